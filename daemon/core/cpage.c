/* SPDX-License-Identifier: Apache-2.0 */
/* See cpage.h.  The wake-up rule is chosen by measurement (bench/RESULTS.md,
 * "Wake-up strategy"): by default a FUTEX_WAKE is spent only when the
 * client's hint page says a thread is about to sleep;
 * DEVQD_CPAGE_WAKE=always makes every publication wake, which is the
 * alternative the benchmarks compare against. */
#include "core/cpage.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/log.h"
#include "device/backend.h" /* DEVQ_BOP_MSG */

_Static_assert(DEVQ_CREC_MSG >= DEVQ_BOP_MSG, "a ring entry holds any failure message whole");

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif
#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008U
#endif

/* Every cleanup syscall is checked: a failed close is a bug to see. */
static void close_or_log(int fd, const char *what)
{
	if (fd >= 0 && close(fd) < 0)
		log_err("%s: close: %s", what, strerror(errno));
}

static int make_memfd(const char *name, size_t len)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_NOEXEC_SEAL);
	if (fd < 0 && errno == EINVAL) /* kernels before 6.3 */
		fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)len) < 0) {
		int e = errno;
		close_or_log(fd, name);
		return -e;
	}
	return fd;
}

static size_t round_page(size_t n)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	return (n + pg - 1) / pg * pg;
}

void devq_cpage_free(struct devq_cpage *cp)
{
	if (!cp)
		return;
	if (cp->pub && munmap(cp->pub, cp->pub_len) < 0)
		log_err("completion page: munmap: %s", strerror(errno));
	if (cp->hint && munmap(cp->hint, cp->hint_len) < 0)
		log_err("completion page hint: munmap: %s", strerror(errno));
	close_or_log(cp->efd, "completion page eventfd");
	close_or_log(cp->bell, "submit ring doorbell");
	free(cp);
}

/* Entries of a ring from the environment variable name: a power of two up
 * to max (others round down), def when unset; 0: none. */
static unsigned long ring_entries(const char *name, unsigned long def, unsigned long max)
{
	const char *e = getenv(name);
	unsigned long n = e && *e ? strtoul(e, NULL, 10) : def;
	if (n > max)
		n = max;
	while (n & (n - 1))
		n &= n - 1;
	return n;
}

int devq_cpage_create(unsigned nslots, bool submit_ring, struct devq_cpage **out,
		      int fds_out[4])
{
	int fd_pub = -1, fd_hint = -1, efd_client = -1, bell_client = -1, r;
	struct devq_cpage *cp = calloc(1, sizeof(*cp));
	if (!cp)
		return -ENOMEM;
	cp->efd = cp->bell = -1;
	const char *w = getenv("DEVQD_CPAGE_WAKE");
	cp->always_wake = w && !strcmp(w, "always");
	/* DEVQD_CRING_ENTRIES: entries of the record ring, a power of two
	 * up to 65536 (others round down); 0: no ring (the benchmarks'
	 * comparison: every record on the socket).  DEVQD_SQ_ENTRIES: the
	 * same for the submit ring, up to DEVQ_SQ_MAX; 0: none (every
	 * Submit on the socket). */
	unsigned long ring_n = ring_entries("DEVQD_CRING_ENTRIES", DEVQ_CRING_DEFAULT, 65536);
	unsigned long sq_n = submit_ring ? ring_entries("DEVQD_SQ_ENTRIES", DEVQ_SQ_DEFAULT,
							DEVQ_SQ_MAX)
					 : 0;
	size_t slots_end = round_page(sizeof(struct devq_cpage_hdr) +
				      (size_t)nslots * sizeof(struct devq_cpage_slot));
	cp->pub_len = slots_end + ring_n * sizeof(struct devq_crec);
	cp->hint_len = round_page(sq_n ? DEVQ_SQ_OFF + sq_n * sizeof(struct devq_sqe)
				       : sizeof(struct devq_cpage_hints));

	if ((r = fd_pub = make_memfd("devq-cpage", cp->pub_len)) < 0 ||
	    (r = fd_hint = make_memfd("devq-cpage-hints", cp->hint_len)) < 0)
		goto fail;
	cp->pub = mmap(NULL, cp->pub_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd_pub, 0);
	if (cp->pub == MAP_FAILED) {
		cp->pub = NULL;
		r = -errno;
		goto fail;
	}
	cp->hint = mmap(NULL, cp->hint_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd_hint, 0);
	if (cp->hint == MAP_FAILED) {
		cp->hint = NULL;
		r = -errno;
		goto fail;
	}
	/* Our mapping stays writable; from here on nobody can make a new
	 * writable mapping or write(2) it: the client can only read. */
	if (fcntl(fd_pub, F_ADD_SEALS,
		  F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) < 0 ||
	    fcntl(fd_hint, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		r = -errno;
		goto fail;
	}
	cp->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (cp->efd < 0) {
		r = -errno;
		goto fail;
	}
	efd_client = fcntl(cp->efd, F_DUPFD_CLOEXEC, 0);
	if (efd_client < 0) {
		r = -errno;
		goto fail;
	}
	if (sq_n) {
		/* A pipe, not an eventfd: its two ends are two open files, so
		 * the client cannot clear O_NONBLOCK on the end devqd reads
		 * (an eventfd's copy shares its flags, and a client that
		 * cleared them and read the count back first would block the
		 * loop in its read). */
		int p[2];
		if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0) {
			r = -errno;
			goto fail;
		}
		cp->bell = p[0];
		bell_client = p[1];
		cp->sq = devq_sq_hdr(cp->hint);
		cp->sqe = devq_sq_entries(cp->hint);
		cp->sq_n = (uint32_t)sq_n;
	}
	cp->pub->magic = DEVQ_CPAGE_MAGIC;
	cp->pub->layout = DEVQ_CPAGE_LAYOUT;
	cp->pub->nslots = nslots;
	if (ring_n) {
		cp->ring = (struct devq_crec *)((char *)cp->pub + slots_end);
		cp->ring_n = (uint32_t)ring_n;
		cp->pub->ring_off = (uint32_t)slots_end;
		cp->pub->ring_size = (uint32_t)ring_n;
	}
	fds_out[0] = fd_pub;
	fds_out[1] = fd_hint;
	fds_out[2] = efd_client;
	fds_out[3] = bell_client;
	*out = cp;
	return 0;
fail:
	close_or_log(fd_pub, "completion page");
	close_or_log(fd_hint, "completion page hint");
	close_or_log(efd_client, "completion page client eventfd");
	close_or_log(bell_client, "submit ring client doorbell");
	devq_cpage_free(cp);
	return r;
}

struct devq_cpage_slot *devq_cpage_slot_open(struct devq_cpage *cp, uint32_t queue)
{
	if (!cp || cp->pub->used >= cp->pub->nslots)
		return NULL;
	struct devq_cpage_slot *s = &devq_cpage_slots(cp->pub)[cp->pub->used];
	atomic_store_explicit(&s->queue, queue, memory_order_relaxed);
	atomic_store_explicit(&s->completed, 0, memory_order_relaxed);
	atomic_store_explicit(&s->failed, 0, memory_order_relaxed);
	/* The client finds the slot by scanning for its queue id: the id must
	 * be visible before the slot reads as open. */
	atomic_store_explicit(&s->open, 1, memory_order_release);
	__atomic_store_n(&cp->pub->used, cp->pub->used + 1, __ATOMIC_RELEASE);
	return s;
}

/* A thread sleeps and this publication is what it waits for.  The hint is
 * the client's own: a wrong one only delays or hurries that client. */
static bool wants_wake(struct devq_cpage *cp, struct devq_cpage_slot *slot, uint64_t point)
{
	if (!atomic_load_explicit(&cp->hint->waiters, memory_order_seq_cst))
		return false;
	/* A sleeper whose ring is half full is woken to take its records
	 * before the ring fills (then they would travel the socket): once per
	 * value of its head. */
	if (devq_cpage_ring_armed(cp)) {
		uint64_t head = atomic_load_explicit(&cp->hint->ring_head, memory_order_relaxed);
		if (cp->ring_tail - head >= cp->ring_n / 2 && cp->ring_tail - head <= cp->ring_n) {
			uint64_t key = head | 1ull << 63;
			if (atomic_load_explicit(&cp->woke, memory_order_relaxed) != key) {
				atomic_store_explicit(&cp->woke, key, memory_order_relaxed);
				return true;
			}
		}
	}
	uint32_t ws = atomic_load_explicit(&cp->hint->wait_slot, memory_order_relaxed);
	if (!ws)
		return true;
	if (!slot)
		return false;
	uint64_t wp = atomic_load_explicit(&cp->hint->wait_point, memory_order_relaxed);
	if (ws - 1 != (uint32_t)(slot - devq_cpage_slots(cp->pub)) || point < wp)
		return false;
	/* Once per (slot, point): the woken thread finds the point complete
	 * (points only rise) and does not sleep for it again; another wait
	 * announces another point.  Two completers racing here both wake,
	 * which is harmless. */
	uint64_t key = ((uint64_t)ws << 48) ^ wp;
	if (atomic_load_explicit(&cp->woke, memory_order_relaxed) == key)
		return false;
	atomic_store_explicit(&cp->woke, key, memory_order_relaxed);
	return true;
}

void devq_cpage_publish(struct devq_cpage *cp, struct devq_cpage_slot *slot, uint64_t point,
			bool failed)
{
	if (slot && failed && point > atomic_load_explicit(&slot->failed, memory_order_relaxed))
		atomic_store_explicit(&slot->failed, point, memory_order_release);
	/* A queue completes in order, so this only ever raises the value;
	 * the check keeps an out-of-band completion (enqueue failure on the
	 * loop thread) from lowering it. */
	if (slot && point > atomic_load_explicit(&slot->completed, memory_order_relaxed))
		atomic_store_explicit(&slot->completed, point, memory_order_seq_cst);
	atomic_fetch_add_explicit(&cp->pub->seq, 1, memory_order_seq_cst);
	if (cp->always_wake || wants_wake(cp, slot, point))
		syscall(SYS_futex, &cp->pub->seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
	if (atomic_load_explicit(&cp->hint->evfd_armed, memory_order_relaxed)) {
		uint64_t one = 1;
		/* EAGAIN only when the counter is saturated: still readable. */
		if (write(cp->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			atomic_store_explicit(&cp->hint->evfd_armed, 0, memory_order_relaxed);
	}
}

bool devq_cpage_ring_put(struct devq_cpage *cp, uint32_t queue, uint64_t point, int code,
			 const char *msg, const uint64_t t[7])
{
	if (!devq_cpage_ring_armed(cp))
		return false;
	struct devq_cpage_hints *h = cp->hint;
	if (cp->overflow) {
		/* Back to the ring only once the client has read every record
		 * sent on the socket: everything in the ring is then newer than
		 * what it read there, and older than what comes next. */
		if (atomic_load_explicit(&h->sock_seen, memory_order_acquire) != cp->sock_sent)
			goto socket;
		cp->overflow = false;
		atomic_store_explicit(&cp->pub->ring_overflow, 0, memory_order_relaxed);
	}
	/* A head past the tail (a lying client) reads as full. */
	if (cp->ring_tail - atomic_load_explicit(&h->ring_head, memory_order_acquire) >=
	    cp->ring_n) {
		cp->overflow = true;
		atomic_store_explicit(&cp->pub->ring_overflow, 1, memory_order_relaxed);
		goto socket;
	}
	struct devq_crec *e = &cp->ring[cp->ring_tail & (cp->ring_n - 1)];
	e->point = point;
	e->queue = queue;
	e->code = code;
	memcpy(e->t, t, sizeof(e->t));
	if (code) {
		size_t n = strnlen(msg, DEVQ_CREC_MSG - 1);
		memcpy(e->msg, msg, n);
		e->msg[n] = '\0';
	} else {
		e->msg[0] = '\0';
	}
	atomic_store_explicit(&cp->pub->ring_tail, ++cp->ring_tail, memory_order_release);
	return true;
socket:
	cp->sock_sent++;
	return false;
}

bool devq_cpage_client_reading(const struct devq_cpage *cp)
{
	return atomic_load_explicit(&cp->hint->reading, memory_order_seq_cst) != 0;
}

/* Something the page does not carry happened: seq moves, as for a
 * publication (seq_cst, before the load of waiters), and a sleeper is
 * woken when anyone is (all) or when it waits for anything (wait_slot 0):
 * a thread waiting for a slot's point learns of that point from the slot. */
static void wake_for_socket(struct devq_cpage *cp, bool all)
{
	atomic_fetch_add_explicit(&cp->pub->seq, 1, memory_order_seq_cst);
	if (!atomic_load_explicit(&cp->hint->waiters, memory_order_seq_cst))
		return;
	if (all || cp->always_wake ||
	    !atomic_load_explicit(&cp->hint->wait_slot, memory_order_relaxed))
		syscall(SYS_futex, &cp->pub->seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void devq_cpage_note_tx(struct devq_cpage *cp, uint64_t bytes)
{
	if (!cp || !bytes)
		return;
	atomic_fetch_add_explicit(&cp->pub->tx_bytes, bytes, memory_order_release);
	/* After the write: a client that polled the socket before it and
	 * then went to sleep on the page finds seq moved, or is woken. */
	wake_for_socket(cp, false);
}

void devq_cpage_note_closed(struct devq_cpage *cp)
{
	if (cp)
		wake_for_socket(cp, true);
}

int devq_cpage_sq_answer(struct devq_cpage *cp)
{
	if (!cp || !cp->sq)
		return 0;
	/* A client writes a byte per ring; a hostile one may write more: at
	 * most this many per call (the poll is level-triggered: the rest
	 * wakes the loop again).  Nonblocking, on devqd's own open file:
	 * EAGAIN when a wake-up found it drained already. */
	char buf[256];
	ssize_t n = read(cp->bell, buf, sizeof(buf));
	if (n < 0 && errno != EAGAIN)
		log_err("submit ring doorbell: read: %s", strerror(errno));
	atomic_store_explicit(&cp->sq->rung, 0, memory_order_seq_cst);
	/* End of file: the client closed its end, and the read end would
	 * read as ready for ever. */
	return n == 0 ? -EPIPE : 0;
}

int devq_cpage_sq_take(struct devq_cpage *cp, uint64_t taken, uint8_t buf[DEVQ_SQE_FRAME],
		       uint32_t *len, char *err, size_t errlen)
{
	if (!cp || !cp->sq)
		return 0;
	uint64_t tail = atomic_load_explicit(&cp->sq->tail, memory_order_seq_cst);
	if (tail == cp->sq_head)
		return 0;
	if (tail - cp->sq_head > cp->sq_n) {
		snprintf(err, errlen,
			 "submit ring: tail %llu is more than its %u entries past the %llu taken",
			 (unsigned long long)tail, cp->sq_n, (unsigned long long)cp->sq_head);
		return -EPROTO;
	}
	/* Each field read once into our memory: the client may write on
	 * while we look, and nothing checked may change after its check. */
	const volatile struct devq_sqe *e = &cp->sqe[cp->sq_head & (cp->sq_n - 1)];
	uint64_t off = e->off;
	if (off > taken)
		return 0; /* socket frames written before it are still to come */
	if (off < cp->sq_off) {
		snprintf(err, errlen,
			 "submit ring: entry %llu says socket offset %llu, before the previous "
			 "entry's %llu",
			 (unsigned long long)cp->sq_head, (unsigned long long)off,
			 (unsigned long long)cp->sq_off);
		return -EPROTO;
	}
	uint32_t n = e->len;
	if (n > DEVQ_SQE_FRAME) {
		snprintf(err, errlen, "submit ring: entry %llu of %u bytes, above the %u an entry holds",
			 (unsigned long long)cp->sq_head, n, DEVQ_SQE_FRAME);
		return -EPROTO;
	}
	memcpy(buf, (const void *)e->frame, n);
	cp->sq_off = off;
	cp->sq_head++;
	atomic_store_explicit(&cp->pub->sq_head, (uint32_t)cp->sq_head, memory_order_release);
	*len = n;
	return 1;
}
