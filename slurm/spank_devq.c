/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spank_devq: Slurm jobs share each node's GPUs through devqd.
 *
 * The job prolog grants tenant job_<JOBID> for the job's uid on every GPU of
 * the job (devctl admin grant), its weight the job's shards on that GPU and
 * its memory cap the admin's, and keeps what it granted in a record of its
 * own (state_dir=); each task updates those grants only (--update-only:
 * nothing the prolog did not grant is made) and learns its tenant sockets
 * (DEVQ_SOCKET, DEVQ_SOCKETS); the job epilog evicts the tenant, logging
 * its usage.
 *
 * What decides a grant comes from slurmd, never from the job: the GPUs are
 * slurmd's SLURM_JOB_GPUS in the prolog's environment, the shards the
 * allocation slurmctld holds (scontrol show job -d, once per job and node,
 * in the prolog), the caps plugstack.conf's.  The job's own options and
 * variables can only lower the weight and the cap.  slurm/README.md says
 * why each source is one the job cannot set.
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
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/spank.h>

SPANK_PLUGIN(devq, 1);

#define MAX_GPUS 64
/* What a child may print that is read: scontrol show job -d of a job on
 * many nodes (a line per node group) runs to kilobytes. */
#define OUT_MAX 65536
#define ERR_MAX 8192
/* devqd's bounds on a grant: a weight of 1 to 64, of at most 65536. */
#define MAX_SHARES 64
#define MAX_OF 65536

/* plugstack.conf arguments (devq-slurm(8)). */
static struct {
	unsigned shards_per_gpu;   /* M: the "of" of every grant */
	char socket_tmpl[256];     /* %g: GPU index, %n: slurmd's node name */
	char devctl[256];          /* absolute path */
	char scontrol[256];        /* absolute path */
	char state_dir[256];       /* the prolog's records, root's, 0700 */
	bool fail_closed;          /* a refused grant fails the prolog */
	bool allow_priority;       /* --devq-priority accepted */
	unsigned timeout_s;        /* each devctl or scontrol run */
	unsigned grace_ms;         /* devctl admin evict --grace */
	uint64_t memory_per_shard; /* the cap per allocated shard (0: none) */
	uint64_t max_memory;       /* the cap of any grant (0: none) */
} cfg = {
	.shards_per_gpu = 1,
	.socket_tmpl = "/run/devqd/gpu%g.sock",
	.devctl = "/usr/bin/devctl",
	.scontrol = "/usr/bin/scontrol",
	.state_dir = "/run/slurm-devq",
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
	"devq: lower the job's GPU memory cap (shared plus device bytes, all its "
	"processes) on each GPU below the site's; K, M, G, T suffixes",
	1, 0, opt_memory_cb,
};
static struct spank_option opt_shares = {
	"devq-shares", "N",
	"devq: lower the job's weight on each GPU below its shard count",
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
		} else if (kl == 8 && !strncmp(a, "scontrol", kl)) {
			bad = v[0] != '/' || strlen(v) >= sizeof(cfg.scontrol);
			if (!bad)
				snprintf(cfg.scontrol, sizeof(cfg.scontrol), "%s", v);
		} else if (kl == 9 && !strncmp(a, "state_dir", kl)) {
			bad = v[0] != '/' || !v[1] || strlen(v) >= sizeof(cfg.state_dir);
			if (!bad)
				snprintf(cfg.state_dir, sizeof(cfg.state_dir), "%s", v);
		} else if (kl == 16 && !strncmp(a, "memory_per_shard", kl)) {
			bad = parse_size(v, &cfg.memory_per_shard);
		} else if (kl == 10 && !strncmp(a, "max_memory", kl)) {
			bad = parse_size(v, &cfg.max_memory);
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
				    "socket, devctl, scontrol, state_dir, memory_per_shard, "
				    "max_memory, fail_closed, allow_priority, timeout, grace_ms)",
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

/* ---- running devctl and scontrol ------------------------------------------ */

struct run {
	int status;            /* exit status, or -1: did not run / killed */
	bool timed_out;
	char out[OUT_MAX];
	char err[ERR_MAX];
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

/* Runs argv[0] (an absolute path: cfg.devctl or cfg.scontrol) with argv,
 * capturing stdout and stderr, killing it at cfg.timeout_s.  Its
 * environment is fixed: nothing of the job's (DEVQ_SOCKET above all)
 * reaches it; with slurm_conf, the SLURM_CONF of slurmd's own environment
 * (this process's, not the job's), so that scontrol asks this cluster. */
static void run_prog(char *const argv[], bool slurm_conf, struct run *r)
{
	memset(r, 0, sizeof(*r));
	r->status = -1;
	static char conf[4096 + 16];
	char *envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL, NULL};
	const char *c = slurm_conf ? getenv("SLURM_CONF") : NULL;
	if (c && *c && strlen(c) < 4096) {
		snprintf(conf, sizeof(conf), "SLURM_CONF=%s", c);
		envp[2] = conf;
	}
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
			size_t cap = i ? sizeof(r->err) : sizeof(r->out);
			char tmp[4096];
			ssize_t k = read(pf[i].fd, tmp, sizeof(tmp));
			if (k <= 0) {
				close(pf[i].fd);
				pf[i].fd = -1;
				open_fds--;
				continue;
			}
			size_t room = cap - 1 - *len;
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
		snprintf(r->err, sizeof(r->err), "%s did not answer within %u s (timeout=)",
			 argv[0], cfg.timeout_s);
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
	return r->err[0] ? r->err : r->status >= 0 ? "it failed and said nothing" : "it did not run";
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

static const char *node_name(void)
{
	/* slurmd's, in every hook's own environment (not the job's). */
	const char *n = getenv("SLURMD_NODENAME");
	return n && *n ? n : NULL;
}

static int socket_of(unsigned gpu, char *out, size_t cap)
{
	const char *node = node_name();
	size_t n = 0;
	for (const char *p = cfg.socket_tmpl; *p; p++) {
		char add[64];
		const char *s = add;
		if (*p == '%' && p[1] == 'g') {
			snprintf(add, sizeof(add), "%u", gpu);
			p++;
		} else if (*p == '%' && p[1] == 'n') {
			if (!node)
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

/* The job's id and uid, from slurmstepd (spank items), else from the
 * hook's own environment, which slurmd builds for the prolog and epilog.
 * 0, or -1: an error, already logged. */
static int job_ids(spank_t sp, struct job *j)
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
	return 0;
}

/* The job's GPUs from slurmd's SLURM_JOB_GPUS (the prolog's and epilog's
 * environment).  0: go on; 1: no GPUs here; -1: an error, already logged. */
static int job_gpus(struct job *j, const char *gpu_list)
{
	j->ngpus = 0;
	if (!gpu_list || !*gpu_list)
		return 1;
	j->ngpus = parse_gpus(gpu_list, j->gpus);
	if (j->ngpus < 0) {
		slurm_error("devq: job %" PRIu32 ": cannot read the GPU list '%s'", j->id, gpu_list);
		j->ngpus = 0;
		return -1;
	}
	return j->ngpus ? 0 : 1;
}

/* ---- what the job holds: Slurm's allocation ---------------------------------- */

/* Whether name is one of the hosts of Slurm's hostlist item [p, end) (one
 * item: no comma outside brackets), e.g. "n[1-2]", "gpu[01-16]a", "login1":
 * each bracket a list of numbers and ranges, zero-padded to the width of
 * the range's low end when that starts with 0. */
static bool host_match(const char *p, const char *end, const char *name)
{
	while (p < end && *p != '[') {
		if (*name != *p)
			return false;
		p++, name++;
	}
	if (p == end)
		return *name == '\0';
	const char *close = memchr(p, ']', (size_t)(end - p));
	if (!close)
		return false;
	size_t digits = 0;
	while (isdigit((unsigned char)name[digits]))
		digits++;
	for (size_t d = 1; d <= digits && d <= 18; d++) {
		unsigned long long v = 0;
		for (size_t i = 0; i < d; i++)
			v = v * 10 + (unsigned)(name[i] - '0');
		for (const char *r = p + 1; r < close;) {
			const char *re = r;
			while (re < close && *re != ',')
				re++;
			const char *dash = memchr(r, '-', (size_t)(re - r));
			const char *le = dash ? dash : re;
			unsigned long long lo = 0, hi = 0;
			bool ok = le > r && le - r <= 18;
			for (const char *x = r; ok && x < le; x++)
				ok = isdigit((unsigned char)*x), lo = lo * 10 + (unsigned)(*x - '0');
			hi = lo;
			if (ok && dash) {
				ok = re > dash + 1 && re - dash - 1 <= 18;
				hi = 0;
				for (const char *x = dash + 1; ok && x < re; x++)
					ok = isdigit((unsigned char)*x),
					hi = hi * 10 + (unsigned)(*x - '0');
			}
			size_t lw = (size_t)(le - r);
			bool width = lw > 1 && *r == '0' ? d == lw : d == 1 || name[0] != '0';
			if (ok && width && v >= lo && v <= hi && host_match(close + 1, end, name + d))
				return true;
			r = re < close ? re + 1 : re;
		}
	}
	return false;
}

/* Whether name is in Slurm's hostlist expression [list, list + len). */
static bool hostlist_has(const char *list, size_t len, const char *name)
{
	size_t i = 0;
	while (i < len) {
		size_t s = i;
		int depth = 0;
		while (i < len && (depth || list[i] != ',')) {
			depth += list[i] == '[' ? 1 : list[i] == ']' && depth ? -1 : 0;
			i++;
		}
		if (host_match(list + s, list + i, name))
			return true;
		i++;
	}
	return false;
}

/* One GRES of a node's allocation, "gpu:2(IDX:0-1)", "gpu:a100:1(IDX:3)",
 * "shard:3(IDX:0)": a whole GPU is all of its shards_per_gpu; shards on
 * several GPUs are split evenly, at least one each (Slurm says how many
 * the node has, not how they split); shards that name no GPU are split
 * over the job's.  Into shards[], by the job's GPUs' order; the most any
 * GRES gives a GPU counts. */
static void alloc_gres(const char *e, size_t len, const struct job *j, unsigned *shards)
{
	char b[512];
	if (len >= sizeof(b))
		return;
	memcpy(b, e, len);
	b[len] = '\0';
	char *idx = NULL, *paren = strchr(b, '(');
	if (paren) {
		*paren = '\0';
		idx = strstr(paren + 1, "IDX:");
		char *close = idx ? strchr(idx, ')') : NULL;
		if (close) {
			*close = '\0';
			idx += 4;
		} else {
			idx = NULL;
		}
	}
	char *colon = strchr(b, ':');
	if (!colon)
		return;
	*colon = '\0';
	bool whole = !strcmp(b, "gpu"), shard = !strcmp(b, "shard");
	if (!whole && !shard)
		return;
	char *last = strrchr(colon + 1, ':');
	unsigned count;
	if (parse_uint(last ? last + 1 : colon + 1, 1, 1000000000, &count) < 0)
		return;
	unsigned list[MAX_GPUS];
	int n = idx ? parse_gpus(idx, list) : -1;
	if (n <= 0) {
		if (whole)
			return; /* which GPUs is not said */
		n = j->ngpus;
		memcpy(list, j->gpus, sizeof(list[0]) * (size_t)n);
	}
	unsigned per = whole ? cfg.shards_per_gpu : count / (unsigned)n ? count / (unsigned)n : 1;
	for (int k = 0; k < n; k++)
		for (int i = 0; i < j->ngpus; i++)
			if (j->gpus[i] == list[k] && shards[i] < per)
				shards[i] = per;
}

/* The shards of each of the job's GPUs on this node, from scontrol show
 * job -d: its "Nodes=HOSTLIST ... GRES=..." lines, the one naming this
 * node.  0 (shards[] filled, 0 for a GPU no line names), or -1 with why. */
static int alloc_parse(const char *out, const struct job *j, unsigned *shards, char *why,
		       size_t n)
{
	const char *node = node_name();
	bool seen = false;
	for (const char *l = out; *l;) {
		const char *eol = strchr(l, '\n');
		if (!eol)
			eol = l + strlen(l);
		const char *p = l;
		while (p < eol && *p == ' ')
			p++;
		if (eol - p > 6 && !strncmp(p, "Nodes=", 6)) {
			const char *h = p + 6, *he = h;
			while (he < eol && *he != ' ')
				he++;
			const char *g = NULL;
			for (const char *x = he; x + 6 <= eol; x++)
				if (!strncmp(x, " GRES=", 6)) {
					g = x + 6;
					break;
				}
			/* Without slurmd's node name, a job on one node group
			 * is still read. */
			if (g && (node ? hostlist_has(h, (size_t)(he - h), node) : !seen)) {
				seen = true;
				const char *ge = g;
				while (ge < eol && *ge != ' ')
					ge++;
				for (const char *s = g; s < ge;) {
					const char *x = s;
					int depth = 0;
					while (x < ge && (depth || *x != ',')) {
						depth += *x == '(' ? 1 : *x == ')' && depth ? -1 : 0;
						x++;
					}
					alloc_gres(s, (size_t)(x - s), j, shards);
					s = x < ge ? x + 1 : x;
				}
			}
		}
		l = *eol ? eol + 1 : eol;
	}
	if (!seen) {
		snprintf(why, n, "no GRES line for node %s in scontrol's answer", node ? node : "?");
		return -1;
	}
	return 0;
}

/* Asks slurmctld what the job holds on this node (scontrol show job -d
 * JOBID): once per job and node, in the prolog, killed at timeout=.  Not
 * the job's environment, which the job sets. */
static int job_alloc(const struct job *j, unsigned *shards, char *why, size_t n)
{
	char id[16];
	snprintf(id, sizeof(id), "%" PRIu32, j->id);
	char *argv[] = {cfg.scontrol, "show", "job", "-d", id, NULL};
	struct run *r = malloc(sizeof(*r));
	if (!r) {
		snprintf(why, n, "out of memory");
		return -1;
	}
	run_prog(argv, true, r);
	int rc;
	if (r->status != 0) {
		snprintf(why, n, "%s show job -d %s: %.200s", cfg.scontrol, id, reason(r));
		rc = -1;
	} else {
		rc = alloc_parse(r->out, j, shards, why, n);
	}
	free(r);
	return rc;
}

/* ---- the grants ----------------------------------------------------------- */

/* What the prolog granted the job on this node, one entry per GPU. */
struct plan {
	uid_t uid;
	bool priority;
	int n;
	struct {
		unsigned gpu, shares;
		uint64_t memory; /* 0: no cap */
	} g[MAX_GPUS];
};

static uint64_t min_cap(uint64_t a, uint64_t b)
{
	return !a ? b : !b ? a : a < b ? a : b;
}

/* The admin's cap for a GPU of which the job holds shards: memory_per_shard
 * times them, at most max_memory; 0 when neither is set. */
static uint64_t admin_cap(unsigned shards)
{
	uint64_t c = 0;
	/* devqd's largest cap, 2^63 bytes, where the product is more. */
	const uint64_t most = UINT64_C(1) << 63;
	if (cfg.memory_per_shard)
		c = shards > most / cfg.memory_per_shard ? most : cfg.memory_per_shard * shards;
	return min_cap(c, cfg.max_memory);
}

/* devctl --socket S admin grant job_N --uid U --shares K --of M [--memory B]
 * [--priority] [--update-only] --label job=N --json; the tenant socket into
 * sock. */
static int grant(const struct job *j, unsigned gpu, unsigned shares, uint64_t memory,
		 bool priority, bool update_only, char *sock, size_t cap, struct run *r)
{
	char path[512], uid[24], sh[16], of[16], mem[24];
	if (socket_of(gpu, path, sizeof(path)) < 0) {
		memset(r, 0, sizeof(*r));
		snprintf(r->err, sizeof(r->err), "socket template '%s' does not expand for GPU %u",
			 cfg.socket_tmpl, gpu);
		r->status = -1;
		return -1;
	}
	snprintf(uid, sizeof(uid), "%u", (unsigned)j->uid);
	/* A weight within devqd's bounds: 1 to 64, and at most M. */
	if (shares > MAX_SHARES)
		shares = MAX_SHARES;
	if (shares > cfg.shards_per_gpu)
		shares = cfg.shards_per_gpu;
	if (!shares)
		shares = 1;
	snprintf(sh, sizeof(sh), "%u", shares);
	snprintf(of, sizeof(of), "%u", cfg.shards_per_gpu);
	char *argv[24];
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
	if (memory) {
		snprintf(mem, sizeof(mem), "%" PRIu64, memory);
		argv[n++] = "--memory";
		argv[n++] = mem;
	}
	if (priority)
		argv[n++] = "--priority";
	if (update_only)
		argv[n++] = "--update-only";
	/* The job's id on its metrics, to join the scheduler's own series
	 * (Prometheus keeps it as exported_job beside the scrape's job). */
	char label[32];
	snprintf(label, sizeof(label), "job=%u", (unsigned)j->id);
	argv[n++] = "--label";
	argv[n++] = label;
	argv[n++] = "--json";
	argv[n] = NULL;
	run_prog(argv, false, r);
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
	run_prog(argv, false, r);
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

/* ---- the prolog's record ---------------------------------------------------- */

/* The prolog keeps what it granted in state_dir (root's, not writable by
 * anyone else), one file per job and node: the task hook reads its GPUs,
 * weights and caps there, where the job cannot write, rather than in the
 * job's environment, where it can.  The directory is made 0700 when
 * missing; one that is not a directory of this uid's, or that others may
 * write, is refused.  An open fd, or -1 with why. */
static int state_open(bool create, char *why, size_t n)
{
	if (create && mkdir(cfg.state_dir, 0700) < 0 && errno != EEXIST) {
		snprintf(why, n, "mkdir %s: %s", cfg.state_dir, strerror(errno));
		return -1;
	}
	int fd = open(cfg.state_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		int e = errno; /* record_read tells a missing directory by it */
		snprintf(why, n, "%s: %s", cfg.state_dir, strerror(e));
		errno = e;
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 022)) {
		snprintf(why, n, "%s is not a directory of uid %u that only it may write (state_dir=)",
			 cfg.state_dir, (unsigned)geteuid());
		close(fd);
		errno = EPERM;
		return -1;
	}
	return fd;
}

/* "job_42", or "job_42@n1" with slurmd's node name (several slurmd on one
 * host share state_dir); a node name with a '/' is left out. */
static void record_name(const struct job *j, char *out, size_t n)
{
	const char *node = node_name();
	if (node && !strchr(node, '/') && strlen(node) < 128)
		snprintf(out, n, "%s@%s", j->tenant, node);
	else
		snprintf(out, n, "%s", j->tenant);
}

#define RECORD_HEADER "devq-slurm job v1"

/* Written whole to a temporary file and renamed over: a task reads the
 * prolog's record or none.  0, or -1 with why. */
static int record_write(const struct job *j, const struct plan *p, char *why, size_t n)
{
	int dfd = state_open(true, why, n);
	if (dfd < 0)
		return -1;
	char name[192], tmp[200];
	record_name(j, name, sizeof(name));
	snprintf(tmp, sizeof(tmp), "%s.new", name);
	if (unlinkat(dfd, tmp, 0) < 0 && errno != ENOENT) {
		snprintf(why, n, "%s/%s: %s", cfg.state_dir, tmp, strerror(errno));
		close(dfd);
		return -1;
	}
	int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!f) {
		snprintf(why, n, "%s/%s: %s", cfg.state_dir, tmp, strerror(errno));
		if (fd >= 0)
			close(fd);
		close(dfd);
		return -1;
	}
	fprintf(f, "%s uid %u priority %d\n", RECORD_HEADER, (unsigned)p->uid, p->priority);
	for (int i = 0; i < p->n; i++)
		fprintf(f, "gpu %u shares %u memory %" PRIu64 "\n", p->g[i].gpu, p->g[i].shares,
			p->g[i].memory);
	bool ok = fflush(f) == 0 && !ferror(f);
	ok = fclose(f) == 0 && ok;
	if (!ok || renameat(dfd, tmp, dfd, name) < 0) {
		snprintf(why, n, "%s/%s: %s", cfg.state_dir, name, strerror(errno));
		unlinkat(dfd, tmp, 0);
		close(dfd);
		return -1;
	}
	close(dfd);
	return 0;
}

/* 0 with *p filled; 1: no record (the prolog granted nothing here); -1: an
 * error, with why. */
static int record_read(const struct job *j, struct plan *p, char *why, size_t n)
{
	memset(p, 0, sizeof(*p));
	int dfd = state_open(false, why, n);
	if (dfd < 0)
		return errno == ENOENT ? 1 : -1;
	char name[192];
	record_name(j, name, sizeof(name));
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	close(dfd);
	if (fd < 0) {
		if (errno == ENOENT)
			return 1;
		snprintf(why, n, "%s/%s: %s", cfg.state_dir, name, strerror(errno));
		return -1;
	}
	FILE *f = fdopen(fd, "r");
	if (!f) {
		snprintf(why, n, "%s/%s: %s", cfg.state_dir, name, strerror(errno));
		close(fd);
		return -1;
	}
	char line[256];
	unsigned uid;
	int prio, rc = 0;
	if (!fgets(line, sizeof(line), f) ||
	    sscanf(line, RECORD_HEADER " uid %u priority %d", &uid, &prio) != 2) {
		rc = -1;
	} else {
		p->uid = (uid_t)uid;
		p->priority = prio != 0;
		while (rc == 0 && fgets(line, sizeof(line), f)) {
			unsigned g, sh;
			uint64_t mem;
			if (p->n == MAX_GPUS ||
			    sscanf(line, "gpu %u shares %u memory %" SCNu64, &g, &sh, &mem) != 3)
				rc = -1;
			else
				p->g[p->n].gpu = g, p->g[p->n].shares = sh, p->g[p->n++].memory = mem;
		}
	}
	if (rc)
		snprintf(why, n, "%s/%s: not a record of this plugin's", cfg.state_dir, name);
	fclose(f);
	return rc;
}

static void record_remove(const struct job *j)
{
	char why[1024], name[192];
	int dfd = state_open(false, why, sizeof(why));
	if (dfd < 0)
		return;
	record_name(j, name, sizeof(name));
	if (unlinkat(dfd, name, 0) < 0 && errno != ENOENT)
		slurm_error("devq: job %" PRIu32 ": %s/%s: %s", j->id, cfg.state_dir, name,
			    strerror(errno));
	close(dfd);
}

/* ---- the hooks ------------------------------------------------------------ */

/* The job's --devq-shares (0: none given). */
static unsigned opt_shares_val(spank_t sp)
{
	char *val = NULL;
	unsigned n;
	if (spank_option_getopt(sp, &opt_shares, &val) == ESPANK_SUCCESS && val &&
	    parse_uint(val, 1, MAX_SHARES, &n) == 0)
		return n;
	return 0;
}

/* The job's --devq-memory in bytes (0: none given). */
static uint64_t opt_memory_val(spank_t sp)
{
	char *val = NULL;
	uint64_t b;
	if (spank_option_getopt(sp, &opt_memory, &val) == ESPANK_SUCCESS && val &&
	    parse_size(val, &b) == 0)
		return b;
	return 0;
}

int slurm_spank_job_prolog(spank_t sp, int ac, char **av)
{
	/* Each hook gets the arguments; slurm_spank_init does not run
	 * before the prolog and epilog (slurmstepd spank prolog/epilog). */
	if (parse_args(ac, av) < 0)
		return -1;
	struct job j;
	if (job_ids(sp, &j) < 0)
		return cfg.fail_closed ? -1 : 0;
	int k = job_gpus(&j, getenv("SLURM_JOB_GPUS"));
	if (k) {
		record_remove(&j); /* one of an earlier job with this id */
		return k > 0 ? 0 : cfg.fail_closed ? -1 : 0;
	}
	/* The shards the allocation holds on each GPU.  Without Slurm's
	 * answer the job gets the least (1 shard's weight and cap), never
	 * more than it holds. */
	unsigned alloc[MAX_GPUS] = {0};
	char why[1024];
	bool known = job_alloc(&j, alloc, why, sizeof(why)) == 0;
	if (!known)
		slurm_error("devq: job %" PRIu32 ": cannot learn its shards from Slurm (%s): "
			    "the weight and cap of 1 shard on each GPU", j.id, why);
	unsigned want = opt_shares_val(sp);
	uint64_t want_mem = opt_memory_val(sp);
	char *val = NULL;
	bool prio = spank_option_getopt(sp, &opt_priority, &val) == ESPANK_SUCCESS;
	if (prio && !cfg.allow_priority) {
		slurm_info("devq: job %" PRIu32 ": --devq-priority ignored: not allowed here "
			   "(allow_priority=no)", j.id);
		prio = false;
	}
	struct plan *p = calloc(1, sizeof(*p));
	struct run *r = malloc(sizeof(*r));
	if (!p || !r) {
		free(p);
		free(r);
		return cfg.fail_closed ? -1 : 0;
	}
	p->uid = j.uid;
	p->priority = prio;
	int rc = 0;
	for (int i = 0; i < j.ngpus; i++) {
		unsigned held = alloc[i];
		if (!held) {
			if (known)
				slurm_error("devq: job %" PRIu32 ": GPU %u is in SLURM_JOB_GPUS but "
					    "not in the job's GRES as Slurm shows it: the weight "
					    "and cap of 1 shard", j.id, j.gpus[i]);
			held = 1;
		}
		unsigned shares = held > MAX_SHARES ? MAX_SHARES : held;
		if (shares > cfg.shards_per_gpu)
			shares = cfg.shards_per_gpu;
		if (want && want < shares)
			shares = want;
		uint64_t cap = admin_cap(held), mem = min_cap(cap, want_mem);
		if (cap && want_mem > cap)
			slurm_info("devq: job %" PRIu32 ": --devq-memory=%" PRIu64 " is above "
				   "the site's cap of %" PRIu64 " bytes on GPU %u: capped there",
				   j.id, want_mem, cap, j.gpus[i]);
		char sock[512];
		if (grant(&j, j.gpus[i], shares, mem, prio, false, sock, sizeof(sock), r) == 0) {
			slurm_info("devq: job %" PRIu32 ": tenant %s for uid %u on GPU %u: %u of "
				   "%u shares (%u held), memory cap %" PRIu64 ": %s",
				   j.id, j.tenant, (unsigned)j.uid, j.gpus[i], shares,
				   cfg.shards_per_gpu, held, mem, sock);
			p->g[p->n].gpu = j.gpus[i];
			p->g[p->n].shares = shares;
			p->g[p->n++].memory = mem;
			continue;
		}
		char path[512] = "";
		socket_of(j.gpus[i], path, sizeof(path));
		slurm_error("devq: job %" PRIu32 ": devqd at %s (GPU %u) did not grant %s: %s%s",
			    j.id, path, j.gpus[i], j.tenant, reason(r),
			    cfg.fail_closed ? "; failing the prolog (fail_closed=yes)" : "");
		if (cfg.fail_closed) {
			rc = -1;
			break;
		}
	}
	if (!rc && record_write(&j, p, why, sizeof(why)) < 0) {
		slurm_error("devq: job %" PRIu32 ": cannot keep what was granted: %s%s", j.id, why,
			    cfg.fail_closed ? "; failing the prolog (fail_closed=yes)"
					    : "; its tasks get no tenant socket");
		if (cfg.fail_closed)
			rc = -1;
	}
	if (rc) {
		/* Nothing half-granted outlives a failed prolog. */
		for (int b = 0; b < p->n; b++)
			evict(&j, p->g[b].gpu, true);
		record_remove(&j);
	}
	free(p);
	free(r);
	return rc;
}

/* Whether gpu is in list[0..n). */
static bool has_gpu(const unsigned *list, int n, unsigned gpu)
{
	for (int i = 0; i < n; i++)
		if (list[i] == gpu)
			return true;
	return false;
}

int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
	/* Each hook gets the arguments; slurm_spank_init does not run
	 * before the prolog and epilog (slurmstepd spank prolog/epilog). */
	if (parse_args(ac, av) < 0)
		return -1;
	if (!spank_remote(sp))
		return 0;
	struct job j;
	if (job_ids(sp, &j) < 0)
		return cfg.fail_closed ? -1 : 0;
	/* The job's environment starts as its user's: what it says of GPUs
	 * and shards is read only to narrow or lower what the prolog
	 * granted, never to grant. */
	char step_gpus[256] = "", job_gpus_env[256] = "", shards[32] = "";
	if (spank_getenv(sp, "SLURM_STEP_GPUS", step_gpus, sizeof(step_gpus)) != ESPANK_SUCCESS)
		step_gpus[0] = '\0';
	if (spank_getenv(sp, "SLURM_JOB_GPUS", job_gpus_env, sizeof(job_gpus_env)) !=
	    ESPANK_SUCCESS)
		job_gpus_env[0] = '\0';
	struct plan *p = malloc(sizeof(*p));
	if (!p)
		return cfg.fail_closed ? -1 : 0;
	char why[1024];
	int k = record_read(&j, p, why, sizeof(why));
	if (k) {
		if (k < 0)
			slurm_error("devq: job %" PRIu32 ": %s", j.id, why);
		else if (step_gpus[0] || job_gpus_env[0])
			slurm_info("devq: job %" PRIu32 ": no grant of its prolog on this node: "
				   "SLURM_STEP_GPUS='%s' SLURM_JOB_GPUS='%s' of the job's "
				   "environment ignored", j.id, step_gpus, job_gpus_env);
		free(p);
		return k < 0 && cfg.fail_closed ? -1 : 0;
	}
	if (p->uid != j.uid) {
		slurm_error("devq: job %" PRIu32 ": the prolog's record is of uid %u, the job's "
			    "uid is %u", j.id, (unsigned)p->uid, (unsigned)j.uid);
		free(p);
		return cfg.fail_closed ? -1 : 0;
	}
	/* The step's GPUs (an srun step) narrow the job's to those it was
	 * given; a GPU of no grant is ignored, and a list naming none of the
	 * job's leaves them all. */
	bool use[MAX_GPUS];
	int nuse = 0;
	unsigned list[MAX_GPUS];
	int nl = step_gpus[0] ? parse_gpus(step_gpus, list) : -1;
	for (int i = 0; i < p->n; i++)
		nuse += use[i] = nl > 0 && has_gpu(list, nl, p->g[i].gpu);
	for (int i = 0; i < nl; i++) {
		bool granted = false;
		for (int g = 0; g < p->n; g++)
			granted |= p->g[g].gpu == list[i];
		if (!granted)
			slurm_info("devq: job %" PRIu32 ": GPU %u of SLURM_STEP_GPUS is none of "
				   "the job's on this node: ignored", j.id, list[i]);
	}
	if (!nuse)
		for (int i = 0; i < p->n; i++)
			nuse += use[i] = true;
	/* The step's shard count on the node, split over its GPUs, and the
	 * step's options: each can only lower what the prolog granted. */
	unsigned step = 0, s;
	if (spank_getenv(sp, "SLURM_SHARDS_ON_NODE", shards, sizeof(shards)) == ESPANK_SUCCESS &&
	    parse_uint(shards, 1, 1000000000, &s) == 0 && nuse)
		step = (s + (unsigned)nuse - 1) / (unsigned)nuse;
	unsigned want = opt_shares_val(sp);
	uint64_t want_mem = opt_memory_val(sp);
	char all[MAX_GPUS * 128] = "", first[512] = "";
	size_t alen = 0;
	struct run *r = malloc(sizeof(*r));
	if (!r) {
		free(p);
		return cfg.fail_closed ? -1 : 0;
	}
	int rc = 0;
	for (int i = 0; i < p->n; i++) {
		if (!use[i])
			continue;
		unsigned shares = p->g[i].shares;
		if (step && step < shares)
			shares = step;
		if (want && want < shares)
			shares = want;
		uint64_t mem = min_cap(p->g[i].memory, want_mem);
		char sock[512];
		if (grant(&j, p->g[i].gpu, shares, mem, p->priority, true, sock, sizeof(sock), r) <
		    0) {
			slurm_error("devq: job %" PRIu32 ": GPU %u: cannot update %s to %u shares: "
				    "%s", j.id, p->g[i].gpu, j.tenant, shares, reason(r));
			if (cfg.fail_closed) {
				rc = -1;
				break;
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
	free(p);
	if (rc)
		return rc;
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
	if (job_ids(sp, &j) < 0)
		return 0;
	job_gpus(&j, getenv("SLURM_JOB_GPUS"));
	/* slurmd's GPUs and the prolog's record's: every GPU, even after one
	 * fails, for each holds the job's memory. */
	struct plan *p = malloc(sizeof(*p));
	char why[1024];
	if (p && record_read(&j, p, why, sizeof(why)) == 0)
		for (int i = 0; i < p->n; i++)
			if (!has_gpu(j.gpus, j.ngpus, p->g[i].gpu) && j.ngpus < MAX_GPUS)
				j.gpus[j.ngpus++] = p->g[i].gpu;
	free(p);
	for (int i = 0; i < j.ngpus; i++)
		evict(&j, j.gpus[i], true);
	record_remove(&j);
	return 0;
}
