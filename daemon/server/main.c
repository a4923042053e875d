/* SPDX-License-Identifier: Apache-2.0 */
/* devqd: argument parsing, backend selection, and the loop's lifetime. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/config.h"
#include "base/log.h"
#include "frame.h"
#include "base/version.h"
#include "server/policy.h"
#include "server/server.h"
#include "base/lock.h"
#include "core/repo.h"
#include "device/hostslot.h"
#include "core/trace.h"
#include "server/reload.h"
#include "core/quota.h"

/* getopt value of the flags that are set through the config key table. */
#define DEVQ_OPT_BY_KEY 0x300

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: devqd [OPTION]...\n"
		"Share one device among client processes: clients connect on a Unix socket,\n"
		"hand over shared-memory buffers and submit kernels; devqd orders and runs them\n"
		"on device streams and reports completions with timing.\n"
		"\n"
		"  -s, --socket PATH       listen on PATH (default /run/devqd/devqd.sock)\n"
		"  -b, --backend NAME      cuda, cpu or auto (default auto: CUDA when a GPU\n"
		"                          initialises, otherwise the CPU backend, saying why)\n"
		"  -d, --device N          GPU ordinal for the CUDA backend (default 0)\n"
		"  -n, --streams N         device streams (CPU backend: worker threads; default 4)\n"
		"      --priority-streams N  high-priority streams besides those, for queues\n"
		"                          opened with priority 1 (default 1; 0: none)\n"
		"      --priority-users LIST  users who may open high-priority queues besides\n"
		"                          root and the daemon's user (default: none)\n"
		"      --priority-groups LIST members of these groups may too (default: none)\n"
		"      --max-op-ms MS      longest duration one op may request (default 10000)\n"
		"      --rate NAME=UNITS/s pin executable NAME's rate: its cost units done per\n"
		"                          second, which turns an op's cost into expected time\n"
		"                          (repeatable; default: learned from its ops)\n"
		"      --max-buffer-mb MB  largest buffer (default 4096)\n"
		"      --max-queues N      queues per session (default 64)\n"
		"      --trace-records N   recent ops kept for devctl trace/top (default 16384;\n"
		"                          0 turns op recording off)\n"
		"      --admin-group NAME  members may trace every user's sessions (default:\n"
		"                          root only)\n"
		"      --test-fault-injection\n"
		"                          expose the 'fault' executable, which makes the device\n"
		"                          fail as a GPU does after an illegal address (tests only)\n"
		"  -c, --config FILE       read settings from FILE (default /etc/devqd/devqd.conf\n"
		"                          when it exists); flags override the file\n"
		"      --stall-timeout-ms MS  watchdog: ops in flight and no completion for MS\n"
		"                          means the device is stuck (default 60000)\n"
		"      --slice-us US       a sliced host op's slices: expected time of each\n"
		"                          per core, how late a cancel or max-op-ms stops it\n"
		"                          (default 2000)\n"
		"Tenancy (see devqd.conf(5) for defaults):\n"
		"      --allow-users LIST  users admitted besides root and the daemon's user\n"
		"      --allow-groups LIST members of these groups are admitted (default devq)\n"
		"      --fair-k N          most ops handed to one device stream (default 16)\n"
		"      --fair-window-us US expected device time handed to one stream (default\n"
		"                          1000); the rest waits, tenants taking turns\n"
		"      --fair-shares LIST  user:weight,...: those users' weights (default 1)\n"
		"      --quota-session-ops N, --quota-user-ops N   ops in flight: backpressure\n"
		"      --quota-session-buffers N, --quota-user-buffers N\n"
		"      --quota-session-pinned-mb MB, --quota-user-pinned-mb MB\n"
		"      --quota-session-device-mb MB, --quota-user-device-mb MB\n"
		"      --quota-user-queues N, --quota-user-sessions N\n"
		"      --quota-session-fds N   received fds waiting for their frames\n"
		"      --quota-outbound-kb KB  unsent replies before a disconnect\n"
		"Admin calls and granted tenants:\n"
		"      --control-groups LIST  groups whose members may grant and evict\n"
		"                          tenants besides root (default: root only)\n"
		"      --observer-groups LIST  groups whose members see every tenant's status\n"
		"                          and metrics, read-only (devq-exporter's user)\n"
		"      --tenants-dir DIR   where tenant sockets go (default: the socket path\n"
		"                          without .sock, plus .tenants)\n"
		"      --grant-exclusive yes|no  a uid with a live grant may not connect on\n"
		"                          the main socket unless it is an admin (default yes)\n"
		"Device losses:\n"
		"      --lost-refuse-after N  device losses caused by one uid's work before\n"
		"                          that uid is refused (default 3)\n"
		"      --lost-refuse-s S   how long it is refused, and the window in which its\n"
		"                          losses count (default 600; 0: never refuse)\n"
		"      --state-dir DIR     where that record outlives a restart (default\n"
		"                          $STATE_DIRECTORY, set by systemd: /var/lib/devqd)\n"
		"      --check-config      read the configuration file and the flags, check\n"
		"                          them as a start would (the access lists too), say\n"
		"                          what is wrong and exit: 0 when devqd would accept\n"
		"                          them, 2 otherwise (devqd.service's ExecReload runs it\n"
		"                          first, so that systemctl reload fails on a bad file)\n"
		"      --executables DIR[:DIR]...  serve the executables of these repository\n"
		"                          directories (repeatable; default\n"
		"                          /etc/devqd/executables.d when it exists); SIGHUP\n"
		"                          rescans them\n"
		"      --print-config      print the effective settings (defaults, the file,\n"
		"                          the flags) as devqd.conf lines and exit\n"
		"      --check-executables DIR  validate the repository DIR as a start would,\n"
		"                          log each refused file and why, and exit: 0 when all\n"
		"                          are good, 1 otherwise (repeatable)\n"
		"  -v, --verbose [N]       more logging (repeat for debug); with N, set the\n"
		"                          level as devqd.conf's verbose does (0..2)\n"
		"  -h, --help              this text\n"
		"  -V, --version           print the version and the protocol versions spoken\n"
		"\n"
		"Runs in the foreground and logs to stderr.  SIGTERM or SIGINT stops it: no new\n"
		"connections, ops not yet started are cancelled, a sliced host op stops at the\n"
		"end of its slice, other running ones finish (bounded by the maximum op\n"
		"duration), everything is freed, exit status 0.  When the device\n"
		"is lost (a sticky GPU fault) every op in flight fails, every session is told\n"
		"(device_lost) and devqd exits with status 69 so that its service manager\n"
		"starts a fresh one; ops still running 1 s after the loss are not waited for.\n");
}

static int parse_u64(const char *opt, const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v < min || v > max) {
		fprintf(stderr, "devqd: %s: '%s' is not a number in %llu..%llu\n", opt, s,
			(unsigned long long)min, (unsigned long long)max);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

/* Appends dirs, DIR[:DIR]... as devqd.conf's executables takes it (the
 * scan skips an empty name between colons), to the ':'-separated list
 * *list. */
static int add_dir(char **list, const char *dir)
{
	if (!*dir) {
		fprintf(stderr, "devqd: --executables: empty value\n");
		return -EINVAL;
	}
	size_t old = *list ? strlen(*list) : 0;
	char *n = realloc(*list, old + strlen(dir) + 2);
	if (!n) {
		fprintf(stderr, "devqd: out of memory\n");
		return -ENOMEM;
	}
	if (old)
		n[old++] = ':';
	strcpy(n + old, dir);
	*list = n;
	return 0;
}

/* --check-executables: what a start would load, without a device (device
 * images are checked as files only) and without serving. */
static int check_executables(const char *dirs, int verbose)
{
	devq_log_set_level(DEVQ_LOG_NOTICE + verbose);
	struct devq_repo_scan *sc = calloc(1, sizeof(*sc));
	if (!sc) {
		fprintf(stderr, "devqd: out of memory\n");
		return 1;
	}
	int r = devq_repo_scan(dirs, NULL, sc);
	unsigned good = sc->n;
	devq_repo_scan_discard(sc);
	free(sc);
	if (r < 0) {
		fprintf(stderr, "devqd: %s\n", strerror(-r));
		return 1;
	}
	if (r > 0) {
		fprintf(stderr, "devqd: %s: %d refused, %u good\n", dirs, r, good);
		return 1;
	}
	printf("devqd: %s: %u executables OK\n", dirs, good);
	return 0;
}

/* fds 0-2 open before anything else is: started with one of them closed,
 * devqd would hand that number to its epoll, a socket or a client's memfd,
 * and its log lines (stderr) would be written into it.  -errno when
 * /dev/null cannot be opened. */
static int std_fds_open(void)
{
	for (int fd = 0; fd <= 2; fd++) {
		if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
			continue;
		int n = open("/dev/null", O_RDWR); /* the lowest free number: fd */
		if (n < 0)
			return -errno;
		if (n != fd) { /* cannot happen: fd was free and lower */
			close(n);
			return -EBADF;
		}
	}
	return 0;
}

/* ---- a crash in a host executable -------------------------------------- */

/* Host executables run in devqd (<devq/kernel.h>): one that faults takes
 * the daemon down like any in-process code, and systemd restarts it.  So
 * that the log says whose code it was, a fatal signal on a thread inside a
 * host executable's run first writes one line naming it (write(2) only:
 * async-signal safe), then puts back the action there was before (the
 * default, or a sanitizer's) and returns, so the faulting instruction
 * raises it again and the process dies as it would have.  A signal sent
 * by kill(2) (systemctl kill -s SEGV) is no fault to re-execute: it is
 * raised again, to be delivered with that action once this returns. */
static const int fatal_signals[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT };
static struct sigaction fatal_prev[sizeof(fatal_signals) / sizeof(fatal_signals[0])];

static void put(const char *s)
{
	size_t n = strlen(s);
	while (n) {
		ssize_t w = write(STDERR_FILENO, s, n);
		if (w <= 0)
			return;
		s += w;
		n -= (size_t)w;
	}
}

static void on_fatal(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	const char *name = devq_hslots_running();
	if (name) {
		char num[4] = { (char)('0' + sig / 10 % 10), (char)('0' + sig % 10), 0 };
		put("devqd: fatal signal ");
		put(sig >= 10 ? num : num + 1);
		put(" in host executable ");
		put(name);
		put(": devqd stops (the fault is in that executable's library)\n");
	}
	for (size_t i = 0; i < sizeof(fatal_signals) / sizeof(fatal_signals[0]); i++)
		if (fatal_signals[i] == sig)
			sigaction(sig, &fatal_prev[i], NULL);
	if (si->si_code <= 0) /* SI_USER, SI_TKILL, SI_QUEUE: sent, not a fault */
		raise(sig);
}

static void note_fatal_signals(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_fatal;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(fatal_signals) / sizeof(fatal_signals[0]); i++)
		sigaction(fatal_signals[i], &sa, &fatal_prev[i]);
}

/* The labels that join devq's series to the node's other GPU exporters
 * (Status.gpu, Status.uuid): the ordinal devqd serves, and the backend's
 * UUID (CUDA: the device's), or for the CPU backend "CPU-" and the host's
 * machine id, which stays the same across restarts and reboots. */
static void device_ids(struct devq_engine *e)
{
	snprintf(e->gpu, sizeof(e->gpu), "%d", e->cfg.device);
	if (e->be->uuid[0] || strcmp(e->be->name, "cpu")) {
		snprintf(e->uuid, sizeof(e->uuid), "%s", e->be->uuid);
		return;
	}
	char id[64] = "";
	FILE *f = fopen("/etc/machine-id", "re");
	if (f) {
		if (!fgets(id, sizeof(id), f))
			id[0] = '\0';
		if (fclose(f) != 0)
			log_warn("/etc/machine-id: close: %s", strerror(errno));
	}
	id[strcspn(id, "\n")] = '\0';
	if (!id[0]) { /* no machine id: the host's name, stable enough */
		if (gethostname(id, sizeof(id) - 1) != 0)
			snprintf(id, sizeof(id), "unknown");
		id[sizeof(id) - 1] = '\0';
	}
	snprintf(e->uuid, sizeof(e->uuid), "CPU-%.59s", id);
}

int main(int argc, char **argv)
{
	if (std_fds_open() < 0)
		return 70; /* EX_SOFTWARE; no stderr to say it on */
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "backend", required_argument, NULL, 'b' },
		{ "streams", required_argument, NULL, 'n' },
		{ "max-op-ms", required_argument, NULL, 1 },
		{ "max-buffer-mb", required_argument, NULL, 2 },
		{ "max-queues", required_argument, NULL, 3 },
		{ "device", required_argument, NULL, 'd' },
		{ "test-fault-injection", no_argument, NULL, 4 },
		{ "config", required_argument, NULL, 'c' },
		{ "stall-timeout-ms", required_argument, NULL, 5 },
		{ "trace-records", required_argument, NULL, 70 },
		{ "admin-group", required_argument, NULL, 71 },
		{ "check-config", no_argument, NULL, 72 },
		{ "executables", required_argument, NULL, 73 },
		{ "check-executables", required_argument, NULL, 74 },
		/* Tenancy: each is also a devqd.conf key, set through its table. */
		{ "allow-users", required_argument, NULL, DEVQ_OPT_BY_KEY },
		{ "allow-groups", required_argument, NULL, DEVQ_OPT_BY_KEY },
		{ "priority-users", required_argument, NULL, DEVQ_OPT_BY_KEY },
		{ "priority-groups", required_argument, NULL, DEVQ_OPT_BY_KEY },
		{ "control-groups", required_argument, NULL, DEVQ_OPT_BY_KEY },
		{ "observer-groups", required_argument, NULL, DEVQ_OPT_BY_KEY },
		{ "tenants-dir", required_argument, NULL, DEVQ_OPT_BY_KEY },
		{ "grant-exclusive", required_argument, NULL, DEVQ_OPT_BY_KEY },
		{ "fair-k", required_argument, NULL, DEVQ_OPT_BY_KEY },
		{ "priority-streams", required_argument, NULL, DEVQ_OPT_BY_KEY },
		{ "fair-shares", required_argument, NULL, DEVQ_OPT_BY_KEY },
		{ "fair-window-us", required_argument, NULL, DEVQ_OPT_BY_KEY },
		{ "quota-session-ops", required_argument, NULL, DEVQ_OPT_BY_KEY },
		{ "quota-user-ops", required_argument, NULL, DEVQ_OPT_BY_KEY },
		{ "quota-session-buffers", required_argument, NULL, DEVQ_OPT_BY_KEY },
		{ "quota-user-buffers", required_argument, NULL, DEVQ_OPT_BY_KEY },
		{ "quota-session-pinned-mb", required_argument, NULL, DEVQ_OPT_BY_KEY },
		{ "quota-user-pinned-mb", required_argument, NULL, DEVQ_OPT_BY_KEY },
		{ "quota-session-device-mb", required_argument, NULL, DEVQ_OPT_BY_KEY },
		{ "quota-user-device-mb", required_argument, NULL, DEVQ_OPT_BY_KEY },
		{ "quota-user-queues", required_argument, NULL, DEVQ_OPT_BY_KEY },
		{ "quota-user-sessions", required_argument, NULL, DEVQ_OPT_BY_KEY },
		{ "quota-session-fds", required_argument, NULL, DEVQ_OPT_BY_KEY },
		{ "quota-outbound-kb", required_argument, NULL, DEVQ_OPT_BY_KEY },
		{ "lost-refuse-after", required_argument, NULL, DEVQ_OPT_BY_KEY },
		{ "lost-refuse-s", required_argument, NULL, DEVQ_OPT_BY_KEY },
		{ "state-dir", required_argument, NULL, DEVQ_OPT_BY_KEY },
		{ "rate", required_argument, NULL, DEVQ_OPT_BY_KEY },
		{ "slice-us", required_argument, NULL, DEVQ_OPT_BY_KEY },
		{ "print-config", no_argument, NULL, 75 },
		{ "verbose", optional_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	struct devq_daemon d = { 0 };
	struct devq_config cfg = { 0 };
	cfg.socket_path = "/run/devqd/devqd.sock";
	cfg.backend = "auto";
	cfg.streams = 4;
	cfg.priority_streams = 1;
	cfg.max_op_ns = 10ull * 1000 * 1000 * 1000;
	cfg.max_buffer_bytes = 4096ull << 20;
	cfg.max_frame = DEVQ_FRAME_MAX_DEFAULT;
	cfg.max_queues = 64;
	cfg.stall_ns = 60ull * 1000 * 1000 * 1000;
	cfg.slice_ns = DEVQ_SLICE_NS_DEFAULT;
	cfg.trace_records = DEVQ_TRACE_DEFAULT_RECORDS;
	cfg.lost_refuse_after = 3;
	cfg.lost_refuse_s = 600;
	cfg.grant_exclusive = true;
	d.listen_fd = -1;
	int verbose = 0, c;
	char *exe_dirs = NULL, *check_dirs = NULL; /* --executables, --check-executables */
	bool check_config = false, print_config = false;
	uint64_t v;
	/* The file first, so that every flag below overrides it. */
	if (devq_config_load_argv(&cfg, argc, argv) < 0)
		return 2;
	int li = 0;
	while ((c = getopt_long(argc, argv, "s:b:n:d:c:vhV", opts, &li)) != -1) {
		switch (c) {
		case 's':
			cfg.socket_path = optarg;
			break;
		case 'b':
			if (strcmp(optarg, "cpu") && strcmp(optarg, "auto") &&
			    strcmp(optarg, "cuda")) {
				fprintf(stderr,
					"devqd: --backend: '%s' is not a backend (cuda, cpu or auto)\n",
					optarg);
				return 2;
			}
			cfg.backend = optarg;
			break;
		case 'd':
			if (parse_u64("--device", optarg, 0, 1023, &v))
				return 2;
			cfg.device = (int)v;
			break;
		case 4:
			cfg.test_faults = true;
			break;
		case 'n':
			if (parse_u64("--streams", optarg, 1, 256, &v))
				return 2;
			cfg.streams = (unsigned)v;
			break;
		case 1:
			if (parse_u64("--max-op-ms", optarg, 1, 24ull * 3600 * 1000, &v))
				return 2;
			cfg.max_op_ns = v * 1000000;
			break;
		case 2:
			if (parse_u64("--max-buffer-mb", optarg, 1, 1ull << 30, &v))
				return 2;
			cfg.max_buffer_bytes = v << 20;
			break;
		case 3:
			if (parse_u64("--max-queues", optarg, 1, 1u << 16, &v))
				return 2;
			cfg.max_queues = (unsigned)v;
			break;
		case 'c': /* loaded above */
			break;
		case 5:
			if (parse_u64("--stall-timeout-ms", optarg, 1000, 24ull * 3600 * 1000, &v))
				return 2;
			cfg.stall_ns = v * 1000000;
			break;
		case 70:
			if (parse_u64("--trace-records", optarg, 0, DEVQ_TRACE_MAX_RECORDS, &v))
				return 2;
			cfg.trace_records = (unsigned)v;
			break;
		case 71:
			cfg.admin_group = optarg;
			break;
		case 72:
			check_config = true;
			break;
		case 73:
		case 74:
			/* Repeatable: the flags' directories replace the file's. */
			if (add_dir(c == 73 ? &exe_dirs : &check_dirs, optarg) < 0)
				return 2;
			if (c == 73)
				cfg.executables = exe_dirs;
			break;
		case DEVQ_OPT_BY_KEY: {
			char err[256];
			if (devq_config_set(&cfg, opts[li].name, optarg, err, sizeof(err)) < 0) {
				fprintf(stderr, "devqd: --%s\n", err);
				return 2;
			}
			break;
		}
		case 'v':
			/* --verbose N (or =N) is the key, in its syntax; -v and a
			 * bare --verbose add one. */
			if (!optarg && devq_config_verbose_has_value(argc, argv, optind) &&
			    !strncmp(argv[optind - 1], "--", 2))
				optarg = argv[optind++];
			if (optarg) {
				char err[256];
				if (devq_config_set(&cfg, "verbose", optarg, err, sizeof(err)) < 0) {
					fprintf(stderr, "devqd: --%s\n", err);
					return 2;
				}
			} else {
				verbose++;
			}
			break;
		case 75:
			print_config = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("devqd %s (protocol %u..%u)\n", DEVQ_VERSION, DEVQ_PROTO_MIN, DEVQ_PROTO_MAX);
			return 0;
		default:
			/* getopt said what was wrong, in one line: the help would
			 * bury it. */
			fprintf(stderr, "Try 'devqd --help' for more information.\n");
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "devqd: unexpected argument '%s'\n", argv[optind]);
		fprintf(stderr, "Try 'devqd --help' for more information.\n");
		return 2;
	}
	if (check_dirs) {
		int rc = check_executables(check_dirs, verbose);
		free(exe_dirs);
		free(check_dirs);
		devq_config_fini();
		return rc;
	}
	if (print_config) {
		/* What the daemon would run with: the quota defaults are filled
		 * in as at start (core/quota.c). */
		devq_quota_defaults(&cfg);
		if (!cfg.executables) /* what the scan reads then (core/repo.c) */
			cfg.executables = DEVQ_REPO_DEFAULT_DIR;
		devq_config_dump(stdout, &cfg);
		free(exe_dirs);
		devq_config_fini();
		return fflush(stdout) == 0 ? 0 : 1;
	}
	if (check_config) {
		/* What a start checks before it touches the device or the socket. */
		struct devq_policy pol;
		char perr[256];
		if (devq_policy_init(&pol, cfg.allow_users, cfg.allow_groups ? cfg.allow_groups : "devq",
				     !cfg.allow_groups, perr, sizeof(perr)) < 0) {
			fprintf(stderr, "devqd: access policy: %s\n", perr);
			devq_config_fini();
			return 2;
		}
		if (devq_policy_init_priority(&pol, cfg.priority_users, cfg.priority_groups, perr,
					      sizeof(perr)) < 0) {
			fprintf(stderr, "devqd: priority grant: %s\n", perr);
			devq_config_fini();
			return 2;
		}
		if (devq_policy_init_control(&pol, cfg.control_groups, perr, sizeof(perr)) < 0) {
			fprintf(stderr, "devqd: admin calls: %s\n", perr);
			devq_config_fini();
			return 2;
		}
		if (devq_policy_init_observer(&pol, cfg.observer_groups, perr, sizeof(perr)) < 0) {
			fprintf(stderr, "devqd: observers: %s\n", perr);
			devq_config_fini();
			return 2;
		}
		printf("devqd: configuration OK\n");
		devq_config_fini();
		return 0;
	}
	devq_log_set_level(DEVQ_LOG_NOTICE + cfg.verbose + verbose);
	cfg.stop_grace_ns = cfg.max_op_ns + 2ull * 1000 * 1000 * 1000;
	signal(SIGPIPE, SIG_IGN);
	note_fatal_signals();

	struct devq_engine_events ev = devq_server_events(&d);
	devq_server_block_signals(); /* until their handlers are set: server.c */
	int r = devq_engine_init(&d.e, &cfg, &ev, NULL);
	if (r < 0)
		return r == -EINVAL ? 2 : 1;
	device_ids(&d.e);
	uv_loop_t loop;
	if (uv_loop_init(&loop) < 0) {
		log_err("out of memory");
		devq_engine_fini(&d.e);
		return 1;
	}
	d.loop = &loop;
	if (devq_reload_initial(&d) < 0) {
		log_err("out of memory");
		devq_engine_fini(&d.e);
		return 1;
	}
	int code = devq_server_run(&d);
	/* The backend's threads first: one may still be inside on_complete,
	 * about to wake the loop (uv_async_send writes to the loop's wake-up
	 * fd, which uv_loop_close closes; libuv aborts on the failed write). */
	devq_engine_fini(&d.e);
	devq_reload_fini(&d);
	if (uv_loop_close(&loop) < 0)
		log_err("loop: handles still open at exit");
	log_notice("stopped");
	devq_config_fini();
	free(exe_dirs);
	return code;
}
