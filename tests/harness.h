/* SPDX-License-Identifier: Apache-2.0 */
/* Test harness: a real devqd on a private socket, per test. */
#ifndef DEVQ_TEST_HARNESS_H
#define DEVQ_TEST_HARNESS_H

#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "devq.h"

struct daemon_proc {
	pid_t pid;
	char dir[64];
	char sock[128];
	char log[128];
};

/* Starts $DEVQ_BUILD/devqd (default build/) with --backend cpu on a socket in
 * a fresh temporary directory plus extra arguments (NULL-terminated list),
 * and waits until it accepts connections.  Aborts the test on failure. */
void harness_start(struct daemon_proc *d, const char *const *extra);
/* Starts a new devqd on the same socket as d's, which must have exited (as
 * systemd restarts a daemon); the old log is kept as LOG.1. */
void harness_restart(struct daemon_proc *d, const char *const *extra);
/* Runs the suite (CK_NORMAL) and returns EXIT_SUCCESS or EXIT_FAILURE.
 * Check runs each test in a child that _exits on a failed assertion, so a
 * failing test would leave its daemon running forever: harness_start records
 * each daemon's pid in a page shared with this main, harness_stop forgets it,
 * and any left over at the end are killed. */
int harness_main(Suite *s);
/* SIGTERM, wait; returns the exit status (or 128+signal). */
int harness_stop(struct daemon_proc *d);
/* Waits for the daemon to exit on its own; the same result as stop. */
int harness_wait(struct daemon_proc *d);
/* Open fds of a process. */
int harness_fd_count(pid_t pid);
/* A process's CPU time (user + system) in clock ticks, from /proc/PID/stat. */
long harness_cpu_ticks(pid_t pid);
/* A path under $DEVQ_BUILD. */
const char *harness_bin(const char *name);
/* prog's path on $PATH (then /usr/bin, /bin, /usr/sbin), NULL: none. */
const char *harness_which(const char *prog);
/* promtool: $DEVQ_PROMTOOL, `make promtool`'s under $DEVQ_BUILD or build/,
 * or one on $PATH; NULL when there is none. */
const char *harness_promtool(void);
/* Whether the build runs under sanitizers or valgrind: latency bounds are
 * skipped there, visibly. */
bool harness_slow(void);
/* The backend the daemons of a run use: DEVQ_TEST_BACKEND (cpu unless set;
 * `make check-cuda-sim` sets cuda and DEVQ_CUDASIM_DIR, where the CUDA
 * simulator tests/cudasim/ is built as libcuda.so.1). */
const char *harness_backend(void);
bool harness_cudasim(void);
/* For a child about to exec a daemon: LD_LIBRARY_PATH to the simulator. */
void harness_cudasim_env(void);
/* Whether a daemon log holds a simulator rule violation (its first in out). */
bool harness_cudasim_violations(const char *log, char *out, size_t outlen);
/* Whether a daemon log holds a line containing what. */
bool harness_log_has(const char *log, const char *what);
/* Waits up to ms for such a line; false if none came. */
bool harness_log_wait(const char *log, const char *what, unsigned ms);
uint64_t harness_now_ns(void);

/* ---- libdevq helpers: each aborts the test on failure ---------------- */
devq *conn(const char *sock, const char *name);
const struct devq_exec *exe(devq *q, const char *name);
struct devq_buffer *mkbuf(devq *q, uint64_t size);
struct devq_arg a_u64(const char *n, uint64_t v);
struct devq_arg a_u32(const char *n, uint32_t v);
struct devq_arg a_f32(const char *n, float v);
struct devq_arg a_buf(const char *n, const struct devq_buffer *b, uint64_t off);

/* Every op's raw timestamps must be in causal order. */
void harness_check_monotonic(const struct devq_completion *c);

#endif
