/* SPDX-License-Identifier: Apache-2.0 */
/* The hostile client (tests/hostile.c): a connection that speaks devq's
 * wire protocol by hand, so that a test can break the protocol, send fds on
 * any byte, pack many requests into one write and never read the replies,
 * as a hostile local user could; and what the daemon holds, read from /proc,
 * so that a test can check it all came back.  Every helper aborts the test
 * (Check) on an unexpected failure. */
#ifndef DEVQ_TEST_HOSTILE_H
#define DEVQ_TEST_HOSTILE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "devq.pb-c.h"
#include "frame.h"
#include "harness.h"

#define HOSTILE_WAIT_MS 5000 /* every wait of a raw helper is bounded by this */

/* ---- raw connections -------------------------------------------------- */

struct raw {
	int fd;
	struct devq_rx rx;
};

enum raw_result { RAW_MSG, RAW_EOF, RAW_TIMEOUT };

void raw_open(struct raw *r, const struct daemon_proc *d);
void raw_close(struct raw *r);
/* All of data, however many sends it takes. */
void raw_write(struct raw *r, const void *data, size_t len);
/* A frame header: payload length, frame type, fds declared. */
void header(uint8_t *p, uint32_t len, uint16_t type, uint16_t nfds);
/* One sendmsg of these bytes with these fds (at most 4). */
void raw_sendmsg(struct raw *r, const void *data, size_t len, const int *fds, unsigned nfds);
void raw_send_frame(struct raw *r, uint16_t type, const void *payload, size_t len,
		    const int *fds, unsigned nfds);
void raw_send_payload(struct raw *r, uint16_t type, const void *payload, size_t len);
void raw_send_fds(struct raw *r, const Devq__ClientMessage *m, const int *fds, unsigned nfds);
void raw_send(struct raw *r, const Devq__ClientMessage *m);
/* The next daemon message within timeout_ms (EOF: the daemon closed). */
enum raw_result raw_next(struct raw *r, int timeout_ms, Devq__DaemonMessage **out);
Devq__DaemonMessage *raw_expect(struct raw *r, Devq__DaemonMessage__BodyCase c);
void raw_expect_error(struct raw *r, int code, const char *s1, const char *s2);
/* Skips replies to earlier requests until an Error arrives. */
void raw_expect_error_later(struct raw *r, int code, const char *s1);
void raw_expect_closed(struct raw *r);
void raw_hello(struct raw *r);
void raw_get_status(struct raw *r);
void raw_expect_alive(struct raw *r);
/* The code of (queue, point)'s completion, its message copied to msg. */
int raw_completion(struct raw *r, uint32_t queue, uint64_t point, char *msg, size_t n);
void raw_submit_op(struct raw *r, Devq__Op *op);
void raw_expect_completion(struct raw *r, uint32_t queue, uint64_t point, int code,
			   const char *s1, const char *s2);
void raw_open_queue(struct raw *r, uint32_t id);
void raw_reset_queue(struct raw *r, uint32_t id);
void raw_create(struct raw *r, uint64_t id, uint64_t size, int kind);
void raw_import(struct raw *r, uint64_t id, uint64_t size, const int *fds, unsigned nfds);

/* ---- many requests in one write ---------------------------------------- */

/* Frames packed back to back, sent with one raw_write. */
struct rawbuf {
	uint8_t *p;
	size_t len, cap;
};

void rawbuf_msg(struct rawbuf *b, const Devq__ClientMessage *m);
/* A Submit of one fill op of buffer buf on queue, waiting on the nwaits
 * (queue, point) pairs of waits (queue at [2i], point at [2i+1]). */
void rawbuf_fill(struct rawbuf *b, uint32_t queue, uint64_t buf, uint64_t size,
		 uint32_t pattern, const uint64_t *waits, size_t nwaits);
void rawbuf_reset_queue(struct rawbuf *b, uint32_t queue);
void rawbuf_trace(struct rawbuf *b, bool all);
void rawbuf_status(struct rawbuf *b);
/* Writes the frames and empties b. */
void rawbuf_send(struct raw *r, struct rawbuf *b);
void rawbuf_free(struct rawbuf *b);

/* ---- what the daemon holds --------------------------------------------- */

struct proc_usage {
	int fds;       /* /proc/PID/fd entries */
	long rss_kb;   /* VmRSS */
	long shmem_kb; /* RssShmem: client memory (memfds) the daemon has mapped in */
	long maps_kb;  /* the sizes of every mapping in /proc/PID/maps, summed */
	long nmaps;    /* mappings */
	long threads;  /* Threads */
};

void proc_usage(pid_t pid, struct proc_usage *u);
/* HugePages_Free of /proc/meminfo, or -1 when the machine has no huge
 * pages reserved (HugePages_Total 0): hugetlb memfds cannot be made. */
long hugepages_free(void);

#endif
