/* SPDX-License-Identifier: Apache-2.0 */
/* Soak: one real devqd, N client processes doing verified dependent work,
 * and chaos from the test process, for SOAK_SECONDS (default 25; `make soak
 * SOAK_SECONDS=600` for the long run).
 *
 * Each client opens three queues and, round after round, submits one batch
 * that fills, scales, copies through device memory and adds, with explicit
 * waits across queues and buffer hazards.  Two buffer sets alternate, so a
 * round is verified on the host (every element) while the next one runs.
 * Every completion is read in arrival order and must be the next point of
 * its queue, with code OK: a lost, duplicated or reordered completion fails
 * the client.
 *
 * Meanwhile the chaos loop SIGKILLs random clients mid-flight (and starts
 * new ones), opens connections that never speak, sends garbage (random bytes,
 * or a Hello followed by random bytes), and floods fds (frames carrying 253
 * fds, declared or not).  At the end every surviving client must have every
 * completion exactly once and correct, and the daemon must be back to its
 * baseline: the same number of fds, no buffer or byte mapped, no op in
 * flight, and a heap (SIGUSR1 stats line, see daemon/server/stats.h; less what
 * the daemon's pools keep for reuse) within HEAP_MARGIN of the baseline (glibc's tcache off in the daemon, so the
 * count is exact).  Under sanitizers or valgrind the heap check
 * is skipped (their allocators replace glibc's; they check leaks at exit). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "devq.h"
#include "devq.pb-c.h"
#include "frame.h"
#include "../harness.h"

#define MAX_CLIENTS 16
#define NQ 3
#define NELEM 4096 /* floats per buffer */
#define MAX_IDLE 24
/* Allowed heap growth over a run, in bytes.  The daemon runs with glibc's
 * per-thread cache off (GLIBC_TUNABLES=glibc.malloc.tcache_count=0):
 * mallinfo2 counts chunks parked in a tcache as in use, up to ~230 KiB per
 * thread, which would drown a small leak.  Without it a run ends within a
 * few hundred bytes of the baseline (libuv's watcher table grows with the
 * highest fd number seen, 8 bytes per fd, and is kept); a leak of a few
 * bytes per op or per connection exceeds the margin within seconds. */
#define HEAP_MARGIN (64 * 1024)

struct slot {
	pid_t pid;
	atomic_int exited_ok; /* set by the client just before exit(0) */
	atomic_ullong ops;    /* completions verified by this process */
};

struct shared {
	uint64_t deadline_ns, kill_until_ns;
	int wait_ms; /* hang detector for one completion */
	atomic_ullong ops_verified, rounds, ops_by_killed;
	struct slot slots[MAX_CLIENTS];
};

static struct shared *sh;
static struct daemon_proc dp;

/* ---- clients --------------------------------------------------------- */

struct bufset {
	struct devq_buffer *a, *b, *c, *dev;
};

struct client {
	devq *q;
	const struct devq_exec *fill, *saxpy, *vadd, *spin;
	struct bufset set[2];
	uint64_t next[NQ + 1];      /* next point expected per queue */
	uint64_t submitted[NQ + 1]; /* points handed out per queue */
	unsigned slot;
};

static void cfail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void cfail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "soak client %d: ", (int)getpid());
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	_exit(3);
}

static uint32_t f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static struct devq_buffer *cbuf(struct client *c, enum devq_buffer_kind kind)
{
	struct devq_buffer *b;
	if (devq_buffer_create(c->q, NELEM * 4, kind, &b) < 0)
		cfail("create buffer: %s", devq_last_error(c->q));
	return b;
}

/* Reads completions until every point up to want[] has arrived, each once,
 * in order, and OK. */
static void collect(struct client *c, const uint64_t *want)
{
	for (;;) {
		bool done = true;
		for (int q = 1; q <= NQ; q++)
			done &= c->next[q] > want[q];
		if (done)
			return;
		struct devq_completion x;
		int r = devq_next_completion(c->q, &x, sh->wait_ms);
		if (r < 0)
			cfail("waiting for completions: %s", devq_last_error(c->q));
		if (x.queue < 1 || x.queue > NQ)
			cfail("completion of unknown queue %u", x.queue);
		if (x.point != c->next[x.queue])
			cfail("queue %u: completion of point %llu, expected %llu (%s)", x.queue,
			      (unsigned long long)x.point, (unsigned long long)c->next[x.queue],
			      x.point < c->next[x.queue] ? "duplicate" : "lost or reordered");
		if (x.code != DEVQ_OK)
			cfail("queue %u point %llu: %s: %s", x.queue, (unsigned long long)x.point,
			      devq_code_name(x.code), x.message);
		c->next[x.queue]++;
		atomic_fetch_add(&sh->slots[c->slot].ops, 1);
		atomic_fetch_add(&sh->ops_verified, 1);
	}
}

static void verify(const struct bufset *s, uint64_t round)
{
	float v = (float)(round % 1000);
	const float *a = s->a->map, *b = s->b->map, *cc = s->c->map;
	for (int i = 0; i < NELEM; i++) {
		if (a[i] != v || cc[i] != 2 * v + 1 || b[i] != 3 * v + 1)
			cfail("round %llu element %d: a=%g b=%g c=%g, want %g %g %g",
			      (unsigned long long)round, i, a[i], b[i], cc[i], v, 3 * v + 1,
			      2 * v + 1);
	}
}

/* One round on buffer set s: A = v (q1), B = 1 (q2), B = 2A + B (q2 after
 * (1, fill)), D = B and C = D through device memory (q3 after the saxpy),
 * B = A + C (q1, ordered after C by hazard and by wait), and a short spin. */
static void submit_round(struct client *c, uint64_t round, uint64_t *last)
{
	struct bufset *s = &c->set[round & 1];
	float v = (float)(round % 1000);
	struct devq_arg fa[] = { a_u64("n", NELEM), a_u32("value", f32_bits(1.0f)),
				 a_buf("dst", s->b, 0) };
	struct devq_arg sa[] = { a_u64("n", NELEM), a_f32("a", 2.0f), a_buf("x", s->a, 0),
				 a_buf("y", s->b, 0) };
	struct devq_arg va[] = { a_u64("n", NELEM), a_buf("a", s->a, 0), a_buf("b", s->c, 0),
				 a_buf("c", s->b, 0) };
	struct devq_arg sp[] = { a_u64("ns", 200000) };
	uint64_t p1 = c->submitted[1] + 1, p2 = c->submitted[2] + 2, p3 = c->submitted[3] + 2;
	struct devq_wait w_fill = { 1, p1 }, w_saxpy = { 2, p2 }, w_copy = { 3, p3 };
	struct devq_op ops[] = {
		{ .queue = 1, .kind = DEVQ_OP_FILL, .dst = s->a, .size = NELEM * 4,
		  .pattern = f32_bits(v) },
		{ .queue = 2, .kind = DEVQ_OP_KERNEL, .exec = c->fill, .args = fa, .nargs = 3 },
		{ .queue = 2, .kind = DEVQ_OP_KERNEL, .exec = c->saxpy, .args = sa, .nargs = 4,
		  .waits = &w_fill, .nwaits = 1 },
		{ .queue = 3, .kind = DEVQ_OP_COPY, .src = s->b, .dst = s->dev, .size = NELEM * 4,
		  .waits = &w_saxpy, .nwaits = 1 },
		{ .queue = 3, .kind = DEVQ_OP_COPY, .src = s->dev, .dst = s->c, .size = NELEM * 4 },
		{ .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = c->vadd, .args = va, .nargs = 4,
		  .waits = &w_copy, .nwaits = 1 },
		{ .queue = 3, .kind = DEVQ_OP_KERNEL, .exec = c->spin, .args = sp, .nargs = 1 },
	};
	size_t n = sizeof(ops) / sizeof(ops[0]);
	uint64_t pts[sizeof(ops) / sizeof(ops[0])];
	if (devq_submit(c->q, ops, n, pts) < 0)
		cfail("submit: %s", devq_last_error(c->q));
	for (size_t i = 0; i < n; i++) {
		if (pts[i] != ++c->submitted[ops[i].queue])
			cfail("op %zu got point %llu, expected %llu", i, (unsigned long long)pts[i],
			      (unsigned long long)c->submitted[ops[i].queue]);
	}
	for (int q = 1; q <= NQ; q++)
		last[q] = c->submitted[q];
}

static void client_main(const char *sock, unsigned slot)
{
	struct client c = { .slot = slot };
	char name[32];
	snprintf(name, sizeof(name), "soak-%u", slot);
	if (devq_connect(sock, name, &c.q) < 0)
		cfail("connect: %s", c.q ? devq_last_error(c.q) : "no handle");
	if (devq_exec_lookup(c.q, "fill_u32", &c.fill) || devq_exec_lookup(c.q, "saxpy_f32", &c.saxpy) ||
	    devq_exec_lookup(c.q, "vadd_f32", &c.vadd) || devq_exec_lookup(c.q, "spin", &c.spin))
		cfail("lookup: %s", devq_last_error(c.q));
	for (int i = 0; i < 2; i++) {
		c.set[i].a = cbuf(&c, DEVQ_BUFFER_SHARED);
		c.set[i].b = cbuf(&c, DEVQ_BUFFER_SHARED);
		c.set[i].c = cbuf(&c, DEVQ_BUFFER_SHARED);
		c.set[i].dev = cbuf(&c, DEVQ_BUFFER_DEVICE);
	}
	for (uint32_t q = 1; q <= NQ; q++) {
		if (devq_queue_open(c.q, q) < 0)
			cfail("open queue: %s", devq_last_error(c.q));
		c.next[q] = 1;
	}
	uint64_t last[2][NQ + 1] = { { 0 } };
	uint64_t round = 0;
	bool pending = false;
	while (harness_now_ns() < sh->deadline_ns) {
		submit_round(&c, round, last[round & 1]);
		if (pending) {
			/* The previous round (other set) is done: check it. */
			collect(&c, last[(round - 1) & 1]);
			verify(&c.set[(round - 1) & 1], round - 1);
			atomic_fetch_add(&sh->rounds, 1);
		}
		pending = true;
		round++;
		/* Now and then give a buffer back and take a new one: the
		 * release waits for the ops that use it. */
		if (round % 64 == 0) {
			struct bufset *s = &c.set[round & 1];
			if (devq_buffer_release(c.q, s->c) < 0 ||
			    devq_buffer_wait_released(c.q, s->c, sh->wait_ms) < 0)
				cfail("release: %s", devq_last_error(c.q));
			s->c = cbuf(&c, DEVQ_BUFFER_SHARED);
		}
	}
	if (pending) {
		collect(&c, last[(round - 1) & 1]);
		verify(&c.set[(round - 1) & 1], round - 1);
		atomic_fetch_add(&sh->rounds, 1);
	}
	for (int q = 1; q <= NQ; q++)
		if (c.next[q] != c.submitted[q] + 1)
			cfail("queue %d: %llu points submitted, %llu completed", q,
			      (unsigned long long)c.submitted[q], (unsigned long long)c.next[q] - 1);
	struct devq_error e;
	if (devq_next_error(c.q, &e) == 1)
		cfail("unexpected error: %s: %s", e.request, e.message);
	devq_disconnect(c.q);
	atomic_store(&sh->slots[slot].exited_ok, 1);
	_exit(0);
}

static pid_t spawn_client(unsigned slot)
{
	atomic_store(&sh->slots[slot].exited_ok, 0);
	atomic_store(&sh->slots[slot].ops, 0);
	fflush(NULL); /* or the child would print our buffered lines again */
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		client_main(dp.sock, slot);
	sh->slots[slot].pid = pid;
	return pid;
}

/* ---- chaos ----------------------------------------------------------- */

static unsigned rnd(unsigned n)
{
	return (unsigned)random() % n;
}

static int raw_connect(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%.100s", dp.sock);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1; /* backlog full under load: try again later */
	}
	struct timeval tv = { 2, 0 };
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	return fd;
}

static size_t pack_frame(uint8_t *buf, const Devq__ClientMessage *m, unsigned nfds)
{
	size_t n = protobuf_c_message_get_packed_size(&m->base);
	uint8_t h[8] = { n & 0xff, (n >> 8) & 0xff, (n >> 16) & 0xff, n >> 24, DEVQ_FRAME_CLIENT,
			 0, nfds & 0xff, nfds >> 8 };
	memcpy(buf, h, 8);
	protobuf_c_message_pack(&m->base, buf + 8);
	return n + 8;
}

static size_t hello_frame(uint8_t *buf)
{
	Devq__Hello h = DEVQ__HELLO__INIT;
	h.min_version = 1;
	h.max_version = 1;
	h.client_name = "soak-chaos";
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_HELLO;
	m.hello = &h;
	return pack_frame(buf, &m, 0);
}

static void send_fds(int sock, const void *p, size_t n, const int *fds, unsigned nfds)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * DEVQ_FDS_PER_MSG)];
	} ctl;
	memset(&ctl, 0, sizeof(ctl));
	struct iovec iov = { (void *)p, n };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			     .msg_controllen = CMSG_SPACE(sizeof(int) * nfds) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
	memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
	/* A failure just means the daemon already dropped us. */
	if (sendmsg(sock, &mh, MSG_NOSIGNAL) < 0)
		return;
}

struct chaos {
	unsigned kills, garbage, idle_opened, floods, fds_flooded, respawned;
	int idle[MAX_IDLE];
	unsigned nidle;
};

static void chaos_garbage(struct chaos *ch)
{
	int fd = raw_connect();
	if (fd < 0)
		return;
	uint8_t buf[4096 + 64];
	size_t off = 0;
	if (rnd(2))
		off = hello_frame(buf);
	size_t n = 1 + rnd(4096);
	for (size_t i = 0; i < n; i++)
		buf[off + i] = (uint8_t)random();
	if (send(fd, buf, off + n, MSG_NOSIGNAL) < 0) {
		/* dropped already */
	}
	close(fd);
	ch->garbage++;
}

static void chaos_flood(struct chaos *ch)
{
	int fd = raw_connect();
	if (fd < 0)
		return;
	int fds[DEVQ_FDS_PER_MSG];
	for (unsigned i = 0; i < DEVQ_FDS_PER_MSG; i++) {
		fds[i] = i % 2 ? memfd_create("soak-flood", MFD_CLOEXEC)
			       : open("/dev/null", O_RDONLY | O_CLOEXEC);
		ck_assert_int_ge(fds[i], 0);
	}
	uint8_t buf[256];
	size_t n = hello_frame(buf);
	if (send(fd, buf, n, MSG_NOSIGNAL) >= 0) {
		Devq__ImportBuffer im = DEVQ__IMPORT_BUFFER__INIT;
		im.id = 1;
		im.size = 4096;
		Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
		m.body_case = DEVQ__CLIENT_MESSAGE__BODY_IMPORT_BUFFER;
		m.import_buffer = &im;
		/* Declared (wrong fd count for an import: refused, fds
		 * closed), or not declared at all (a protocol error). */
		n = pack_frame(buf, &m, rnd(2) ? DEVQ_FDS_PER_MSG : 0);
		send_fds(fd, buf, n, fds, DEVQ_FDS_PER_MSG);
	}
	for (unsigned i = 0; i < DEVQ_FDS_PER_MSG; i++)
		close(fds[i]);
	close(fd);
	ch->floods++;
	ch->fds_flooded += DEVQ_FDS_PER_MSG;
}

static void chaos_idle(struct chaos *ch)
{
	if (ch->nidle == MAX_IDLE) {
		close(ch->idle[0]);
		memmove(ch->idle, ch->idle + 1, (MAX_IDLE - 1) * sizeof(int));
		ch->nidle--;
	}
	int fd = raw_connect();
	if (fd < 0)
		return;
	ch->idle[ch->nidle++] = fd;
	ch->idle_opened++;
}

static void chaos_kill(struct chaos *ch, unsigned nclients)
{
	/* Slot 0 is never killed: at least one client runs the whole soak. */
	if (nclients < 2 || harness_now_ns() > sh->kill_until_ns)
		return;
	unsigned slot = 1 + rnd(nclients - 1);
	pid_t pid = sh->slots[slot].pid;
	int st;
	if (waitpid(pid, &st, WNOHANG) == pid)
		ck_abort_msg("client in slot %u exited early (status %#x)", slot, st);
	kill(pid, SIGKILL);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	ck_assert_msg(WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) == 0 &&
					  atomic_load(&sh->slots[slot].exited_ok)),
		      "client in slot %u failed before it was killed (status %#x)", slot, st);
	atomic_fetch_add(&sh->ops_by_killed, atomic_load(&sh->slots[slot].ops));
	ch->kills++;
	spawn_client(slot);
	ch->respawned++;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* ---- the daemon's own account ---------------------------------------- */

struct dstats {
	long sessions, ops_in_flight, buffers, bytes_mapped, fds;
	unsigned long long heap, cached; /* cached: kept for reuse, bounded */
	long rss_kb;
};

/* SIGUSR1, then the new stats line from the daemon's log. */
static void daemon_stats(struct dstats *s)
{
	char line[512];
	int before = 0;
	FILE *f = fopen(dp.log, "r");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f))
		before += strstr(line, "devqd: stats: ") != NULL;
	fclose(f);
	kill(dp.pid, SIGUSR1);
	for (int tries = 0; tries < 1000; tries++) {
		int seen = 0;
		f = fopen(dp.log, "r");
		ck_assert_ptr_nonnull(f);
		while (fgets(line, sizeof(line), f)) {
			if (strstr(line, "devqd: stats: ") && ++seen > before) {
				fclose(f);
				int n = sscanf(strstr(line, "stats: "),
					       "stats: sessions=%ld ops_in_flight=%ld buffers=%ld "
					       "bytes_mapped=%ld fds=%ld heap_in_use=%llu "
					       "heap_cached=%llu",
					       &s->sessions, &s->ops_in_flight, &s->buffers,
					       &s->bytes_mapped, &s->fds, &s->heap, &s->cached);
				ck_assert_msg(n == 7, "unparsable stats line: %s", line);
				goto rss;
			}
		}
		fclose(f);
		sleep_ms(10);
	}
	ck_abort_msg("devqd wrote no stats line after SIGUSR1");
rss:
	s->rss_kb = -1;
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)dp.pid);
	f = fopen(path, "r");
	if (f) {
		while (fgets(line, sizeof(line), f))
			if (!strncmp(line, "VmRSS:", 6))
				s->rss_kb = atol(line + 6);
		fclose(f);
	}
}

/* Polls until the daemon has no session, op or buffer left (closing is
 * asynchronous), then returns its stats. */
static void settled_stats(struct dstats *s)
{
	for (int i = 0; i < 3000; i++) {
		daemon_stats(s);
		if (s->sessions == 0 && s->ops_in_flight == 0 && s->buffers == 0)
			return;
		sleep_ms(20);
	}
	ck_abort_msg("devqd did not settle: %ld sessions, %ld ops in flight, %ld buffers",
		     s->sessions, s->ops_in_flight, s->buffers);
}

static unsigned env_uint(const char *name, unsigned def, unsigned max)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return def;
	unsigned long n = strtoul(v, NULL, 10);
	return n == 0 || n > max ? def : (unsigned)n;
}

START_TEST(soak)
{
	unsigned seconds = env_uint("SOAK_SECONDS", 25, 24 * 3600);
	unsigned nclients = env_uint("SOAK_CLIENTS", 4, MAX_CLIENTS);
	bool slow = harness_slow();
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(sh, MAP_FAILED);
	memset(sh, 0, sizeof(*sh));
	sh->wait_ms = slow ? 300000 : 60000; /* hang detector only */
	srandom((unsigned)getpid());

	/* Short ops, so a SIGKILL usually finds work in flight. */
	const char *args[] = { "--max-op-ms", "100", "--streams", "2", NULL };
	/* For the daemon only (see HEAP_MARGIN). */
	const char *tun = getenv("GLIBC_TUNABLES");
	char *saved = tun ? strdup(tun) : NULL;
	setenv("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0", 1);
	harness_start(&dp, args);
	if (saved)
		setenv("GLIBC_TUNABLES", saved, 1);
	else
		unsetenv("GLIBC_TUNABLES");
	free(saved);

	/* Baseline after one honest client came and went, so lazily grown
	 * tables are already there. */
	sh->deadline_ns = harness_now_ns() + 300ull * 1000 * 1000;
	sh->kill_until_ns = 0;
	pid_t warm = spawn_client(0);
	int st;
	ck_assert_int_eq(waitpid(warm, &st, 0), warm);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "warm-up client failed (%#x)", st);
	struct dstats base, end;
	settled_stats(&base);
	int base_ext = harness_fd_count(dp.pid);
	printf("soak: %u s, %u clients; baseline: fds %ld, heap %llu B, rss %ld KiB\n", seconds,
	       nclients, base.fds, base.heap, base.rss_kb);

	atomic_store(&sh->ops_verified, 0);
	atomic_store(&sh->rounds, 0);
	uint64_t start = harness_now_ns();
	sh->deadline_ns = start + (uint64_t)seconds * 1000000000ull;
	/* The last stretch without kills, so respawned clients finish too. */
	sh->kill_until_ns = sh->deadline_ns - (uint64_t)(seconds > 10 ? 3 : 1) * 1000000000ull;
	for (unsigned i = 0; i < nclients; i++)
		spawn_client(i);

	struct chaos ch = { 0 };
	while (harness_now_ns() < sh->deadline_ns) {
		sleep_ms(20 + (int)rnd(180));
		switch (rnd(8)) {
		case 0:
		case 1:
		case 2:
			chaos_kill(&ch, nclients);
			break;
		case 3:
		case 4:
			chaos_garbage(&ch);
			break;
		case 5:
			chaos_idle(&ch);
			break;
		default:
			chaos_flood(&ch);
			break;
		}
	}

	/* Every client still running must finish cleanly. */
	unsigned survivors = 0;
	for (unsigned i = 0; i < nclients; i++) {
		pid_t pid = sh->slots[i].pid;
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0 &&
				      atomic_load(&sh->slots[i].exited_ok),
			      "surviving client in slot %u failed (status %#x): see above", i, st);
		survivors++;
	}
	for (unsigned i = 0; i < ch.nidle; i++)
		close(ch.idle[i]);

	settled_stats(&end);
	/* fds: the listening socket and the rest of the daemon's own; every
	 * connection, memfd and flooded fd is gone. */
	for (int i = 0; i < 200 && end.fds != base.fds; i++) {
		sleep_ms(20);
		daemon_stats(&end);
	}
	unsigned long long ops = atomic_load(&sh->ops_verified);
	printf("soak: %llu ops verified (%llu rounds) in %.1f s; %u kills (%llu ops verified by "
	       "clients later killed), %u survivors, %u garbage connections, %u idle "
	       "connections, %u fd floods (%u fds)\n",
	       ops, (unsigned long long)atomic_load(&sh->rounds),
	       (double)(harness_now_ns() - start) / 1e9, ch.kills,
	       (unsigned long long)atomic_load(&sh->ops_by_killed), survivors, ch.garbage,
	       ch.idle_opened, ch.floods, ch.fds_flooded);
	printf("soak: end: fds %ld (baseline %ld), bytes mapped %ld, buffers %ld, heap %llu B "
	       "of which %llu B cached for reuse (baseline %llu B, %llu B cached), rss %ld KiB "
	       "(baseline %ld KiB)\n",
	       end.fds, base.fds, end.bytes_mapped, end.buffers, end.heap, end.cached, base.heap,
	       base.cached, end.rss_kb, base.rss_kb);
	ck_assert_msg(ops > 0, "no op was verified");
	ck_assert_msg(end.fds == base.fds, "devqd holds %ld fds, %ld at the baseline", end.fds,
		      base.fds);
	ck_assert_msg(end.bytes_mapped == 0 && end.buffers == 0, "%ld buffers, %ld bytes mapped",
		      end.buffers, end.bytes_mapped);
	/* The same from outside: /proc/PID/fd, and status through a client. */
	int ext = harness_fd_count(dp.pid);
	ck_assert_msg(ext == base_ext, "/proc/%d/fd: %d fds, %d at the baseline", (int)dp.pid,
		      ext, base_ext);
	devq *probe = conn(dp.sock, "soak-probe");
	struct devq_status *ds;
	ck_assert_msg(devq_get_status(probe, &ds) == 0, "%s", devq_last_error(probe));
	ck_assert_msg(ds->nsessions == 1 && ds->buffers == 0 && ds->bytes_mapped == 0 &&
			      ds->ops_in_flight == 0,
		      "status: %zu sessions, %u buffers, %llu bytes mapped, %llu ops in flight",
		      ds->nsessions, ds->buffers, (unsigned long long)ds->bytes_mapped,
		      (unsigned long long)ds->ops_in_flight);
	devq_status_free(ds);
	devq_disconnect(probe);
	if (slow) {
		printf("soak: heap check skipped under a sanitizer or valgrind (their allocator "
		       "replaces glibc's; leaks are checked at exit)\n");
	} else {
		/* What the pools keep is bounded by design (pool.h); the rest
		 * must be back where it was. */
		ck_assert_msg(end.heap - end.cached <= base.heap - base.cached + HEAP_MARGIN,
			      "devqd heap (less its reuse caches) grew from %llu to %llu bytes "
			      "(margin %d)",
			      base.heap - base.cached, end.heap - end.cached, HEAP_MARGIN);
	}
	int code = harness_stop(&dp);
	ck_assert_msg(code == 0, "devqd exited with status %d", code);
	munmap(sh, sizeof(*sh));
}
END_TEST

int main(void)
{
	unsigned seconds = env_uint("SOAK_SECONDS", 25, 24 * 3600);
	Suite *s = suite_create("soak");
	TCase *tc = tcase_create("soak");
	tcase_set_timeout(tc, (double)seconds * 3 + 600);
	tcase_add_test(tc, soak);
	suite_add_tcase(s, tc);
	return harness_main(s);
}
