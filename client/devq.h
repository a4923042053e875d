/* SPDX-License-Identifier: Apache-2.0 */
/* libdevq: the client library of devq.
 *
 * A client connects to devqd, hands it shared-memory buffers, opens queues
 * (in-order timelines with ids it chooses) and submits ops without waiting
 * for any reply: the k-th op submitted on queue q completes point (q, k),
 * counting from 1, so both sides know the point at submit time.  Completions
 * arrive asynchronously with a status and raw timestamps.
 *
 * Thread-safety: a devq handle and everything obtained from it belong to one
 * thread at a time.  Use one connection per thread, or serialise calls on a
 * handle with your own lock.  Different handles are independent.
 *
 * fork(): a handle belongs to the process that connected.  In a child,
 * every call that talks to devqd or reads what it shares fails with -ECHILD
 * and sends nothing (the parent's session is unaffected); devq_disconnect
 * there frees only the child's copy.  Connect again in the child.
 *
 * Errors: functions return 0 or a negative errno; devq_last_error() then
 * holds a message.  Daemon-side failures carry a devq code (DEVQ_E_*), see
 * devq_code_name(). */
#ifndef DEVQ_H
#define DEVQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What libdevq exports: it is built with -fvisibility=hidden, so only the
 * functions declared here with DEVQ_EXPORT are in libdevq.so's dynamic
 * symbol table (make check's test_exports holds it to exactly them). */
#ifndef DEVQ_EXPORT
#if defined(__GNUC__) || defined(__clang__)
#define DEVQ_EXPORT __attribute__((visibility("default")))
#else
#define DEVQ_EXPORT
#endif
#endif

#define DEVQ_PROTOCOL_MIN 1
#define DEVQ_PROTOCOL_MAX 1
#define DEVQ_DEFAULT_SOCKET "/run/devqd/devqd.sock"

/* Status codes of completions and errors (the protocol's Code enum). */
enum devq_code {
	DEVQ_OK = 0,
	DEVQ_E_INVALID_ARGUMENT = 1,
	DEVQ_E_NOT_FOUND = 2,
	DEVQ_E_OUT_OF_RANGE = 3,
	DEVQ_E_PERMISSION_DENIED = 4,
	DEVQ_E_RESOURCE_EXHAUSTED = 5,
	DEVQ_E_FAILED_PRECONDITION = 6,
	DEVQ_E_DEPENDENCY_FAILED = 7,
	DEVQ_E_DEVICE_ERROR = 8,
	DEVQ_E_DEVICE_LOST = 9,
	DEVQ_E_PROTOCOL_ERROR = 10,
	DEVQ_E_CANCELLED = 11,
	DEVQ_E_DEADLINE_EXCEEDED = 12,
};
/* An op stopped while it ran leaves its outputs partly written: a host
 * executable that runs in slices (gemm_f32 and gemm_f32_nt on the CPU
 * backend) stops at the end of a slice when its session closes, its
 * tenant is evicted or devqd stops (DEVQ_E_CANCELLED), or when its device
 * time passes devqd's max-op-ms (DEVQ_E_DEADLINE_EXCEEDED); the units it
 * finished (for a gemm, tiles of C) hold their result, the others their
 * old contents. */

/* "ok", "invalid_argument", ... ("unknown" for anything else). */
DEVQ_EXPORT const char *devq_code_name(int code);

/* This library's version, "MAJOR.MINOR.PATCH": the devq release it was built
 * from (devqd --version, devctl --version and `pkg-config --modversion devq`
 * say the same).  The daemon's is in devq_get_info()->daemon_version.
 *
 * The soname (libdevq.so.0) changes its major number only when a program
 * built against an older devq.h could break: a function removed or its
 * signature or meaning changed, a struct the caller allocates or fills
 * (devq_op, devq_arg, devq_completion, devq_timing, devq_phases, devq_error,
 * and devq_buffer, which a caller may build to name an id) or that comes in
 * an array (devq_exec, the sessions and users of devq_status) changed in
 * size or layout, a constant renumbered.  Added functions, added enum values
 * and fields appended to a struct the library allocates alone and hands out
 * by pointer (devq_info, devq_status) keep it.  See libdevq(3), VERSIONS. */
DEVQ_EXPORT const char *devq_version(void);

typedef struct devq devq;

struct devq_info {
	uint32_t version;
	char daemon_version[32];
	char backend[16];
	char device[128];
	uint32_t streams, max_frame, max_fds;
	uint64_t max_op_ns;
	uint64_t session;
	/* The protocol versions the daemon speaks (0 from an older daemon
	 * that does not say). */
	uint32_t daemon_min_version, daemon_max_version;
};

/* Connects and says hello.  path NULL: $DEVQ_SOCKET, else
 * DEVQ_DEFAULT_SOCKET.  Returns -EPROTONOSUPPORT when the daemon speaks no
 * version we do (devq_last_error names both ranges); *out is set even on
 * failure when a handle was made, so the message can be read: free it with
 * devq_disconnect. */
DEVQ_EXPORT int devq_connect(const char *path, const char *client_name, devq **out);
/* The same, claiming the protocol versions [min, max] (for tests). */
DEVQ_EXPORT int devq_connect_versions(const char *path, const char *client_name, uint32_t min,
				      uint32_t max, devq **out);
/* Carries a session over a daemon restart (after a device_lost error, or
 * when the connection broke): connects again to the same socket, retrying
 * for up to timeout_ms while the new daemon starts, says hello, re-imports
 * every shared buffer under its old id and handle (the memory and its
 * contents are the client's and survive) and reopens every queue.  Queue
 * timelines restart at point 0; ops that never completed are gone (the old
 * daemon failed them with device_lost).  Device buffers lived in the lost
 * context: they come back with lost set, and ops naming them fail.
 * Completions and errors already received stay readable.  Keeping shared
 * buffers re-importable costs one fd per buffer in this process. */
DEVQ_EXPORT int devq_reconnect(devq *q, int timeout_ms);
/* Closes the connection and frees every handle obtained from it.  The daemon
 * finishes (or cancels) the session's ops and frees its buffers after. */
DEVQ_EXPORT void devq_disconnect(devq *q);

DEVQ_EXPORT const struct devq_info *devq_get_info(const devq *q);
DEVQ_EXPORT const char *devq_last_error(const devq *q);
/* The socket, readable when messages wait.  Calling it also asks the
 * daemon to send completion records there rather than into the completion
 * ring (see below), so that a program that watches this fd in its own
 * event loop sees it become readable when completions wait.  -ECHILD in a
 * child of fork(), as every call that talks to devqd. */
DEVQ_EXPORT int devq_fd(const devq *q);

/* ---- buffers --------------------------------------------------------- */

enum devq_buffer_kind {
	DEVQ_BUFFER_SHARED = 0, /* memfd mapped here and in the daemon */
	DEVQ_BUFFER_DEVICE = 1, /* device memory; map is NULL */
};

#define DEVQ_IMPORT_READ_ONLY 1u

struct devq_buffer {
	uint64_t id;
	uint64_t size;
	enum devq_buffer_kind kind;
	void *map; /* this process's mapping (shared buffers), else NULL */
	bool read_only;
	bool released; /* the daemon sent BufferReleased */
	bool lost;     /* a device buffer that did not survive devq_reconnect */
	/* libdevq keeps fields of its own beside the handles it makes. */
};

/* The daemon creates a sealed memfd (or device memory); round trip. */
DEVQ_EXPORT int devq_buffer_create(devq *q, uint64_t size, enum devq_buffer_kind kind,
				   struct devq_buffer **out);
/* Hands over a memfd sealed with F_SEAL_SHRINK holding at least size bytes;
 * the caller keeps its fd.  Round trip. */
DEVQ_EXPORT int devq_buffer_import(devq *q, int memfd, uint64_t size, unsigned flags,
				   struct devq_buffer **out);
/* Asks for release; the daemon keeps the buffer until every op using it has
 * completed.  The handle and mapping stay valid until
 * devq_buffer_wait_released() returns 0, which also frees them. */
DEVQ_EXPORT int devq_buffer_release(devq *q, struct devq_buffer *b);
DEVQ_EXPORT int devq_buffer_wait_released(devq *q, struct devq_buffer *b, int timeout_ms);

/* ---- executables and queues ------------------------------------------ */

struct devq_exec {
	uint32_t id;
	char name[32];
	char signature[256]; /* e.g. "n:u64, a:f32, x:in f32[n], y:inout f32[n]" */
};

/* The daemon's executables (fetched once per connection, round trip): the
 * built-ins, then those of its executable repository (devqd(8)).  A
 * repository executable keeps its id when the daemon reloads a new version
 * of it; once removed from the repository, a submit naming its id fails
 * with DEVQ_E_NOT_FOUND. */
DEVQ_EXPORT int devq_exec_list(devq *q, const struct devq_exec **list, size_t *n);
DEVQ_EXPORT int devq_exec_lookup(devq *q, const char *name, const struct devq_exec **out);

/* More about an executable of devq_exec_list's list; the library owns it
 * (valid as long as the list). */
struct devq_exec_info {
	const char *source;      /* "built-in", or the repository file DIR/NAME.exec */
	const char *backends;    /* code it has: "cpu", "cuda", "cpu,cuda" ("": old daemon) */
	const char *description; /* "" when none */
	int unavailable; /* 1: the daemon's backend has no code for it (submit fails) */
};
DEVQ_EXPORT const struct devq_exec_info *devq_exec_info(devq *q, const struct devq_exec *e);

/* An executable's cost expression over its scalar arguments (gemm:
 * "2*m*n*k"; "" when it declares none, or from an older daemon), and its
 * rate in cost units per second when the list was fetched: *rate_per_s
 * (0: not known yet), *pinned (1: set by devqd.conf, not learned) and
 * *samples (ops it was learned from, counted up to 8); any of them may be
 * NULL.  The string is the library's, valid as long as the list.  NULL
 * when e is not of devq_exec_list's list.  (A call of its own, not more
 * members of struct devq_exec_info, so that no program built against an
 * older header reads past the struct it knows.) */
DEVQ_EXPORT const char *devq_exec_cost(devq *q, const struct devq_exec *e, uint64_t *rate_per_s,
				       int *pinned, unsigned *samples);

/* Opens queue id (no reply: errors arrive asynchronously).  No queue is
 * open until the client opens it: devq_submit on another fails at once with
 * -ENOENT.  When the daemon refuses the open (resource_exhausted at its
 * per-session limit, failed_precondition for a priority it has no streams
 * for, ...), the refusal arrives as a devq_next_error with request
 * "open_queue", and every op submitted on the queue, before or after it is
 * read, completes as failed at its point, in order, with the refusal's code
 * and reason: devq_wait and devq_next_completion return those failed
 * completions instead of waiting.  Opening a refused id again is allowed;
 * its points then restart at 1, as after devq_reconnect. */
DEVQ_EXPORT int devq_queue_open(devq *q, uint32_t id);
/* The same with a priority: 0 normal, 1 high.  A high-priority queue runs
 * on the daemon's high-priority streams (CUDA stream priorities: the device
 * starts its work first, without preempting a running kernel; on the CPU
 * backend streams the workers take first).  Errors come asynchronously, like
 * devq_queue_open's: invalid_argument for another value,
 * failed_precondition when the daemon has no such streams, permission_denied
 * for a user the daemon does not grant high priority (devqd's
 * priority-users, priority-groups; root and the daemon's user always may). */
DEVQ_EXPORT int devq_queue_open_priority(devq *q, uint32_t id, int priority);
/* Later ops on the queue no longer inherit an earlier failure. */
DEVQ_EXPORT int devq_queue_reset(devq *q, uint32_t id);

/* ---- ops ------------------------------------------------------------- */

enum devq_arg_type {
	DEVQ_ARG_U64,
	DEVQ_ARG_U32,
	DEVQ_ARG_I64,
	DEVQ_ARG_I32,
	DEVQ_ARG_F32,
	DEVQ_ARG_F64,
	DEVQ_ARG_BUFFER,
};

struct devq_arg {
	const char *name;
	enum devq_arg_type type;
	union {
		uint64_t u64;
		uint32_t u32;
		int64_t i64;
		int32_t i32;
		float f32;
		double f64;
		struct {
			const struct devq_buffer *buf;
			uint64_t offset; /* bytes */
		} buf;
	} v;
};

/* Arguments without spelling out the union (C; compound literals):
 *   struct devq_arg args[] = { DEVQ_U64("n", 1024), DEVQ_F32("a", 2.0f),
 *                              DEVQ_BUF("x", x, 0), DEVQ_BUF("y", y, 0) };
 * name: the signature's parameter; BUF's offset is in bytes. */
#ifndef __cplusplus
#define DEVQ_U64(name, x) ((struct devq_arg){ (name), DEVQ_ARG_U64, { .u64 = (x) } })
#define DEVQ_U32(name, x) ((struct devq_arg){ (name), DEVQ_ARG_U32, { .u32 = (x) } })
#define DEVQ_I64(name, x) ((struct devq_arg){ (name), DEVQ_ARG_I64, { .i64 = (x) } })
#define DEVQ_I32(name, x) ((struct devq_arg){ (name), DEVQ_ARG_I32, { .i32 = (x) } })
#define DEVQ_F32(name, x) ((struct devq_arg){ (name), DEVQ_ARG_F32, { .f32 = (x) } })
#define DEVQ_F64(name, x) ((struct devq_arg){ (name), DEVQ_ARG_F64, { .f64 = (x) } })
#define DEVQ_BUF(name, b, off)                                                             \
	((struct devq_arg){ (name), DEVQ_ARG_BUFFER, { .buf = { (b), (off) } } })
#endif

struct devq_wait {
	uint32_t queue;
	uint64_t point;
};

enum devq_op_kind {
	DEVQ_OP_KERNEL,
	DEVQ_OP_COPY, /* size bytes from src+src_offset to dst+dst_offset */
	DEVQ_OP_FILL, /* size bytes (multiple of 4) of dst+dst_offset with pattern */
};

struct devq_op {
	uint32_t queue;
	enum devq_op_kind kind;
	const struct devq_exec *exec; /* KERNEL */
	const struct devq_arg *args;
	size_t nargs;
	const struct devq_buffer *src, *dst; /* COPY, FILL */
	uint64_t src_offset, dst_offset, size;
	uint32_t pattern;
	const struct devq_wait *waits; /* points that must complete first */
	size_t nwaits;
	/* Skip device timing events (CUDA backend): device start/end are then
	 * the host's observations.  Timing is on by default. */
	bool no_timing;
};

/* Sends ops as one batch and returns at once; points[i] (may be NULL) gets
 * op i's point.  Validation failures come back as failed completions, and so
 * do ops on a queue whose open the daemon refused (devq_queue_open).  An op
 * naming a queue this handle never opened fails the whole call with -ENOENT,
 * nothing sent. */
DEVQ_EXPORT int devq_submit(devq *q, const struct devq_op *ops, size_t n, uint64_t *points);

/* The same, marking the batch replayable: the client will submit these ops
 * (same queues, arguments) again and again, and a backend may capture the
 * batch once and replay it (CUDA graphs).  Semantics are those of
 * devq_submit. */
DEVQ_EXPORT int devq_submit_replayable(devq *q, const struct devq_op *ops, size_t n,
				       uint64_t *points);

/* Per-op options that struct devq_op has no room for (its layout is fixed
 * by the ABI).  The struct grows at its end: size says which version the
 * caller was built with, so a program built against this header keeps
 * working with a later library, and a later program's options are refused
 * rather than ignored by this one.  Zero it, then set size and options:
 *   struct devq_op_ext x = { .size = sizeof x, .deadline_us = 5000 }; */
struct devq_op_ext {
	/* sizeof(struct devq_op_ext) as the caller compiled it: at least
	 * DEVQ_OP_EXT_SIZE_V1 and a multiple of 8.  Bytes past the members
	 * this library knows must be zero (-EINVAL otherwise: an option it
	 * cannot honour). */
	uint32_t size;
	uint32_t reserved; /* 0 */
	/* The op's deadline, in microseconds after devqd received it; 0:
	 * none.  An op the device has not started by then never runs: it
	 * completes DEVQ_E_DEADLINE_EXCEEDED, which fails its queue like any
	 * failure (ops waiting on it complete DEVQ_E_DEPENDENCY_FAILED).
	 * devqd checks it when it hands the op to the device and when the
	 * device starts it; an op already running is not stopped by it.
	 * Measured from receipt, so the client's clock and the time on the
	 * way there do not count. */
	uint64_t deadline_us;
};
#define DEVQ_OP_EXT_SIZE_V1 16

/* devq_submit with per-op options: ext[i] applies to ops[i].  ext is an
 * array of n entries of ext[0].size bytes each (every entry has the same
 * size), or NULL: then this is devq_submit.  Not replayable: a deadline
 * would make a batch that is replayed behave differently each time.
 * -EINVAL, nothing sent, for a size below DEVQ_OP_EXT_SIZE_V1 or not a
 * multiple of 8, a reserved member set, or an entry whose bytes past the
 * members this library knows are not zero. */
DEVQ_EXPORT int devq_submit_ex(devq *q, const struct devq_op *ops, size_t n, uint64_t *points,
			       const struct devq_op_ext *ext);

/* ---- completions ----------------------------------------------------- */

/* Raw CLOCK_MONOTONIC timestamps (ns), in causal order. */
struct devq_timing {
	uint64_t client_submit, received, handoff, device_start, device_end, observed,
		client_received;
	uint64_t enqueue_ns; /* the backend's own enqueue cost */
};

struct devq_phases {
	uint64_t submit; /* client submit -> handed to the device queue */
	uint64_t queued; /* handed off -> device start */
	uint64_t device; /* device start -> device end */
	uint64_t sync;   /* device end -> client received */
	uint64_t total;  /* client submit -> client received */
};

struct devq_completion {
	uint32_t queue;
	uint64_t point;
	int code; /* DEVQ_OK or DEVQ_E_* */
	char message[160];
	struct devq_timing t;
};

DEVQ_EXPORT void devq_timing_phases(const struct devq_timing *t, struct devq_phases *p);

/* Next completion in arrival order; timeout_ms < 0 waits forever.
 * -ETIMEDOUT when none came in time. */
DEVQ_EXPORT int devq_next_completion(devq *q, struct devq_completion *out, int timeout_ms);
/* Blocks until point (queue, point) completed; out (may be NULL) gets its
 * completion, which devq_next_completion will then not return. */
DEVQ_EXPORT int devq_wait(devq *q, uint32_t queue, uint64_t point, int timeout_ms,
			  struct devq_completion *out);
/* Highest completed point of queue seen so far (no syscall). */
DEVQ_EXPORT uint64_t devq_completed(const devq *q, uint32_t queue);
/* Reads whatever has arrived, without blocking. */
DEVQ_EXPORT int devq_poll(devq *q);

/* Asynchronous errors not tied to a completion (an unknown queue, a failed
 * release...), oldest first.  Returns 1 with *out filled, 0 when none. */
struct devq_error {
	int code;
	char request[32];
	char message[256];
	bool has_buffer, has_queue;
	uint64_t buffer;
	uint32_t queue;
};
DEVQ_EXPORT int devq_next_error(devq *q, struct devq_error *out);

/* ---- submission performance ------------------------------------------ */

/* Submit coalescing.  With max_bytes > 0, devq_submit only queues its frame;
 * the queue is written (one sendmsg for many frames) once max_bytes are
 * waiting, by devq_flush, and before anything that reads or waits: every
 * request, devq_wait, devq_next_completion, devq_poll, devq_disconnect.  A
 * client that polls devq_fd() itself must call devq_flush first.  0 (the
 * default) writes each submit at once. */
DEVQ_EXPORT int devq_set_coalescing(devq *q, size_t max_bytes);
/* Writes every queued frame; blocks until the kernel took them. */
DEVQ_EXPORT int devq_flush(devq *q);

/* Counters of this handle's socket traffic, for benchmarks. */
struct devq_io_stats {
	uint64_t flushes;        /* write batches (sendmsg calls, up to 64 frames each) */
	uint64_t bytes_sent;
	uint64_t recv_calls;     /* recvmsg calls */
	uint64_t bytes_received;
	uint64_t page_hits;      /* devq_wait answered by the completion page, no syscall */
	uint64_t futex_waits;    /* sleeps on the completion page */
};
DEVQ_EXPORT void devq_get_io_stats(const devq *q, struct devq_io_stats *out);

/* ---- completion page ------------------------------------------------- */

/* libdevq asks for a shared-memory completion page at connect (unless
 * $DEVQ_NO_CPAGE=1).  With it, devq_wait(..., out NULL) and devq_completed
 * read each queue's completed point from memory the daemon publishes:
 * no syscall when the point is already complete; otherwise it polls the
 * page for $DEVQ_SPIN_US microseconds (default 50; 0: never), restarting
 * that time whenever the queue completes another point, for at most 40
 * times it in all, and then sleeps on a futex.  For the queue's next
 * point the poll time follows the connection's recent such waits (up to
 * 1.5 times their average while that is below 8 times $DEVQ_SPIN_US), and
 * it is 0 on the one CPU a confined daemon may use (libdevq(3),
 * DEVQ_SPIN_US).
 * Completion records (status, message, timing) come from a ring in the
 * same shared memory (unless $DEVQ_NO_CRING=1 or the daemon has none):
 * devq_wait(..., out) and devq_next_completion copy them from there with
 * no syscall and no decoding.  A program that does not take its records
 * pays a copy for each (libdevq moves them out of the ring before it fills
 * when a submit or a wait finds it half full); if the ring fills all the
 * same, later records come on the socket until those are read, with no
 * record lost, repeated or reordered.  devq_fd() turns the ring off. */
DEVQ_EXPORT bool devq_has_completion_page(const devq *q);
/* State of a point as far as known without any syscall. */
enum devq_point_state {
	DEVQ_POINT_PENDING = 0,    /* not complete (as far as the page or records say) */
	DEVQ_POINT_OK = 1,         /* complete and succeeded (page) */
	DEVQ_POINT_SEE_RECORD = 2, /* complete; it may have failed: its completion record says */
};
DEVQ_EXPORT int devq_point_state(devq *q, uint32_t queue, uint64_t point);
/* An eventfd that becomes readable whenever the daemon publishes a
 * completion, for clients with their own event loop: poll it, read its
 * 8-byte counter to clear it, then check points with devq_completed.
 * -EOPNOTSUPP without a page.  The fd belongs to the handle. */
DEVQ_EXPORT int devq_completion_fd(devq *q);

/* ---- status ---------------------------------------------------------- */

struct devq_session_info {
	uint64_t id;
	uint32_t pid, uid;
	char name[64];
	uint32_t queues, buffers;
	uint64_t ops_in_flight, bytes_mapped, ops_completed;
	uint64_t ops_failed; /* since connect */
	size_t nqueues_depth;
	struct devq_queue_depth *queue_depths; /* every open queue */
};

struct devq_queue_depth {
	uint32_t queue, stream;
	uint64_t depth; /* submitted - completed */
};

struct devq_user_info {
	uint32_t uid; /* UINT32_MAX: users beyond the daemon's table, together */
	uint64_t ops_completed, ops_failed, device_busy_ns;
};

#define DEVQ_HIST_MAX_BOUNDS 32
/* Completed ops by phase duration: counts[i] for le_ns[i-1] < d <= le_ns[i]
 * (not cumulative), counts[nbounds] for the rest. */
struct devq_histogram {
	char phase[16]; /* "submit", "queued", "device", "sync" (daemon-side) */
	size_t nbounds;
	uint64_t le_ns[DEVQ_HIST_MAX_BOUNDS];
	uint64_t counts[DEVQ_HIST_MAX_BOUNDS + 1];
	uint64_t sum_ns, count;
};

struct devq_refused_user {
	uint32_t uid;
	uint32_t losses;  /* device losses counted against it */
	int64_t until_s;  /* refused until then: seconds since the epoch */
};

/* A tenant (devqd(8) FAIRNESS): a Unix user.  Since its first session of
 * the daemon's run. */
struct devq_tenant_info {
	char name[72];        /* "uid:1000", or a granted tenant's name ("job_42") */
	uint32_t uid, weight, sessions;
	uint64_t ops_waiting; /* waiting in the daemon for room on their stream */
	uint64_t queued_ns;   /* the expected device time of those */
	uint32_t ops_inside;  /* handed to the device, not completed */
	uint64_t ops_done, device_ns;
	uint64_t wait_ns, wait_max_ns; /* device start - receipt: sum, longest */
	uint64_t waits;                /* ops wait_ns sums (timed ones) */
};

/* What a tenant's row in devq_status adds since the gpu and uuid fields:
 * its op latency, and a granted tenant's labels.  An array of its own,
 * parallel to tenants, so that struct devq_tenant_info keeps its size. */
#define DEVQ_TENANT_LABELS 8
struct devq_tenant_extra {
	/* "queued" (devqd's receipt -> device start), "device" (start ->
	 * end), "total" (receipt -> completion queued to the client). */
	size_t nop_seconds;
	struct devq_histogram op_seconds[3];
	size_t nlabels;
	char labels[DEVQ_TENANT_LABELS][128]; /* "key=value" (admin grant --label) */
	uint64_t deadline_exceeded; /* its ops that completed DEVQ_E_DEADLINE_EXCEEDED */
};

struct devq_status {
	char backend[16];
	char device[128];
	uint32_t streams;
	uint64_t uptime_ns;
	uint64_t ops_in_flight, bytes_mapped, sessions_total, ops_completed, ops_failed;
	uint32_t buffers;
	size_t nsessions;
	struct devq_session_info *sessions;
	/* Metrics, since start: failed ops by code, device busy time summed
	 * over streams, per-user counts, phase histograms. */
	uint64_t op_errors[16];
	uint64_t device_busy_ns;
	size_t nusers;
	struct devq_user_info *users;
	size_t nphases;
	struct devq_histogram phases[8];
	/* Uids refused at connect after repeated device losses (devqd(8)):
	 * every one for root and the daemon's admin group, at most the
	 * caller's own uid for anyone else. */
	size_t nrefused;
	struct devq_refused_user *refused;
	/* Tenants: every one for root and the admin group, the caller's own
	 * for anyone else. */
	size_t ntenants;
	struct devq_tenant_info *tenants;
	/* Appended (the struct is the library's to allocate): the device's
	 * labels as the node's other exporters print them (gpu: the ordinal,
	 * uuid: "GPU-..." on CUDA, "CPU-" and the machine id on the CPU
	 * backend; "" from an older daemon), the watchdog's verdict, the
	 * sessions the caller may see (rows asked for or not), and each
	 * tenant's extra row (ntenants of them, NULL when ntenants is 0). */
	char gpu[16];
	char uuid[64];
	bool device_stalled;
	size_t sessions_live;
	struct devq_tenant_extra *tenant_extra;
};

/* Round trip; free with devq_status_free. */
DEVQ_EXPORT int devq_get_status(devq *q, struct devq_status **out);
/* devq_get_status with options: DEVQ_STATUS_NO_SESSIONS leaves the
 * per-session rows out (nsessions 0; sessions_live still counts them), so
 * the daemon does not build them: what a metrics scraper wants. */
#define DEVQ_STATUS_NO_SESSIONS 1u
DEVQ_EXPORT int devq_get_status_opts(devq *q, unsigned flags, struct devq_status **out);
DEVQ_EXPORT void devq_status_free(struct devq_status *s);

/* ---- admin calls: granted tenants ------------------------------------- */
/* Root only, or the members of devqd's control-groups; never on a tenant
 * socket (-EACCES, permission_denied, otherwise).  A granted tenant has a
 * socket of its own, owned by its uid, mode 0600, in devqd's tenant
 * directory: every connection on it is the tenant's (its weight, its memory
 * cap over all of its sessions and processes, its usage).  See devqd(8),
 * TENANTS. */

#define DEVQ_TENANT_NAME_MAX 64 /* [A-Za-z0-9_.-], not starting with '.' */

struct devq_grant_request {
	const char *tenant;
	uint32_t uid;          /* the only uid its socket admits */
	uint32_t shares, of;   /* weight (0: 1), and the device's shares (0: shares) */
	uint64_t memory_bytes; /* cap on pinned + device bytes (0: the per-user quotas) */
	bool priority;         /* its sessions may open high-priority queues */
};

struct devq_grant {
	char tenant[DEVQ_TENANT_NAME_MAX + 1];
	uint32_t uid;
	char socket[108];
	uint32_t shares, of;
	uint64_t memory_bytes;
	bool priority;
	/* Usage since the grant (devq_admin_tenants; 0 from devq_admin_grant
	 * for a new tenant). */
	uint32_t sessions;
	uint64_t device_ns, ops, peak_bytes, errors, cancelled;
	uint64_t bytes, ops_in_flight; /* held and running now */
};

struct devq_evict_result {
	char tenant[DEVQ_TENANT_NAME_MAX + 1];
	uint64_t device_ns, ops, peak_bytes, errors, cancelled;
	uint64_t still_running; /* ops still running when the grace ran out */
	uint64_t bytes_left;    /* bytes not yet freed then */
};

/* Creates the tenant and its socket, or updates its grant (the same uid:
 * idempotent; the new grant replaces the old whole, fields left 0 take
 * their defaults).  -EINVAL: a bad name, shares or socket path; -EPROTONOSUPPORT
 * (failed_precondition): granted to another uid; -ENOSPC: too many. */
DEVQ_EXPORT int devq_admin_grant(devq *q, const struct devq_grant_request *req,
				 struct devq_grant *out);
/* devq_admin_grant, but only for a tenant already granted: -ENOENT
 * (not_found), and nothing made, when none is granted by that name.  For
 * whoever may update a grant but must not create one (a job's task, after
 * its prolog granted).  A devqd older than this call ignores the
 * restriction and creates. */
DEVQ_EXPORT int devq_admin_update(devq *q, const struct devq_grant_request *req,
				  struct devq_grant *out);
/* devq_admin_grant (flags 0) or devq_admin_update (DEVQ_GRANT_UPDATE_ONLY)
 * that also sets the labels on the tenant's metrics: nlabels strings
 * "key=value" (at most DEVQ_TENANT_LABELS; the key [A-Za-z_][A-Za-z0-9_]*,
 * not gpu, UUID, tenant, phase or le; the value printable without blanks,
 * quotes or backslashes; 127 bytes in all: -EINVAL otherwise).  They
 * replace the tenant's; nlabels 0 keeps them.  devqd keeps them in its
 * grants file; devq_status's tenant_extra reports them. */
#define DEVQ_GRANT_UPDATE_ONLY 1u
DEVQ_EXPORT int devq_admin_grant_labels(devq *q, const struct devq_grant_request *req,
					const char *const *labels, size_t nlabels, unsigned flags,
					struct devq_grant *out);
/* What devqd's answer to the last devq_admin_grant warned of, "" when
 * nothing: the uid's sessions already on the main socket, which stay
 * outside the grant's cap and weight, or devqd's grant-exclusive = no,
 * under which the uid may connect there too.  Valid until the next call. */
DEVQ_EXPORT const char *devq_admin_warning(const devq *q);
/* Ends the grant: no new work, its sessions closed at once, ops not started
 * cancelled, running ones left to finish, its socket removed.  Returns once
 * everything is freed or after grace_ms (0: devqd's max-op-ms plus a
 * second), with its usage.  -ENOENT: not granted. */
DEVQ_EXPORT int devq_admin_evict(devq *q, const char *tenant, uint32_t grace_ms,
				 struct devq_evict_result *out);
/* Every grant with its usage; free *list with free(). */
DEVQ_EXPORT int devq_admin_tenants(devq *q, struct devq_grant **list, size_t *n);

/* ---- tracing ---------------------------------------------------------- */

/* What devqd recorded about recent ops (devctl trace, devctl top).  The
 * daemon keeps a bounded ring of completed ops; a caller sees the sessions
 * of its own uid, or every session with `all` (root or the daemon's admin
 * group only: otherwise -EACCES, "permission_denied: ..."). */
struct devq_trace_query {
	bool all;
	uint32_t last;     /* at most this many newest ops (0: every op kept) */
	uint64_t since_ns; /* only ops the daemon saw complete after this time */
	bool no_ops;       /* counters and sessions only */
};

enum devq_trace_wait_kind {
	DEVQ_TRACE_WAIT_QUEUE = 0,    /* the previous point of its own queue */
	DEVQ_TRACE_WAIT_EXPLICIT = 1, /* a wait the client asked for */
	DEVQ_TRACE_WAIT_HAZARD = 2,   /* derived from buffer access */
};

#define DEVQ_TRACE_MAX_WAITS 8
/* An op may have up to 16 buffer arguments (a signature's 16 parameters);
 * a record lists its first 8: the size of this struct is libdevq's ABI. */
#define DEVQ_TRACE_MAX_BUFFERS 8

struct devq_trace_op {
	uint64_t session;
	uint32_t queue, stream;
	uint64_t point;
	int32_t executable; /* devq_exec id; -1 copy, -2 fill, -3 none */
	int code;
	struct devq_timing t; /* client_received is 0: only the client knows it */
	size_t nwaits, nbuffers;
	uint32_t waits_dropped;
	struct {
		uint32_t queue;
		uint64_t point;
		enum devq_trace_wait_kind kind;
	} waits[DEVQ_TRACE_MAX_WAITS];
	struct {
		uint64_t id;
		uint32_t access; /* 1 read, 2 write, 3 both */
		bool released;   /* BufferReleased followed this op's completion */
	} buffers[DEVQ_TRACE_MAX_BUFFERS];
};

struct devq_trace_queue {
	uint32_t id, stream;
	uint64_t submitted, completed;
};

struct devq_trace_session {
	uint64_t id;
	uint32_t pid, uid;
	char name[64];
	bool connected; /* false: gone, or draining after a disconnect */
	uint64_t ops_completed, ops_failed, ops_in_flight, bytes_mapped;
	size_t nqueues;
	struct devq_trace_queue *queues;
};

struct devq_trace {
	uint64_t now_ns; /* daemon's CLOCK_MONOTONIC when it answered */
	char backend[16];
	char device[128];
	uint32_t streams;
	uint32_t capacity; /* ops the daemon's ring keeps; 0: recording off */
	uint64_t recorded; /* ops recorded since the daemon started */
	bool truncated;    /* since_ns reached past the oldest op kept */
	uint64_t *stream_busy_ns; /* [streams]: device time since start */
	size_t nsessions;
	struct devq_trace_session *sessions; /* live ones first, then gone ones */
	size_t nops;
	struct devq_trace_op *ops; /* in completion order */
};

/* Round trip; free with devq_trace_free. */
DEVQ_EXPORT int devq_trace_get(devq *q, const struct devq_trace_query *query,
			       struct devq_trace **out);
DEVQ_EXPORT void devq_trace_free(struct devq_trace *t);

#ifdef __cplusplus
}
#endif
#endif
