/* SPDX-License-Identifier: Apache-2.0 */
/* devqd's loop: the listening socket, one uv_poll per connection (libuv's
 * own pipes cannot carry memfds, so recvmsg/sendmsg are ours), the wake-up
 * from backend threads, and shutdown. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <fcntl.h>
#include <limits.h>
#include <time.h>
#include <malloc.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "server/server.h"

#include "base/log.h"
#include "base/slice.h"
#include "base/pool.h"
#include "codec/msg_dec.h"
#include "core/buffer.h"
#include "core/cpage.h"
#include "core/job.h"
#include "core/outbox.h"
#include "core/quota.h"
#include "core/sched.h"
#include "core/session.h"
#include "core/trace.h"
#include "requests/requests.h"
#include "server/lost.h"
#include "server/notify.h"
#include "server/stats.h"

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59 /* Linux 4.13; older libc headers lack the name */
#endif

#define READS_PER_WAKE 16   /* bounded work per client per wake-up: fairness */
#define ACCEPTS_PER_WAKE 32 /* and connections accepted per wake-up */

/* A client connection: the transport half of a session (core/session.h). */
struct conn {
	struct devq_session *s;
	struct devq_daemon *d;
	int fd;
	int pidfd; /* SO_PEERPIDFD, or -1 */
	uv_poll_t poll;
	int poll_events;
	/* The submit ring's doorbell (core/cpage.h), polled from the Hello
	 * that made it, paused whenever the socket's reading is. */
	uv_poll_t bell;
	bool bell_init; /* the handle exists (closed with the connection) */
	bool bell_on;   /* and is started */
	bool bell_gone; /* the client closed its end: never polled again */
	int handles;    /* open uv handles: the conn is freed when the last closes */
	struct devq_rx rx;
	bool throttled; /* reading paused: over the in-flight quota (held.c) */
	bool tx_full;   /* reading paused: outbox at its quota until it drains */
	bool ready_wait; /* reading paused: a BufferReply waits for a populate */
	bool yielded;    /* reading paused: its tenant's loop budget is spent (frames_idle) */
	bool trace_wait; /* reading paused: its TraceReply is with the builder thread */
	uint64_t fds_since; /* received fds wait for their frame since, 0: none */
	/* The loop share of a session that has no tenant record (refused at
	 * admission: it handles no frame, but nothing relies on that). */
	struct devq_loop_share own_share;
};

#define CONN(s) ((struct conn *)(s)->conn)

/* Every cleanup syscall is checked: a failed close is a bug to see. */
static void close_or_log(int fd, const char *what)
{
	if (fd >= 0 && close(fd) < 0)
		log_err("%s: close: %s", what, strerror(errno));
}

static void session_close(struct devq_session *s);
static void session_flush(struct devq_session *s);
static void session_frames(struct devq_session *s, uint64_t t);
static void conn_cb(uv_poll_t *h, int status, int events);

static void flush_dirty(struct devq_daemon *d)
{
	while (d->e.dirty) {
		struct devq_session *s = d->e.dirty;
		d->e.dirty = s->dirty_next;
		s->dirty = false;
		session_flush(s);
		devq_session_maybe_free(s);
	}
}

/* After a session closes, what the daemon and the allocator kept of its
 * requests (op records recycled after a burst, the frame arena grown to a
 * large frame, replies of megabytes) goes back to the system within a
 * second: a client that came and went leaves the
 * daemon's resident set as it found it.  At most once a second. */
static struct devq_arena frame_arena; /* handle_frame's */

static void trim_cb(uv_timer_t *t)
{
	(void)t;
	devq_job_trim();                   /* recycled op records */
	devq_pool_arena_fini(&frame_arena); /* grown to the largest frame */
	malloc_trim(0);
}

static void on_conn_closed(uv_handle_t *h)
{
	struct conn *c = h->data;
	if (--c->handles)
		return; /* the other handle's close comes */
	struct devq_session *s = c->s;
	if (!c->d->stopping && !uv_is_active((uv_handle_t *)&c->d->trim_timer))
		uv_timer_start(&c->d->trim_timer, trim_cb, 1000, 0);
	if (close(c->fd) < 0)
		log_err("session %llu: close: %s", (unsigned long long)s->id, strerror(errno));
	devq_cpage_note_closed(s->cpage); /* after the close: the client reads the end */
	if (c->pidfd >= 0 && close(c->pidfd) < 0)
		log_err("session %llu: close pidfd: %s", (unsigned long long)s->id, strerror(errno));
	devq_rx_fini(&c->rx);
	free(c);
	s->conn = NULL;
	devq_session_unhold(s);
}

static void session_close(struct devq_session *s)
{
	if (!s->connected)
		return;
	struct conn *c = CONN(s);
	devq_slog(DEVQ_LOG_INFO, s, -1, -1, -1, "disconnected (%llu ops in flight, %u buffers)",
		  (unsigned long long)s->ops_in_flight, s->nbufs);
	if (c->throttled) {
		c->throttled = false;
		c->d->nthrottled--;
	}
	if (c->yielded) {
		c->yielded = false;
		c->d->nyielded--;
	}
	devq_rx_fini(&c->rx); /* fds received and not claimed: closed now */
	devq_tracereq_abort(s); /* a reply being built: nobody to send it to */
	uv_poll_stop(&c->poll);
	uv_close((uv_handle_t *)&c->poll, on_conn_closed);
	if (c->bell_init) {
		uv_poll_stop(&c->bell);
		c->bell_on = false;
		uv_close((uv_handle_t *)&c->bell, on_conn_closed);
	}
	devq_session_disconnect(s);
}

static void bell_cb(uv_poll_t *h, int status, int events);

/* The doorbell follows the socket's reading: a session whose reading is
 * paused cannot make the loop wake through its doorbell either. */
static void bell_set(struct conn *c, bool on)
{
	on = on && !c->bell_gone;
	if (!c->bell_init || on == c->bell_on)
		return;
	c->bell_on = on;
	if (on)
		uv_poll_start(&c->bell, UV_READABLE, bell_cb);
	else
		uv_poll_stop(&c->bell);
}

static void set_events(struct devq_session *s, int events)
{
	struct conn *c = CONN(s);
	/* Stopping: no new requests, only the last replies go out.
	 * Throttled: backpressure until completions free room (quota.h). */
	if (c->d->stopping || c->throttled || c->tx_full || c->ready_wait || c->yielded ||
	    c->trace_wait)
		events &= ~UV_READABLE;
	if (s->connected)
		bell_set(c, events & UV_READABLE);
	if (!s->connected || events == c->poll_events)
		return;
	c->poll_events = events;
	if (events)
		uv_poll_start(&c->poll, events, conn_cb);
	else
		uv_poll_stop(&c->poll);
}

static void session_flush(struct devq_session *s)
{
	if (!s->connected)
		return;
	if (CONN(s)->trace_wait && !devq_tracereq_pending(s)) {
		/* The builder handed the trace back: its reply is finished and
		 * the frames after it answered now, before the write below,
		 * whatever it finds (a client blocked writing more requests
		 * reads nothing until the daemon reads). */
		CONN(s)->trace_wait = false;
		session_frames(s, devq_now_ns());
		if (!s->connected)
			return;
	}
	devq_outbox_push_completions(s);
	size_t queued = s->tx.bytes;
	int r = devq_tx_flush(&s->tx, CONN(s)->fd);
	/* The page tells the client when there is something to read. */
	devq_cpage_note_tx(s->cpage, queued - s->tx.bytes);
	if (r == -EAGAIN && s->tx.bytes >= s->e->cfg.q_outbound) {
		/* A client that does not read its replies would make us hold
		 * them forever: its work still completes, then is freed. */
		log_warn("session %llu: %zu bytes unsent, above the quota of %llu "
			 "(quota-outbound-kb): the client does not read; disconnecting",
			 (unsigned long long)s->id, s->tx.bytes,
			 (unsigned long long)s->e->cfg.q_outbound);
		session_close(s);
		return;
	}
	if (r == -EAGAIN) {
		set_events(s, UV_READABLE | UV_WRITABLE);
		return;
	}
	if (r < 0) {
		log_info("session %llu: send failed: %s", (unsigned long long)s->id, strerror(-r));
		session_close(s);
		return;
	}
	if (s->close_after_flush) {
		session_close(s);
		return;
	}
	struct conn *c = CONN(s);
	if (c->tx_full || (c->ready_wait && !s->populating)) {
		/* Drained, or the buffer is ready: answer the frames already
		 * received (none while a BufferReady still waits), then read on. */
		c->tx_full = false;
		c->ready_wait = s->populating != 0;
		session_frames(s, devq_now_ns());
		if (!s->connected)
			return;
		if (s->tx.bytes) {
			devq_outbox_mark_dirty(s);
			return;
		}
	}
	set_events(s, UV_READABLE);
}

static void protocol_close(struct devq_session *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void protocol_close(struct devq_session *s, const char *fmt, ...)
{
	char msg[200];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	devq_outbox_error(s, DEVQ__CODE__PROTOCOL_ERROR, "frame", NULL, NULL, "%s", msg);
	s->close_after_flush = true;
}

/* Where client messages are unpacked, one frame at a time (loop thread). */
static struct devq_arena frame_arena;

/* A frame from the socket, or (ring) a submit-ring entry's message. */
static void handle_frame(struct devq_session *s, struct devq_frame *f, uint64_t t, bool ring)
{
	if (f->type != DEVQ_FRAME_CLIENT) {
		protocol_close(s, "frame type %u is not a client message", f->type);
		devq_frame_close_fds(f);
		return;
	}
	/* Decoded into the frame arena (a Submit by msg_dec.c, the rest by
	 * protobuf-c): nothing of the message outlives the dispatch (a held
	 * Submit is copied by requests/held.c). */
	if (!frame_arena.pa.alloc)
		devq_pool_arena_init(&frame_arena);
	Devq__ClientMessage *m = devq_msg_dec_arena(&frame_arena.pa, f->len, f->payload);
	if (!m) {
		devq_pool_arena_reset(&frame_arena);
		protocol_close(s, "malformed ClientMessage");
		devq_frame_close_fds(f);
		return;
	}
	struct conn *c = CONN(s);
	/* What the message means (requests/dispatch.c's table), admin calls
	 * included. */
	devq_dispatch_message(&c->d->admin, s, m, f, t, ring);
	devq_pool_arena_reset(&frame_arena);
	/* The Hello that made a submit ring: its doorbell is polled from now. */
	if (!c->bell_init && s->cpage && s->cpage->bell >= 0 && s->connected &&
	    !s->close_after_flush) {
		int e = uv_poll_init(c->d->loop, &c->bell, s->cpage->bell);
		if (e < 0) {
			/* Its entries would wait for socket frames only. */
			log_err("session %llu: submit ring doorbell: %s", (unsigned long long)s->id,
				uv_strerror(e));
			devq_outbox_error(s, DEVQ__CODE__RESOURCE_EXHAUSTED, "hello", NULL, NULL,
					   "devqd cannot poll the submit ring's doorbell: %s",
					   uv_strerror(e));
			s->close_after_flush = true;
		} else {
			c->bell.data = c;
			c->bell_init = true;
			c->handles++;
			bell_set(c, c->poll_events & UV_READABLE);
		}
	}
	devq_frame_close_fds(f); /* whatever the message did not claim */
}

/* A session with ops of a Submit held back (over its in-flight quota) is
 * not read until completions free room: backpressure, never a drop.  Other
 * requests (status, buffers) are served until a Submit is held. */
static bool throttle_if_over(struct devq_session *s)
{
	struct conn *c = CONN(s);
	if (c->throttled)
		return true;
	if (!s->quota.held)
		return false;
	c->throttled = true;
	c->d->nthrottled++;
	log_debug("session %llu: not read until ops complete: %llu in flight",
		  (unsigned long long)s->id, (unsigned long long)s->ops_in_flight);
	set_events(s, c->poll_events);
	return true;
}

/* A session whose unsent replies reached its outbound quota is not read
 * (nor its received frames answered) until they drain: what one write of
 * requests can make the daemon hold is the quota plus one reply. */
static bool tx_full(struct devq_session *s)
{
	struct conn *c = CONN(s);
	if (s->tx.bytes < s->e->cfg.q_outbound)
		return false;
	if (!c->tx_full) {
		c->tx_full = true;
		log_debug("session %llu: not read until %zu unsent bytes drain",
			  (unsigned long long)s->id, s->tx.bytes);
		set_events(s, c->poll_events);
	}
	return true;
}

/* A session whose large buffer is being prefaulted (buffer.h) is not read
 * until its BufferReady is sent: the replies keep their order, and one
 * session queues at most one populate. */
static bool ready_wait(struct devq_session *s)
{
	struct conn *c = CONN(s);
	if (!s->populating)
		return c->ready_wait;
	if (!c->ready_wait) {
		c->ready_wait = true;
		set_events(s, c->poll_events);
	}
	return true;
}

static void frames_idle_cb(uv_idle_t *h);

/* Whether devq_rx_next has anything to look at: bytes of a frame (maybe
 * not all of it yet), or fds (which it refuses without their frame). */
static bool rx_pending(const struct devq_rx *rx)
{
	return rx->len > rx->consumed || rx->fd_count;
}

/* The share of the loop s draws on: its tenant's, the Unix user for now.
 * The one place that knows where a tenant keeps it. */
static struct devq_loop_share *loop_share(struct devq_session *s)
{
	return s->tenant ? &s->tenant->loop : &CONN(s)->own_share;
}

/* Whether more than one tenant has sessions: a lone tenant has nobody to
 * share the loop with, and yielding would only cost it loop iterations
 * (measured: bench/RESULTS.md, "The loop shared by tenant").  The other
 * I/O of the loop is still served between its reads (READS_PER_WAKE). */
static bool tenants_contend(const struct devq_daemon *d)
{
	return d->e.tenants_live > 1;
}

/* Brings sh up to the current turn: each turn since the last forgives one
 * budget of what the tenant's requests took; alone, it owes nothing. */
static struct devq_loop_share *share_now(struct devq_daemon *d, struct devq_loop_share *sh)
{
	uint64_t turns = d->loop_turn - sh->turn;
	sh->turn = d->loop_turn;
	if (!tenants_contend(d) || turns >= sh->spent_ns / DEVQ_FRAMES_SLICE_NS + 1)
		sh->spent_ns = 0;
	else
		sh->spent_ns -= turns * DEVQ_FRAMES_SLICE_NS;
	return sh;
}

/* The session's tenant spent its budget of this turn: the rest of its
 * frames wait for a later turn, and the session is not read meanwhile. */
static void yield(struct devq_session *s)
{
	struct conn *c = CONN(s);
	if (c->yielded)
		return;
	c->yielded = true;
	if (!c->d->nyielded++ && !c->d->stopping) /* stopping: its handle is closed */
		uv_idle_start(&c->d->frames_idle, frames_idle_cb);
	set_events(s, c->poll_events);
}

/* Handles the complete frames already received, while the quotas and the
 * tenant's budget of this loop turn allow: however many sessions a tenant
 * opens and however many costly requests (traces of a full ring, status of
 * many sessions) they write, the tenant's requests take at most
 * DEVQ_FRAMES_SLICE_NS of a turn plus one request, and what one request
 * takes beyond that is paid for with the tenant's next turns. */
static void session_frames(struct devq_session *s, uint64_t t)
{
	struct devq_frame f;
	int r = 0;
	/* Submit-ring entries taken in this call: at most one ring's worth,
	 * then the session yields (served again next loop iteration), as a
	 * socket's frames are bounded by what its reads of one wake-up bring:
	 * a client that refills the ring as fast as it is taken cannot keep
	 * the loop here, even with no other tenant to share it with. */
	unsigned ring_taken = 0;
	struct devq_loop_share *sh = share_now(CONN(s)->d, loop_share(s));
	uint64_t t0 = devq_now_ns();
	while (s->connected && !s->close_after_flush && !CONN(s)->yielded && !throttle_if_over(s) &&
	       !tx_full(s) && !ready_wait(s) &&
	       (s->trace_job || rx_pending(&CONN(s)->rx) || devq_cpage_sq_pending(s->cpage))) {
		/* Tested before a frame, after the throttle: a session with
		 * ops held is throttled while they are in flight, and a
		 * completion resumes it.  Yielding it instead would let them
		 * all complete first, and nothing would resume it. */
		if (sh->spent_ns >= DEVQ_FRAMES_SLICE_NS && tenants_contend(CONN(s)->d)) {
			yield(s);
			break;
		}
		/* One ring's worth taken and more waiting: tested here, after
		 * the throttle, for the same reason as the budget. */
		if (ring_taken && ring_taken >= s->cpage->sq_n && devq_cpage_sq_pending(s->cpage)) {
			yield(s);
			break;
		}
		if (s->trace_job) {
			/* With the builder thread: not read until it is done
			 * (session_flush reads on). */
			if (devq_tracereq_pending(s)) {
				CONN(s)->trace_wait = true;
				set_events(s, CONN(s)->poll_events);
				break;
			}
			/* Finished here, or without a builder built in steps,
			 * each within what is left of the budget; the next
			 * frame waits for it (order). */
			uint64_t left = sh->spent_ns < DEVQ_FRAMES_SLICE_NS
						? DEVQ_FRAMES_SLICE_NS - sh->spent_ns
						: DEVQ_FRAMES_SLICE_NS; /* alone: a step of its own */
			bool done = devq_tracereq_step(s, t0 + left);
			uint64_t t1 = devq_now_ns();
			sh->spent_ns += t1 - t0;
			t0 = t1;
			if (!done)
				yield(s);
			continue;
		}
		/* A submit-ring entry goes before the socket frame that starts
		 * at or after its offset (proto/cpage_layout.h). */
		static uint8_t sq_buf[DEVQ_SQE_FRAME]; /* loop thread only */
		char err[200];
		int q = devq_cpage_sq_take(s->cpage, CONN(s)->rx.taken, sq_buf, &f.len, err,
					   sizeof(err));
		if (q < 0) {
			protocol_close(s, "%s", err);
			return;
		}
		if (q) {
			f.type = DEVQ_FRAME_CLIENT;
			f.payload = sq_buf;
			f.nfds = 0;
		} else if ((r = devq_rx_next(&CONN(s)->rx, &f)) != 1) {
			break;
		}
		/* An entry is received when taken: t is when the socket was
		 * read, and the client may have written the entry since. */
		handle_frame(s, &f, q ? devq_now_ns() : t, q);
		uint64_t t1 = devq_now_ns();
		sh->spent_ns += t1 - t0;
		t0 = t1;
		ring_taken += (unsigned)q;
	}
	if (r == -EMSGSIZE)
		protocol_close(s, "frame exceeds the maximum payload of %u bytes",
			       s->e->cfg.max_frame);
	else if (r < 0)
		protocol_close(s, "fds do not match the frames that declare them");
}

/* Once per loop iteration while sessions wait (first in the turn, before
 * the iteration's I/O): each tenant with budget left in this turn serves
 * one of its yielded sessions, in turn by session id.  Tenants take turns,
 * and inside a tenant its sessions do: six sessions of one user share one
 * budget, not six. */
static void frames_idle_cb(uv_idle_t *h)
{
	struct devq_daemon *d = h->data;
	struct devq_loop_share *tenants = NULL;
	uint64_t pass = ++d->loop_pass;
	for (struct devq_session *s = d->e.sessions; s; s = s->next) {
		struct conn *c = s->conn;
		if (!s->connected || !c || !c->yielded)
			continue;
		struct devq_loop_share *sh = loop_share(s);
		if (sh->pass != pass) {
			sh->pass = pass;
			sh->pass_next = sh->pass_first = NULL;
			sh->pass_link = tenants;
			tenants = sh;
		}
		if (s->id > sh->rr_last && (!sh->pass_next || s->id < sh->pass_next->id))
			sh->pass_next = s;
		if (!sh->pass_first || s->id < sh->pass_first->id)
			sh->pass_first = s;
	}
	for (struct devq_loop_share *sh = tenants; sh; sh = sh->pass_link) {
		if (share_now(d, sh)->spent_ns >= DEVQ_FRAMES_SLICE_NS)
			continue; /* still paying for a request that ran long */
		struct devq_session *s = sh->pass_next ? sh->pass_next : sh->pass_first;
		struct conn *c = s->conn;
		c->yielded = false;
		d->nyielded--;
		sh->rr_last = s->id;
		session_frames(s, devq_now_ns());
		if (s->connected)
			devq_outbox_mark_dirty(s); /* its flush reads on */
	}
	if (!d->nyielded || d->stopping)
		uv_idle_stop(h);
	flush_dirty(d);
}

/* A loop turn ends after the iteration's I/O: the tenants' budgets start
 * afresh with the yielded sessions (frames_idle, the next iteration's
 * first callback), so a tenant's waiting sessions come before its
 * newly readable ones. */
static void turn_check_cb(uv_check_t *h)
{
	struct devq_daemon *d = h->data;
	d->loop_turn++;
}

static void resume_throttled(struct devq_daemon *d)
{
	if (!d->nthrottled || d->stopping)
		return;
	for (struct devq_session *s = d->e.sessions; s; s = s->next) {
		if (!s->connected || !CONN(s)->throttled || !devq_quota_may_resume(s))
			continue;
		CONN(s)->throttled = false;
		d->nthrottled--;
		if (!devq_held_resume(s)) {
			throttle_if_over(s);
			continue;
		}
		session_frames(s, devq_now_ns());
		devq_outbox_mark_dirty(s); /* its flush restarts reading */
	}
}

/* The fds one uid's connections hold: sockets, pidfds, received fds not
 * yet claimed by a frame (devqd.conf(5)).  A session's completion page
 * eventfd and submit-ring doorbell are not counted: one each per session,
 * bounded by quota-user-sessions. */
static unsigned user_fds(const struct devq_daemon *d, uid_t uid)
{
	unsigned n = 0;
	for (const struct devq_session *t = d->e.sessions; t; t = t->next) {
		const struct conn *c = t->conn;
		if (t->uid != uid || !c)
			continue;
		n += 1 + (c->pidfd >= 0) + (unsigned)c->rx.fd_count;
	}
	return n;
}

static void fds_timer_cb(uv_timer_t *t)
{
	struct devq_daemon *d = t->data;
	uint64_t now = devq_now_ns();
	bool waiting = false;
	for (struct devq_session *s = d->e.sessions; s; s = s->next) {
		struct conn *c = s->conn;
		if (!s->connected || !c || !c->fds_since)
			continue;
		if (!c->rx.fd_count) {
			c->fds_since = 0;
			continue;
		}
		if (now - c->fds_since < DEVQ_FDS_WAIT_NS || s->close_after_flush) {
			waiting = true;
			continue;
		}
		log_info("session %llu: %zu received fds without their frame for 1 s: closing",
			 (unsigned long long)s->id, c->rx.fd_count);
		protocol_close(s, "%zu fds arrived without their frame's header within 1 s",
			       c->rx.fd_count);
		devq_rx_fini(&c->rx); /* the fds go now, whatever the client does */
		devq_rx_init(&c->rx, d->e.cfg.max_frame);
		c->fds_since = 0;
		devq_outbox_mark_dirty(s);
	}
	if (!waiting)
		uv_timer_stop(t);
	flush_dirty(d);
}

/* After a read: fds that wait for their frame start the clock, and one
 * uid's fds stay within its budget. */
static bool check_fds(struct devq_session *s)
{
	struct conn *c = CONN(s);
	struct devq_daemon *d = c->d;
	if (!c->rx.fd_count) {
		c->fds_since = 0;
		return true;
	}
	if (!c->fds_since) {
		c->fds_since = devq_now_ns();
		if (!uv_is_active((uv_handle_t *)&d->fds_timer))
			uv_timer_start(&d->fds_timer, fds_timer_cb, 250, 250);
	}
	if (s->admin) /* root and the admin group: no budget */
		return true;
	unsigned n = user_fds(d, s->uid);
	if (n > d->user_fd_budget) {
		protocol_close(s,
			       "uid %u holds %u fds in devqd, above the per-user budget of %u "
			       "(a quarter of devqd's RLIMIT_NOFILE)",
			       (unsigned)s->uid, n, d->user_fd_budget);
		return false;
	}
	return true;
}

/* The ops that the frames just handled queued go to the streams now. */
static void hand_over(struct devq_session *s)
{
	struct devq_daemon *d = CONN(s)->d;
	if (d->e.flush_due) {
		d->e.flush_due = false;
		/* A lone short op may run right here: its time is the
		 * tenant's, like its frames'. */
		uint64_t here = devq_fair_flush_loop(&d->e);
		if (here)
			loop_share(s)->spent_ns += here;
	}
}

static void session_read(struct devq_session *s)
{
	struct conn *c = CONN(s);
	struct devq_daemon *d = c->d;
	for (int i = 0; i < READS_PER_WAKE && s->connected && !s->close_after_flush &&
			!c->throttled && !c->tx_full && !c->ready_wait && !c->yielded &&
			!c->trace_wait;
	     i++) {
		ssize_t n = devq_rx_recv(&c->rx, c->fd, MSG_DONTWAIT);
		uint64_t t = devq_now_ns();
		if (n == -EAGAIN)
			break;
		if (n == 0) {
			if (c->rx.len)
				log_info("session %llu: EOF inside a frame", (unsigned long long)s->id);
			/* Entries the client put in the submit ring before it
			 * hung up count as its frames do. */
			if (devq_cpage_sq_pending(s->cpage))
				session_frames(s, t);
			session_close(s);
			return;
		}
		if (n == -EMSGSIZE) {
			protocol_close(s, "frame exceeds the maximum payload of %u bytes",
				       d->e.cfg.max_frame);
			break;
		}
		if (n == -EPROTO) {
			protocol_close(s, "control data truncated (too many fds)");
			break;
		}
		if (n < 0) {
			log_info("session %llu: recv: %s", (unsigned long long)s->id,
				 strerror((int)-n));
			session_close(s);
			return;
		}
		if (c->rx.fd_count > d->e.cfg.q_session_fds) {
			protocol_close(s,
				       "%zu received fds wait for their frames, above the quota of "
				       "%u (quota-session-fds)",
				       c->rx.fd_count, d->e.cfg.q_session_fds);
			break;
		}
		session_frames(s, t);
		if (s->connected && !check_fds(s))
			break;
		/* What one read brought is handed over: wake the streams now,
		 * once for all its frames.  Not after the read loop: a lone op
		 * would then wait for the read that finds the socket empty
		 * (measured: bench/RESULTS.md, "Figures from the code's
		 * comments"). */
		hand_over(s);
	}
}

/* The submit ring's doorbell rang: its entries are taken as the socket's
 * frames are (session_frames), and handed over at once. */
static void bell_cb(uv_poll_t *h, int status, int events)
{
	struct conn *c = h->data;
	struct devq_session *s = c->s;
	struct devq_daemon *d = c->d;
	(void)events;
	if (status < 0) {
		log_info("session %llu: doorbell: %s", (unsigned long long)s->id,
			 uv_strerror(status));
		session_close(s);
	} else if (s->connected && !d->stopping) {
		if (devq_cpage_sq_answer(s->cpage) == -EPIPE) {
			/* Its entries are still taken as the socket's frames
			 * arrive; only the doorbell is gone. */
			log_debug("session %llu: the client closed the submit ring's doorbell",
				  (unsigned long long)s->id);
			c->bell_gone = true;
			bell_set(c, false);
		}
		session_frames(s, devq_now_ns());
		if (s->connected)
			hand_over(s);
	}
	if (s->connected)
		devq_outbox_mark_dirty(s);
	flush_dirty(d);
}

static void conn_cb(uv_poll_t *h, int status, int events)
{
	struct conn *c = h->data;
	struct devq_session *s = c->s;
	struct devq_daemon *d = c->d;
	if (status < 0) {
		session_close(s);
	} else {
		if ((events & UV_READABLE) && !d->stopping)
			session_read(s);
		if (s->connected)
			devq_outbox_mark_dirty(s);
	}
	flush_dirty(d);
}

/* A uid with a live grant works through its tenant socket: on the main
 * socket it would be its own uid tenant, outside the grant's cap, weight
 * and eviction (setting grant-exclusive).  Whether to refuse uid, why. */
static bool refuse_granted_uid(struct devq_daemon *d, uid_t uid, char *why, size_t n)
{
	char socks[256];
	unsigned k = devq_admin_grants_of(&d->admin, uid, socks, sizeof(socks));
	if (!k)
		return false;
	snprintf(why, n, "access denied: uid %u holds %s (%s): connect there, not on the main "
		 "socket (setting grant-exclusive)", (unsigned)uid,
		 k == 1 ? "a grant" : "grants", socks);
	return true;
}

/* Access policy (on a tenant socket: its uid only; on the main socket not
 * a uid with a live grant) and per-tenant session quota, at connect: a refused peer gets an Error saying why, and the
 * connection closes once it is sent. */
static void admit(struct devq_daemon *d, struct devq_session *s, const struct devq_peer *peer,
		  int peer_err)
{
	char why[400];
	int code = 0;
	if (peer_err < 0) {
		snprintf(why, sizeof(why), "cannot read the peer's credentials: %s",
			 strerror(-peer_err));
		code = DEVQ__CODE__PERMISSION_DENIED;
	} else if (s->grant && peer->uid != s->grant->uid) {
		/* A tenant socket admits its uid alone, whatever allow-users
		 * says (root too, unless the grant is root's). */
		snprintf(why, sizeof(why),
			 "access denied: uid %u (pid %d) may not use tenant %s's socket, granted "
			 "to uid %u", (unsigned)peer->uid, (int)peer->pid, s->grant->name,
			 (unsigned)s->grant->uid);
		code = DEVQ__CODE__PERMISSION_DENIED;
	} else if (!s->grant && !devq_policy_admits(&d->policy, peer, why, sizeof(why))) {
		code = DEVQ__CODE__PERMISSION_DENIED;
	} else if (!s->grant && !s->admin && d->e.cfg.grant_exclusive &&
		   refuse_granted_uid(d, peer->uid, why, sizeof(why))) {
		code = DEVQ__CODE__PERMISSION_DENIED;
	} else if (!s->admin && devq_culprit_refuses(&d->culprits, peer->uid, &d->e.cfg,
						     (int64_t)time(NULL), why, sizeof(why))) {
		code = DEVQ__CODE__PERMISSION_DENIED;
	} else {
		code = devq_session_admit(s, why, sizeof(why));
	}
	if (!code)
		return;
	devq_slog(DEVQ_LOG_WARN, s, code, -1, -1, "refused: %s", why);
	devq_outbox_error(s, code, "hello", NULL, NULL, "%s", why);
	s->close_after_flush = true;
	session_flush(s);
}

/* Whether the peer may see other users' sessions: root, or a member
 * (primary or supplementary group, as the kernel saw them at connect) of
 * the configured admin group. */
static bool is_admin(const struct devq_daemon *d, int fd, uid_t uid, gid_t gid)
{
	const struct devq_trace_ring *t = d->e.trace;
	if (uid == 0)
		return true;
	if (!t || !t->admin_group_set)
		return false;
	if (gid == t->admin_gid)
		return true;
	gid_t groups[256];
	socklen_t len = sizeof(groups);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0)
		return false;
	for (size_t i = 0; i < len / sizeof(gid_t); i++)
		if (groups[i] == t->admin_gid)
			return true;
	return false;
}

static void on_accept(uv_poll_t *h, int status, int events);

static void accept_resume(uv_timer_t *t)
{
	struct devq_daemon *d = t->data;
	if (d->reserve_fd < 0)
		d->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (d->stopping)
		return;
	d->accept_paused = false;
	uv_poll_start(&d->listen_poll, UV_READABLE, on_accept);
	devq_tenants_pause(d, false);
}

/* Out of fds (EMFILE, ENFILE): the listening socket stays readable, so
 * retrying at once would spin.  The spare fd lets one pending connection
 * in: an admin's is served (so root can look at what holds the fds), any
 * other closed at once so its client is not left hanging.  Then accepting
 * pauses for 100 ms.  Returns the admin's connection, or -1. */
static int accept_exhausted(struct devq_daemon *d, int err)
{
	uint64_t now = devq_now_ns();
	if (now - d->emfile_logged_ns > 10000000000ull) {
		d->emfile_logged_ns = now;
		log_warn("accept: %s: out of fds; accepting only admins, pausing 100 ms at a time "
			 "(logged every 10 s)", strerror(err));
	}
	int fd = -1;
	if (d->reserve_fd >= 0) {
		close_or_log(d->reserve_fd, "accept: the spare fd");
		d->reserve_fd = -1;
		fd = accept4(d->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0) {
			struct ucred cred;
			socklen_t len = sizeof(cred);
			bool admin = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 &&
				     is_admin(d, fd, cred.uid, cred.gid);
			if (!admin) {
				close_or_log(fd, "accept at EMFILE");
				fd = -1;
			}
		}
		if (fd < 0)
			d->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	}
	if (!d->accept_paused) {
		d->accept_paused = true;
		uv_poll_stop(&d->listen_poll);
		devq_tenants_pause(d, true);
		uv_timer_start(&d->accept_timer, accept_resume, 100, 0);
	}
	return fd;
}

/* A connection of a non-admin uid that is already at its fd budget is
 * refused at once, before it costs a pidfd and a session: told why in one
 * non-blocking send (a client that does not read loses the message, not
 * the daemon its time), then closed.  Otherwise a uid reconnecting in a
 * loop would hold, between accept and refusal, fds beyond its budget and
 * run the daemon out of them.  True when fd was refused (and closed). */
static bool over_budget_at_accept(struct devq_daemon *d, int fd)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
	    is_admin(d, fd, cred.uid, cred.gid))
		return false; /* the policy and admit() decide */
	unsigned n = user_fds(d, cred.uid) + 2; /* its socket and pidfd */
	if (n <= d->user_fd_budget)
		return false;
	char msg[200];
	snprintf(msg, sizeof(msg),
		 "uid %u holds %u fds in devqd, above the per-user budget of %u (a quarter of "
		 "devqd's RLIMIT_NOFILE)", (unsigned)cred.uid, n, d->user_fd_budget);
	Devq__Error e = DEVQ__ERROR__INIT;
	e.code = DEVQ__CODE__RESOURCE_EXHAUSTED;
	e.message = msg;
	e.request = "hello";
	Devq__DaemonMessage m = DEVQ__DAEMON_MESSAGE__INIT;
	m.body_case = DEVQ__DAEMON_MESSAGE__BODY_ERROR;
	m.error = &e;
	struct devq_tx tx;
	devq_tx_init(&tx);
	if (devq_tx_push(&tx, DEVQ_FRAME_DAEMON, &m.base, NULL, 0) == 0)
		(void)devq_tx_flush(&tx, fd); /* best effort: EAGAIN drops it */
	devq_tx_fini(&tx);
	uint64_t now = devq_now_ns();
	if (now - d->budget_logged_ns > 1000000000ull) {
		d->budget_logged_ns = now;
		log_warn("refused a connection of uid %u: it holds %u fds, above its budget of %u "
			 "(logged at most every second)", (unsigned)cred.uid, n, d->user_fd_budget);
	}
	if (close(fd) < 0)
		log_err("accept: close: %s", strerror(errno));
	return true;
}

/* A connection accepted on the main socket (grant NULL) or on a granted
 * tenant's: its session, admitted or refused. */
static void serve_fd(struct devq_daemon *d, int fd, struct devq_tenant *grant)
{
	if (over_budget_at_accept(d, fd))
		return;
	struct devq_peer peer;
	int pr = devq_policy_peer_read(fd, &peer);
	struct conn *c = calloc(1, sizeof(*c));
	struct devq_session *s = c ? devq_session_new(&d->e, peer.pid, peer.uid, peer.gid) : NULL;
	if (!s) {
		log_err("accept: out of memory");
		free(c);
		if (peer.pidfd >= 0 && close(peer.pidfd) < 0)
			log_err("accept: close: %s", strerror(errno));
		if (close(fd) < 0)
			log_err("accept: close: %s", strerror(errno));
		return;
	}
	c->s = s;
	c->d = d;
	c->fd = fd;
	c->pidfd = peer.pidfd;
	s->conn = c;
	s->grant = grant;
	/* Decided once, from the kernel's view of the peer at connect, as the
	 * access policy is.  A tenant socket's sessions are the job's: no
	 * admin rights there, and high priority only by its grant. */
	s->admin = !grant && is_admin(d, fd, peer.uid, peer.gid);
	s->control = !grant && pr == 0 && devq_policy_controls(&d->tenants.control, &peer);
	/* observer-groups: every tenant's status and metrics, no admin
	 * call (control stays as decided above), no trace of others. */
	s->observer = !grant && pr == 0 && devq_policy_controls(&d->observers, &peer);
	/* On a tenant socket its grant decides, as it is at each queue's
	 * open and op (core/timeline.c): a re-grant reaches live sessions. */
	s->may_high = pr == 0 && (grant || devq_policy_matches(&d->priority, &peer));
	devq_rx_init(&c->rx, d->e.cfg.max_frame);
	uv_poll_init(d->loop, &c->poll, fd);
	c->poll.data = c;
	c->handles = 1;
	c->poll_events = UV_READABLE;
	uv_poll_start(&c->poll, UV_READABLE, conn_cb);
	devq_slog(DEVQ_LOG_INFO, s, -1, -1, -1, "connected (pid %d, uid %u, gid %u%s%s%s)",
		  (int)s->pid, (unsigned)s->uid, (unsigned)s->gid, c->pidfd >= 0 ? ", pidfd" : "",
		  grant ? ", tenant " : "", grant ? grant->name : "");
	admit(d, s, &peer, pr);
	if (!s->close_after_flush && !s->admin) {
		unsigned n = user_fds(d, s->uid);
		if (n > d->user_fd_budget) {
			log_warn("session %llu: refused: uid %u holds %u fds, above its "
				 "budget of %u", (unsigned long long)s->id,
				 (unsigned)s->uid, n, d->user_fd_budget);
			devq_outbox_error(s, DEVQ__CODE__RESOURCE_EXHAUSTED, "hello", NULL,
					   NULL,
					   "uid %u holds %u fds in devqd, above the per-user "
					   "budget of %u (a quarter of devqd's RLIMIT_NOFILE)",
					   (unsigned)s->uid, n, d->user_fd_budget);
			s->close_after_flush = true;
			session_flush(s);
		}
	}
}

static void on_accept(uv_poll_t *h, int status, int events)
{
	struct devq_daemon *d = h->data;
	(void)events;
	if (status < 0 || d->stopping)
		return;
	/* A bounded number per wake-up: a flood of connections waits its turn
	 * behind the sessions' I/O instead of holding the loop. */
	for (int k = 0; k < ACCEPTS_PER_WAKE; k++) {
		int fd = accept4(d->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		bool exhausted = fd < 0 && (errno == EMFILE || errno == ENFILE);
		if (exhausted)
			fd = accept_exhausted(d, errno);
		if (fd < 0) {
			if (!exhausted && errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
				log_warn("accept: %s", strerror(errno));
			return;
		}
		serve_fd(d, fd, NULL);
	}
}

/* A granted tenant's socket (tenants.c): the same, for its uid alone. */
static void on_tenant_accept(uv_poll_t *h, int status, int events)
{
	struct devq_tsock *ts = h->data;
	struct devq_daemon *d = ts->d;
	(void)events;
	if (status < 0 || d->stopping)
		return;
	for (int k = 0; k < ACCEPTS_PER_WAKE; k++) {
		int fd = accept4(ts->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
			/* As on the main socket: every socket pauses 100 ms; no
			 * spare fd for a job's connection (admins use the main
			 * socket). */
			int afd = accept_exhausted(d, errno);
			if (afd >= 0) /* an admin's, from the main socket */
				serve_fd(d, afd, NULL);
			return;
		}
		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
				log_warn("accept on %s: %s", ts->path, strerror(errno));
			return;
		}
		serve_fd(d, fd, ts->t);
	}
}

/* ---- shutdown -------------------------------------------------------- */

static void close_handle(uv_handle_t *h)
{
	if (!uv_is_closing(h))
		uv_close(h, NULL);
}

static void finish_stop(struct devq_daemon *d)
{
	uv_timer_stop(&d->stop_timer);
	for (struct devq_session *s = d->e.sessions, *n; s; s = n) {
		n = s->next;
		session_flush(s); /* best effort: the last completions */
		session_close(s);
	}
	/* A session still marked dirty is never freed when its connection
	 * closes (a refused one, closed before any wake-up drained the list). */
	/* The trace builder: stopped, what it held freed (the sessions are
	 * closed), its eventfd closed after the loop stops polling it. */
	if (d->trace_fd >= 0)
		uv_poll_stop(&d->trace_poll);
	devq_tracereq_fini();
	if (d->trace_fd >= 0)
		close_handle((uv_handle_t *)&d->trace_poll);
	d->trace_fd = -1;
	flush_dirty(d);
	close_handle((uv_handle_t *)&d->wake);
	close_handle((uv_handle_t *)&d->lazy_timer);
	close_handle((uv_handle_t *)&d->flush_prep);
	close_handle((uv_handle_t *)&d->turn_check);
	close_handle((uv_handle_t *)&d->stop_timer);
	/* A repeated stop signal must not kill the cleanup that follows. */
	signal(SIGTERM, SIG_IGN);
	signal(SIGINT, SIG_IGN);
	close_handle((uv_handle_t *)&d->sig_term);
	close_handle((uv_handle_t *)&d->sig_int);
	devq_stats_stop();
	devq_notify_close(d);
}

static void on_stop_tick(uv_timer_t *t)
{
	struct devq_daemon *d = t->data;
	if (d->e.ops_in_flight == 0) {
		finish_stop(d);
		return;
	}
	if (d->e.device_lost && devq_now_ns() - d->stop_started > DEVQ_LOST_GRACE_NS) {
		/* The device is gone: an op still running (a CPU op, a kernel
		 * the fault did not abort) cannot produce anything useful, and
		 * waiting for it only keeps every client from the restarted
		 * daemon.  The notices and the completions so far go out (best
		 * effort, the sockets do not block); the backend may still use
		 * our memory, so leave without cleanup. */
		log_err("device lost: %llu ops still running after %llu ms; exiting with "
			"status %d without waiting for them",
			(unsigned long long)d->e.ops_in_flight,
			(unsigned long long)(DEVQ_LOST_GRACE_NS / 1000000), d->exit_code);
		for (struct devq_session *s = d->e.sessions; s; s = s->next)
			if (s->connected)
				session_flush(s);
		fflush(NULL);
		_exit(d->exit_code);
	}
	/* Each stream may run device_depth ops that can no longer be
	 * cancelled, one after the other. */
	unsigned depth = d->e.be && d->e.be->device_depth ? d->e.be->device_depth : 1;
	if (devq_now_ns() - d->stop_started > d->e.cfg.stop_grace_ns + (depth - 1) * d->e.cfg.max_op_ns) {
		/* The backend still runs ops on our memory: freeing it is not
		 * safe, so leave without cleanup and say so. */
		log_err("stop: %llu ops still running after the grace period; exiting",
			(unsigned long long)d->e.ops_in_flight);
		fflush(NULL);
		_exit(1);
	}
}

static void begin_stop(struct devq_daemon *d, const char *why)
{
	if (d->stopping)
		return;
	d->stopping = true;
	d->stop_started = devq_now_ns();
	unsigned connected = 0;
	for (const struct devq_session *s = d->e.sessions; s; s = s->next)
		connected += s->connected;
	log_notice("stopping (%s): %llu ops in flight, %u sessions connected (%llu since start)",
		   why, (unsigned long long)d->e.ops_in_flight, connected,
		   (unsigned long long)d->e.sessions_total);
	uv_poll_stop(&d->listen_poll);
	close_handle((uv_handle_t *)&d->listen_poll);
	close_handle((uv_handle_t *)&d->accept_timer);
	close_handle((uv_handle_t *)&d->fds_timer);
	close_handle((uv_handle_t *)&d->frames_idle);
	close_handle((uv_handle_t *)&d->trim_timer);
	if (close(d->listen_fd) < 0)
		log_err("stop: close of the listening socket: %s", strerror(errno));
	d->listen_fd = -1;
	devq_tenants_stop(d); /* the grants stay in the state file */
	/* A socket systemd owns stays: it queues clients for the next start. */
	if (d->e.cfg.socket_path && !d->socket_inherited && unlink(d->e.cfg.socket_path) < 0 &&
	    errno != ENOENT)
		log_err("stop: unlink %s: %s", d->e.cfg.socket_path, strerror(errno));
	devq_notify_stopping(d);
	/* Ops that have not started are cancelled; a sliced host op stops at
	 * the end of its slice (the backend checks the flag between slices);
	 * other running ones finish. */
	for (struct devq_session *s = d->e.sessions; s; s = s->next) {
		atomic_store(&s->cancel, true);
		if (s->connected)
			set_events(s, CONN(s)->poll_events);
	}
	uv_timer_start(&d->stop_timer, on_stop_tick, 0, 5);
}

void devq_server_stop(struct devq_daemon *d, const char *why, int exit_code)
{
	if (!d->stopping)
		d->exit_code = exit_code;
	begin_stop(d, why);
}

static void on_signal(uv_signal_t *h, int signum)
{
	begin_stop(h->data, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

/* What a wake-up of the loop does; returns how many of the completions
 * it collected had been deferred (devq_sched_drain). */
static unsigned collect(struct devq_daemon *d)
{
	unsigned lazy = devq_sched_drain(&d->e);
	devq_buffer_collect(&d->e); /* the buffer worker's populates and unmaps */
	resume_throttled(d);
	flush_dirty(d);
	return lazy;
}

/* The lazy poll (engine.h, cmpl_parked): it runs while deferred
 * completions come, every millisecond, and parks when one period brought
 * none, or nothing is in flight; while parked, the first deferred
 * completion wakes the loop (on_wake), which starts it again.  Ticking
 * through a long op instead cost that op's CPUs a loop wake-up every
 * millisecond (13 during a 1024^3 gemm_f32 on the CPU backend). */
static void on_lazy(uv_timer_t *t);

static void lazy_start(struct devq_daemon *d)
{
	if (uv_is_active((uv_handle_t *)&d->lazy_timer) || d->stopping)
		return;
	devq_sched_unpark(&d->e);
	uv_timer_start(&d->lazy_timer, on_lazy, 1, 1);
}

static void lazy_stop(struct devq_daemon *d)
{
	if (!uv_is_active((uv_handle_t *)&d->lazy_timer))
		return;
	uv_timer_stop(&d->lazy_timer);
	/* Deferred after the last drain, while the poll still ran: no
	 * completer woke the loop for them, so the loop wakes itself. */
	if (devq_sched_park(&d->e))
		uv_async_send(&d->wake);
}

static void on_wake(uv_async_t *a)
{
	struct devq_daemon *d = a->data;
	if (collect(d) && d->e.ops_in_flight)
		lazy_start(d);
}

/* The trace builder handed replies back (requests/tracereq.c). */
static void on_trace_ready(uv_poll_t *h, int status, int events)
{
	struct devq_daemon *d = h->data;
	(void)status, (void)events;
	uint64_t n;
	if (read(d->trace_fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
		log_err("trace: reading the builder's eventfd: %s", strerror(errno));
	devq_tracereq_collect();
	flush_dirty(d);
}

/* Completions published in a completion page do not wake the loop at once
 * (the client was woken directly): this timer collects them. */
static void on_lazy(uv_timer_t *t)
{
	struct devq_daemon *d = t->data;
	if (!collect(d) || !d->e.ops_in_flight)
		lazy_stop(d);
}

/* Runs once per loop iteration, before the loop waits for I/O: the
 * backend flush that handing over ops asked for, unless a read already
 * did it.  Waking a device stream's worker costs more than its null op on
 * a VM (an IPI to an idle vCPU), so the frames of one read share the
 * wake-ups (session_read), and hand-overs elsewhere in the iteration share
 * one flush here. */
static void on_flush_prep(uv_prepare_t *h)
{
	struct devq_daemon *d = h->data;
	if (d->e.flush_due) {
		d->e.flush_due = false;
		devq_fair_flush(&d->e);
	}
	/* The completion of an op the loop ran itself (engine.h, drain_due)
	 * is taken now, and the lazy poll stopped when nothing else is in
	 * flight: a sporadic op then wakes the loop once, for its submit, not
	 * again a millisecond later.  Here and not in session_read: draining
	 * may free sessions. */
	if (d->e.drain_due) {
		d->e.drain_due = false;
		collect(d);
		if (!d->e.ops_in_flight)
			lazy_stop(d);
	}
}

/* ---- the engine's events ---------------------------------------------- */

static void ev_wake(void *ud)
{
	struct devq_daemon *d = ud;
	uv_async_send(&d->wake);
}

static void ev_device_lost(void *ud, const struct devq_job *job)
{
	struct devq_daemon *d = ud;
	devq_lost_notify(d, job);
	devq_server_stop(d, "device lost", DEVQ_EXIT_DEVICE_LOST);
}

static unsigned ev_refused_uids(void *ud, struct devq_refused_uid *out, unsigned max)
{
	struct devq_daemon *d = ud;
	return devq_culprit_list(&d->culprits, &d->e.cfg, (int64_t)time(NULL), out, max);
}

struct devq_engine_events devq_server_events(struct devq_daemon *d)
{
	return (struct devq_engine_events){ .wake = ev_wake,
					    .device_lost = ev_device_lost,
					    .refused_uids = ev_refused_uids,
					    .ud = d };
}

/* ---- listening socket ------------------------------------------------ */

/* Binds path, replacing a stale socket file but never a live daemon's. */
static int listen_on(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path)) {
		log_err("socket path too long: %s", path);
		return -ENAMETOOLONG;
	}
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;
		if (e != EADDRINUSE) {
			close_or_log(fd, "listen");
			return -e;
		}
		int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		int live = probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0;
		if (probe >= 0)
			close_or_log(probe, "listen: probe");
		if (live) {
			log_err("%s: another daemon is serving this socket", path);
			close_or_log(fd, "listen");
			return -EADDRINUSE;
		}
		struct stat st;
		if (lstat(path, &st) == 0 && !S_ISSOCK(st.st_mode)) {
			log_err("%s exists and is not a socket; not removing it", path);
			close_or_log(fd, "listen");
			return -EEXIST;
		}
		if (unlink(path) < 0 && errno != ENOENT) {
			e = errno;
			close_or_log(fd, "listen");
			return -e;
		}
		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			e = errno;
			close_or_log(fd, "listen");
			return -e;
		}
	}
	/* The mode before listen: once it listens, a client may connect, and
	 * must find the socket as it stays (a test that opened it to all
	 * raced with this chmod when it came after listen, and so could a
	 * client meant to be refused). */
	if (chmod(path, 0660) < 0)
		log_warn("%s: chmod 0660: %s (the socket keeps the umask's mode)", path,
			 strerror(errno));
	if (listen(fd, 128) < 0) {
		int e = errno;
		close_or_log(fd, "listen");
		return -e;
	}
	return fd;
}

/* Socket activation: systemd hands over one listening Unix stream socket. */
static int inherited_socket(void)
{
	int n = sd_listen_fds(1);
	if (n <= 0)
		return -ENOENT;
	if (n > 1 || sd_is_socket_unix(SD_LISTEN_FDS_START, SOCK_STREAM, 1, NULL, 0) <= 0) {
		log_err("socket activation: expected one listening Unix stream socket, got %d fds", n);
		return -EINVAL;
	}
	int fd = SD_LISTEN_FDS_START;
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	fcntl(fd, F_SETFD, FD_CLOEXEC);
	return fd;
}

int devq_server_start(struct devq_daemon *d)
{
	char perr[256];
	d->trace_fd = -1;
	if (devq_policy_init(&d->policy, d->e.cfg.allow_users,
			     d->e.cfg.allow_groups ? d->e.cfg.allow_groups : "devq", !d->e.cfg.allow_groups,
			     perr, sizeof(perr)) < 0) {
		log_err("access policy: %s", perr);
		return 2;
	}
	if (devq_policy_init_priority(&d->priority, d->e.cfg.priority_users,
				      d->e.cfg.priority_groups, perr, sizeof(perr)) < 0) {
		log_err("priority grant: %s", perr);
		return 2;
	}
	if (devq_policy_init_observer(&d->observers, d->e.cfg.observer_groups, perr,
				      sizeof(perr)) < 0) {
		log_err("observers: %s", perr);
		return 2;
	}
	const char *state_dir = d->e.cfg.state_dir;
	char env_dir[PATH_MAX];
	if (!state_dir && getenv("STATE_DIRECTORY")) {
		/* systemd's StateDirectory=: the first of a ':' list. */
		snprintf(env_dir, sizeof(env_dir), "%s", getenv("STATE_DIRECTORY"));
		env_dir[strcspn(env_dir, ":")] = '\0';
		state_dir = env_dir;
	}
	int fd = inherited_socket();
	if (fd == -EINVAL)
		return 1;
	if (fd >= 0) {
		d->socket_inherited = true;
	} else {
		fd = listen_on(d->e.cfg.socket_path);
		if (fd < 0) {
			log_err("cannot listen on %s: %s", d->e.cfg.socket_path, strerror(-fd));
			return 1;
		}
	}
	d->listen_fd = fd;
	/* The instance is named by its socket: devqd@0's gpu0.sock, devqd's
	 * devqd.sock share the state directory, not its files. */
	snprintf(d->sock_path, sizeof(d->sock_path), "%s", d->e.cfg.socket_path);
	if (d->socket_inherited) {
		struct sockaddr_un sa = { 0 };
		socklen_t salen = sizeof(sa) - 1;
		if (getsockname(fd, (struct sockaddr *)&sa, &salen) == 0 && sa.sun_path[0])
			snprintf(d->sock_path, sizeof(d->sock_path), "%s", sa.sun_path);
	}
	char inst[128];
	devq_tenants_instance(d->sock_path, inst, sizeof(inst));
	/* Uids refused after device losses, from before a restart. */
	devq_culprit_load(&d->culprits, state_dir, inst, &d->e.cfg, (int64_t)time(NULL));
	d->tenants.on_accept = on_tenant_accept;
	d->tenants.close_session = session_close;
	d->tenants.flush = flush_dirty;
	int tr = devq_tenants_start(d, d->sock_path, state_dir);
	if (tr) {
		close_or_log(fd, "listen");
		if (!d->socket_inherited)
			unlink(d->e.cfg.socket_path);
		return tr;
	}
	if (d->e.cfg.test_faults && getenv("DEVQD_TEST_START_PAUSE_MS")) {
		/* --test-fault-injection: hold the window between the socket
		 * accepting and the signal handlers being set open, so that a
		 * test can signal the daemon inside it. */
		unsigned ms = (unsigned)strtoul(getenv("DEVQD_TEST_START_PAUSE_MS"), NULL, 10);
		struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	}
	struct rlimit rl;
	rlim_t nofile = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur : 1024;
	if (nofile == RLIM_INFINITY || nofile > (1u << 30))
		nofile = 1u << 30;
	d->user_fd_budget = (unsigned)(nofile / 4 > 64 ? nofile / 4 : 64);
	d->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	uv_timer_init(d->loop, &d->accept_timer);
	d->accept_timer.data = d;
	uv_timer_init(d->loop, &d->fds_timer);
	d->fds_timer.data = d;
	uv_idle_init(d->loop, &d->frames_idle);
	d->frames_idle.data = d;
	uv_timer_init(d->loop, &d->trim_timer);
	d->trim_timer.data = d;
	log_info("fd budget: %u per user (RLIMIT_NOFILE %llu / 4)", d->user_fd_budget,
		 (unsigned long long)nofile);
	uv_poll_init(d->loop, &d->listen_poll, fd);
	d->listen_poll.data = d;
	uv_poll_start(&d->listen_poll, UV_READABLE, on_accept);
	uv_async_init(d->loop, &d->wake, on_wake);
	d->wake.data = d;
	d->trace_fd = devq_tracereq_start();
	if (d->trace_fd >= 0) {
		uv_poll_init(d->loop, &d->trace_poll, d->trace_fd);
		d->trace_poll.data = d;
		uv_poll_start(&d->trace_poll, UV_READABLE, on_trace_ready);
	}
	uv_timer_init(d->loop, &d->lazy_timer);
	d->lazy_timer.data = d;
	uv_prepare_init(d->loop, &d->flush_prep);
	d->flush_prep.data = d;
	uv_prepare_start(&d->flush_prep, on_flush_prep);
	uv_check_init(d->loop, &d->turn_check);
	d->turn_check.data = d;
	uv_check_start(&d->turn_check, turn_check_cb);
	uv_timer_init(d->loop, &d->stop_timer);
	d->stop_timer.data = d;
	uv_signal_init(d->loop, &d->sig_term);
	uv_signal_init(d->loop, &d->sig_int);
	d->sig_term.data = d->sig_int.data = d;
	uv_signal_start(&d->sig_term, on_signal, SIGTERM);
	uv_signal_start(&d->sig_int, on_signal, SIGINT);
	devq_stats_start(d);
	/* Once, at the default level: what an operator needs to know. */
	struct sockaddr_un sa = { 0 };
	socklen_t salen = sizeof(sa) - 1;
	if (d->socket_inherited && getsockname(fd, (struct sockaddr *)&sa, &salen) < 0)
		sa.sun_path[0] = '\0';
	log_notice("listening on %s%s; backend %s (%s)%s%s",
		   d->socket_inherited ? (sa.sun_path[0] ? sa.sun_path : "an unnamed socket")
				       : d->e.cfg.socket_path,
		   d->socket_inherited ? " (from systemd)" : "", d->e.be->name, d->e.be->device,
		   d->e.backend_note[0] ? ": " : "", d->e.backend_note);
	log_notice("limits: ops up to %llu ms, buffers up to %llu MiB, %u queues per session, "
		   "%u streams + %u high-priority; admitted: %s",
		   (unsigned long long)(d->e.cfg.max_op_ns / 1000000),
		   (unsigned long long)(d->e.cfg.max_buffer_bytes >> 20), d->e.cfg.max_queues,
		   d->e.cfg.streams, d->e.cfg.priority_streams, d->policy.describe);
	/* Ready only now: the backend is up and the socket is being served. */
	if (devq_notify_ready(d) < 0) {
		log_err("out of memory");
		return 1;
	}
	return 0;
}

/* The signals the loop handles (SIGTERM, SIGINT, SIGHUP, SIGUSR1), whose
 * default action ends the process. */
static void stop_signals(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGHUP);
	sigaddset(set, SIGUSR1);
}

void devq_server_block_signals(void)
{
	sigset_t set;
	stop_signals(&set);
	int r = pthread_sigmask(SIG_BLOCK, &set, NULL);
	if (r != 0)
		log_warn("blocking SIGTERM until its handler is set: %s", strerror(r));
}

int devq_server_run(struct devq_daemon *d)
{
	int r = devq_server_start(d);
	if (r)
		return r;
	/* The loop wakes for every request and works briefly: the shortest
	 * slice the kernel gives (base/slice.h) lets it take a CPU busy with
	 * other processes when a request comes, instead of waiting a slice or
	 * a tick, which shortens a tenant's slowest round trips under a flood
	 * of another tenant's costly requests (measured under bench/loopfair:
	 * bench/RESULTS.md, "Trace replies off the loop").  Threads the loop
	 * starts later inherit it. */
	int sl = devq_slice_set(DEVQ_LOOP_SLICE_NS);
	if (sl < 0)
		log_info("loop thread: the kernel's default time slice (a slice of its own: %s)",
			 sl == -EINVAL ? "this kernel has none, Linux 6.12 has" : strerror(-sl));
	/* Blocked since before the backend's threads (which keep them
	 * blocked) and the socket: a client that connects and stops or
	 * reloads the daemon at once gets an orderly stop or a reload, not
	 * death by the default action (exit 143).  The handlers are set now. */
	sigset_t set;
	stop_signals(&set);
	int e = pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	if (e != 0)
		log_warn("unblocking SIGTERM: %s", strerror(e));
	uv_run(d->loop, UV_RUN_DEFAULT);
	devq_server_fini(d);
	return d->exit_code;
}

int devq_server_session_fd(const struct devq_session *s)
{
	return s->conn ? ((const struct conn *)s->conn)->fd : -1;
}

void devq_server_fini(struct devq_daemon *d)
{
	devq_tracereq_fini(); /* stopped already, unless the loop never ran */
	devq_buffer_worker_fini(&d->e); /* the last large unmaps */
	flush_dirty(d);                 /* and the sessions they kept */
	if (d->reserve_fd >= 0 && close(d->reserve_fd) < 0)
		log_err("close: %s", strerror(errno));
	d->reserve_fd = -1;
	devq_pool_arena_fini(&frame_arena);
	devq_tenants_fini(d);
}
