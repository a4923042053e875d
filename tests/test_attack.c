/* SPDX-License-Identifier: Apache-2.0 */
/* Time to serve under attack.  For each of eight attacks a hostile local
 * user tried on devqd (uid 65534, admitted with --allow-users), a
 * well-behaved client of another uid (65533) keeps submitting while the
 * attack runs, and each of its round trips (submit, wait for the
 * completion) must end within the attack's bound; every tenth round it
 * also connects afresh and asks for status, within the same bound (a run
 * that misses it runs once more, and both must miss to fail).  After
 * the attacker is gone, what the daemon holds returns to what it held
 * before: its fds exactly, its huge pages exactly (when the machine has
 * any), the client memory it maps (RssShmem) within 1 MiB, its mappings
 * within 2, its resident set within TOL_RSS_KB and its address space
 * within TOL_MAPS_KB (the heap's top may stay where a burst of replies left
 * it: address space, not memory).
 * The attacks:
 *
 *   1 hugetlb    hugetlb memfds imported (refused), a hole punched in an
 *                imported tmpfs memfd that an op then reads, every free huge
 *                page held by the attacker                     bound 100 ms
 *   2 leak       create/release and import/release cycles of odd sizes,
 *                hugetlb imports among them                     bound 100 ms
 *   3 reset      fail, reset, ok, reset in one write, over and over; the
 *                ok points must stay ok                          bound 100 ms
 *   4 ranges     thousands of failed ranges, then frames of 80,000 waits:
 *                each such frame (900 KB) costs devqd's loop tens of
 *                ms, up to 150 on a loaded VM, and the bystander
 *                may wait behind two                             bound 400 ms
 *   5 unread     600 TraceRequests over a full ring in one write, never
 *                read: each reply of 16,384 ops (1.2 MB) costs devqd's
 *                loop tens of ms, up to 150 on a loaded VM, and the
 *                bystander may wait behind two                   bound 500 ms
 *   6 fds        sessions parking fds on a 1-byte header up to the per-user
 *                budget and past it (devqd with RLIMIT_NOFILE 256)
 *                                                                bound 100 ms
 *   7 snoop      status and trace requests by the thousand, each checked to
 *                show nothing of the other uids' sessions        bound 100 ms
 *   8 big        2 GiB buffers created and released, 1 GiB memfds imported
 *                and released: the worker's prefaults and unmaps take
 *                the process's mmap lock and a CPU of two    bound 200 ms
 *
 * The bounds are tens of milliseconds where an unloaded machine serves in
 * about one: generous for a loaded 2-core CI machine (measured worst at a
 * load average of 6-10 on 2 cores: 10-65 ms; attack 4 155-220 ms, attack
 * 5 195-315 ms, attack 8 118 ms; before the fixes 12-19 s, 0.5-8 s and
 * 2.4-3.5 s).  Attacks 4 and 5 are bounded by what one request costs (one
 * frame, one reply), not by how many a write carries.  A request's own cost is
 * bounded by the frame size and the trace ring, not by how many requests
 * one write carries: past DEVQ_FRAMES_SLICE_NS the rest of a session's
 * frames waits for the loop's next turn.  Under
 * sanitizers or valgrind (harness_slow) the bounds are reported, not
 * enforced.  The tests need root (to run clients as other uids) and skip
 * otherwise; attack 1 needs huge pages (vm.nr_hugepages > 0) and skips
 * without them. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "devq.h"
#include "devq.pb-c.h"
#include "frame.h"
#include "harness.h"
#include "hostile.h"

#define ATTACKER 65534
#define BYSTANDER 65533
#define ATTACK_NS 1500000000ull /* each attack runs this long at least */
#define TOL_RSS_KB (8 * 1024)   /* what the allocator may keep after an attack */
#define TOL_MAPS_KB (48 * 1024) /* under DEVQ_BUFFER_BG_BYTES: a large mapping is caught */
#define TOL_SHMEM_KB 1024
#define TOL_NMAPS 2
#define HUGE_SZ (2u << 20)
/* devqd gives back its recycled records and allocator memory a second
 * after a session closes: what is measured after the attack is after that. */
#define SETTLE_MIN_NS 1500000000ull

/* ---- processes ------------------------------------------------------- */

static void become(uid_t uid)
{
	if (setgroups(0, NULL) < 0 || setgid(uid) < 0 || setuid(uid) < 0)
		_exit(90);
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static void put_byte(int fd, char c)
{
	if (write(fd, &c, 1) != 1)
		_exit(91);
}

/* A byte from fd within ms, or 0. */
static char get_byte(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char c = 0;
	if (poll(&p, 1, ms) == 1 && read(fd, &c, 1) == 1)
		return c;
	return 0;
}

/* ---- the bystander: a client of another uid ---------------------------- */

struct served {
	uint64_t worst_op_ns, worst_conn_ns;
	unsigned ops, conns;
	int err; /* 0, or the step that failed */
};

static uint64_t fill_wait(devq *q, struct devq_buffer *b, uint32_t pattern, int *err)
{
	struct devq_op op = { .queue = 0, .kind = DEVQ_OP_FILL, .dst = b, .size = 4096,
			      .pattern = pattern };
	uint64_t t0 = harness_now_ns(), p;
	struct devq_completion c;
	if (devq_submit(q, &op, 1, &p) != 0 || devq_wait(q, 0, p, 20000, &c) != 0 ||
	    c.code != DEVQ_OK || ((const uint32_t *)b->map)[1023] != pattern)
		*err = 1;
	return harness_now_ns() - t0;
}

/* Connects, warms up (ops, a 64 MiB buffer, status, trace: what the daemon
 * sets up once is set up before the baseline), says 'R' on res; measures
 * from 'G' on ctl until 'S', writes its struct served on res; exits at
 * 'X'. */
static void bystander(const char *sock, int ctl, int res)
{
	become(BYSTANDER);
	struct served sv = { 0 };
	devq *q = NULL;
	struct devq_buffer *b = NULL, *big = NULL;
	if (devq_connect(sock, "bystander", &q) != 0 || devq_queue_open(q, 0) != 0 ||
	    devq_buffer_create(q, 4096, DEVQ_BUFFER_SHARED, &b) != 0)
		_exit(10);
	for (int i = 0; i < 20; i++)
		fill_wait(q, b, (uint32_t)i, &sv.err);
	if (devq_buffer_create(q, 64u << 20, DEVQ_BUFFER_SHARED, &big) != 0 ||
	    devq_buffer_release(q, big) != 0 || devq_buffer_wait_released(q, big, 20000) != 0)
		_exit(11);
	struct devq_status *st;
	struct devq_trace *tr;
	struct devq_trace_query tq = { 0 };
	if (devq_get_status(q, &st) != 0 || devq_trace_get(q, &tq, &tr) != 0)
		_exit(12);
	devq_status_free(st);
	devq_trace_free(tr);
	put_byte(res, 'R');
	if (get_byte(ctl, 60000) != 'G')
		_exit(13);
	for (unsigned i = 0; get_byte(ctl, 0) != 'S'; i++) {
		uint64_t dt = fill_wait(q, b, 0x5e00u + i, &sv.err);
		sv.worst_op_ns = dt > sv.worst_op_ns ? dt : sv.worst_op_ns;
		sv.ops++;
		if (i % 10 == 9) {
			uint64_t t0 = harness_now_ns();
			devq *n = NULL;
			if (devq_connect(sock, "bystander-new", &n) != 0 ||
			    devq_get_status(n, &st) != 0)
				sv.err = 2;
			else
				devq_status_free(st);
			devq_disconnect(n);
			dt = harness_now_ns() - t0;
			sv.worst_conn_ns = dt > sv.worst_conn_ns ? dt : sv.worst_conn_ns;
			sv.conns++;
		}
		sleep_ms(2);
	}
	if (write(res, &sv, sizeof(sv)) != sizeof(sv))
		_exit(14);
	if (get_byte(ctl, 60000) != 'X')
		_exit(15);
	devq_disconnect(q);
	_exit(0);
}

/* ---- the attacks (run as ATTACKER; write 'A' on started once in effect) -- */

struct attack {
	const char *name;
	const char *const *args; /* devqd arguments besides --allow-users */
	unsigned bound_ms;
	bool hugepages;  /* needs HugePages_Total > 0 */
	bool low_nofile; /* devqd runs with RLIMIT_NOFILE 256 */
	bool fill_ring;  /* root fills the trace ring before the attack */
	int (*run)(const struct daemon_proc *d, int started);
};

static bool attack_over(uint64_t t0)
{
	return harness_now_ns() - t0 >= ATTACK_NS;
}

/* Reads and drops whatever the daemon sent; false once it hung up. */
static bool drain(int fd)
{
	char buf[65536];
	for (;;) {
		ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n > 0)
			continue;
		return n < 0 && (errno == EAGAIN || errno == EINTR);
	}
}

static int sealed_memfd(size_t size, unsigned flags)
{
	int fd = memfd_create("attack", MFD_CLOEXEC | MFD_ALLOW_SEALING | flags);
	if (fd < 0 || ftruncate(fd, (off_t)size) < 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) < 0)
		_exit(20);
	return fd;
}

/* 1: hugetlb memfds (refused), a punched hole under a read, and every free
 * huge page held.  Before the fix devqd died of SIGBUS. */
static int attack_hugetlb(const struct daemon_proc *d, int started)
{
	devq *q;
	if (devq_connect(d->sock, "hugetlb", &q) != 0 || devq_queue_open(q, 0) != 0)
		return 21;
	const struct devq_exec *cs = NULL;
	struct devq_buffer *out;
	if (devq_exec_lookup(q, "checksum", &cs) != 0 || devq_buffer_create(q, 4096, DEVQ_BUFFER_SHARED, &out) != 0)
		return 22;
	long nfree = hugepages_free();
	void *held = MAP_FAILED;
	uint64_t t0 = harness_now_ns();
	for (unsigned i = 0; !attack_over(t0); i++) {
		int hfd = sealed_memfd(HUGE_SZ, MFD_HUGETLB);
		struct devq_buffer *b = NULL;
		if (devq_buffer_import(q, hfd, HUGE_SZ, 0, &b) == 0)
			return 23; /* a hugetlb memfd must be refused */
		if (fallocate(hfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, HUGE_SZ) < 0)
			return 24;
		close(hfd);
		if (held == MAP_FAILED && nfree > 1)
			held = mmap(NULL, (size_t)(nfree - 1) * HUGE_SZ, PROT_READ | PROT_WRITE,
				    MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE, -1, 0);
		/* A tmpfs memfd is accepted; a hole punched in it reads as
		 * zeros, never a fault. */
		int tfd = sealed_memfd(1u << 20, 0);
		if (devq_buffer_import(q, tfd, 1u << 20, 0, &b) != 0)
			return 25;
		if (fallocate(tfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 1u << 20) < 0)
			return 26;
		struct devq_arg a[] = { a_u64("n", 1u << 20), a_buf("data", b, 0),
					a_buf("out", out, 0) };
		struct devq_op op = { .queue = 0, .kind = DEVQ_OP_KERNEL, .exec = cs, .args = a,
				      .nargs = 3 };
		uint64_t p;
		struct devq_completion c;
		if (devq_submit(q, &op, 1, &p) != 0 || devq_wait(q, 0, p, 20000, &c) != 0 ||
		    c.code != DEVQ_OK)
			return 27;
		close(tfd);
		if (devq_buffer_release(q, b) != 0 || devq_buffer_wait_released(q, b, 20000) != 0)
			return 28;
		if (i == 0)
			put_byte(started, 'A');
	}
	devq_disconnect(q);
	return 0;
}

/* 2: create/release and import/release cycles of sizes no page size
 * divides; hugetlb imports among them.  Before the fix hugetlb mappings
 * leaked (munmap of the unrounded length failed, unchecked). */
static int attack_leak(const struct daemon_proc *d, int started)
{
	devq *q;
	if (devq_connect(d->sock, "leak", &q) != 0)
		return 31;
	bool huge = hugepages_free() > 0;
	uint64_t t0 = harness_now_ns();
	for (unsigned i = 0; !attack_over(t0); i++) {
		struct devq_buffer *b;
		if (devq_buffer_create(q, 4097 + i, DEVQ_BUFFER_SHARED, &b) != 0 ||
		    devq_buffer_release(q, b) != 0 || devq_buffer_wait_released(q, b, 20000) != 0)
			return 32;
		int fd = sealed_memfd((3u << 20) + 1, 0);
		if (devq_buffer_import(q, fd, (3u << 20) + 1, 0, &b) != 0 ||
		    devq_buffer_release(q, b) != 0 || devq_buffer_wait_released(q, b, 20000) != 0)
			return 33;
		close(fd);
		if (huge) {
			fd = sealed_memfd(HUGE_SZ, MFD_HUGETLB);
			if (devq_buffer_import(q, fd, 4097, 0, &b) == 0)
				return 34;
			close(fd);
		}
		if (i == 0)
			put_byte(started, 'A');
	}
	devq_disconnect(q);
	return 0;
}

/* Opens queues 1 and 2 and creates buffer 1 on a raw connection. */
static void raw_setup(struct raw *r)
{
	raw_hello(r);
	raw_open_queue(r, 1);
	raw_open_queue(r, 2);
	raw_create(r, 1, 4096, DEVQ__BUFFER_KIND__SHARED);
	devq__daemon_message__free_unpacked(raw_expect(r, DEVQ__DAEMON_MESSAGE__BODY_BUFFER_READY),
					    NULL);
}

/* 3: fail, reset, ok, reset in one write; an op of queue 2 waits on each
 * ok point and must succeed.  Before the fix the ok point read as failed. */
static int attack_reset(const struct daemon_proc *d, int started)
{
	struct raw r;
	raw_open(&r, d);
	raw_setup(&r);
	struct rawbuf b = { 0 };
	uint64_t t0 = harness_now_ns(), p1 = 0, p2 = 0;
	int wrong = 0;
	for (unsigned round = 0; !attack_over(t0); round++) {
		for (int i = 0; i < 200; i++) {
			rawbuf_fill(&b, 1, 99, 16, 1, NULL, 0); /* no buffer 99: fails */
			rawbuf_reset_queue(&b, 1);
			rawbuf_fill(&b, 1, 1, 16, 2, NULL, 0);
			rawbuf_reset_queue(&b, 1);
			p1 += 2;
			uint64_t w[2] = { 1, p1 };
			rawbuf_fill(&b, 2, 1, 16, 3, w, 1);
			p2++;
		}
		rawbuf_send(&r, &b);
		char msg[256];
		if (raw_completion(&r, 2, p2, msg, sizeof(msg)) != DEVQ__CODE__OK)
			wrong++;
		if (round == 0)
			put_byte(started, 'A');
	}
	rawbuf_free(&b);
	raw_close(&r);
	return wrong ? 35 : 0;
}

/* 4: as many failed ranges as fit (fail, reset, ok, 1100 times: past the
 * bound), then frames of 80,000 waits on them.  Before the fix each wait
 * scanned every range: seconds of stall for everyone. */
static int attack_ranges(const struct daemon_proc *d, int started)
{
	struct raw r;
	raw_open(&r, d);
	raw_setup(&r);
	struct rawbuf b = { 0 };
	enum { NW = 80000 };
	uint64_t *w = malloc(2 * NW * sizeof(*w));
	if (!w)
		return 41;
	uint64_t t0 = harness_now_ns(), p1 = 0;
	for (unsigned round = 0; !attack_over(t0); round++) {
		for (int i = 0; i < 1100; i++) {
			rawbuf_fill(&b, 1, 99, 16, 1, NULL, 0);
			rawbuf_reset_queue(&b, 1);
			rawbuf_fill(&b, 1, 1, 16, 2, NULL, 0);
			p1 += 2;
		}
		rawbuf_send(&r, &b);
		for (int k = 0; k < 3; k++) {
			for (int i = 0; i < NW; i++) {
				w[2 * i] = 1;
				w[2 * i + 1] = 1 + (uint64_t)(i * 7919u) % p1;
			}
			rawbuf_fill(&b, 2, 1, 16, 3, w, NW);
			rawbuf_send(&r, &b);
			if (!drain(r.fd))
				return 42;
		}
		if (round == 0)
			put_byte(started, 'A');
	}
	free(w);
	rawbuf_free(&b);
	raw_close(&r);
	return 0;
}

/* 5: a full ring of the attacker's own ops, then 600 TraceRequests in one
 * write, never read.  Before the fix hundreds of MB of replies queued. */
static int attack_unread(const struct daemon_proc *d, int started)
{
	devq *q;
	struct devq_buffer *b;
	if (devq_connect(d->sock, "ring-filler", &q) != 0 || devq_queue_open(q, 0) != 0 ||
	    devq_buffer_create(q, 4096, DEVQ_BUFFER_SHARED, &b) != 0)
		return 51;
	static struct devq_op ops[1024];
	static uint64_t pts[1024];
	for (int i = 0; i < 1024; i++)
		ops[i] = (struct devq_op){ .queue = 0, .kind = DEVQ_OP_FILL, .dst = b, .size = 64 };
	for (int k = 0; k < 16; k++)
		if (devq_submit(q, ops, 1024, pts) != 0)
			return 52;
	struct devq_completion c;
	if (devq_wait(q, 0, pts[1023], 20000, &c) != 0)
		return 53;
	uint64_t t0 = harness_now_ns();
	struct raw r[4];
	unsigned n = 0;
	while (!attack_over(t0) && n < 4) {
		raw_open(&r[n], d);
		raw_hello(&r[n]);
		struct rawbuf rb = { 0 };
		for (int i = 0; i < 600; i++)
			rawbuf_trace(&rb, false);
		rawbuf_send(&r[n], &rb);
		rawbuf_free(&rb);
		if (n++ == 0)
			put_byte(started, 'A');
		sleep_ms(400);
	}
	while (!attack_over(t0))
		sleep_ms(10);
	for (unsigned i = 0; i < n; i++)
		raw_close(&r[i]);
	devq_disconnect(q);
	return 0;
}

/* 6: sessions that park 8 fds each on one byte of a header, up to the
 * per-user budget and past it, kept up as devqd closes them.  Before the
 * fix one uid could take every fd of the daemon. */
static int attack_fds(const struct daemon_proc *d, int started)
{
	enum { N = 128 };
	int socks[N], memfd = memfd_create("park", MFD_CLOEXEC);
	if (memfd < 0)
		return 61;
	int fds[4] = { memfd, memfd, memfd, memfd };
	for (int i = 0; i < N; i++)
		socks[i] = -1;
	uint64_t t0 = harness_now_ns();
	bool said = false;
	unsigned refused = 0;
	while (!attack_over(t0)) {
		for (int i = 0; i < N; i++) {
			if (socks[i] >= 0) {
				struct pollfd p = { .fd = socks[i], .events = POLLIN };
				if (poll(&p, 1, 0) == 0)
					continue;
				close(socks[i]); /* refused, or its fds timed out */
				socks[i] = -1;
				refused++;
			}
			struct raw r;
			raw_open(&r, d);
			devq_rx_fini(&r.rx);
			socks[i] = r.fd;
			static const uint8_t hdr[1] = { 0 };
			struct iovec iov = { (void *)hdr, 1 };
			union {
				struct cmsghdr align;
				char buf[CMSG_SPACE(sizeof(fds))];
			} ctl;
			memset(&ctl, 0, sizeof(ctl));
			struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
					     .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
			struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
			cm->cmsg_level = SOL_SOCKET;
			cm->cmsg_type = SCM_RIGHTS;
			cm->cmsg_len = CMSG_LEN(sizeof(fds));
			memcpy(CMSG_DATA(cm), fds, sizeof(fds));
			for (int k = 0; k < 2; k++) /* 8 fds */
				if (sendmsg(r.fd, &mh, MSG_NOSIGNAL | (k ? 0 : MSG_MORE)) < 0 && k == 0)
					break;
		}
		if (refused && !said) {
			put_byte(started, 'A');
			said = true;
		}
		sleep_ms(20);
	}
	for (int i = 0; i < N; i++)
		if (socks[i] >= 0)
			close(socks[i]);
	close(memfd);
	return said ? 0 : 62; /* the budget must have refused some */
}

/* 7: status and trace requests by the thousand; none may show a session,
 * pid or per-uid counter of another uid, and tracing everyone is refused. */
static int attack_snoop(const struct daemon_proc *d, int started)
{
	devq *q;
	if (devq_connect(d->sock, "snoop", &q) != 0)
		return 71;
	struct raw r;
	raw_open(&r, d);
	raw_hello(&r);
	uint64_t t0 = harness_now_ns();
	for (unsigned round = 0; !attack_over(t0); round++) {
		/* A thousand of each per round, written 100 at a time with the
		 * replies read in between: a client that writes them all and
		 * reads nothing meanwhile is one that does not read, which
		 * devqd disconnects once 16 MiB of replies wait
		 * (quota-outbound-kb; attack 5 is that one). */
		for (int k = 0; k < 10; k++) {
			struct rawbuf rb = { 0 };
			for (int i = 0; i < 100; i++) {
				rawbuf_status(&rb);
				rawbuf_trace(&rb, false);
			}
			rawbuf_send(&r, &rb);
			rawbuf_free(&rb);
			if (!drain(r.fd))
				return 79;
		}
		struct devq_status *st;
		if (devq_get_status(q, &st) != 0)
			return 72;
		for (size_t i = 0; i < st->nsessions; i++)
			if (st->sessions[i].uid != ATTACKER)
				return 73;
		for (size_t i = 0; i < st->nusers; i++)
			if (st->users[i].uid != ATTACKER)
				return 74;
		devq_status_free(st);
		struct devq_trace *tr;
		struct devq_trace_query tq = { 0 };
		if (devq_trace_get(q, &tq, &tr) != 0)
			return 75;
		for (size_t i = 0; i < tr->nsessions; i++)
			if (tr->sessions[i].uid != ATTACKER)
				return 76;
		for (size_t i = 0; i < tr->nops; i++)
			if (tr->ops[i].session != devq_get_info(q)->session)
				return 77;
		devq_trace_free(tr);
		tq.all = true;
		if (devq_trace_get(q, &tq, &tr) != -EACCES)
			return 78;
		if (!drain(r.fd))
			return 79;
		if (round == 0)
			put_byte(started, 'A');
	}
	raw_close(&r);
	devq_disconnect(q);
	return 0;
}

/* 8: 2 GiB buffers created and released, 1 GiB memfds imported and
 * released.  Before the fix each prefault and unmap ran on the loop. */
static int attack_big(const struct daemon_proc *d, int started)
{
	devq *q;
	if (devq_connect(d->sock, "big", &q) != 0)
		return 81;
	uint64_t t0 = harness_now_ns();
	for (unsigned i = 0; !attack_over(t0); i++) {
		struct devq_buffer *b;
		if (i == 0)
			put_byte(started, 'A');
		if (devq_buffer_create(q, 2ull << 30, DEVQ_BUFFER_SHARED, &b) != 0 ||
		    devq_buffer_release(q, b) != 0 || devq_buffer_wait_released(q, b, 30000) != 0)
			return 82;
		int fd = sealed_memfd(1u << 30, 0);
		if (devq_buffer_import(q, fd, 1u << 30, 0, &b) != 0 ||
		    devq_buffer_release(q, b) != 0 || devq_buffer_wait_released(q, b, 30000) != 0)
			return 83;
		close(fd);
	}
	devq_disconnect(q);
	return 0;
}

/* ---- the run ---------------------------------------------------------- */

static void fill_ring(const struct daemon_proc *d)
{
	devq *q = conn(d->sock, "root-ring");
	ck_assert_int_eq(devq_queue_open(q, 0), 0);
	struct devq_buffer *b = mkbuf(q, 4096);
	static struct devq_op ops[1024];
	static uint64_t pts[1024];
	for (int i = 0; i < 1024; i++)
		ops[i] = (struct devq_op){ .queue = 0, .kind = DEVQ_OP_FILL, .dst = b, .size = 64 };
	for (int k = 0; k < 16; k++)
		ck_assert_int_eq(devq_submit(q, ops, 1024, pts), 0);
	struct devq_completion c;
	ck_assert_int_eq(devq_wait(q, 0, pts[1023], 20000, &c), 0);
	devq_disconnect(q);
}

static bool back_to(const struct proc_usage *base, const struct proc_usage *now, long huge0,
		    long huge1)
{
	return now->fds == base->fds && now->rss_kb - base->rss_kb <= TOL_RSS_KB &&
	       now->maps_kb - base->maps_kb <= TOL_MAPS_KB &&
	       now->shmem_kb - base->shmem_kb <= TOL_SHMEM_KB &&
	       now->nmaps - base->nmaps <= TOL_NMAPS && huge1 == huge0;
}

/* One run of attack a.  Everything but the bystander's latency is asserted
 * here; the return says whether the latency bound held (true where it is
 * not enforced, or the attack was skipped). */
static bool under_attack(const struct attack *a)
{
	const char *only = getenv("DEVQ_ATTACK"); /* e.g. DEVQ_ATTACK=5-unread: that one alone */
	if (only && *only && strcmp(only, a->name))
		return true;
	if (geteuid() != 0) {
		fprintf(stderr, "SKIP: %s needs root to run clients as uids %d and %d\n", a->name,
			ATTACKER, BYSTANDER);
		return true;
	}
	if (a->hugepages && hugepages_free() < 2) {
		fprintf(stderr, "SKIP: %s needs huge pages (vm.nr_hugepages is 0 or all in use)\n",
			a->name);
		return true;
	}
	const char *args[16] = { "--allow-users", "65534,65533" };
	size_t na = 2;
	for (const char *const *p = a->args; p && *p && na < 15; p++)
		args[na++] = *p;
	args[na] = NULL;
	struct rlimit old, low;
	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
	if (a->low_nofile) {
		low = old;
		low.rlim_cur = 256;
		ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
	}
	struct daemon_proc d;
	harness_start(&d, args);
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
	ck_assert_int_eq(chmod(d.dir, 0755), 0);
	ck_assert_int_eq(chmod(d.sock, 0666), 0);
	if (a->fill_ring)
		fill_ring(&d);

	int ctl[2], res[2], started[2];
	ck_assert_int_eq(pipe(ctl), 0);
	ck_assert_int_eq(pipe(res), 0);
	pid_t by = fork();
	ck_assert_int_ge(by, 0);
	if (by == 0)
		bystander(d.sock, ctl[0], res[1]);
	if (get_byte(res[0], harness_slow() ? 600000 : 60000) != 'R') {
		int bst = 0;
		pid_t w = waitpid(by, &bst, WNOHANG);
		ck_abort_msg("the bystander did not start (%s, status %#x)",
			     w == by ? "exited" : "still running", bst);
	}
	sleep_ms(300);
	struct proc_usage base;
	proc_usage(d.pid, &base);
	long huge0 = hugepages_free();

	ck_assert_int_eq(pipe(started), 0); /* the bystander must not hold it open */
	pid_t at = fork();
	ck_assert_int_ge(at, 0);
	if (at == 0) {
		become(ATTACKER);
		_exit(a->run(&d, started[1]));
	}
	close(started[1]);
	bool began = get_byte(started[0], 60000) == 'A';
	put_byte(ctl[1], 'G');
	int ast = 0;
	ck_assert_int_eq(waitpid(at, &ast, 0), at);
	put_byte(ctl[1], 'S');
	struct served sv;
	ck_assert_int_eq(read(res[0], &sv, sizeof(sv)), sizeof(sv));

	/* The attacker is gone: what the daemon holds settles back. */
	struct proc_usage now;
	long huge1 = -1;
	uint64_t t0 = harness_now_ns();
	do {
		sleep_ms(50);
		proc_usage(d.pid, &now);
		huge1 = hugepages_free();
	} while ((!back_to(&base, &now, huge0, huge1) || harness_now_ns() - t0 < SETTLE_MIN_NS) &&
		 harness_now_ns() - t0 < 10000000000ull);
	double settle_ms = (harness_now_ns() - t0) / 1e6;
	fprintf(stderr,
		"attack %s: bystander uid %d: %u ops, worst %.1f ms; %u fresh connections, "
		"worst %.1f ms (bound %u ms)%s\n"
		"  devqd before -> after (settled in %.0f ms): fds %d -> %d, RSS %ld -> %ld KiB "
		"(shmem %ld -> %ld), mapped %ld -> %ld KiB in %ld -> %ld mappings, threads %ld -> "
		"%ld, free huge pages %ld -> %ld\n",
		a->name, BYSTANDER, sv.ops, sv.worst_op_ns / 1e6, sv.conns, sv.worst_conn_ns / 1e6,
		a->bound_ms, harness_slow() ? " (not enforced: sanitizers)" : "", settle_ms,
		base.fds, now.fds, base.rss_kb, now.rss_kb, base.shmem_kb, now.shmem_kb, base.maps_kb,
		now.maps_kb, base.nmaps,
		now.nmaps, base.threads, now.threads, huge0, huge1);
	ck_assert_msg(began, "the attack never took effect (attacker status %#x)", ast);
	ck_assert_msg(WIFEXITED(ast) && WEXITSTATUS(ast) == 0, "attacker: status %#x", ast);
	ck_assert_msg(sv.err == 0, "the bystander was not served correctly (step %d)", sv.err);
	ck_assert_uint_gt(sv.ops, 0);
	bool in_bound = harness_slow() || (sv.worst_op_ns <= a->bound_ms * 1000000ull &&
					   sv.worst_conn_ns <= a->bound_ms * 1000000ull);
	ck_assert_msg(now.fds == base.fds, "devqd holds %d fds, %d before", now.fds, base.fds);
	ck_assert_msg(huge1 == huge0, "free huge pages %ld, %ld before", huge1, huge0);
	if (harness_slow()) { /* ASan's quarantine keeps what was freed: not enforced */
		fprintf(stderr, "  (memory not enforced: sanitizers)\n");
		goto done;
	}
	ck_assert_msg(now.rss_kb - base.rss_kb <= TOL_RSS_KB, "RSS %ld KiB, %ld before",
		      now.rss_kb, base.rss_kb);
	ck_assert_msg(now.maps_kb - base.maps_kb <= TOL_MAPS_KB, "mapped %ld KiB, %ld before",
		      now.maps_kb, base.maps_kb);
	ck_assert_msg(now.nmaps - base.nmaps <= TOL_NMAPS, "%ld mappings, %ld before", now.nmaps,
		      base.nmaps);
	ck_assert_msg(now.shmem_kb - base.shmem_kb <= TOL_SHMEM_KB,
		      "client memory mapped: %ld KiB, %ld before", now.shmem_kb, base.shmem_kb);
done:
	put_byte(ctl[1], 'X');
	int bst;
	ck_assert_int_eq(waitpid(by, &bst, 0), by);
	ck_assert_msg(WIFEXITED(bst) && WEXITSTATUS(bst) == 0, "bystander: status %#x", bst);
	for (int i = 0; i < 2; i++) {
		close(ctl[i]);
		close(res[i]);
	}
	close(started[0]);
	ck_assert_int_eq(harness_stop(&d), 0); /* alive, and exits cleanly */
	return in_bound;
}

static const char *const big_args[] = { "--max-buffer-mb", "4096", NULL };

static const struct attack attacks[] = {
	{ "1-hugetlb", NULL, 100, true, false, false, attack_hugetlb },
	{ "2-leak", NULL, 100, false, false, false, attack_leak },
	{ "3-reset", NULL, 100, false, false, false, attack_reset },
	{ "4-ranges", NULL, 400, false, false, false, attack_ranges },
	{ "5-unread", NULL, 500, false, false, false, attack_unread },
	{ "6-fds", NULL, 100, false, true, false, attack_fds },
	{ "7-snoop", NULL, 100, false, false, true, attack_snoop },
	{ "8-big", big_args, 200, false, false, false, attack_big },
};

/* A bound missed once is tried once more, and fails the test only if the
 * second run misses it too: one op's latency on a shared VM can meet a
 * scheduling hiccup of the host (a CI machine's first minutes, another
 * guest) that says nothing about devqd, while every defect these attacks
 * found stalled the bystander on every run, for seconds.  Correctness and
 * the return to baseline are asserted on every run. */
START_TEST(served_under_attack)
{
	const struct attack *a = &attacks[_i];
	if (under_attack(a))
		return;
	fprintf(stderr, "attack %s: the bound of %u ms was missed; once more\n", a->name,
		a->bound_ms);
	ck_assert_msg(under_attack(a), "%s: the bystander (uid %d) waited past the bound of %u ms "
		      "in two runs (worst times above)", a->name, BYSTANDER, a->bound_ms);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("attack");
	TCase *t = tcase_create("attack");
	tcase_set_timeout(t, harness_slow() ? 600 : 120);
	tcase_add_loop_test(t, served_under_attack, 0, sizeof(attacks) / sizeof(attacks[0]));
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	return harness_main(suite());
}
