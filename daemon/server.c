/* devqd's loop: the listening socket, one uv_poll per connection (libuv's
 * own pipes cannot carry memfds, so recvmsg/sendmsg are ours), the wake-up
 * from backend threads, and shutdown. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <fcntl.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "daemon.h"
#include "codec/msg_dec.h"
#include "stats.h"
#include "notify.h"

#define READS_PER_WAKE 16 /* bounded work per client per wake-up: fairness */

static void session_close(struct devq_session *s);
static void session_flush(struct devq_session *s);
static void conn_cb(uv_poll_t *h, int status, int events);

void devq_session_mark_dirty(struct devq_session *s)
{
	if (s->dirty || !s->connected)
		return;
	s->dirty = true;
	s->dirty_next = s->d->dirty;
	s->d->dirty = s;
}

static void flush_dirty(struct devq_daemon *d)
{
	while (d->dirty) {
		struct devq_session *s = d->dirty;
		d->dirty = s->dirty_next;
		s->dirty = false;
		session_flush(s);
		devq_session_maybe_free(s);
	}
}

/* Pending completions go out as one frame, ahead of anything sent after
 * them, so a client sees an op complete before the release it enables.
 * Encoded by hand straight into the send queue (cmpl_enc.c): the same bytes
 * protobuf-c would write, at a fraction of the instructions, and no
 * temporary Completion/Timing structs to allocate. */
static void push_completions(struct devq_session *s)
{
	size_t n = s->ncmpl;
	if (!n)
		return;
	s->ncmpl = 0;
	size_t plen = devq_cmpl_enc_size(s->cmpl, n);
	uint8_t *p;
	int r = devq_tx_reserve(&s->tx, DEVQ_FRAME_DAEMON, plen, &p);
	if (r < 0) {
		log_err("session %llu: %s; %zu completions lost", (unsigned long long)s->id,
			strerror(-r), n);
		return;
	}
	devq_cmpl_enc(p, plen, s->cmpl, n);
}

void devq_session_send(struct devq_session *s, const Devq__DaemonMessage *m, const int *fds,
		       unsigned nfds)
{
	if (!s->connected) {
		for (unsigned i = 0; i < nfds; i++)
			close(fds[i]);
		return;
	}
	push_completions(s);
	if (devq_tx_push(&s->tx, DEVQ_FRAME_DAEMON, &m->base, fds, nfds) < 0) {
		log_err("session %llu: out of memory queueing a reply; closing",
			(unsigned long long)s->id);
		s->close_after_flush = true;
	}
	devq_session_mark_dirty(s);
}

void devq_session_error(struct devq_session *s, Devq__Code code, const char *request,
			const struct devq_buf *b, const uint32_t *queue, const char *fmt, ...)
{
	char msg[640]; /* device_lost notices name several sessions */
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	devq_slog(DEVQ_LOG_INFO, s, code, queue ? (int64_t)*queue : -1, -1, "%s: %s", request, msg);
	Devq__Error e = DEVQ__ERROR__INIT;
	e.code = code;
	e.message = msg;
	e.request = (char *)request;
	if (b) {
		e.has_buffer = true;
		e.buffer = b->id;
	}
	if (queue) {
		e.has_queue = true;
		e.queue = *queue;
	}
	Devq__DaemonMessage m = DEVQ__DAEMON_MESSAGE__INIT;
	m.body_case = DEVQ__DAEMON_MESSAGE__BODY_ERROR;
	m.error = &e;
	devq_session_send(s, &m, NULL, 0);
}

static void on_conn_closed(uv_handle_t *h)
{
	struct devq_session *s = h->data;
	close(s->fd);
	s->fd = -1;
	devq_session_maybe_free(s);
}

void devq_session_maybe_free(struct devq_session *s)
{
	if (s->connected || s->fd >= 0 || s->dirty || s->ops_in_flight || s->nbufs)
		return;
	devq_session_free(s);
}

static void session_close(struct devq_session *s)
{
	if (!s->connected)
		return;
	devq_slog(DEVQ_LOG_INFO, s, -1, -1, -1, "disconnected (%llu ops in flight, %u buffers)",
		  (unsigned long long)s->ops_in_flight, s->nbufs);
	s->connected = false;
	s->ncmpl = 0;
	if (s->quota.throttled) {
		s->quota.throttled = false;
		s->d->nthrottled--;
	}
	devq_rx_fini(&s->rx); /* fds received and not claimed: closed now */
	uv_poll_stop(&s->poll);
	uv_close((uv_handle_t *)&s->poll, on_conn_closed);
	devq_tx_fini(&s->tx);
	devq_session_teardown(s);
}

static void set_events(struct devq_session *s, int events)
{
	/* Stopping: no new requests, only the last replies go out.
	 * Throttled: backpressure until completions free room (quota.h). */
	if (s->d->stopping || s->quota.throttled)
		events &= ~UV_READABLE;
	if (!s->connected || events == s->poll_events)
		return;
	s->poll_events = events;
	if (events)
		uv_poll_start(&s->poll, events, conn_cb);
	else
		uv_poll_stop(&s->poll);
}

static void session_flush(struct devq_session *s)
{
	if (!s->connected)
		return;
	push_completions(s);
	size_t queued = s->tx.bytes;
	int r = devq_tx_flush(&s->tx, s->fd);
	/* The page tells the client when there is something to read. */
	devq_cpage_note_tx(s->cpage, queued - s->tx.bytes);
	if (r == -EAGAIN && s->tx.bytes > s->d->cfg.q_outbound) {
		/* A client that does not read its replies would make us hold
		 * them forever: its work still completes, then is freed. */
		log_warn("session %llu: %zu bytes unsent, above the quota of %llu "
			 "(quota-outbound-kb): the client does not read; disconnecting",
			 (unsigned long long)s->id, s->tx.bytes,
			 (unsigned long long)s->d->cfg.q_outbound);
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
	devq_session_error(s, DEVQ__CODE__PROTOCOL_ERROR, "frame", NULL, NULL, "%s", msg);
	s->close_after_flush = true;
}

/* Where client messages are unpacked, one frame at a time (loop thread). */
static struct devq_arena frame_arena;

static void handle_frame(struct devq_session *s, struct devq_frame *f, uint64_t t)
{
	if (f->type != DEVQ_FRAME_CLIENT) {
		protocol_close(s, "frame type %u is not a client message", f->type);
		devq_frame_close_fds(f);
		return;
	}
	/* Decoded into the frame arena (a Submit by msg_dec.c, the rest by
	 * protobuf-c): nothing of the message outlives the dispatch (a held
	 * Submit is copied by quota.c). */
	if (!frame_arena.pa.alloc)
		devq_arena_init(&frame_arena);
	Devq__ClientMessage *m = devq_msg_dec(&frame_arena.pa, f->len, f->payload);
	if (!m) {
		devq_arena_reset(&frame_arena);
		protocol_close(s, "malformed ClientMessage");
		devq_frame_close_fds(f);
		return;
	}
	devq_session_dispatch(s, m, f, t);
	devq_arena_reset(&frame_arena);
	devq_frame_close_fds(f); /* whatever the message did not claim */
}

/* A session with ops of a Submit held back (over its in-flight quota) is
 * not read until completions free room: backpressure, never a drop.  Other
 * requests (status, buffers) are served until a Submit is held. */
static bool throttle_if_over(struct devq_session *s)
{
	if (s->quota.throttled)
		return true;
	if (!s->quota.held)
		return false;
	s->quota.throttled = true;
	s->d->nthrottled++;
	log_debug("session %llu: not read until ops complete: %llu in flight",
		  (unsigned long long)s->id, (unsigned long long)s->ops_in_flight);
	set_events(s, s->poll_events);
	return true;
}

/* Handles the complete frames already received, while the quota allows. */
static void session_frames(struct devq_session *s, uint64_t t)
{
	struct devq_frame f;
	int r = 0;
	while (s->connected && !s->close_after_flush && !throttle_if_over(s) &&
	       (r = devq_rx_next(&s->rx, &f)) == 1)
		handle_frame(s, &f, t);
	if (r == -EMSGSIZE)
		protocol_close(s, "frame exceeds the maximum payload of %u bytes",
			       s->d->cfg.max_frame);
	else if (r < 0)
		protocol_close(s, "fds do not match the frames that declare them");
}

static void resume_throttled(struct devq_daemon *d)
{
	if (!d->nthrottled || d->stopping)
		return;
	for (struct devq_session *s = d->sessions; s; s = s->next) {
		if (!s->quota.throttled || !devq_quota_may_resume(s))
			continue;
		s->quota.throttled = false;
		d->nthrottled--;
		if (!devq_quota_resume_held(s)) {
			throttle_if_over(s);
			continue;
		}
		session_frames(s, devq_now_ns());
		devq_session_mark_dirty(s); /* its flush restarts reading */
	}
}

static void session_read(struct devq_session *s)
{
	for (int i = 0; i < READS_PER_WAKE && s->connected && !s->close_after_flush &&
			!s->quota.throttled;
	     i++) {
		ssize_t n = devq_rx_recv(&s->rx, s->fd, MSG_DONTWAIT);
		uint64_t t = devq_now_ns();
		if (n == -EAGAIN)
			break;
		if (n == 0) {
			if (s->rx.len)
				log_info("session %llu: EOF inside a frame", (unsigned long long)s->id);
			session_close(s);
			return;
		}
		if (n == -EMSGSIZE) {
			protocol_close(s, "frame exceeds the maximum payload of %u bytes",
				       s->d->cfg.max_frame);
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
		if (s->rx.fd_count > s->d->cfg.q_session_fds) {
			protocol_close(s,
				       "%zu received fds wait for their frames, above the quota of "
				       "%u (quota-session-fds)",
				       s->rx.fd_count, s->d->cfg.q_session_fds);
			break;
		}
		session_frames(s, t);
		/* What one read brought is handed over: wake the streams now,
		 * once for all its frames.  Not after the read loop: the read
		 * that finds the socket empty would cost a lone op 1.5 us
		 * (round trip 4.7 against 3.2 us). */
		if (s->d->flush_due) {
			s->d->flush_due = false;
			devq_sched_flush(s->d);
		}
	}
}

static void conn_cb(uv_poll_t *h, int status, int events)
{
	struct devq_session *s = h->data;
	struct devq_daemon *d = s->d;
	if (status < 0) {
		session_close(s);
	} else {
		if ((events & UV_READABLE) && !d->stopping)
			session_read(s);
		if (s->connected)
			devq_session_mark_dirty(s);
	}
	flush_dirty(d);
}

/* Access policy and per-user session quota, at connect: a refused peer
 * gets an Error saying why, and the connection closes once it is sent. */
static void admit(struct devq_session *s, const struct devq_peer *peer, int peer_err)
{
	char why[400];
	int code = 0;
	if (peer_err < 0) {
		snprintf(why, sizeof(why), "cannot read the peer's credentials: %s",
			 strerror(-peer_err));
		code = DEVQ__CODE__PERMISSION_DENIED;
	} else if (!devq_policy_admits(&s->d->policy, peer, why, sizeof(why))) {
		code = DEVQ__CODE__PERMISSION_DENIED;
	} else if (devq_quota_attach(s, why, sizeof(why)) < 0) {
		code = DEVQ__CODE__RESOURCE_EXHAUSTED;
	} else if (devq_fair_attach(s) < 0) {
		snprintf(why, sizeof(why), "out of memory");
		code = DEVQ__CODE__RESOURCE_EXHAUSTED;
	}
	if (!code)
		return;
	log_warn("session %llu: refused: %s", (unsigned long long)s->id, why);
	devq_session_error(s, code, "hello", NULL, NULL, "%s", why);
	s->close_after_flush = true;
	session_flush(s);
}

static void on_accept(uv_poll_t *h, int status, int events)
{
	struct devq_daemon *d = h->data;
	(void)events;
	if (status < 0 || d->stopping)
		return;
	for (;;) {
		int fd = accept4(d->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
				log_warn("accept: %s", strerror(errno));
			return;
		}
		struct devq_peer peer;
		int pr = devq_peer_read(fd, &peer);
		struct devq_session *s = calloc(1, sizeof(*s));
		if (!s) {
			log_err("accept: out of memory");
			if (peer.pidfd >= 0)
				close(peer.pidfd);
			close(fd);
			continue;
		}
		s->d = d;
		s->id = ++d->next_session_id;
		s->fd = fd;
		s->pid = peer.pid;
		s->uid = peer.uid;
		s->gid = peer.gid;
		s->pidfd = peer.pidfd;
		s->has_pidfd = peer.pidfd >= 0;
		s->connected = true;
		atomic_init(&s->cancel, false);
		atomic_init(&s->cp_eager, false);
		devq_rx_init(&s->rx, d->cfg.max_frame);
		devq_tx_init(&s->tx);
		uv_poll_init(d->loop, &s->poll, fd);
		s->poll.data = s;
		s->next = d->sessions;
		if (s->next)
			s->next->prev = s;
		d->sessions = s;
		d->sessions_total++;
		s->poll_events = UV_READABLE;
		uv_poll_start(&s->poll, UV_READABLE, conn_cb);
		log_info("session %llu: connected (pid %d, uid %u, gid %u%s)",
			 (unsigned long long)s->id, (int)s->pid, (unsigned)s->uid,
			 (unsigned)s->gid, s->has_pidfd ? ", pidfd" : "");
		admit(s, &peer, pr);
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
	for (struct devq_session *s = d->sessions, *n; s; s = n) {
		n = s->next;
		session_flush(s); /* best effort: the last completions */
		session_close(s);
	}
	close_handle((uv_handle_t *)&d->wake);
	close_handle((uv_handle_t *)&d->lazy_timer);
	close_handle((uv_handle_t *)&d->flush_prep);
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
	if (d->ops_in_flight == 0) {
		finish_stop(d);
		return;
	}
	if (devq_now_ns() - d->stop_started > d->cfg.stop_grace_ns) {
		/* The backend still runs ops on our memory: freeing it is not
		 * safe, so leave without cleanup and say so. */
		log_err("stop: %llu ops still running after the grace period; exiting",
			(unsigned long long)d->ops_in_flight);
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
	log_info("stopping (%s): %llu ops in flight, %llu sessions", why,
		 (unsigned long long)d->ops_in_flight, (unsigned long long)d->sessions_total);
	uv_poll_stop(&d->listen_poll);
	close_handle((uv_handle_t *)&d->listen_poll);
	close(d->listen_fd);
	d->listen_fd = -1;
	/* A socket systemd owns stays: it queues clients for the next start. */
	if (d->cfg.socket_path && !d->socket_inherited)
		unlink(d->cfg.socket_path);
	devq_notify_stopping(d);
	/* Ops that have not started are cancelled; running ones finish. */
	for (struct devq_session *s = d->sessions; s; s = s->next) {
		atomic_store(&s->cancel, true);
		set_events(s, s->poll_events);
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

static void on_wake(uv_async_t *a)
{
	struct devq_daemon *d = a->data;
	devq_sched_drain(d);
	resume_throttled(d);
	flush_dirty(d);
}

/* Completions published in a completion page do not wake the loop at once
 * (the client was woken directly): this timer collects them. */
static void on_lazy(uv_timer_t *t)
{
	struct devq_daemon *d = t->data;
	on_wake(&d->wake);
	if (!d->ops_in_flight)
		uv_timer_stop(t);
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
	if (d->flush_due) {
		d->flush_due = false;
		devq_sched_flush(d);
	}
}

void devq_lazy_arm(struct devq_daemon *d)
{
	if (!uv_is_active((uv_handle_t *)&d->lazy_timer) && !d->stopping)
		uv_timer_start(&d->lazy_timer, on_lazy, 1, 1);
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
			close(fd);
			return -e;
		}
		int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		int live = probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0;
		if (probe >= 0)
			close(probe);
		if (live) {
			log_err("%s: another daemon is serving this socket", path);
			close(fd);
			return -EADDRINUSE;
		}
		struct stat st;
		if (lstat(path, &st) == 0 && !S_ISSOCK(st.st_mode)) {
			log_err("%s exists and is not a socket; not removing it", path);
			close(fd);
			return -EEXIST;
		}
		unlink(path);
		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			e = errno;
			close(fd);
			return -e;
		}
	}
	if (listen(fd, 128) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	chmod(path, 0660);
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
	devq_quota_defaults(d);
	if (devq_policy_init(&d->policy, d->cfg.allow_users,
			     d->cfg.allow_groups ? d->cfg.allow_groups : "devq", !d->cfg.allow_groups,
			     perr, sizeof(perr)) < 0) {
		log_err("access policy: %s", perr);
		return 2;
	}
	if (devq_fair_init(&d->fair, d->cfg.fair_shares, perr, sizeof(perr)) < 0) {
		log_err("%s", perr);
		return 2;
	}
	int fd = inherited_socket();
	if (fd == -EINVAL)
		return 1;
	if (fd >= 0) {
		d->socket_inherited = true;
		log_info("using the listening socket passed by systemd");
	} else {
		fd = listen_on(d->cfg.socket_path);
		if (fd < 0) {
			log_err("cannot listen on %s: %s", d->cfg.socket_path, strerror(-fd));
			return 1;
		}
	}
	d->listen_fd = fd;
	uv_poll_init(d->loop, &d->listen_poll, fd);
	d->listen_poll.data = d;
	uv_poll_start(&d->listen_poll, UV_READABLE, on_accept);
	uv_async_init(d->loop, &d->wake, on_wake);
	d->wake.data = d;
	uv_timer_init(d->loop, &d->lazy_timer);
	d->lazy_timer.data = d;
	uv_prepare_init(d->loop, &d->flush_prep);
	d->flush_prep.data = d;
	uv_prepare_start(&d->flush_prep, on_flush_prep);
	uv_timer_init(d->loop, &d->stop_timer);
	d->stop_timer.data = d;
	uv_signal_init(d->loop, &d->sig_term);
	uv_signal_init(d->loop, &d->sig_int);
	d->sig_term.data = d->sig_int.data = d;
	uv_signal_start(&d->sig_term, on_signal, SIGTERM);
	uv_signal_start(&d->sig_int, on_signal, SIGINT);
	devq_stats_start(d);
	log_info("listening on %s (backend %s: %s)",
		 d->socket_inherited ? "the socket-activated fd" : d->cfg.socket_path, d->be->name,
		 d->be->device);
	/* Ready only now: the backend is up and the socket is being served. */
	if (devq_notify_ready(d) < 0) {
		log_err("out of memory");
		return 1;
	}
	return 0;
}

int devq_server_run(struct devq_daemon *d)
{
	int r = devq_server_start(d);
	if (r)
		return r;
	uv_run(d->loop, UV_RUN_DEFAULT);
	devq_arena_fini(&frame_arena);
	devq_sched_fini();
	return d->exit_code;
}
