/* devqd internals shared by its modules: the daemon, sessions, buffers,
 * queues and op records.  All of it is owned by the loop thread; backend
 * threads only touch struct devq_bop (see backend.h). */
#ifndef DEVQ_DAEMON_H
#define DEVQ_DAEMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

#include "backend.h"
#include "codec/cmpl_enc.h" /* struct devq_cmpl */
#include "cpage.h"
#include "pool.h"
#include "devq.pb-c.h"
#include "frame.h"
#include "idmap.h"
#include "kernels.h"
#include "metrics.h"
#include "fair.h"
#include "policy.h"
#include "quota.h"

#define DEVQ_PROTO_MIN 1
#define DEVQ_PROTO_MAX 1
#define DEVQ_VERSION "0.1.0"

/* Exit status after the device was lost (EX_UNAVAILABLE): the service
 * manager restarts devqd on a fresh device context. */
#define DEVQ_EXIT_DEVICE_LOST 69

struct devq_config {
	const char *socket_path;
	const char *backend; /* "cpu", "cuda" or "auto" */
	int device;          /* GPU ordinal for the CUDA backend */
	unsigned streams;
	unsigned priority_streams; /* high-priority streams, besides `streams` */
	int verbose;
	uint64_t max_op_ns;       /* admin bound on one op's duration */
	uint64_t max_buffer_bytes;
	uint32_t max_frame;
	unsigned max_queues;      /* per session */
	uint64_t stop_grace_ns;   /* shutdown: how long in-flight work may take */
	/* Watchdog: ops in flight and no completion for this long means the
	 * device or a completion thread is stuck (notify.c stops pinging). */
	uint64_t stall_ns;
	bool test_faults;         /* expose the fault-injection kernel (tests) */
	unsigned trace_records;   /* trace.c: op records kept (0: off) */
	const char *admin_group;  /* may trace every user's sessions (NULL: root only) */
	/* Tenancy (policy.c, quota.c, fair.c); 0 or NULL means the default,
	 * which devq_quota_defaults fills in. */
	const char *allow_users, *allow_groups; /* comma-separated; groups: "devq" */
	unsigned fair_k;                        /* ops per session inside the backend */
	const char *fair_shares;                /* "user:weight,...": k*weight each */
	unsigned q_session_ops, q_user_ops;     /* ops in flight: backpressure */
	unsigned q_session_buffers, q_user_buffers;
	uint64_t q_session_pinned, q_user_pinned; /* bytes of shared buffers */
	uint64_t q_session_device, q_user_device; /* bytes of device buffers */
	unsigned q_user_queues, q_user_sessions;
	unsigned q_session_fds;                 /* received fds not yet claimed */
	uint64_t q_outbound;                    /* unsent bytes before a disconnect */
};

#define DEVQ_FAIR_K_DEFAULT 16

struct devq_session;
struct devq_op;

struct devq_buf {
	struct devq_session *s;
	uint64_t id, size;
	Devq__BufferKind kind;
	bool read_only;
	bool releasing;  /* release asked; freed when inflight drops to 0 */
	void *host;      /* shared: daemon mapping; NULL for device buffers */
	size_t map_len;
	uint64_t devaddr;
	unsigned inflight; /* ops referencing it that have not completed */
	/* Hazard tracking (dma_resv rule): readers wait for the last writer,
	 * writers for the last writer and every reader since. */
	struct devq_op *last_writer;
	struct devq_op **readers;
	unsigned nreaders, readers_cap;
};

struct devq_fail_range {
	uint64_t from, to; /* failed points [from, to); to == UINT64_MAX: open */
};

struct devq_queue {
	uint32_t id;
	unsigned stream;
	uint64_t submitted; /* points handed out */
	uint64_t completed; /* highest point whose completion the loop has seen */
	/* Ops in flight, ring indexed by point % ring_cap, points
	 * (completed, submitted]. */
	struct devq_op **ring;
	size_t ring_cap;
	bool reset;        /* the next op does not inherit earlier failure */
	uint64_t reset_at; /* first point submitted after the last reset */
	struct devq_fail_range *fails;
	unsigned nfails;
	struct devq_cpage_slot *cslot; /* completion page slot, NULL: none */
};

struct devq_op {
	struct devq_bop b; /* first: the backend's view */
	struct devq_session *s;
	struct devq_queue *q;
	uint64_t point;
	unsigned refs;
	bool completed;
	struct devq_buf *bufs[DEVQ_MAX_PARAMS]; /* referenced, each once */
	unsigned acc[DEVQ_MAX_PARAMS];          /* access of bufs[i] */
	unsigned nbufs;
	uint64_t t_client_submit, t_received, t_observed;
	struct devq_op *cnext; /* completion list link (backend threads -> loop) */
	struct devq_bop *winline[4]; /* b.waits when it has at most 4 entries */
	struct devq_op *fnext; /* fair.c: waiting for a backend slot */
	bool fhanded;          /* fair.c: given to the backend */
};

struct devq_daemon;
struct devq_trace_ring;

struct devq_session {
	struct devq_daemon *d;
	struct devq_session *prev, *next;
	uint64_t id;
	pid_t pid;
	uid_t uid;
	gid_t gid;
	char name[64];
	int fd;
	uv_poll_t poll;
	int poll_events;
	bool connected; /* fd open and served */
	bool hello_done;
	bool close_after_flush;
	atomic_bool cancel;
	struct devq_rx rx;
	struct devq_tx tx;
	struct idmap bufs;   /* id -> struct devq_buf */
	struct idmap queues; /* id -> struct devq_queue */
	uint64_t ops_in_flight, ops_completed, bytes_mapped;
	unsigned nbufs;
	uint64_t trace_failed; /* ops that completed with an error (trace.c) */
	/* Completions gathered during one drain, sent as one frame. */
	struct devq_cmpl *cmpl;
	size_t ncmpl, cmpl_cap;
	struct devq_session *dirty_next;
	bool dirty;
	struct devq_cpage *cpage; /* completion page (cpage.c), NULL: none */
	atomic_bool cp_eager; /* ops wait for backend slots: completions wake the loop */
	atomic_uint cp_deferred; /* completions since the loop last drained (eager) */
	struct devq_fair_sess fair;   /* fair.c */
	struct devq_quota_sess quota; /* quota.c */
	int pidfd;                    /* SO_PEERPIDFD, when has_pidfd */
	bool has_pidfd;
};

struct devq_daemon {
	struct devq_config cfg;
	uv_loop_t *loop;
	struct devq_backend *be;
	struct devq_sig *sigs; /* parsed manifest, indexed like devq_kernels */
	unsigned *stream_load; /* queues mapped onto each device stream */
	int listen_fd;
	bool socket_inherited; /* from systemd: not ours to unlink */
	uv_poll_t listen_poll;
	uv_async_t wake;
	uv_signal_t sig_term, sig_int;
	uv_timer_t stop_timer;
	bool stopping;
	uint64_t stop_started;
	int exit_code;
	pthread_mutex_t cmpl_lock;
	struct devq_op *cmpl_head, *cmpl_tail; /* from backend threads */
	/* Completions published in a page whose loop wake-up was deferred:
	 * the lazy timer (server.c) drains them within a millisecond. */
	unsigned cmpl_deferred; /* under cmpl_lock */
	uv_timer_t lazy_timer;
	/* Backend flush deferred to the end of the loop iteration (server.c):
	 * every frame read in one iteration goes to the device streams with
	 * one wake-up per stream. */
	uv_prepare_t flush_prep;
	bool flush_due;
	struct devq_session *sessions;
	struct devq_trace_ring *trace; /* recent op records (trace.c) */
	struct devq_session *dirty;
	struct devq_notify *notify; /* notify.c: READY/STATUS/WATCHDOG state */
	uint64_t next_session_id;
	struct devq_metrics metrics; /* metrics.c: for devctl metrics */
	uint64_t start_ns;
	/* totals */
	uint64_t ops_in_flight, ops_completed, ops_failed, sessions_total, bytes_mapped;
	unsigned nbufs;
	/* Why the backend in use was chosen, when that deserves an operator's
	 * attention (e.g. CPU fallback on a host with /dev/nvidia*); "" if not. */
	char backend_note[256];
	bool device_lost;
	struct devq_policy policy; /* policy.c: who may connect */
	struct devq_fair fair;     /* fair.c: sessions waiting for backend slots */
	struct devq_user *users;   /* quota.c: usage per Unix user */
	unsigned nthrottled;       /* sessions not read: over their in-flight quota */
};

/* lost.c: the device took a sticky fault (op is the first op reporting it):
 * tell every session, naming the sessions that had work on the device, and
 * stop with DEVQ_EXIT_DEVICE_LOST once the ops in flight have failed. */
void devq_device_lost(struct devq_daemon *d, const struct devq_op *op);

/* backend_select.c: opens the backend cfg->backend names ("auto" tries the
 * GPU first).  Logs which one and why; on failure logs the reason. */
int devq_backend_select(const struct devq_config *cfg, const struct devq_backend_config *bc,
			struct devq_backend **out, char *note, size_t notelen);

/* log.c */
enum { DEVQ_LOG_ERR, DEVQ_LOG_WARN, DEVQ_LOG_INFO, DEVQ_LOG_DEBUG };
void devq_log_set_level(int level);
void devq_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define log_err(...) devq_log(DEVQ_LOG_ERR, __VA_ARGS__)
#define log_warn(...) devq_log(DEVQ_LOG_WARN, __VA_ARGS__)
#define log_info(...) devq_log(DEVQ_LOG_INFO, __VA_ARGS__)
#define log_debug(...) devq_log(DEVQ_LOG_DEBUG, __VA_ARGS__)
/* A session event: under journald it carries DEVQ_SESSION, DEVQ_CLIENT_PID,
 * DEVQ_CLIENT_UID and, when not negative, DEVQ_QUEUE, DEVQ_POINT and
 * DEVQ_CODE; on stderr it reads "session N: ...". */
void devq_slog(int level, const struct devq_session *s, int code, int64_t queue, int64_t point,
	       const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* server.c: connections and the loop */
int devq_server_run(struct devq_daemon *d);
/* Stops as SIGTERM does, then exits with exit_code. */
void devq_server_stop(struct devq_daemon *d, const char *why, int exit_code); /* start, then run the loop until stopped */
/* Listens and sets up the loop's handles without running it: 0, or the
 * exit status to give up with.  Split from run so that an in-process driver
 * (tests/fuzz) can step the real loop with uv_run(UV_RUN_NOWAIT/ONCE). */
int devq_server_start(struct devq_daemon *d);
void devq_session_send(struct devq_session *s, const Devq__DaemonMessage *m,
		       const int *fds, unsigned nfds);
void devq_session_error(struct devq_session *s, Devq__Code code, const char *request,
			const struct devq_buf *b, const uint32_t *queue, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));
void devq_session_mark_dirty(struct devq_session *s);
/* Keeps the lazy timer running while completions may be published in a
 * page without waking the loop. */
void devq_lazy_arm(struct devq_daemon *d);
void devq_session_maybe_free(struct devq_session *s);

/* session.c: what each client message means */
void devq_session_dispatch(struct devq_session *s, const Devq__ClientMessage *m,
			   struct devq_frame *f, uint64_t t_received);
void devq_session_teardown(struct devq_session *s); /* connection gone */
void devq_session_free(struct devq_session *s);

/* buffer.c */
int devq_buf_create(struct devq_session *s, uint64_t id, uint64_t size, Devq__BufferKind kind,
		    int *fd_out, char *err, size_t errlen);
int devq_buf_import(struct devq_session *s, uint64_t id, uint64_t size, bool read_only, int fd,
		    char *err, size_t errlen);
void devq_buf_release(struct devq_buf *b); /* frees now or once idle */
void devq_buf_put(struct devq_buf *b);     /* an op stopped using it */

/* sched.c: ordering, hand-off, completion */
void devq_sched_submit(struct devq_session *s, const Devq__Op *m, uint64_t t_received);
void devq_sched_drain(struct devq_daemon *d);
/* Stamps t_handoff and gives op to the backend (fair.c decides when). */
/* from_loop: called on the loop thread (else from a completer). */
void devq_sched_handoff(struct devq_op *op, bool from_loop);
/* Tells the backend that everything handed over so far should be issued
 * (a backend may hold back a replayable run to launch it as one graph). */
void devq_sched_flush(struct devq_daemon *d);
/* The same, from the loop thread: done once the loop has run every
 * callback of this iteration, before it waits for I/O again. */
void devq_sched_flush_soon(struct devq_daemon *d);
void devq_op_unref(struct devq_op *op);
void devq_sched_fini(void); /* frees the recycled op records */
/* priority: 0 normal, 1 high (the backend's high-priority streams). */
struct devq_queue *devq_queue_open(struct devq_session *s, uint32_t id, int priority, char *err,
				   size_t errlen);
void devq_queue_reset(struct devq_queue *q);
void devq_queue_free(struct devq_daemon *d, struct devq_queue *q);
void devq_on_complete(void *ud, struct devq_bop *bop); /* backend threads */

/* validate.c: checks one op against the session's handles */
int devq_validate_op(struct devq_session *s, const Devq__Op *m, struct devq_op *op, char *err,
		     size_t errlen);

#endif
