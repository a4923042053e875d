/* SPDX-License-Identifier: Apache-2.0 */
/* devqd.conf parser.  The format is deliberately small: "key = value" lines,
 * '#' or ';' starting a comment line, no sections, no inline comments (a
 * socket path may contain '#').  Every key is a row of the table below; the
 * row says which field of struct devq_config it sets and what it accepts,
 * so the parser itself never names a setting. */
#include "base/config.h"
#include "base/log.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum cfg_type {
	CFG_STR,    /* const char *, owned by the config */
	CFG_CHOICE, /* const char *, one of row->choices */
	CFG_U64,    /* uint64_t = value * scale */
	CFG_UINT,   /* unsigned */
	CFG_INT,    /* int */
	CFG_BOOL,   /* bool: yes/no, true/false, on/off, 1/0 */
	CFG_RATES,  /* const char *: a list of NAME=UNITS/s, merged (set_rates) */
};

struct cfg_key {
	const char *name;
	enum cfg_type type;
	size_t off;
	uint64_t min, max;   /* numbers: accepted range, in the key's own unit */
	uint64_t scale;      /* CFG_U64: field = value * scale (ms -> ns, MiB -> bytes) */
	const char *choices; /* CFG_CHOICE: "a|b|c" */
};

#define F(field) offsetof(struct devq_config, field)

/* Keep in step with man/devqd.conf.5, packaging/devqd.conf and the flags in
 * main.c: each key is also the long option --KEY. */
static const struct cfg_key keys[] = {
	{ "socket", CFG_STR, F(socket_path), 0, 0, 0, NULL },
	{ "backend", CFG_CHOICE, F(backend), 0, 0, 0, "auto|cpu|cuda" },
	{ "device", CFG_INT, F(device), 0, 1023, 0, NULL },
	{ "streams", CFG_UINT, F(streams), 1, 256, 0, NULL },
	{ "priority-streams", CFG_UINT, F(priority_streams), 0, 64, 0, NULL },
	{ "max-op-ms", CFG_U64, F(max_op_ns), 1, 24ull * 3600 * 1000, 1000000, NULL },
	{ "max-buffer-mb", CFG_U64, F(max_buffer_bytes), 1, 1ull << 30, 1ull << 20, NULL },
	{ "max-queues", CFG_UINT, F(max_queues), 1, 1u << 16, 0, NULL },
	{ "verbose", CFG_INT, F(verbose), 0, 2, 0, NULL },
	{ "stall-timeout-ms", CFG_U64, F(stall_ns), 1000, 24ull * 3600 * 1000, 1000000, NULL },
	/* Sliced host ops (device/cpu/backend_cpu.c run_sliced). */
	{ "slice-us", CFG_U64, F(slice_ns), 100, 1000000, 1000, NULL },
	/* Tracing (trace.c): op records kept; who may trace every session. */
	{ "trace-records", CFG_UINT, F(trace_records), 0, 1u << 20, 0, NULL },
	{ "admin-group", CFG_STR, F(admin_group), 0, 0, 0, NULL },
	/* Tenancy: access policy (policy.c), fairness (fair.c), quotas (quota.c). */
	{ "allow-users", CFG_STR, F(allow_users), 0, 0, 0, NULL },
	{ "allow-groups", CFG_STR, F(allow_groups), 0, 0, 0, NULL },
	{ "priority-users", CFG_STR, F(priority_users), 0, 0, 0, NULL },
	{ "priority-groups", CFG_STR, F(priority_groups), 0, 0, 0, NULL },
	{ "fair-k", CFG_UINT, F(fair_k), 1, 4096, 0, NULL },
	{ "fair-shares", CFG_STR, F(fair_shares), 0, 0, 0, NULL },
	{ "fair-window-us", CFG_U64, F(fair_window_ns), 10, 10000000, 1000, NULL },
	{ "quota-session-ops", CFG_UINT, F(q_session_ops), 1, 1u << 24, 0, NULL },
	{ "quota-user-ops", CFG_UINT, F(q_user_ops), 1, 1u << 26, 0, NULL },
	{ "quota-session-buffers", CFG_UINT, F(q_session_buffers), 1, 1u << 24, 0, NULL },
	{ "quota-user-buffers", CFG_UINT, F(q_user_buffers), 1, 1u << 26, 0, NULL },
	{ "quota-session-pinned-mb", CFG_U64, F(q_session_pinned), 1, 1ull << 30, 1ull << 20, NULL },
	{ "quota-user-pinned-mb", CFG_U64, F(q_user_pinned), 1, 1ull << 30, 1ull << 20, NULL },
	{ "quota-session-device-mb", CFG_U64, F(q_session_device), 1, 1ull << 30, 1ull << 20, NULL },
	{ "quota-user-device-mb", CFG_U64, F(q_user_device), 1, 1ull << 30, 1ull << 20, NULL },
	{ "quota-user-queues", CFG_UINT, F(q_user_queues), 1, 1u << 24, 0, NULL },
	{ "quota-user-sessions", CFG_UINT, F(q_user_sessions), 1, 1u << 20, 0, NULL },
	{ "quota-session-fds", CFG_UINT, F(q_session_fds), 506, 1u << 16, 0, NULL },
	{ "quota-outbound-kb", CFG_U64, F(q_outbound), 4, 1ull << 30, 1024, NULL },
	/* Device losses (culprit.c): refusing a uid whose work keeps losing it. */
	{ "lost-refuse-after", CFG_UINT, F(lost_refuse_after), 1, 1000, 0, NULL },
	{ "lost-refuse-s", CFG_U64, F(lost_refuse_s), 0, 30ull * 24 * 3600, 1, NULL },
	{ "state-dir", CFG_STR, F(state_dir), 0, 0, 0, NULL },
	/* Admin calls and granted tenants (server/tenants.c). */
	{ "control-groups", CFG_STR, F(control_groups), 0, 0, 0, NULL },
	/* Read-only: every tenant's status and metrics (requests/status.c). */
	{ "observer-groups", CFG_STR, F(observer_groups), 0, 0, 0, NULL },
	{ "tenants-dir", CFG_STR, F(tenants_dir), 0, 0, 0, NULL },
	{ "grant-exclusive", CFG_BOOL, F(grant_exclusive), 0, 0, 0, NULL },
	/* The executable repository (core/repo.c): DIR[:DIR]... */
	{ "executables", CFG_STR, F(executables), 0, 0, 0, NULL },
	/* Pinned rates of executables' costs (core/cost.h): NAME=UNITS/s,...
	 * A file may also say rate.NAME = UNITS/s, one line each. */
	{ "rate", CFG_RATES, F(rate), 1, UINT64_MAX, 0, NULL },
};

#undef F

/* Keys SIGHUP applies at once: fields the daemon reads each time it needs
 * them, never ones it derived state from at start (streams, quotas...). */
static const char *const reloadable[] = { "max-op-ms",        "max-buffer-mb",
					   "max-queues",       "verbose",
					   "stall-timeout-ms", "lost-refuse-after",
					   "lost-refuse-s",    "executables",
					   "slice-us" };

static bool is_reloadable(const char *key)
{
	for (size_t i = 0; i < sizeof(reloadable) / sizeof(reloadable[0]); i++)
		if (!strcmp(reloadable[i], key))
			return true;
	return false;
}

/* Strings the file supplied: cfg's fields point into these.  One list per
 * process (there is one configuration), kept reachable so that an early
 * exit on a bad flag is not a leak. */
struct cfg_strings {
	size_t n;
	char *s[];
};
static struct cfg_strings *owned;

/* What devq_config_load_argv saw, for devq_config_reload: the file, and
 * argv to tell which keys a flag set (those keep their flag's value). */
static const char *loaded_path;
static int saved_argc;
static char *const *saved_argv;

static const struct cfg_key *find_key(const char *name)
{
	/* rate.NAME is a line of the rate key's family (set_rates). */
	if (!strncmp(name, "rate.", 5))
		name = "rate";
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (!strcmp(keys[i].name, name))
			return &keys[i];
	return NULL;
}

static char *keep_string(const char *v)
{
	struct cfg_strings *old = owned;
	size_t n = old ? old->n : 0;
	char *copy = strdup(v);
	struct cfg_strings *ns = copy ? realloc(old, sizeof(*ns) + (n + 1) * sizeof(char *)) : NULL;
	if (!ns) {
		free(copy);
		return NULL;
	}
	ns->n = n + 1;
	ns->s[n] = copy;
	owned = ns;
	return copy;
}

static bool choice_ok(const char *choices, const char *v)
{
	size_t len = strlen(v);
	for (const char *p = choices; *p;) {
		const char *bar = strchr(p, '|');
		size_t n = bar ? (size_t)(bar - p) : strlen(p);
		if (n == len && !strncmp(p, v, n))
			return true;
		p += n + (bar ? 1 : 0);
	}
	return false;
}

static int parse_number(const struct cfg_key *k, const char *v, uint64_t *out, char *err,
			size_t errlen)
{
	char *end;
	errno = 0;
	unsigned long long x = strtoull(v, &end, 10);
	if (errno || end == v || *end || !isdigit((unsigned char)v[0]) || x < k->min ||
	    x > k->max) {
		snprintf(err, errlen, "%s: '%s' is not a number in %llu..%llu", k->name, v,
			 (unsigned long long)k->min, (unsigned long long)k->max);
		return -EINVAL;
	}
	*out = x;
	return 0;
}

/* ---- rate: NAME=UNITS/s entries ------------------------------------- */

struct rate_ent {
	char name[32];
	uint64_t per_s;
};

/* [a-z_][a-z0-9_]{0,30}: an executable's name. */
static bool rate_name_ok(const char *s, size_t len)
{
	if (len < 1 || len > 31 || !(islower((unsigned char)s[0]) || s[0] == '_'))
		return false;
	for (size_t i = 1; i < len; i++)
		if (!(s[i] == '_' || islower((unsigned char)s[i]) || isdigit((unsigned char)s[i])))
			return false;
	return true;
}

/* UNITS or UNITS/s, UNITS in 1..2^64-1. */
static bool rate_units_ok(const char *s, size_t len, uint64_t *out)
{
	char num[32];
	if (len >= 2 && s[len - 2] == '/' && s[len - 1] == 's')
		len -= 2;
	if (!len || len >= sizeof(num) || !isdigit((unsigned char)s[0]))
		return false;
	memcpy(num, s, len);
	num[len] = '\0';
	char *end;
	errno = 0;
	unsigned long long x = strtoull(num, &end, 10);
	if (errno || *end || !x)
		return false;
	*out = x;
	return true;
}

/* The entries a line gives: key "rate" with "NAME=UNITS/s[, ...]", or key
 * "rate.NAME" with "UNITS/s".  Appended to e (n in use, max room); a name
 * already there gets the new rate. */
static int parse_rates(const char *key, const char *value, struct rate_ent *e, unsigned *n,
		       unsigned max, char *err, size_t errlen)
{
	const char *fixed = !strncmp(key, "rate.", 5) ? key + 5 : NULL;
	if (fixed && !rate_name_ok(fixed, strlen(fixed))) {
		snprintf(err, errlen, "%s: '%s' is not an executable's name", key, fixed);
		return -EINVAL;
	}
	for (const char *p = value;;) {
		p += strspn(p, " \t");
		size_t len = strcspn(p, ",");
		while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		const char *eq = fixed ? NULL : memchr(p, '=', len);
		size_t nlen = fixed ? strlen(fixed) : eq ? (size_t)(eq - p) : 0;
		const char *name = fixed ? fixed : p, *u = fixed ? p : eq ? eq + 1 : p;
		while (!fixed && nlen && (p[nlen - 1] == ' ' || p[nlen - 1] == '\t'))
			nlen--;
		u += strspn(u, " \t");
		uint64_t per_s;
		if (!rate_name_ok(name, nlen) || !rate_units_ok(u, (size_t)(p + len - u), &per_s)) {
			snprintf(err, errlen,
				 fixed ? "%s: '%.*s' is not UNITS/s (a rate of 1 or more cost units "
					 "per second)"
				       : "%s: '%.*s' is not NAME=UNITS/s (an executable's name, a rate "
					 "of 1 or more cost units per second)",
				 key, (int)len, p);
			return -EINVAL;
		}
		unsigned i = 0;
		while (i < *n && (strlen(e[i].name) != nlen || strncmp(e[i].name, name, nlen)))
			i++;
		if (i == *n) {
			if (*n == max) {
				snprintf(err, errlen, "%s: more than %u executables' rates", key, max);
				return -EINVAL;
			}
			memcpy(e[i].name, name, nlen);
			e[i].name[nlen] = '\0';
			(*n)++;
		}
		e[i].per_s = per_s;
		if (fixed || !p[len] || p[len + strspn(p + len, " \t")] != ',')
			break;
		p += len + 1;
	}
	return 0;
}

/* Merges a rate line into cfg->rate, kept as the canonical list
 * "NAME=UNITS/s,..." that devq_config_dump prints. */
static int set_rates(struct devq_config *cfg, const char *key, const char *value, char *err,
		     size_t errlen)
{
	struct rate_ent e[DEVQ_CONFIG_RATES_MAX];
	unsigned n = 0;
	if ((cfg->rate &&
	     parse_rates("rate", cfg->rate, e, &n, DEVQ_CONFIG_RATES_MAX, err, errlen) < 0) ||
	    parse_rates(key, value, e, &n, DEVQ_CONFIG_RATES_MAX, err, errlen) < 0)
		return -EINVAL;
	char out[DEVQ_CONFIG_RATES_MAX * (32 + 24)];
	size_t o = 0;
	for (unsigned i = 0; i < n; i++)
		o += (size_t)snprintf(out + o, sizeof(out) - o, "%s%s=%llu/s", i ? "," : "",
				      e[i].name, (unsigned long long)e[i].per_s);
	char *s = keep_string(out);
	if (!s) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	cfg->rate = s;
	return 0;
}

uint64_t devq_config_rate(const char *rates, const char *name)
{
	struct rate_ent e[DEVQ_CONFIG_RATES_MAX];
	unsigned n = 0;
	char err[8];
	if (!rates || parse_rates("rate", rates, e, &n, DEVQ_CONFIG_RATES_MAX, err, sizeof(err)) < 0)
		return 0;
	for (unsigned i = 0; i < n; i++)
		if (!strcmp(e[i].name, name))
			return e[i].per_s;
	return 0;
}

int devq_config_set(struct devq_config *cfg, const char *key, const char *value, char *err,
		    size_t errlen)
{
	const struct cfg_key *k = find_key(key);
	if (!k) {
		snprintf(err, errlen, "unknown key '%s'", key);
		return -EINVAL;
	}
	char *field = (char *)cfg + k->off;
	uint64_t x;
	switch (k->type) {
	case CFG_RATES:
		return set_rates(cfg, key, value, err, errlen);
	case CFG_CHOICE:
		if (!choice_ok(k->choices, value)) {
			snprintf(err, errlen, "%s: '%s' is not one of %s", k->name, value,
				 k->choices);
			return -EINVAL;
		}
		/* fall through */
	case CFG_STR: {
		if (!*value) {
			snprintf(err, errlen, "%s: empty value", k->name);
			return -EINVAL;
		}
		char *s = keep_string(value);
		if (!s) {
			snprintf(err, errlen, "out of memory");
			return -ENOMEM;
		}
		*(const char **)field = s;
		return 0;
	}
	case CFG_BOOL:
		if (!strcmp(value, "yes") || !strcmp(value, "true") || !strcmp(value, "on") ||
		    !strcmp(value, "1")) {
			*(bool *)field = true;
		} else if (!strcmp(value, "no") || !strcmp(value, "false") ||
			   !strcmp(value, "off") || !strcmp(value, "0")) {
			*(bool *)field = false;
		} else {
			snprintf(err, errlen, "%s: '%s' is not yes or no", k->name, value);
			return -EINVAL;
		}
		return 0;
	case CFG_U64:
		if (parse_number(k, value, &x, err, errlen) < 0)
			return -EINVAL;
		*(uint64_t *)field = x * (k->scale ? k->scale : 1);
		return 0;
	case CFG_UINT:
		if (parse_number(k, value, &x, err, errlen) < 0)
			return -EINVAL;
		*(unsigned *)field = (unsigned)x;
		return 0;
	case CFG_INT:
		if (parse_number(k, value, &x, err, errlen) < 0)
			return -EINVAL;
		*(int *)field = (int)x;
		return 0;
	}
	snprintf(err, errlen, "%s: unsupported key type", k->name);
	return -EINVAL;
}

char *devq_config_trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	size_t n = strlen(s);
	while (n && isspace((unsigned char)s[n - 1]))
		s[--n] = '\0';
	return s;
}

int devq_config_split(char *line, char **key, char **value)
{
	char *s = devq_config_trim(line);
	if (!*s)
		return 0;
	char *eq = strchr(s, '=');
	if (!eq) {
		*key = s;
		return -EINVAL;
	}
	*eq = '\0';
	*key = devq_config_trim(s);
	*value = devq_config_trim(eq + 1);
	return 1;
}

int devq_config_load(struct devq_config *cfg, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "re");
	if (!f) {
		int e = errno;
		snprintf(err, errlen, "%s: %s", path, strerror(e));
		return -e;
	}
	/* A key given twice is a mistake worth naming, not a silent override. */
	unsigned seen_at[sizeof(keys) / sizeof(keys[0])] = { 0 };
	/* The rate family's lines may be several, but each executable once. */
	struct rate_ent rate_seen[DEVQ_CONFIG_RATES_MAX];
	unsigned rate_line[DEVQ_CONFIG_RATES_MAX], nrate = 0;
	char line[4096];
	unsigned lineno = 0;
	int r = 0;
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		size_t len = strlen(line);
		if (len == sizeof(line) - 1 && line[len - 1] != '\n' && !feof(f)) {
			snprintf(err, errlen, "%s:%u: line longer than %zu bytes", path, lineno,
				 sizeof(line) - 2);
			r = -EINVAL;
			break;
		}
		char *first = devq_config_trim(line);
		if (*first == '#' || *first == ';')
			continue;
		char *key, *value;
		int kv = devq_config_split(first, &key, &value);
		if (kv == 0)
			continue;
		if (kv < 0) {
			snprintf(err, errlen, "%s:%u: expected 'key = value', got '%.64s'", path,
				 lineno, key);
			r = -EINVAL;
			break;
		}
		const struct cfg_key *k = find_key(key);
		if (k && k->type == CFG_RATES) {
			struct rate_ent one[DEVQ_CONFIG_RATES_MAX];
			unsigned none = 0, before = nrate;
			char why[256];
			r = parse_rates(key, value, one, &none, DEVQ_CONFIG_RATES_MAX, why, sizeof(why));
			for (unsigned i = 0; !r && i < none; i++) {
				unsigned j = 0;
				while (j < before && strcmp(rate_seen[j].name, one[i].name))
					j++;
				if (j < before) {
					snprintf(why, sizeof(why), "rate.%.31s given twice (first at line %u)",
						 one[i].name, rate_line[j]);
					r = -EINVAL;
				} else if (nrate < DEVQ_CONFIG_RATES_MAX) {
					rate_seen[nrate] = one[i];
					rate_line[nrate++] = lineno;
				}
			}
			if (r < 0) {
				snprintf(err, errlen, "%s:%u: %s", path, lineno, why);
				break;
			}
		} else if (k && seen_at[k - keys]) {
			snprintf(err, errlen, "%s:%u: %s given twice (first at line %u)", path,
				 lineno, key, seen_at[k - keys]);
			r = -EINVAL;
			break;
		}
		char why[256];
		r = devq_config_set(cfg, key, value, why, sizeof(why));
		if (r < 0) {
			snprintf(err, errlen, "%s:%u: %s", path, lineno, why);
			break;
		}
		seen_at[k - keys] = lineno;
	}
	if (!r && ferror(f)) {
		snprintf(err, errlen, "%s: read error", path);
		r = -EIO;
	}
	fclose(f);
	return r;
}

int devq_config_load_argv(struct devq_config *cfg, int argc, char *const *argv)
{
	const char *path = NULL;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--"))
			break;
		if (!strcmp(a, "--config") || !strcmp(a, "-c")) {
			if (i + 1 >= argc) {
				fprintf(stderr, "devqd: %s needs a FILE\n", a);
				return -EINVAL;
			}
			path = argv[++i];
		} else if (!strncmp(a, "--config=", 9)) {
			path = a + 9;
		} else if (a[0] == '-' && a[1] && a[1] != '-') {
			/* A cluster such as -vc FILE or -cFILE, as getopt reads
			 * it: the first option that takes a value ends it. */
			for (const char *c = a + 1; *c; c++) {
				if (*c == 'c') {
					if (c[1]) {
						path = c + 1;
					} else if (i + 1 < argc) {
						path = argv[++i];
					} else {
						fprintf(stderr, "devqd: -c needs a FILE\n");
						return -EINVAL;
					}
					break;
				}
				if (strchr("sbnd", *c)) {
					i += !c[1]; /* its value is the next word */
					break;
				}
			}
		} else if (a[0] == '-' && a[1] == '-' && !strchr(a, '=')) {
			/* A long option's value may start with '-c': skip it.
			 * Every key is a flag with a value (--verbose's is
			 * optional and a number, never '-c...'). */
			if ((find_key(a + 2) && strcmp(a + 2, "verbose")) ||
			    !strcmp(a, "--check-executables"))
				i++;
		}
	}
	bool explicit = path != NULL;
	if (!path)
		path = DEVQ_CONFIG_DEFAULT_PATH;
	loaded_path = path;
	saved_argc = argc;
	saved_argv = argv;
	char err[512];
	int r = devq_config_load(cfg, path, err, sizeof(err));
	if (r == -ENOENT && !explicit)
		return 0;
	if (r < 0)
		fprintf(stderr, "devqd: config: %s\n", err);
	return r;
}

/* Whether argv sets key with a flag: --key, --key=..., or its short
 * option (main.c's -s -b -d -n). */
static bool set_by_flag(const char *key)
{
	static const struct {
		char opt;
		const char *key;
	} shorts[] = { { 's', "socket" }, { 'b', "backend" }, { 'd', "device" },
		       { 'n', "streams" } };
	char shortopt = 0;
	for (size_t i = 0; i < sizeof(shorts) / sizeof(shorts[0]); i++)
		if (!strcmp(shorts[i].key, key))
			shortopt = shorts[i].opt;
	size_t n = strlen(key);
	for (int i = 1; i < saved_argc; i++) {
		const char *a = saved_argv[i];
		if (!strcmp(a, "--"))
			break;
		if (a[0] == '-' && a[1] == '-' && !strncmp(a + 2, key, n) &&
		    (a[2 + n] == '\0' || a[2 + n] == '='))
			return true;
		if (!shortopt || a[0] != '-' || a[1] == '-')
			continue;
		/* A cluster such as -vn4: stop at the first option that takes
		 * a value, the rest of the word is that value. */
		for (const char *c = a + 1; *c; c++) {
			if (*c == shortopt)
				return true;
			if (strchr("sbndc", *c))
				break;
		}
	}
	return false;
}

/* Whether --verbose N is the Nth word, N all digits: the flag's value in
 * the config's syntax, not one more -v. */
static bool verbose_number_at(int argc, char *const *argv, int i)
{
	if (i >= argc || !argv[i][0])
		return false;
	for (const char *c = argv[i]; *c; c++)
		if (!isdigit((unsigned char)*c))
			return false;
	return true;
}

/* Whether argv gives verbose a value (--verbose=N or --verbose N). */
static bool verbose_value_flag(void)
{
	for (int i = 1; i < saved_argc; i++) {
		const char *a = saved_argv[i];
		if (!strcmp(a, "--"))
			break;
		if (!strncmp(a, "--verbose=", 10) ||
		    (!strcmp(a, "--verbose") && verbose_number_at(saved_argc, saved_argv, i + 1)))
			return true;
	}
	return false;
}

bool devq_config_verbose_has_value(int argc, char *const *argv, int i)
{
	return verbose_number_at(argc, argv, i);
}

static bool same_value(const struct cfg_key *k, const struct devq_config *a,
		       const struct devq_config *b)
{
	const char *x = (const char *)a + k->off, *y = (const char *)b + k->off;
	switch (k->type) {
	case CFG_STR:
	case CFG_CHOICE:
	case CFG_RATES: {
		const char *s = *(const char *const *)x, *t = *(const char *const *)y;
		return s == t || (s && t && !strcmp(s, t));
	}
	case CFG_U64:
		return *(const uint64_t *)x == *(const uint64_t *)y;
	case CFG_UINT:
		return *(const unsigned *)x == *(const unsigned *)y;
	case CFG_INT:
		return *(const int *)x == *(const int *)y;
	case CFG_BOOL:
		return *(const bool *)x == *(const bool *)y;
	}
	return false;
}

int devq_config_reload(struct devq_config *cfg, char *err, size_t errlen)
{
	if (!loaded_path) {
		snprintf(err, errlen, "no configuration file was loaded");
		return -ENOENT;
	}
	/* Parse into a copy: a file with a mistake changes nothing. */
	struct devq_config next = *cfg;
	int r = devq_config_load(&next, loaded_path, err, errlen);
	if (r == -ENOENT && strcmp(loaded_path, DEVQ_CONFIG_DEFAULT_PATH) == 0)
		return 0; /* still no default file: nothing to apply */
	if (r < 0)
		return r;
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		const struct cfg_key *k = &keys[i];
		if (same_value(k, cfg, &next))
			continue;
		/* -v and a bare --verbose add to the file's verbose rather than
		 * replacing it; --verbose N replaces it, as any flag does. */
		if (strcmp(k->name, "verbose") ? set_by_flag(k->name) : verbose_value_flag()) {
			log_info("reload: %s: the command-line flag still wins", k->name);
		} else if (!is_reloadable(k->name)) {
			log_warn("reload: %s changed in %s; it takes effect when devqd restarts",
				 k->name, loaded_path);
		} else {
			memcpy((char *)cfg + k->off, (const char *)&next + k->off,
			       k->type == CFG_U64 ? sizeof(uint64_t)
			       : k->type == CFG_BOOL ? sizeof(bool)
			       : k->type == CFG_UINT ? sizeof(unsigned)
			       : k->type == CFG_INT ? sizeof(int)
						    : sizeof(const char *));
			log_info("reload: %s changed", k->name);
		}
	}
	return 0;
}

int devq_config_verbose_flags(void)
{
	int n = 0;
	for (int i = 1; i < saved_argc; i++) {
		const char *a = saved_argv[i];
		if (!strcmp(a, "--"))
			break;
		if (!strcmp(a, "--verbose") && !verbose_number_at(saved_argc, saved_argv, i + 1))
			n++;
		else if (a[0] == '-' && a[1] != '-')
			for (const char *c = a + 1; *c; c++)
				n += *c == 'v';
	}
	return n;
}

const char *devq_config_key_name(size_t i)
{
	return i < sizeof(keys) / sizeof(keys[0]) ? keys[i].name : NULL;
}

bool devq_config_key_reloadable(const char *key)
{
	return is_reloadable(key);
}

void devq_config_dump(FILE *f, const struct devq_config *cfg)
{
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		const struct cfg_key *k = &keys[i];
		const char *field = (const char *)cfg + k->off;
		uint64_t scale = k->scale ? k->scale : 1;
		switch (k->type) {
		case CFG_STR:
		case CFG_CHOICE:
		case CFG_RATES: {
			const char *s = *(const char *const *)field;
			if (s)
				fprintf(f, "%s = %s\n", k->name, s);
			else
				fprintf(f, "# %s is not set\n", k->name);
			break;
		}
		case CFG_U64:
			fprintf(f, "%s = %llu\n", k->name,
				(unsigned long long)(*(const uint64_t *)field / scale));
			break;
		case CFG_UINT:
			fprintf(f, "%s = %u\n", k->name, *(const unsigned *)field);
			break;
		case CFG_INT:
			fprintf(f, "%s = %d\n", k->name, *(const int *)field);
			break;
		case CFG_BOOL:
			fprintf(f, "%s = %s\n", k->name, *(const bool *)field ? "yes" : "no");
			break;
		}
	}
}

void devq_config_fini(void)
{
	if (!owned)
		return;
	for (size_t i = 0; i < owned->n; i++)
		free(owned->s[i]);
	free(owned);
	owned = NULL;
}
