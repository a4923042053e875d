/* SPDX-License-Identifier: Apache-2.0 */
/* A client session as the core sees it: its buffers, queues, counters,
 * completion page, fairness and quota state, and its outbox (core/outbox.h).
 * The transport (socket, poll, receive buffer, throttling) is the server's
 * and hangs off `conn`; while the server holds the session (`held`) it is
 * not freed.  Loop thread, except the atomics, which completers read. */
#ifndef DEVQ_SESSION_H
#define DEVQ_SESSION_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/idmap.h"
#include "base/log.h"
#include "codec/cmpl_enc.h" /* struct devq_cmpl */
#include "core/fair.h"
#include "core/quota.h"
#include "frame.h"

struct devq_engine;
struct devq_cpage;

struct devq_session {
	struct devq_engine *e;
	struct devq_session *prev, *next;
	uint64_t id;
	pid_t pid;
	uid_t uid;
	gid_t gid;
	bool admin; /* root or in the admin group: may see every user's work */
	/* in observer-groups: sees every tenant's status and metrics, as an
	 * admin does, and nothing more (no trace of others, no admin call) */
	bool observer;
	/* may make admin calls (grant, evict): root or control-groups, and
	 * never on a tenant socket (server/tenants.c) */
	bool control;
	/* may open high-priority queues: root, the daemon's user, or granted
	 * by priority-users/priority-groups (set by the server at connect) */
	bool may_high;
	char name[64];
	void *conn;      /* the server's transport state */
	bool held;       /* the transport still refers to the session */
	bool connected;  /* replies can be delivered */
	bool hello_done;
	bool close_after_flush;
	atomic_bool cancel;
	struct devq_tx tx; /* the outbox: frames not yet written */
	struct idmap bufs;   /* id -> struct devq_buf */
	struct idmap queues; /* id -> struct devq_timeline */
	/* sched.c: the queue the last submit named (NULL: none yet), tried
	 * before the map: a client's ops mostly come queue by queue.  A
	 * queue lives as long as its session, so this never dangles. */
	struct devq_timeline *last_q;
	uint64_t ops_in_flight, ops_completed, bytes_mapped;
	unsigned nbufs;
	uint64_t trace_failed; /* ops that completed with an error (trace.c) */
	/* BufferReady replies waiting for the buffer worker's populate
	 * (buffer.h): the server does not read the session meanwhile. */
	unsigned populating;
	/* A TraceReply being built in steps (requests/tracereq.c): the server
	 * reads no further frame of the session until it is queued. */
	void *trace_job;
	/* Completions gathered during one drain, sent as one frame. */
	struct devq_cmpl *cmpl;
	size_t ncmpl, cmpl_cap;
	/* Send a Completions frame even with no record in it: a wake-up for
	 * a client that watches the socket and just disarmed its ring. */
	bool cmpl_nudge;
	struct devq_session *dirty_next;
	bool dirty;
	struct devq_cpage *cpage; /* completion page (cpage.c), NULL: none */
	atomic_bool cp_eager; /* ops wait for backend slots: completions wake the loop */
	atomic_uint cp_deferred; /* completions since the loop last drained (eager) */
	struct devq_fair_sess fair;   /* fair.c */
	struct devq_quota_sess quota; /* quota.c */
	struct devq_tenant *tenant;   /* tenant.h: set at admission, NULL before */
	/* A connection on a granted tenant's socket: that tenant, set by the
	 * server at accept (admission makes it s->tenant); NULL otherwise. */
	struct devq_tenant *grant;
};

/* A session event in the log, with the session's journal fields. */
#define devq_slog(level, s, code, queue, point, ...)                                    \
	devq_log_fields((level),                                                        \
			&(struct devq_log_ctx){ (s)->id, (long)(s)->pid, (unsigned)(s)->uid,   \
						(s)->grant ? (s)->grant->name : NULL },       \
			(code), (queue), (point), __VA_ARGS__)

/* A new session of the given peer, held by the transport and connected:
 * NULL when out of memory.  Admission (quota, fairness lanes) is
 * devq_session_admit's. */
struct devq_session *devq_session_new(struct devq_engine *e, pid_t pid, uid_t uid, gid_t gid);
/* Per-user session quota and fairness lanes: 0, or a Devq__Code with why
 * filled in (the client is refused). */
int devq_session_admit(struct devq_session *s, char *why, size_t whylen);
/* The connection is gone: replies can no longer be delivered; what has
 * not started is cancelled; every buffer is released (each waits for its
 * last consumer). */
void devq_session_disconnect(struct devq_session *s);
/* The transport let go of s (after disconnect): s is freed once idle. */
void devq_session_unhold(struct devq_session *s);
/* Frees s if nothing refers to it any more: not held, not on the dirty
 * list, no op in flight, no buffer.  Called after the dirty list is
 * processed; true when s was freed. */
bool devq_session_maybe_free(struct devq_session *s);

#endif
