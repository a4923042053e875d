/* SPDX-License-Identifier: Apache-2.0 */
/* devctl: the command-line client of devqd.  This file is its entry point:
 * the global options and the verbs; each verb lives in its own file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devctl/admin.h"
#include "devctl/cdi.h"
#include "devctl/metrics.h"
#include "devctl/status.h"
#include "devctl/submit.h"
#include "devctl/trace.h"
#include "devctl/util.h"
#include "devq.h"

/* One verb: devctl VERB [ARG]... */
struct devctl_verb {
	const char *name;
	/* argv: the arguments after the verb.  Returns devctl's exit status. */
	int (*run)(const char *sock, int argc, char **argv);
	/* Its part of devctl --help, which VERB --help prints alone.  Verbs
	 * that share one (list and status, trace and top, admin and health)
	 * sit together in verbs[], where it is printed once. */
	void (*usage)(FILE *f);
	unsigned flags;
};

enum {
	/* VERB --help runs the verb, as help's own text is devctl --help. */
	DEVCTL_VERB_HELP_RUNS = 1u << 0,
};

static void usage(FILE *f);

static void help_usage(FILE *f)
{
	fprintf(f, "  help                this text\n");
}

static int help_main(const char *sock, int argc, char **argv)
{
	(void)sock;
	(void)argc;
	(void)argv;
	usage(stdout);
	return 0;
}

/* In the order devctl --help lists them. */
static const struct devctl_verb verbs[] = {
	{ "submit", devctl_submit_main, devctl_submit_usage, 0 },
	{ "list", devctl_list_main, devctl_status_usage, 0 },
	{ "status", devctl_status_main, devctl_status_usage, 0 },
	{ "help", help_main, help_usage, DEVCTL_VERB_HELP_RUNS },
	{ "metrics", devctl_metrics, devctl_metrics_usage, 0 },
	{ "trace", devctl_trace_main, devctl_trace_usage, 0 },
	{ "top", devctl_top_main, devctl_trace_usage, 0 },
	{ "admin", devctl_admin_main, devctl_admin_usage, 0 },
	{ "health", devctl_health_main, devctl_admin_usage, 0 },
	{ "cdi", devctl_cdi_main, devctl_cdi_usage, 0 },
};

#define NVERBS (sizeof(verbs) / sizeof(verbs[0]))

static const struct devctl_verb *find_verb(const char *name)
{
	for (size_t i = 0; i < NVERBS; i++)
		if (!strcmp(verbs[i].name, name))
			return &verbs[i];
	return NULL;
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: devctl [--socket PATH | --device N] COMMAND [ARG]...\n"
		"       devctl [--socket PATH | --device N] --version\n"
		"Talk to devqd (socket: --socket, else $DEVQ_SOCKET, else %s).\n"
		"--device N talks to the instance for GPU N, devqd@N.service, on\n"
		"/run/devqd/gpuN.sock.\n"
		"COMMAND --help describes one command.  --version prints devctl's version\n"
		"and, when devqd can be reached, the daemon's version and the protocol\n"
		"versions it speaks (exit status 0 either way).\n"
		"\n"
		"Commands:\n",
		DEVQ_DEFAULT_SOCKET);
	for (size_t i = 0; i < NVERBS; i++)
		if (!i || verbs[i].usage != verbs[i - 1].usage)
			verbs[i].usage(f);
}

#ifndef DEVQ_VERSION
#error "DEVQ_VERSION is defined by the Makefile from the VERSION file"
#endif

/* devctl --version: its own version, then the daemon's when it answers.  An
 * unreachable daemon is reported, not an error: the version was printed. */
static int cmd_version(const char *sock)
{
	printf("devctl %s (protocol %u..%u)\n", DEVQ_VERSION, DEVQ_PROTOCOL_MIN, DEVQ_PROTOCOL_MAX);
	const char *path = sock;
	if (!path || !*path)
		path = getenv("DEVQ_SOCKET");
	if (!path || !*path)
		path = DEVQ_DEFAULT_SOCKET;
	devq *q = NULL;
	int r = devq_connect(path, "devctl", &q);
	if (r < 0) {
		printf("daemon: not reachable (%s)\n", q ? devq_last_error(q) : strerror(-r));
	} else {
		const struct devq_info *in = devq_get_info(q);
		if (in->daemon_min_version)
			printf("daemon: devqd %s at %s (protocol %u..%u, using %u)\n", in->daemon_version,
			       path, in->daemon_min_version, in->daemon_max_version, in->version);
		else
			printf("daemon: devqd %s at %s (protocol %u)\n", in->daemon_version, path,
			       in->version);
	}
	devq_disconnect(q);
	return 0;
}

int main(int argc, char **argv)
{
	static char device_sock[64];
	const char *sock = NULL;
	bool version = false;
	int i = 1;
	for (; i < argc; i++) {
		if (!strcmp(argv[i], "--socket") || !strcmp(argv[i], "-s")) {
			if (i + 1 >= argc) {
				devctl_errf("%s: --socket needs a path\n", devctl_prog);
				return 2;
			}
			sock = argv[++i];
		} else if (!strncmp(argv[i], "--socket=", 9)) {
			sock = argv[i] + 9;
		} else if (!strcmp(argv[i], "--device") || !strncmp(argv[i], "--device=", 9)) {
			const char *n = argv[i][8] == '=' ? argv[i] + 9 : i + 1 < argc ? argv[++i] : "";
			char *end;
			errno = 0;
			unsigned long v = strtoul(n, &end, 10);
			if (!*n || *end || errno || n[0] == '-' || v > 1023) {
				fprintf(stderr, "%s: --device: '%s' is not a GPU ordinal (0..1023)\n",
					devctl_prog, n);
				return 2;
			}
			/* devqd@N.socket's path (systemd/devqd@.socket). */
			snprintf(device_sock, sizeof(device_sock), "/run/devqd/gpu%lu.sock", v);
			sock = device_sock;
		} else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(argv[i], "-V") || !strcmp(argv[i], "--version")) {
			version = true;
		} else {
			break;
		}
	}
	if (version)
		return cmd_version(sock);
	if (i >= argc) {
		usage(stderr);
		return 2;
	}
	const char *cmd = argv[i++];
	const struct devctl_verb *v = find_verb(cmd);
	for (int k = i; k < argc; k++) {
		if (!strcmp(argv[k], "--json"))
			devctl_json_errors = true;
		/* COMMAND --help (not a value: submit's NAME=VALUE never is one) */
		if (!strcmp(argv[k], "--help") || !strcmp(argv[k], "-h")) {
			if (!v || (v->flags & DEVCTL_VERB_HELP_RUNS))
				break;
			v->usage(stdout);
			return 0;
		}
	}
	if (v)
		return v->run(sock, argc - i, argv + i);
	devctl_errf("%s: unknown command '%s' (try devctl --help)\n", devctl_prog, cmd);
	return 2;
}
