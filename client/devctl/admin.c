/* SPDX-License-Identifier: Apache-2.0 */
/* devctl admin (grant, evict, tenants) and devctl health. */
#include "devctl/admin.h"

#include <errno.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "devctl/cdi.h"
#include "devctl/util.h"

void devctl_admin_usage(FILE *f)
{
	fprintf(f,
		"  admin grant TENANT --uid UID [--shares N --of M] [--memory BYTES] [--priority]\n"
		"        [--label KEY=VALUE]... [--update-only] [--cdi] [--json]\n"
		"      Create or update tenant TENANT (A-Z a-z 0-9 _ . -, 1-64 characters, not\n"
		"      starting with '.') and its socket, owned by UID (a number or a user\n"
		"      name), mode 0600, in devqd's tenant directory: every connection on it\n"
		"      is the tenant's.  --shares N of M: its fair weight N (1-64; default 1)\n"
		"      and the device's shares it is of (default N); --memory: a cap on its\n"
		"      shared plus device bytes over all its sessions (suffixes K, M, G, T);\n"
		"      --priority: it may open high-priority queues.  --label: a label on its\n"
		"      metrics (at most 8, replacing its labels; kept across restarts).\n"
		"      --update-only: only\n"
		"      update a granted tenant; none by that name is not_found, nothing made.\n"
		"      Root only, or\n"
		"      devqd's control-groups.  --cdi: also write the CDI spec %s/\n"
		"      devq.dev-tenant_TENANT.json, device devq.dev/tenant=TENANT (the socket\n"
		"      and DEVQ_SOCKET), for podman run --device; admin evict removes it.\n"
		"  admin evict TENANT [--grace MS] [--json]\n"
		"      End the grant: refuse new work, close its sessions, cancel ops not\n"
		"      started, stop a sliced host op at its next slice, let other running\n"
		"      ones finish, free its buffers, remove its\n"
		"      socket; print its usage once all is freed or after MS (default:\n"
		"      devqd's max-op-ms plus a second), saying what still runs.\n"
		"  admin tenants [--json]\n"
		"      The granted tenants, their sessions and usage.\n"
		"  health [--json]\n"
		"      Exit 0 when devqd serves and its device runs an op; 1 when the op\n"
		"      fails or does not complete within 5 s, 3 when devqd cannot be reached.\n",
		DEVCTL_CDI_RUN_DIR);
}

static int connect_admin(const char *sock, devq **q)
{
	int r = devq_connect(sock, "devctl", q);
	if (r < 0) {
		fprintf(stderr, "devctl: %s%s\n", *q ? devq_last_error(*q) : strerror(-r),
			devctl_conn_hint(r, *q));
		devq_disconnect(*q);
		*q = NULL;
		return 3;
	}
	return 0;
}

/* "1073741824", "512M", "2G": bytes. */
static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	if (!*s || *s == '-')
		return -1;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -1;
	unsigned shift = 0;
	if (*end) {
		const char *units = "KMGT";
		const char *u = strchr(units, end[0] >= 'a' ? end[0] - 32 : end[0]);
		if (!u || !end[0] || (end[1] && strcmp(end + 1, "iB") && strcmp(end + 1, "B")))
			return -1;
		shift = 10 * (unsigned)(u - units + 1);
	}
	if (shift && v > (UINT64_MAX >> shift))
		return -1;
	*out = (uint64_t)v << shift;
	return 0;
}

static int parse_u32(const char *s, uint32_t *out)
{
	char *end;
	errno = 0;
	if (!*s || *s == '-')
		return -1;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || *end || v > UINT32_MAX)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

static void json_grant(FILE *f, const struct devq_grant *g, bool usage)
{
	fputs("{\"tenant\":", f);
	devctl_json_str(f, g->tenant);
	fprintf(f, ",\"uid\":%" PRIu32 ",\"socket\":", g->uid);
	devctl_json_str(f, g->socket);
	fprintf(f, ",\"shares\":%" PRIu32 ",\"of\":%" PRIu32 ",\"memory_bytes\":%" PRIu64
		   ",\"priority\":%s",
		g->shares, g->of, g->memory_bytes, g->priority ? "true" : "false");
	if (usage)
		fprintf(f,
			",\"sessions\":%" PRIu32 ",\"device_ns\":%" PRIu64 ",\"ops\":%" PRIu64
			",\"peak_bytes\":%" PRIu64 ",\"errors\":%" PRIu64 ",\"cancelled\":%" PRIu64
			",\"still_running\":%" PRIu64 ",\"bytes\":%" PRIu64,
			g->sessions, g->device_ns, g->ops, g->peak_bytes, g->errors, g->cancelled,
			g->ops_in_flight, g->bytes);
	fputc('}', f);
}

static int fail_call(devq *q, const char *what, bool json)
{
	if (json) {
		fputs("{\"error\":", stderr);
		char msg[600];
		snprintf(msg, sizeof(msg), "%s: %s", what, devq_last_error(q));
		devctl_json_str(stderr, msg);
		fputs("}\n", stderr);
	} else {
		fprintf(stderr, "devctl: %s: %s\n", what, devq_last_error(q));
	}
	devq_disconnect(q);
	return 1;
}

static int usage_err(const char *fmt, const char *arg)
{
	fprintf(stderr, "devctl: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, " (try devctl admin --help)\n");
	return 2;
}

static int cmd_grant(const char *sock, int argc, char **argv)
{
	struct devq_grant_request req = { 0 };
	bool json = false, have_uid = false, cdi = false, update_only = false;
	const char *labels[DEVQ_TENANT_LABELS];
	size_t nlabels = 0;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--json")) {
			json = true;
		} else if (!strcmp(a, "--cdi")) {
			cdi = true;
		} else if (!strcmp(a, "--update-only")) {
			update_only = true;
		} else if (!strcmp(a, "--priority")) {
			req.priority = true;
		} else if (!strcmp(a, "--label")) {
			if (i + 1 >= argc || !strchr(argv[i + 1], '='))
				return usage_err("admin grant: --label needs KEY=VALUE%s", "");
			if (nlabels == DEVQ_TENANT_LABELS)
				return usage_err("admin grant: at most 8 --label ('%s')", argv[i + 1]);
			labels[nlabels++] = argv[++i];
		} else if (!strcmp(a, "--uid") || !strcmp(a, "--shares") || !strcmp(a, "--of") ||
			   !strcmp(a, "--memory")) {
			if (i + 1 >= argc)
				return usage_err("admin grant: %s needs a value", a);
			const char *v = argv[++i];
			if (!strcmp(a, "--uid")) {
				if (parse_u32(v, &req.uid) < 0) {
					struct passwd *pw = getpwnam(v);
					if (!pw)
						return usage_err("admin grant: --uid: no user '%s'", v);
					req.uid = pw->pw_uid;
				}
				have_uid = true;
			} else if (!strcmp(a, "--shares")) {
				if (parse_u32(v, &req.shares) < 0 || !req.shares)
					return usage_err("admin grant: --shares: '%s' is not a "
							 "positive number", v);
			} else if (!strcmp(a, "--of")) {
				if (parse_u32(v, &req.of) < 0 || !req.of)
					return usage_err("admin grant: --of: '%s' is not a "
							 "positive number", v);
			} else if (parse_size(v, &req.memory_bytes) < 0) {
				return usage_err("admin grant: --memory: '%s' is not a size", v);
			}
		} else if (a[0] == '-' && a[1]) {
			return usage_err("admin grant: unknown option %s", a);
		} else if (!req.tenant) {
			req.tenant = a;
		} else {
			return usage_err("admin grant: one TENANT only ('%s')", a);
		}
	}
	if (!req.tenant)
		return usage_err("admin grant: no TENANT%s", "");
	if (!have_uid)
		return usage_err("admin grant: --uid is required%s", "");
	devq *q;
	int rc = connect_admin(sock, &q);
	if (rc)
		return rc;
	struct devq_grant g;
	if (devq_admin_grant_labels(q, &req, labels, nlabels, update_only ? DEVQ_GRANT_UPDATE_ONLY : 0,
				    &g) < 0)
		return fail_call(q, "admin grant", json);
	/* Granted, with what the grant does not cover: said, not failed. */
	char warn[320];
	snprintf(warn, sizeof(warn), "%s", devq_admin_warning(q));
	devq_disconnect(q);
	if (warn[0] && json) {
		fputs("{\"warning\":", stderr);
		devctl_json_str(stderr, warn);
		fputs("}\n", stderr);
	} else if (warn[0]) {
		fprintf(stderr, "devctl: admin grant: warning: %s\n", warn);
	}
	/* devctl writes the spec, not devqd: the unit's ProtectSystem=strict
	 * keeps devqd out of /var/run/cdi. */
	char err[512];
	if (cdi && devctl_cdi_tenant_write(g.tenant, g.socket, err, sizeof(err)) < 0) {
		fprintf(stderr, "devctl: admin grant --cdi: tenant %s is granted, but %s\n", g.tenant,
			err);
		return 4;
	}
	if (json) {
		json_grant(stdout, &g, false);
		fputc('\n', stdout);
	} else {
		printf("tenant %s: uid %" PRIu32 ", %" PRIu32 " of %" PRIu32 " shares, ", g.tenant,
		       g.uid, g.shares, g.of);
		if (g.memory_bytes)
			printf("memory cap %" PRIu64 " bytes", g.memory_bytes);
		else
			printf("no memory cap of its own");
		printf("%s; socket %s\n", g.priority ? ", high priority allowed" : "", g.socket);
	}
	return 0;
}

static int cmd_evict(const char *sock, int argc, char **argv)
{
	const char *tenant = NULL;
	uint32_t grace = 0;
	bool json = false;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--json")) {
			json = true;
		} else if (!strcmp(a, "--grace")) {
			if (i + 1 >= argc || parse_u32(argv[i + 1], &grace) < 0 || !grace)
				return usage_err("admin evict: --grace needs milliseconds (1 or "
						 "more)%s", "");
			i++;
		} else if (a[0] == '-' && a[1]) {
			return usage_err("admin evict: unknown option %s", a);
		} else if (!tenant) {
			tenant = a;
		} else {
			return usage_err("admin evict: one TENANT only ('%s')", a);
		}
	}
	if (!tenant)
		return usage_err("admin evict: no TENANT%s", "");
	devq *q;
	int rc = connect_admin(sock, &q);
	if (rc)
		return rc;
	struct devq_evict_result r;
	if (devq_admin_evict(q, tenant, grace, &r) < 0)
		return fail_call(q, "admin evict", json);
	/* The tenant's CDI spec (admin grant --cdi), if any, goes with it. */
	char err[512];
	if (devctl_cdi_tenant_remove(tenant, err, sizeof(err)) < 0) {
		fprintf(stderr, "devctl: admin evict: %s\n", err);
		rc = 4;
	}
	if (json) {
		fputs("{\"tenant\":", stdout);
		devctl_json_str(stdout, r.tenant);
		printf(",\"device_ns\":%" PRIu64 ",\"ops\":%" PRIu64 ",\"peak_bytes\":%" PRIu64
		       ",\"errors\":%" PRIu64 ",\"cancelled\":%" PRIu64 ",\"still_running\":%" PRIu64
		       "}\n",
		       r.device_ns, r.ops, r.peak_bytes, r.errors, r.cancelled, r.still_running);
	} else {
		char dev[32];
		devctl_fmt_ns(dev, sizeof(dev), r.device_ns, 3);
		printf("tenant %s evicted: device %s, %" PRIu64 " ops, peak %" PRIu64
		       " bytes, %" PRIu64 " errors, %" PRIu64 " cancelled\n",
		       r.tenant, dev, r.ops, r.peak_bytes, r.errors, r.cancelled);
		if (r.still_running)
			printf("still running after the grace: %" PRIu64 " ops, holding %" PRIu64
			       " bytes (freed when they end)\n",
			       r.still_running, r.bytes_left);
		else
			printf("everything freed\n");
	}
	devq_disconnect(q);
	return rc;
}

static int cmd_tenants(const char *sock, int argc, char **argv)
{
	bool json = false;
	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = true;
		else
			return usage_err("admin tenants: unknown argument %s", argv[i]);
	}
	devq *q;
	int rc = connect_admin(sock, &q);
	if (rc)
		return rc;
	struct devq_grant *g;
	size_t n;
	if (devq_admin_tenants(q, &g, &n) < 0)
		return fail_call(q, "admin tenants", json);
	if (json) {
		fputc('[', stdout);
		for (size_t i = 0; i < n; i++) {
			if (i)
				fputc(',', stdout);
			json_grant(stdout, &g[i], true);
		}
		fputs("]\n", stdout);
	} else if (!n) {
		printf("no granted tenants\n");
	} else {
		printf("%-24s %8s %9s %14s %8s %10s %12s %14s\n", "TENANT", "UID", "SHARES",
		       "MEMORY", "SESSIONS", "OPS", "DEVICE", "PEAK BYTES");
		for (size_t i = 0; i < n; i++) {
			char shares[24], mem[24], dev[32];
			snprintf(shares, sizeof(shares), "%" PRIu32 "/%" PRIu32, g[i].shares, g[i].of);
			if (g[i].memory_bytes)
				snprintf(mem, sizeof(mem), "%" PRIu64, g[i].memory_bytes);
			else
				snprintf(mem, sizeof(mem), "-");
			devctl_fmt_ns(dev, sizeof(dev), g[i].device_ns, 1);
			printf("%-24s %8" PRIu32 " %9s %14s %8" PRIu32 " %10" PRIu64 " %12s %14" PRIu64
			       "\n",
			       g[i].tenant, g[i].uid, shares, mem, g[i].sessions, g[i].ops, dev,
			       g[i].peak_bytes);
		}
	}
	free(g);
	devq_disconnect(q);
	return 0;
}

int devctl_admin_main(const char *sock, int argc, char **argv)
{
	if (argc < 1) {
		devctl_admin_usage(stderr);
		return 2;
	}
	if (!strcmp(argv[0], "grant"))
		return cmd_grant(sock, argc - 1, argv + 1);
	if (!strcmp(argv[0], "evict"))
		return cmd_evict(sock, argc - 1, argv + 1);
	if (!strcmp(argv[0], "tenants"))
		return cmd_tenants(sock, argc - 1, argv + 1);
	return usage_err("admin: unknown command '%s'", argv[0]);
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Serves: the Hello was answered.  Device usable: a fill of a small device
 * buffer ran on it and completed, within 5 s. */
int devctl_health_main(const char *sock, int argc, char **argv)
{
	bool json = false;
	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = true;
		else
			return usage_err("health: unknown argument %s", argv[i]);
	}
	uint64_t t0 = now_ns();
	devq *q = NULL;
	int r = devq_connect(sock, "devctl health", &q);
	const char *why = NULL;
	char msg[600] = "";
	int rc = 0;
	struct devq_buffer *b = NULL;
	if (r < 0) {
		snprintf(msg, sizeof(msg), "devqd does not serve: %s",
			 q ? devq_last_error(q) : strerror(-r));
		why = msg;
		rc = 3;
	} else if (devq_buffer_create(q, 4096, DEVQ_BUFFER_DEVICE, &b) < 0 ||
		   devq_queue_open(q, 1) < 0) {
		snprintf(msg, sizeof(msg), "device: %s", devq_last_error(q));
		why = msg;
		rc = 1;
	} else {
		struct devq_op op = { .queue = 1, .kind = DEVQ_OP_FILL, .dst = b, .size = 4096,
				      .pattern = 0x68656c6f };
		uint64_t point;
		struct devq_completion c;
		if (devq_submit(q, &op, 1, &point) < 0) {
			snprintf(msg, sizeof(msg), "device: %s", devq_last_error(q));
			why = msg;
			rc = 1;
		} else if ((r = devq_wait(q, 1, point, 5000, &c)) < 0) {
			snprintf(msg, sizeof(msg), "device: no completion within 5 s: %s",
				 r == -ETIMEDOUT ? "timed out" : devq_last_error(q));
			why = msg;
			rc = 1;
		} else if (c.code != DEVQ_OK) {
			snprintf(msg, sizeof(msg), "device: the op failed: %s: %s",
				 devq_code_name(c.code), c.message);
			why = msg;
			rc = 1;
		}
	}
	uint64_t el = now_ns() - t0;
	const struct devq_info *in = rc == 3 ? NULL : devq_get_info(q);
	if (json) {
		printf("{\"ok\":%s", rc ? "false" : "true");
		if (in) {
			fputs(",\"backend\":", stdout);
			devctl_json_str(stdout, in->backend);
			fputs(",\"device\":", stdout);
			devctl_json_str(stdout, in->device);
			fputs(",\"version\":", stdout);
			devctl_json_str(stdout, in->daemon_version);
		}
		printf(",\"check_ns\":%" PRIu64, el);
		if (why) {
			fputs(",\"error\":", stdout);
			devctl_json_str(stdout, why);
		}
		fputs("}\n", stdout);
	} else if (rc) {
		fprintf(stderr, "devctl: health: %s\n", why);
	} else {
		char t[32];
		devctl_fmt_ns(t, sizeof(t), el, 3);
		printf("ok: devqd %s serves, %s backend (%s) ran an op; %s\n", in->daemon_version,
		       in->backend, in->device, t);
	}
	devq_disconnect(q);
	return rc;
}
