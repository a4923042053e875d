/* Test harness: a real devqd on a private socket, per test. */
#ifndef DEVQ_TEST_HARNESS_H
#define DEVQ_TEST_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

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
/* SIGTERM, wait; returns the exit status (or 128+signal). */
int harness_stop(struct daemon_proc *d);
/* Open fds of a process. */
int harness_fd_count(pid_t pid);
/* A path under $DEVQ_BUILD. */
const char *harness_bin(const char *name);
/* Whether the build runs under sanitizers or valgrind: latency bounds are
 * skipped there, visibly. */
bool harness_slow(void);
uint64_t harness_now_ns(void);

#endif
