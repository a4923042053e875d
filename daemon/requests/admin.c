/* SPDX-License-Identifier: Apache-2.0 */
/* The admin calls; see admin.h. */
#include "requests/admin.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "core/engine.h"
#include "core/outbox.h"
#include "core/sched.h"
#include "core/session.h"
#include "core/tenant.h"

/* An evict waiting for the tenant's running ops and buffers. */
struct devq_evict_wait {
	struct devq_evict_wait *next;
	struct devq_tenant *t; /* kept (t->held) until answered */
	uint64_t session;      /* the admin's session, by id: it may be gone */
	uint64_t deadline_ns;
};

void devq_admin_init(struct devq_admin *a, struct devq_engine *e, const struct devq_admin_ops *ops)
{
	a->e = e;
	a->ops = *ops;
	a->control = "";
	a->unavailable = "";
	a->state[0] = '\0';
}

void devq_admin_socks_gone(struct devq_admin *a)
{
	for (struct devq_admin_grant *g = a->grants; g; g = g->next)
		g->sock = NULL;
}

void devq_admin_fini(struct devq_admin *a)
{
	while (a->waits) {
		struct devq_evict_wait *w = a->waits;
		a->waits = w->next;
		free(w);
	}
	while (a->grants) {
		struct devq_admin_grant *g = a->grants;
		a->grants = g->next;
		free(g);
	}
}

unsigned devq_admin_grants_of(const struct devq_admin *a, uid_t uid, char *socks, size_t n)
{
	unsigned count = 0;
	size_t len = 0;
	if (n)
		socks[0] = '\0';
	for (const struct devq_admin_grant *g = a->grants; g; g = g->next) {
		if (g->t->uid != uid || !g->t->granted)
			continue;
		if (g->sock && len < n) {
			int w = snprintf(socks + len, n - len, "%s%s", count ? ", " : "",
					 a->ops.sock_path(a->ops.ud, g->sock));
			len = w < 0 ? n : len + (size_t)w;
		}
		count++;
	}
	return count;
}

/* uid's connected sessions on the main socket that are not an admin's (an
 * admin's own sessions are its tools', not a job's). */
static unsigned main_sessions(const struct devq_admin *a, uid_t uid)
{
	unsigned n = 0;
	for (const struct devq_session *x = a->e->sessions; x; x = x->next)
		n += x->connected && !x->grant && !x->admin && x->uid == uid;
	return n;
}

static struct devq_admin_grant *grant_of(const struct devq_admin *a, const struct devq_tenant *t)
{
	for (struct devq_admin_grant *g = a->grants; g; g = g->next)
		if (g->t == t)
			return g;
	return NULL;
}

/* ---- the state file ---------------------------------------------------- */

/* One line per grant: "TENANT UID SHARES OF MEMORY PRIORITY", under a
 * header naming the format's version.  Written whole to a temporary file
 * and renamed over, so a crash leaves the old or the new list, never half
 * of one.  At most DEVQ_GRANTS_MAX lines. */
/* A grant's metric labels follow priority, key=value each (v1 still: a
 * line without them reads as before). */
#define GRANTS_HEADER "# devqd grants v1: tenant uid shares of memory_bytes priority"
/* The version save() writes, the only one the loader reads besides the
 * unversioned file of earlier releases ("# devqd grants: ...", or no
 * header at all), whose lines are the same. */
#define GRANTS_VERSION 1
/* A line longer than this is refused whole, not read in pieces: no line
 * save() writes comes near it (a 64-byte name and five numbers), and a
 * longer one costs no memory to skip. */
#define GRANTS_LINE_MAX 4096

/* What a line of the grants file says. */
struct grants_line {
	char name[DEVQ_TENANT_NAME_MAX + 1];
	uid_t uid;
	uint32_t shares, of;
	uint64_t memory;
	bool priority;
	char labels[DEVQ_TENANT_LABELS][DEVQ_TENANT_LABEL_MAX + 1];
	const char *lp[DEVQ_TENANT_LABELS];
	size_t nlabels;
};

/* Whether "key=value" may label a tenant's metrics (see AdminGrant.labels),
 * and not a key already among the first n of have; why in err if not. */
static bool label_ok(const char *kv, const char *const *have, size_t n, char *err, size_t en)
{
	static const char *const ours[] = { "gpu", "UUID", "tenant", "phase", "le" };
	size_t len = strlen(kv);
	const char *eq = strchr(kv, '=');
	if (!eq || eq == kv || len > DEVQ_TENANT_LABEL_MAX || !eq[1]) {
		snprintf(err, en, "label '%.40s': want key=value, at most %d bytes", kv,
			 DEVQ_TENANT_LABEL_MAX);
		return false;
	}
	size_t k = (size_t)(eq - kv);
	bool key = !(kv[0] >= '0' && kv[0] <= '9') && !(k >= 2 && kv[0] == '_' && kv[1] == '_');
	for (size_t i = 0; i < k; i++)
		key &= (kv[i] >= 'a' && kv[i] <= 'z') || (kv[i] >= 'A' && kv[i] <= 'Z') ||
		       (kv[i] >= '0' && kv[i] <= '9') || kv[i] == '_';
	for (size_t i = 0; i < sizeof(ours) / sizeof(ours[0]); i++)
		key &= !(strlen(ours[i]) == k && !memcmp(ours[i], kv, k));
	if (!key) {
		snprintf(err, en, "label '%.40s': the key must be [A-Za-z_][A-Za-z0-9_]*, not "
			 "__..., gpu, UUID, tenant, phase or le", kv);
		return false;
	}
	for (const char *v = eq + 1; *v; v++)
		if (*v <= ' ' || *v > '~' || *v == '"' || *v == '\\') {
			snprintf(err, en, "label '%.40s': the value must be printable, without "
				 "blanks, quotes or backslashes", kv);
			return false;
		}
	for (size_t i = 0; i < n; i++)
		if (!strncmp(have[i], kv, k + 1)) {
			snprintf(err, en, "label key '%.*s' given twice", (int)k, kv);
			return false;
		}
	return true;
}

enum grants_kind {
	GRANTS_GRANT, /* a grant, in the struct */
	GRANTS_NONE,  /* blank or a comment */
	GRANTS_BAD,   /* neither: why in err */
};

static bool grants_blank(char c)
{
	return c == ' ' || c == '\t';
}

/* The next field of [*p, end): blanks skipped, then the bytes up to the
 * next blank or the end, which *p moves past.  Its length; 0 when only
 * blanks were left. */
static size_t grants_field(const char **p, const char *end, const char **field)
{
	const char *s = *p;
	while (s < end && grants_blank(*s))
		s++;
	*field = s;
	while (s < end && !grants_blank(*s))
		s++;
	*p = s;
	return (size_t)(s - *field);
}

/* Up to 32 bytes of s for a log line, each byte that is not printable
 * ASCII as '?': the file may hold anything. */
static const char *grants_excerpt(char out[40], const char *s, size_t len)
{
	size_t k = len < 32 ? len : 32;
	for (size_t i = 0; i < k; i++)
		out[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
	snprintf(out + k, 40 - k, "%s", len > k ? "..." : "");
	return out;
}

/* A number field: decimal digits only (no sign, no base, no blank inside),
 * at most max.  0, or -1 with why in err. */
static int grants_number(const char **p, const char *end, const char *what, uint64_t max,
			 uint64_t *out, char *err, size_t n)
{
	const char *f;
	char x[40];
	size_t len = grants_field(p, end, &f);
	if (!len) {
		snprintf(err, n, "no %s (a grant is: tenant uid shares of memory_bytes priority)",
			 what);
		return -1;
	}
	size_t digits = 0;
	while (digits < len && f[digits] >= '0' && f[digits] <= '9')
		digits++;
	if (digits < len) {
		snprintf(err, n, "%s '%s' is not a decimal number (digits only)", what,
			 grants_excerpt(x, f, len));
		return -1;
	}
	uint64_t v = 0;
	for (size_t i = 0; i < len; i++) {
		unsigned d = (unsigned)(f[i] - '0');
		/* Past max, or past 64 bits: either way too large. */
		if (d > max || v > (max - d) / 10) {
			snprintf(err, n, "%s %s is more than %" PRIu64, what,
				 grants_excerpt(x, f, len), max);
			return -1;
		}
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

/* Parses one line of the grants file, len bytes without its newline: a
 * grant only if the whole line is one (a NUL inside, a field out of range,
 * a sign, or anything but blanks after the last field makes it GRANTS_BAD).
 * The limits are the admin call's where it has one; grant() checks the
 * rest (of >= shares, the socket path, the uid's tenants).  No I/O. */
static enum grants_kind grants_parse(const char *line, size_t len, struct grants_line *g,
				     char *err, size_t n)
{
	const char *p = line, *end = line + len;
	/* Blanks at the end are allowed: an editor may leave them, or a \r. */
	while (end > p && (grants_blank(end[-1]) || end[-1] == '\r'))
		end--;
	if (memchr(p, '\0', (size_t)(end - p))) {
		snprintf(err, n, "a NUL byte inside");
		return GRANTS_BAD;
	}
	const char *f;
	size_t flen = grants_field(&p, end, &f);
	if (!flen || f[0] == '#')
		return GRANTS_NONE;
	if (flen > DEVQ_TENANT_NAME_MAX) {
		snprintf(err, n, "tenant name of %zu bytes; at most %d", flen, DEVQ_TENANT_NAME_MAX);
		return GRANTS_BAD;
	}
	memcpy(g->name, f, flen);
	g->name[flen] = '\0';
	if (!devq_tenant_name_ok(g->name)) {
		char x[40];
		snprintf(err, n, "tenant name '%s': 1 to %d characters of A-Z a-z 0-9 _ . -, "
			 "not starting with '.'", grants_excerpt(x, f, flen), DEVQ_TENANT_NAME_MAX);
		return GRANTS_BAD;
	}
	uint64_t uid, shares, of, memory, prio;
	/* uid 4294967295 is (uid_t)-1, "no uid" to chown and setuid. */
	if (grants_number(&p, end, "uid", UINT32_MAX - 1, &uid, err, n) ||
	    grants_number(&p, end, "shares", DEVQ_FAIR_MAX_WEIGHT, &shares, err, n) ||
	    grants_number(&p, end, "of", DEVQ_GRANT_OF_MAX, &of, err, n) ||
	    grants_number(&p, end, "memory_bytes", DEVQ_GRANT_MEMORY_MAX, &memory, err, n) ||
	    grants_number(&p, end, "priority", 1, &prio, err, n))
		return GRANTS_BAD;
	if (!shares) {
		snprintf(err, n, "shares 0; 1 to %d", DEVQ_FAIR_MAX_WEIGHT);
		return GRANTS_BAD;
	}
	/* Then its labels, key=value each, as the admin call takes them. */
	g->nlabels = 0;
	while ((flen = grants_field(&p, end, &f))) {
		if (!memchr(f, '=', flen) || g->nlabels == DEVQ_TENANT_LABELS ||
		    flen > DEVQ_TENANT_LABEL_MAX) {
			char x[40];
			snprintf(err, n, "'%s' after the last field (priority; then at most %d "
				 "labels key=value of %d bytes)", grants_excerpt(x, f, (size_t)(end - f)),
				 DEVQ_TENANT_LABELS, DEVQ_TENANT_LABEL_MAX);
			return GRANTS_BAD;
		}
		char *l = g->labels[g->nlabels];
		memcpy(l, f, flen);
		l[flen] = '\0';
		if (!label_ok(l, g->lp, g->nlabels, err, n))
			return GRANTS_BAD;
		g->lp[g->nlabels++] = l;
	}
	g->uid = (uid_t)uid;
	g->shares = (uint32_t)shares;
	g->of = (uint32_t)of;
	g->memory = memory;
	g->priority = prio != 0;
	return GRANTS_GRANT;
}

/* The version a first line names ("# devqd grants vN: ..."): 0 for the
 * unversioned header of earlier releases ("# devqd grants: ..."), -1 when
 * it is no header (a grant, a blank or another comment: such a file is
 * unversioned too), -2 when it says "# devqd grants" but names no version
 * (v0 is none): a later format may say more there.  No I/O. */
static long grants_header(const char *line, size_t len)
{
	static const char pre[] = "# devqd grants";
	size_t k = sizeof(pre) - 1;
	if (len < k || memcmp(line, pre, k) || (len > k && line[k] != ':' && line[k] != ' '))
		return -1;
	if (len > k && line[k] == ':')
		return 0;
	if (len < k + 3 || memcmp(line + k, " v", 2))
		return -2;
	long v = 0;
	size_t i = k + 2;
	for (; i < len && line[i] >= '0' && line[i] <= '9' && v < 1000000; i++)
		v = v * 10 + (line[i] - '0');
	return i > k + 2 && i < len && line[i] == ':' && v > 0 ? v : -2;
}

/* Reads the next line of f into buf (at most cap bytes, without its
 * newline; a last line without one counts).  0 at the end of the file;
 * else 1 with *len its length, or with *len = cap + 1 when it was longer
 * than cap: the rest of it is read and dropped. */
static int grants_read_line(FILE *f, char *buf, size_t cap, size_t *len)
{
	size_t k = 0;
	int c;
	while ((c = getc(f)) != EOF && c != '\n') {
		if (k < cap)
			buf[k] = (char)c;
		if (k <= cap)
			k++;
	}
	*len = k;
	return c != EOF || k > 0;
}

static void save(struct devq_admin *a)
{
	if (!a->state[0])
		return;
	char tmp[PATH_MAX + 8];
	snprintf(tmp, sizeof(tmp), "%s.new", a->state);
	FILE *f = fopen(tmp, "we");
	if (!f) {
		log_err("%s: %s: grants will not outlive a restart", tmp, strerror(errno));
		return;
	}
	fprintf(f, "%s\n", GRANTS_HEADER);
	for (const struct devq_admin_grant *g = a->grants; g; g = g->next)
	{
		fprintf(f, "%s %u %u %u %" PRIu64 " %d", g->t->name, (unsigned)g->t->uid,
			g->t->shares, g->t->of, g->t->memory_cap, g->t->priority ? 1 : 0);
		for (unsigned k = 0; k < g->t->nlabels; k++)
			fprintf(f, " %s", g->t->labels[k]);
		fputc('\n', f);
	}
	bool ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
	ok = fclose(f) == 0 && ok;
	if (!ok || rename(tmp, a->state) < 0) {
		log_err("%s: %s: grants will not outlive a restart", a->state, strerror(errno));
		if (unlink(tmp) < 0 && errno != ENOENT)
			log_err("%s: unlink: %s", tmp, strerror(errno));
	}
}

static int grant(struct devq_admin *a, const char *name, uid_t uid, uint32_t shares,
		 uint32_t of, uint64_t memory, bool priority, bool update_only,
		 const char *const *labels, size_t nlabels, struct devq_tenant **out, char *err,
		 size_t n);

void devq_admin_load(struct devq_admin *a)
{
	FILE *f = fopen(a->state, "re");
	if (!f) {
		if (errno != ENOENT)
			log_warn("%s: %s; no grant restored", a->state, strerror(errno));
		return;
	}
	char line[GRANTS_LINE_MAX];
	size_t len;
	unsigned n = 0, lineno = 0;
	/* A line cut by a read error is not read as a whole one. */
	while (grants_read_line(f, line, sizeof(line), &len) && !ferror(f)) {
		lineno++;
		if (len > sizeof(line)) {
			log_warn("%s:%u: longer than %zu bytes; skipped", a->state, lineno,
				 sizeof(line));
			continue;
		}
		if (lineno == 1) {
			long v = grants_header(line, len);
			if (v == -2 || v > GRANTS_VERSION) {
				char x[40];
				log_warn("%s:1: '%s' names no format this devqd reads (v%d, or "
					 "none); no grant restored, and the next grant or evict "
					 "rewrites the file", a->state, grants_excerpt(x, line, len),
					 GRANTS_VERSION);
				break;
			}
			if (v >= 0)
				continue;
		}
		struct grants_line g;
		char err[300];
		enum grants_kind k = grants_parse(line, len, &g, err, sizeof(err));
		if (k == GRANTS_NONE)
			continue;
		struct devq_tenant *t;
		if (k == GRANTS_BAD || grant(a, g.name, g.uid, g.shares, g.of, g.memory,
					     g.priority, false, g.lp, g.nlabels, &t, err,
					     sizeof(err))) {
			log_warn("%s:%u: %s; skipped", a->state, lineno, err);
			continue;
		}
		n++;
	}
	if (ferror(f))
		log_warn("%s: read: %s; no grant restored after line %u", a->state,
			 strerror(errno), lineno);
	if (fclose(f) != 0)
		log_warn("%s: close: %s", a->state, strerror(errno));
	if (n)
		log_notice("restored %u grants from %s", n, a->state);
}

/* ---- the calls --------------------------------------------------------- */

/* update_only: only a granted tenant is changed; none by that name is
 * not_found and nothing is made (a scheduler's task updating what its job's
 * prolog granted must not grant what the prolog did not). */
static int grant(struct devq_admin *a, const char *name, uid_t uid, uint32_t shares,
		 uint32_t of, uint64_t memory, bool priority, bool update_only,
		 const char *const *labels, size_t nlabels, struct devq_tenant **out, char *err,
		 size_t n)
{
	if (!devq_tenant_name_ok(name)) {
		snprintf(err, n, "tenant name '%.80s': 1 to %d characters of A-Z a-z 0-9 _ . -, "
			 "not starting with '.'", name, DEVQ_TENANT_NAME_MAX);
		return DEVQ__CODE__INVALID_ARGUMENT;
	}
	int code = a->ops.sock_fits(a->ops.ud, name, err, n);
	if (code)
		return code;
	if (uid == (uid_t)-1) {
		snprintf(err, n, "tenant %s: uid %u is not a uid", name, (unsigned)uid);
		return DEVQ__CODE__INVALID_ARGUMENT;
	}
	if (!shares)
		shares = 1;
	if (shares > DEVQ_FAIR_MAX_WEIGHT) {
		snprintf(err, n, "tenant %s: %u shares; at most %d", name, shares,
			 DEVQ_FAIR_MAX_WEIGHT);
		return DEVQ__CODE__INVALID_ARGUMENT;
	}
	if (!of)
		of = shares;
	if (of < shares || of > DEVQ_GRANT_OF_MAX) {
		snprintf(err, n, "tenant %s: %u shares of %u; 'of' must be %u to %d", name, shares,
			 of, shares, DEVQ_GRANT_OF_MAX);
		return DEVQ__CODE__INVALID_ARGUMENT;
	}
	if (memory > DEVQ_GRANT_MEMORY_MAX) {
		snprintf(err, n, "tenant %s: a memory cap of %" PRIu64 " bytes; at most %" PRIu64,
			 name, memory, DEVQ_GRANT_MEMORY_MAX);
		return DEVQ__CODE__INVALID_ARGUMENT;
	}
	if (nlabels > DEVQ_TENANT_LABELS) {
		snprintf(err, n, "tenant %s: %zu labels; at most %d", name, nlabels,
			 DEVQ_TENANT_LABELS);
		return DEVQ__CODE__INVALID_ARGUMENT;
	}
	for (size_t i = 0; i < nlabels; i++)
		if (!labels[i] || !label_ok(labels[i], labels, i, err, n))
			return DEVQ__CODE__INVALID_ARGUMENT;
	if (a->unavailable[0]) {
		snprintf(err, n, "%s", a->unavailable);
		return DEVQ__CODE__FAILED_PRECONDITION;
	}
	struct devq_tenant *t = devq_tenant_find(a->e, name);
	if (!t && update_only) {
		snprintf(err, n, "tenant %s is not granted (update only: nothing made)", name);
		return DEVQ__CODE__NOT_FOUND;
	}
	if (t && t->uid != uid) {
		snprintf(err, n, "tenant %s is granted to uid %u; evict it before granting it to "
			 "uid %u", name, (unsigned)t->uid, (unsigned)uid);
		return DEVQ__CODE__FAILED_PRECONDITION;
	}
	if (!t && a->ngranted >= DEVQ_GRANTS_MAX) {
		snprintf(err, n, "tenant %s: %u tenants are granted, the most devqd keeps", name,
			 a->ngranted);
		return DEVQ__CODE__RESOURCE_EXHAUSTED;
	}
	bool fresh = !t;
	if (devq_tenant_grant(a->e, name, uid, shares, of, memory, priority, &t) < 0) {
		snprintf(err, n, "out of memory");
		return DEVQ__CODE__RESOURCE_EXHAUSTED;
	}
	if (fresh) {
		struct devq_admin_grant *g = calloc(1, sizeof(*g));
		code = g ? a->ops.sock_open(a->ops.ud, t, &g->sock, err, n)
			 : DEVQ__CODE__RESOURCE_EXHAUSTED;
		if (!g)
			snprintf(err, n, "out of memory");
		if (code) {
			free(g);
			devq_tenant_ungrant(a->e, t);
			return code;
		}
		g->t = t;
		g->after_session = a->e->next_session_id;
		t->nlabels = 0; /* a fresh grant starts with none (re-granted name) */
		g->next = a->grants;
		a->grants = g;
		a->ngranted++;
	}
	if (nlabels) { /* given: they replace the tenant's */
		for (size_t i = 0; i < nlabels; i++)
			snprintf(t->labels[i], sizeof(t->labels[i]), "%s", labels[i]);
		t->nlabels = (unsigned)nlabels;
	}
	*out = t;
	return 0;
}

static void grant_msg(const struct devq_admin *a, struct devq_tenant *t, Devq__Grant *g)
{
	devq__grant__init(g);
	const struct devq_admin_grant *k = grant_of(a, t);
	g->tenant = t->name;
	g->uid = t->uid;
	g->socket = k && k->sock ? (char *)a->ops.sock_path(a->ops.ud, k->sock) : "";
	g->shares = t->shares;
	g->of = t->of;
	g->memory_bytes = t->memory_cap;
	g->priority = t->priority;
	g->sessions = t->sessions;
	g->device_ns = t->fair.device_ns;
	g->ops = t->fair.ops_done;
	g->peak_bytes = t->peak;
	g->errors = t->failed;
	g->cancelled = t->cancelled;
	g->bytes = t->pinned + t->device;
	g->ops_in_flight = t->ops;
	g->main_sessions = main_sessions(a, t->uid);
	for (unsigned k = 0; k < t->nlabels; k++)
		t->labelp[k] = t->labels[k];
	g->n_labels = t->nlabels;
	g->labels = t->labelp;
}

static void send_body(struct devq_session *s, Devq__DaemonMessage__BodyCase c, void *body)
{
	Devq__DaemonMessage m = DEVQ__DAEMON_MESSAGE__INIT;
	m.body_case = c;
	m.grant = body; /* every body of the oneof shares one slot */
	devq_outbox_send(s, &m, NULL, 0);
}

void devq_admin_on_grant(struct devq_admin *a, struct devq_session *s, const Devq__AdminGrant *m)
{
	char err[400];
	struct devq_tenant *t;
	int code = grant(a, m->tenant ? m->tenant : "", (uid_t)m->uid, m->shares, m->of,
			 m->memory_bytes, m->priority, m->update_only,
			 (const char *const *)m->labels, m->n_labels, &t, err, sizeof(err));
	if (code) {
		devq_outbox_error(s, code, "admin_grant", NULL, NULL, "%s", err);
		return;
	}
	save(a);
	devq_log_fields(DEVQ_LOG_NOTICE,
			&(struct devq_log_ctx){ .uid = t->uid, .tenant = t->name },
			-1, -1, -1, "tenant %s granted to uid %u: %u of %u shares, memory %" PRIu64
			"%s", t->name, (unsigned)t->uid, t->shares, t->of, t->memory_cap,
			t->priority ? ", priority" : "");
	Devq__Grant g;
	grant_msg(a, t, &g);
	/* What the grant does not cover, said to whoever made it: the uid's
	 * sessions on the main socket are its own, under the per-user quotas,
	 * outside the tenant's cap and weight. */
	char warn[300] = "";
	if (!a->e->cfg.grant_exclusive)
		snprintf(warn, sizeof(warn), "grant-exclusive is off: uid %u may also connect on "
			 "the main socket, outside tenant %s's cap and weight (%u sessions there "
			 "now)", (unsigned)t->uid, t->name, g.main_sessions);
	else if (g.main_sessions)
		snprintf(warn, sizeof(warn), "uid %u has %u sessions on the main socket, opened "
			 "before this grant: they stay outside tenant %s's cap and weight until "
			 "they close", (unsigned)t->uid, g.main_sessions, t->name);
	if (warn[0]) {
		g.warning = warn;
		devq_log_fields(DEVQ_LOG_WARN,
				&(struct devq_log_ctx){ .uid = t->uid, .tenant = t->name }, -1, -1,
				-1, "tenant %s: %s", t->name, warn);
	}
	send_body(s, DEVQ__DAEMON_MESSAGE__BODY_GRANT, &g);
}

void devq_admin_on_tenants(struct devq_admin *a, struct devq_session *s)
{
	size_t n = 0;
	for (struct devq_admin_grant *k = a->grants; k; k = k->next)
		n++;
	Devq__Grant *g = calloc(n ? n : 1, sizeof(*g));
	Devq__Grant **p = calloc(n ? n : 1, sizeof(*p));
	if (!g || !p) {
		free(g);
		free(p);
		devq_outbox_error(s, DEVQ__CODE__RESOURCE_EXHAUSTED, "admin_tenants", NULL, NULL,
				   "out of memory");
		return;
	}
	size_t i = 0;
	for (struct devq_admin_grant *k = a->grants; k; k = k->next, i++) {
		grant_msg(a, k->t, &g[i]);
		p[i] = &g[i];
	}
	Devq__GrantList l = DEVQ__GRANT_LIST__INIT;
	l.n_items = n;
	l.items = p;
	send_body(s, DEVQ__DAEMON_MESSAGE__BODY_GRANTS, &l);
	free(g);
	free(p);
}

static bool evict_done(const struct devq_tenant *t)
{
	return !t->ops && !t->buffers;
}

/* The evict's answer: the usage line in the log, the reply to the admin if
 * still connected; t is let go. */
static void evict_answer(struct devq_admin *a, struct devq_tenant *t, uint64_t session)
{
	uint64_t left = t->pinned + t->device;
	devq_log_fields(DEVQ_LOG_NOTICE, &(struct devq_log_ctx){ .uid = t->uid, .tenant = t->name },
			-1, -1, -1,
			"tenant %s evicted: device %" PRIu64 " ns, %" PRIu64 " ops, peak %" PRIu64
			" bytes, %" PRIu64 " errors, %" PRIu64 " cancelled, %" PRIu64
			" still running (%" PRIu64 " bytes not yet freed)",
			t->name, t->fair.device_ns, t->fair.ops_done, t->peak, t->failed,
			t->cancelled, t->ops, left);
	for (struct devq_session *s = a->e->sessions; s; s = s->next) {
		if (s->id != session || !s->connected)
			continue;
		Devq__Evicted r = DEVQ__EVICTED__INIT;
		r.tenant = t->name;
		r.device_ns = t->fair.device_ns;
		r.ops = t->fair.ops_done;
		r.peak_bytes = t->peak;
		r.errors = t->failed;
		r.cancelled = t->cancelled;
		r.still_running = t->ops;
		r.bytes_left = left;
		send_body(s, DEVQ__DAEMON_MESSAGE__BODY_EVICTED, &r);
		devq_outbox_mark_dirty(s);
		break;
	}
	t->held = false;
	if (!t->sessions)
		devq_tenant_maybe_free(a->e, t);
}

bool devq_admin_evict_tick(struct devq_admin *a)
{
	devq_sched_drain(a->e); /* completions published in pages only */
	uint64_t now = devq_now_ns();
	for (struct devq_evict_wait **pp = &a->waits; *pp;) {
		struct devq_evict_wait *w = *pp;
		if (!evict_done(w->t) && now < w->deadline_ns) {
			pp = &w->next;
			continue;
		}
		*pp = w->next;
		evict_answer(a, w->t, w->session);
		free(w);
	}
	return a->waits != NULL;
}

void devq_admin_on_evict(struct devq_admin *a, struct devq_session *s, const Devq__AdminEvict *m)
{
	const char *name = m->tenant ? m->tenant : "";
	struct devq_tenant *t = devq_tenant_name_ok(name) ? devq_tenant_find(a->e, name) : NULL;
	if (!t) {
		devq_outbox_error(s, devq_tenant_name_ok(name) ? DEVQ__CODE__NOT_FOUND
							       : DEVQ__CODE__INVALID_ARGUMENT,
				   "admin_evict", NULL, NULL, "tenant '%.80s' is not granted", name);
		return;
	}
	struct devq_evict_wait *w = calloc(1, sizeof(*w));
	if (!w) {
		devq_outbox_error(s, DEVQ__CODE__RESOURCE_EXHAUSTED, "admin_evict", NULL, NULL,
				   "out of memory");
		return;
	}
	/* No new session: the socket goes, and one accepted meanwhile is
	 * refused at admission (the tenant is no longer granted). */
	struct devq_admin_grant **pp = &a->grants;
	while (*pp && (*pp)->t != t)
		pp = &(*pp)->next;
	uint64_t after = UINT64_MAX;
	if (*pp) {
		struct devq_admin_grant *k = *pp;
		after = k->after_session;
		*pp = k->next;
		if (k->sock)
			a->ops.sock_close(a->ops.ud, k->sock);
		free(k);
		a->ngranted--;
		/* The uid's main-socket sessions opened under this grant go
		 * with its last one, whichever of its grants ends last. */
		for (struct devq_admin_grant *o = a->grants; o; o = o->next)
			if (o->t->uid == t->uid && o->after_session > after)
				o->after_session = after;
	}
	t->held = true; /* before ungrant: an idle tenant may be freed there */
	devq_tenant_ungrant(a->e, t);
	save(a);
	/* Its sessions close now: ops not started are cancelled, running
	 * ones finish, each buffer goes when its last op ends. */
	unsigned closed = 0;
	for (struct devq_session *x = a->e->sessions; x; x = x->next) {
		if (x->tenant != t && x->grant != t)
			continue;
		atomic_store(&x->cancel, true);
		if (x->connected) {
			a->ops.close_session(a->ops.ud, x);
			closed++;
		}
		/* One refused at admission never counted among its sessions:
		 * t may be freed before it, so it lets go of t now. */
		if (x->tenant != t)
			x->grant = NULL;
	}
	/* With the uid's last grant go its sessions on the main socket
	 * opened after its first (possible with grant-exclusive off): the
	 * job's processes, wherever they connected.  Not those of its other
	 * grants (closed with them), nor an admin's (its tools', and the
	 * evicting one among them). */
	unsigned main_closed = 0;
	if (!devq_admin_grants_of(a, t->uid, NULL, 0))
		for (struct devq_session *x = a->e->sessions; x; x = x->next) {
			if (x->grant || x->admin || x == s || x->uid != t->uid ||
			    x->id <= after || !x->connected)
				continue;
			atomic_store(&x->cancel, true);
			a->ops.close_session(a->ops.ud, x);
			main_closed++;
		}
	devq_log_fields(DEVQ_LOG_NOTICE, &(struct devq_log_ctx){ .uid = t->uid, .tenant = t->name },
			-1, -1, -1, "tenant %s: evicting (%u sessions closed, %u of uid %u on the "
			"main socket, %" PRIu64 " ops in flight)", t->name, closed, main_closed,
			(unsigned)t->uid, t->ops);
	uint64_t grace_ms = m->grace_ms ? m->grace_ms : a->e->cfg.max_op_ns / 1000000 + 1000;
	w->t = t;
	w->session = s->id;
	w->deadline_ns = devq_now_ns() + grace_ms * 1000000ull;
	if (evict_done(t)) {
		evict_answer(a, t, s->id);
		free(w);
		return;
	}
	w->next = a->waits;
	a->waits = w;
	a->ops.evict_poll(a->ops.ud);
}
