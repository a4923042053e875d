/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spank_devq: Slurm jobs share each node's GPUs through devqd.
 *
 * The job prolog grants tenant job_<JOBID> for the job's uid on every GPU of
 * the job (devctl admin grant), each task learns its tenant sockets
 * (DEVQ_SOCKET, DEVQ_SOCKETS) and the step's shard count becomes the grant's
 * weight, and the job epilog evicts the tenant, logging its usage.
 *
 * The plugin runs devctl rather than linking libdevq.  A devqd that hangs
 * must not hang slurmd's prolog or a task's start: a child process can be
 * killed at a deadline, a library call in slurmstepd cannot.  devctl's admin
 * commands and their JSON are the one admin contract devq keeps, so the
 * plugin has no ABI of its own to follow, and the package needs only devctl.
 * See slurm/README.md and devq-slurm(8).
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/spank.h>

SPANK_PLUGIN(devq, 1);

#define MAX_GPUS 64
#define OUT_MAX 8192
/* devqd's bounds on a grant: a weight of 1 to 64, of at most 65536. */
#define MAX_SHARES 64
#define MAX_OF 65536

/* plugstack.conf arguments (devq-slurm(8)). */
static struct {
	unsigned shards_per_gpu;   /* M: the "of" of every grant */
	char socket_tmpl[256];     /* %g: GPU index, %n: slurmd's node name */
	char devctl[256];          /* absolute path */
	bool fail_closed;          /* a refused grant fails the prolog */
	bool allow_priority;       /* --devq-priority accepted */
	unsigned timeout_s;        /* each devctl run */
	unsigned grace_ms;         /* devctl admin evict --grace */
} cfg = {
	.shards_per_gpu = 1,
	.socket_tmpl = "/run/devqd/gpu%g.sock",
	.devctl = "/usr/bin/devctl",
	.fail_closed = true,
	.allow_priority = false,
	.timeout_s = 10,
	.grace_ms = 5000,
};

/* ---- job options ---------------------------------------------------------- */

static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	if (!s || !isdigit((unsigned char)s[0]))
		return -1;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		return -1;
	unsigned shift = 0;
	switch (toupper((unsigned char)*end)) {
	case '\0': break;
	case 'K': shift = 10; break;
	case 'M': shift = 20; break;
	case 'G': shift = 30; break;
	case 'T': shift = 40; break;
	default: return -1;
	}
	if (*end && end[1])
		return -1;
	if (v == 0 || v > (UINT64_MAX >> shift))
		return -1;
	*out = (uint64_t)v << shift;
	return 0;
}

static int parse_uint(const char *s, unsigned lo, unsigned hi, unsigned *out)
{
	char *end;
	errno = 0;
	if (!s || !isdigit((unsigned char)s[0]))
		return -1;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return -1;
	*out = (unsigned)v;
	return 0;
}

/* Callbacks check the value where the user typed it (srun, sbatch, salloc):
 * a bad size is refused at submission, not found by a prolog on a node. */
static int opt_memory_cb(int val, const char *arg, int remote)
{
	(void)val;
	uint64_t b;
	if (parse_size(arg, &b) < 0) {
		if (!remote)
			slurm_error("devq: --devq-memory=%s: not a size (BYTES, or with a K, M, G "
				    "or T suffix, powers of 1024; more than 0)",
				    arg ? arg : "");
		return -1;
	}
	return 0;
}

static int opt_shares_cb(int val, const char *arg, int remote)
{
	(void)val;
	unsigned n;
	if (parse_uint(arg, 1, MAX_SHARES, &n) < 0) {
		if (!remote)
			slurm_error("devq: --devq-shares=%s: not a whole number from 1 to 64",
				    arg ? arg : "");
		return -1;
	}
	return 0;
}

static int opt_priority_cb(int val, const char *arg, int remote)
{
	(void)val;
	(void)arg;
	if (!cfg.allow_priority) {
		if (!remote)
			slurm_error("devq: --devq-priority is not allowed on this cluster "
				    "(plugstack.conf: allow_priority=no)");
		return -1;
	}
	return 0;
}

/* Registered with spank_option_register: sbatch and salloc ignore a
 * spank_options table. */
static struct spank_option opt_memory = {
	"devq-memory", "SIZE",
	"devq: cap the job's GPU memory (shared plus device bytes, all its processes) "
	"on each GPU; K, M, G, T suffixes",
	1, 0, opt_memory_cb,
};
static struct spank_option opt_shares = {
	"devq-shares", "N",
	"devq: the job's weight on each GPU until a step's shard count sets it",
	1, 0, opt_shares_cb,
};
static struct spank_option opt_priority = {
	"devq-priority", NULL,
	"devq: the job may open high-priority queues (where the site allows it)",
	0, 0, opt_priority_cb,
};

/* ---- plugin arguments ----------------------------------------------------- */

static int parse_bool(const char *v, bool *out)
{
	if (!strcmp(v, "yes") || !strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "on"))
		*out = true;
	else if (!strcmp(v, "no") || !strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "off"))
		*out = false;
	else
		return -1;
	return 0;
}

static int parse_args(int ac, char **av)
{
	for (int i = 0; i < ac; i++) {
		const char *a = av[i];
		const char *eq = strchr(a, '=');
		if (!eq) {
			slurm_error("devq: plugstack.conf argument '%s' is not KEY=VALUE", a);
			return -1;
		}
		size_t kl = (size_t)(eq - a);
		const char *v = eq + 1;
		int bad = 0;
		if (kl == 14 && !strncmp(a, "shards_per_gpu", kl)) {
			bad = parse_uint(v, 1, MAX_OF, &cfg.shards_per_gpu);
		} else if (kl == 6 && !strncmp(a, "socket", kl)) {
			bad = v[0] != '/' || strlen(v) >= sizeof(cfg.socket_tmpl);
			if (!bad)
				snprintf(cfg.socket_tmpl, sizeof(cfg.socket_tmpl), "%s", v);
		} else if (kl == 6 && !strncmp(a, "devctl", kl)) {
			bad = v[0] != '/' || strlen(v) >= sizeof(cfg.devctl);
			if (!bad)
				snprintf(cfg.devctl, sizeof(cfg.devctl), "%s", v);
		} else if (kl == 11 && !strncmp(a, "fail_closed", kl)) {
			bad = parse_bool(v, &cfg.fail_closed);
		} else if (kl == 14 && !strncmp(a, "allow_priority", kl)) {
			bad = parse_bool(v, &cfg.allow_priority);
		} else if (kl == 7 && !strncmp(a, "timeout", kl)) {
			bad = parse_uint(v, 1, 3600, &cfg.timeout_s);
		} else if (kl == 8 && !strncmp(a, "grace_ms", kl)) {
			bad = parse_uint(v, 0, 3600000, &cfg.grace_ms);
		} else {
			slurm_error("devq: unknown plugstack.conf argument '%s' (known: shards_per_gpu, "
				    "socket, devctl, fail_closed, allow_priority, timeout, grace_ms)",
				    a);
			return -1;
		}
		if (bad) {
			slurm_error("devq: plugstack.conf argument '%s': bad value (see devq-slurm(8))",
				    a);
			return -1;
		}
	}
	return 0;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	if (parse_args(ac, av) < 0)
		return -1;
	/* The options exist in every context (srun, sbatch, slurmstepd, the
	 * prolog) so that each sees the same table. */
	if (spank_option_register(sp, &opt_memory) != ESPANK_SUCCESS ||
	    spank_option_register(sp, &opt_shares) != ESPANK_SUCCESS ||
	    spank_option_register(sp, &opt_priority) != ESPANK_SUCCESS) {
		slurm_error("devq: cannot register the --devq-* options");
		return -1;
	}
	return 0;
}

/* ---- running devctl ------------------------------------------------------- */

struct run {
	int status;            /* exit status, or -1: did not run / killed */
	bool timed_out;
	char out[OUT_MAX];
	char err[OUT_MAX];
};

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void trim(char *s)
{
	size_t n = strlen(s);
	while (n && (s[n - 1] == '\n' || s[n - 1] == ' ' || s[n - 1] == '\r'))
		s[--n] = '\0';
}

/* Runs devctl with argv (argv[0] is cfg.devctl), capturing stdout and
 * stderr, killing it at cfg.timeout_s.  Its environment is fixed: nothing of
 * the job's (DEVQ_SOCKET above all) reaches it. */
static void run_devctl(char *const argv[], struct run *r)
{
	memset(r, 0, sizeof(*r));
	r->status = -1;
	int po[2], pe[2];
	if (pipe2(po, O_CLOEXEC) < 0) {
		snprintf(r->err, sizeof(r->err), "pipe: %s", strerror(errno));
		return;
	}
	if (pipe2(pe, O_CLOEXEC) < 0) {
		snprintf(r->err, sizeof(r->err), "pipe: %s", strerror(errno));
		close(po[0]);
		close(po[1]);
		return;
	}
	/* slurmstepd may ignore SIGCHLD, which would make waitpid fail. */
	struct sigaction dfl = {.sa_handler = SIG_DFL}, old;
	sigemptyset(&dfl.sa_mask);
	sigaction(SIGCHLD, &dfl, &old);
	pid_t pid = fork();
	if (pid == 0) {
		static char *const envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};
		dup2(po[1], 1);
		dup2(pe[1], 2);
		int nul = open("/dev/null", O_RDONLY);
		if (nul >= 0)
			dup2(nul, 0);
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		execve(argv[0], argv, envp);
		dprintf(2, "cannot run %s: %s", argv[0], strerror(errno));
		_exit(127);
	}
	close(po[1]);
	close(pe[1]);
	if (pid < 0) {
		snprintf(r->err, sizeof(r->err), "fork: %s", strerror(errno));
		close(po[0]);
		close(pe[0]);
		sigaction(SIGCHLD, &old, NULL);
		return;
	}
	size_t no = 0, ne = 0;
	struct pollfd pf[2] = {{.fd = po[0], .events = POLLIN}, {.fd = pe[0], .events = POLLIN}};
	double deadline = now_s() + cfg.timeout_s;
	int open_fds = 2;
	while (open_fds) {
		double left = deadline - now_s();
		if (left <= 0) {
			r->timed_out = true;
			break;
		}
		int n = poll(pf, 2, (int)(left * 1000) + 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		for (int i = 0; i < 2; i++) {
			if (pf[i].fd < 0 || !pf[i].revents)
				continue;
			char *buf = i ? r->err : r->out;
			size_t *len = i ? &ne : &no;
			char tmp[1024];
			ssize_t k = read(pf[i].fd, tmp, sizeof(tmp));
			if (k <= 0) {
				close(pf[i].fd);
				pf[i].fd = -1;
				open_fds--;
				continue;
			}
			size_t room = OUT_MAX - 1 - *len;
			size_t c = (size_t)k < room ? (size_t)k : room;
			memcpy(buf + *len, tmp, c);
			*len += c;
			buf[*len] = '\0';
		}
	}
	for (int i = 0; i < 2; i++)
		if (pf[i].fd >= 0)
			close(pf[i].fd);
	if (r->timed_out)
		kill(pid, SIGKILL);
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	sigaction(SIGCHLD, &old, NULL);
	if (!r->timed_out && WIFEXITED(st))
		r->status = WEXITSTATUS(st);
	trim(r->out);
	trim(r->err);
	if (r->timed_out)
		snprintf(r->err, sizeof(r->err), "devctl did not answer within %u s (timeout=)",
			 cfg.timeout_s);
}

/* devctl's reason: its {"error":"..."} object (with --json) as plain text. */
static const char *reason(struct run *r)
{
	char *e = strstr(r->err, "{\"error\":\"");
	if (e) {
		e += 10;
		char *q = strrchr(e, '"');
		if (q)
			*q = '\0';
		return e;
	}
	return r->err[0] ? r->err : r->status >= 0 ? "devctl failed and said nothing" : "devctl did not run";
}

/* The string value of "key" in devctl's JSON object; 0 when found. */
static int json_string(const char *json, const char *key, char *out, size_t cap)
{
	char pat[64];
	snprintf(pat, sizeof(pat), "\"%s\":", key);
	const char *p = strstr(json, pat);
	if (!p)
		return -1;
	p += strlen(pat);
	while (*p == ' ')
		p++;
	if (*p++ != '"')
		return -1;
	size_t n = 0;
	for (; *p && *p != '"'; p++) {
		char c = *p;
		if (c == '\\') {
			p++;
			if (*p == '"' || *p == '\\' || *p == '/')
				c = *p;
			else
				return -1; /* a path with control characters: refuse it */
		}
		if (n + 1 >= cap)
			return -1;
		out[n++] = c;
	}
	if (*p != '"')
		return -1;
	out[n] = '\0';
	return 0;
}

/* ---- GPUs, sockets, tenant ------------------------------------------------ */

/* "0,1,3" or "0-2,5" (Slurm's index lists) into gpus[]; returns the count or
 * -1 when the list is not one. */
static int parse_gpus(const char *s, unsigned *gpus)
{
	int n = 0;
	while (*s) {
		char *end;
		if (!isdigit((unsigned char)*s))
			return -1;
		unsigned long a = strtoul(s, &end, 10), b = a;
		if (*end == '-') {
			if (!isdigit((unsigned char)end[1]))
				return -1;
			b = strtoul(end + 1, &end, 10);
		}
		if (b < a || b > 1023)
			return -1;
		for (unsigned long g = a; g <= b; g++) {
			if (n == MAX_GPUS)
				return -1;
			gpus[n++] = (unsigned)g;
		}
		if (*end == ',')
			end++;
		else if (*end)
			return -1;
		s = end;
	}
	return n;
}

static int socket_of(unsigned gpu, char *out, size_t cap)
{
	const char *node = getenv("SLURMD_NODENAME");
	size_t n = 0;
	for (const char *p = cfg.socket_tmpl; *p; p++) {
		char add[64];
		const char *s = add;
		if (*p == '%' && p[1] == 'g') {
			snprintf(add, sizeof(add), "%u", gpu);
			p++;
		} else if (*p == '%' && p[1] == 'n') {
			if (!node || !*node)
				return -1;
			s = node;
			p++;
		} else if (*p == '%' && p[1] == '%') {
			add[0] = '%', add[1] = '\0';
			p++;
		} else {
			add[0] = *p, add[1] = '\0';
		}
		size_t l = strlen(s);
		if (n + l >= cap)
			return -1;
		memcpy(out + n, s, l);
		n += l;
	}
	out[n] = '\0';
	return 0;
}

struct job {
	uint32_t id;
	uid_t uid;
	char tenant[32];
	unsigned gpus[MAX_GPUS];
	int ngpus;
};

/* The job's id, uid and GPUs.  0: go on; 1: not a devq job (no GPUs); -1:
 * an error, already logged. */
static int job_get(spank_t sp, struct job *j, const char *gpu_list)
{
	memset(j, 0, sizeof(*j));
	if (spank_get_item(sp, S_JOB_ID, &j->id) != ESPANK_SUCCESS) {
		const char *s = getenv("SLURM_JOB_ID");
		if (!s || !*s) {
			slurm_error("devq: cannot tell the job's id");
			return -1;
		}
		j->id = (uint32_t)strtoul(s, NULL, 10);
	}
	if (spank_get_item(sp, S_JOB_UID, &j->uid) != ESPANK_SUCCESS) {
		const char *s = getenv("SLURM_JOB_UID");
		if (!s || !*s) {
			slurm_error("devq: job %" PRIu32 ": cannot tell the job's uid", j->id);
			return -1;
		}
		j->uid = (uid_t)strtoul(s, NULL, 10);
	}
	snprintf(j->tenant, sizeof(j->tenant), "job_%" PRIu32, j->id);
	if (!gpu_list || !*gpu_list)
		return 1;
	j->ngpus = parse_gpus(gpu_list, j->gpus);
	if (j->ngpus < 0) {
		slurm_error("devq: job %" PRIu32 ": cannot read the GPU list '%s'", j->id, gpu_list);
		return -1;
	}
	return j->ngpus ? 0 : 1;
}

/* devctl --socket S admin grant job_N --uid U --shares K --of M [--memory B]
 * [--priority] --json; the tenant socket into sock. */
static int grant(spank_t sp, const struct job *j, unsigned gpu, unsigned shares, char *sock,
		 size_t cap, struct run *r)
{
	char path[512], uid[24], sh[16], of[16], mem[24];
	if (socket_of(gpu, path, sizeof(path)) < 0) {
		snprintf(r->err, sizeof(r->err), "socket template '%s' does not expand for GPU %u",
			 cfg.socket_tmpl, gpu);
		r->status = -1;
		return -1;
	}
	snprintf(uid, sizeof(uid), "%u", (unsigned)j->uid);
	/* A weight within devqd's bounds: at most 64, and at most M. */
	if (shares > MAX_SHARES)
		shares = MAX_SHARES;
	if (shares > cfg.shards_per_gpu)
		shares = cfg.shards_per_gpu;
	snprintf(sh, sizeof(sh), "%u", shares);
	snprintf(of, sizeof(of), "%u", cfg.shards_per_gpu);
	char *argv[20];
	int n = 0;
	argv[n++] = cfg.devctl;
	argv[n++] = "--socket";
	argv[n++] = path;
	argv[n++] = "admin";
	argv[n++] = "grant";
	argv[n++] = (char *)j->tenant;
	argv[n++] = "--uid";
	argv[n++] = uid;
	argv[n++] = "--shares";
	argv[n++] = sh;
	argv[n++] = "--of";
	argv[n++] = of;
	char *val = NULL;
	uint64_t bytes;
	if (spank_option_getopt(sp, &opt_memory, &val) == ESPANK_SUCCESS && val &&
	    parse_size(val, &bytes) == 0) {
		snprintf(mem, sizeof(mem), "%" PRIu64, bytes);
		argv[n++] = "--memory";
		argv[n++] = mem;
	}
	if (spank_option_getopt(sp, &opt_priority, &val) == ESPANK_SUCCESS) {
		if (cfg.allow_priority)
			argv[n++] = "--priority";
		else
			slurm_info("devq: job %" PRIu32 ": --devq-priority ignored: not allowed "
				   "here (allow_priority=no)", j->id);
	}
	argv[n++] = "--json";
	argv[n] = NULL;
	run_devctl(argv, r);
	if (r->status != 0)
		return -1;
	if (json_string(r->out, "socket", sock, cap) < 0) {
		snprintf(r->err, sizeof(r->err), "devctl's answer has no tenant socket: %.200s",
			 r->out);
		return -1;
	}
	return 0;
}

static void evict(const struct job *j, unsigned gpu, bool quiet_not_found)
{
	char path[512], grace[16];
	if (socket_of(gpu, path, sizeof(path)) < 0) {
		slurm_error("devq: job %" PRIu32 ": socket template '%s' does not expand for GPU %u",
			    j->id, cfg.socket_tmpl, gpu);
		return;
	}
	snprintf(grace, sizeof(grace), "%u", cfg.grace_ms);
	/* When eviction starts, for whoever times the cleanup. */
	slurm_info("devq: job %" PRIu32 ": evicting %s from devqd at %s (GPU %u)", j->id, j->tenant,
		   path, gpu);
	char *argv[] = {cfg.devctl, "--socket", path, "admin", "evict", (char *)j->tenant,
			"--grace", grace, "--json", NULL};
	struct run *r = malloc(sizeof(*r));
	if (!r)
		return;
	run_devctl(argv, r);
	if (r->status == 0) {
		/* The usage line: what the job used on this GPU. */
		slurm_info("devq: job %" PRIu32 " GPU %u usage: %s", j->id, gpu, r->out);
	} else {
		const char *why = reason(r);
		if (!(quiet_not_found && strstr(why, "not_found")))
			slurm_error("devq: job %" PRIu32 ": evicting %s from devqd at %s (GPU %u) "
				    "failed: %s",
				    j->id, j->tenant, path, gpu, why);
	}
	free(r);
}

/* ---- the hooks ------------------------------------------------------------ */

static unsigned initial_shares(spank_t sp)
{
	char *val = NULL;
	unsigned n;
	if (spank_option_getopt(sp, &opt_shares, &val) == ESPANK_SUCCESS && val &&
	    parse_uint(val, 1, MAX_SHARES, &n) == 0)
		return n;
	return 1;
}

int slurm_spank_job_prolog(spank_t sp, int ac, char **av)
{
	/* Each hook gets the arguments; slurm_spank_init does not run
	 * before the prolog and epilog (slurmstepd spank prolog/epilog). */
	if (parse_args(ac, av) < 0)
		return -1;
	struct job j;
	int k = job_get(sp, &j, getenv("SLURM_JOB_GPUS"));
	if (k)
		return k > 0 ? 0 : cfg.fail_closed ? -1 : 0;
	unsigned shares = initial_shares(sp);
	struct run *r = malloc(sizeof(*r));
	if (!r)
		return cfg.fail_closed ? -1 : 0;
	for (int i = 0; i < j.ngpus; i++) {
		char sock[512];
		if (grant(sp, &j, j.gpus[i], shares, sock, sizeof(sock), r) == 0) {
			slurm_info("devq: job %" PRIu32 ": tenant %s for uid %u on GPU %u: %s",
				   j.id, j.tenant, (unsigned)j.uid, j.gpus[i], sock);
			continue;
		}
		char path[512] = "";
		socket_of(j.gpus[i], path, sizeof(path));
		slurm_error("devq: job %" PRIu32 ": devqd at %s (GPU %u) did not grant %s: %s%s",
			    j.id, path, j.gpus[i], j.tenant, reason(r),
			    cfg.fail_closed ? "; failing the prolog (fail_closed=yes)" : "");
		if (!cfg.fail_closed)
			continue;
		/* Nothing half-granted outlives a failed prolog. */
		for (int b = 0; b < i; b++)
			evict(&j, j.gpus[b], true);
		free(r);
		return -1;
	}
	free(r);
	return 0;
}

int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
	/* Each hook gets the arguments; slurm_spank_init does not run
	 * before the prolog and epilog (slurmstepd spank prolog/epilog). */
	if (parse_args(ac, av) < 0)
		return -1;
	if (!spank_remote(sp))
		return 0;
	/* The step's GPUs (an srun step), else the job's (the batch step). */
	char list[256] = "", shards[32] = "";
	if (spank_getenv(sp, "SLURM_STEP_GPUS", list, sizeof(list)) != ESPANK_SUCCESS || !list[0])
		if (spank_getenv(sp, "SLURM_JOB_GPUS", list, sizeof(list)) != ESPANK_SUCCESS)
			list[0] = '\0';
	struct job j;
	int k = job_get(sp, &j, list);
	if (k)
		return k > 0 ? 0 : cfg.fail_closed ? -1 : 0;
	/* Slurm says how many shards the step has on this node, not how they
	 * split among its GPUs: each GPU gets an even part, at least one. */
	unsigned shares = initial_shares(sp), s;
	if (spank_getenv(sp, "SLURM_SHARDS_ON_NODE", shards, sizeof(shards)) == ESPANK_SUCCESS &&
	    parse_uint(shards, 1, 1000000000, &s) == 0)
		shares = (s + (unsigned)j.ngpus - 1) / (unsigned)j.ngpus;
	char all[MAX_GPUS * 128] = "", first[512] = "";
	size_t alen = 0;
	struct run *r = malloc(sizeof(*r));
	if (!r)
		return cfg.fail_closed ? -1 : 0;
	for (int i = 0; i < j.ngpus; i++) {
		char sock[512];
		/* grant is idempotent: it updates the weight and names the
		 * socket the prolog's grant made. */
		if (grant(sp, &j, j.gpus[i], shares, sock, sizeof(sock), r) < 0) {
			slurm_error("devq: job %" PRIu32 ": GPU %u: cannot set %s's shares to %u: %s",
				    j.id, j.gpus[i], j.tenant, shares, reason(r));
			if (cfg.fail_closed) {
				free(r);
				return -1;
			}
			continue;
		}
		if (!first[0])
			snprintf(first, sizeof(first), "%s", sock);
		size_t l = strlen(sock);
		if (alen + l + 2 < sizeof(all)) {
			if (alen)
				all[alen++] = ',';
			memcpy(all + alen, sock, l + 1);
			alen += l;
		}
	}
	free(r);
	if (first[0] && (spank_setenv(sp, "DEVQ_SOCKET", first, 1) != ESPANK_SUCCESS ||
			 spank_setenv(sp, "DEVQ_SOCKETS", all, 1) != ESPANK_SUCCESS)) {
		slurm_error("devq: job %" PRIu32 ": cannot set DEVQ_SOCKET", j.id);
		return cfg.fail_closed ? -1 : 0;
	}
	return 0;
}

int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
	/* Each hook gets the arguments; slurm_spank_init does not run
	 * before the prolog and epilog (slurmstepd spank prolog/epilog). */
	if (parse_args(ac, av) < 0)
		return -1;
	struct job j;
	int k = job_get(sp, &j, getenv("SLURM_JOB_GPUS"));
	if (k)
		return 0;
	/* Every GPU, even after one fails: each holds the job's memory. */
	for (int i = 0; i < j.ngpus; i++)
		evict(&j, j.gpus[i], true);
	return 0;
}
