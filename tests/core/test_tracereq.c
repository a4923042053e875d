/* SPDX-License-Identifier: Apache-2.0 */
/* The TraceRequest handler (daemon/requests/tracereq.c) against an engine
 * with no transport, its trace ring filled by hand: what a reply costs the
 * loop when a client arranged the records.  Work on the loop thread must
 * not grow faster than the records a reply carries. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/engine.h"
#include "core/session.h"
#include "core/trace.h"
#include "devq.pb-c.h"
#include "frame.h"
#include "requests/requests.h"

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void ev_wake(void *ud)
{
	(void)ud;
}

static void ev_arm_lazy(void *ud)
{
	(void)ud;
}

static void ev_device_lost(void *ud, const struct devq_job *j)
{
	(void)ud, (void)j;
}

/* The reply s has queued, read back through a socketpair. */
static Devq__DaemonMessage *take_reply(struct devq_session *s)
{
	int sv[2];
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	struct devq_rx rx;
	devq_rx_init(&rx, 64u << 20);
	while (s->tx.bytes) {
		int r = devq_tx_flush(&s->tx, sv[0]);
		ck_assert(r == 0 || r == -EAGAIN);
		while (devq_rx_recv(&rx, sv[1], MSG_DONTWAIT) > 0)
			;
	}
	struct devq_frame f;
	ck_assert_int_eq(devq_rx_next(&rx, &f), 1);
	Devq__DaemonMessage *m = devq__daemon_message__unpack(NULL, f.len, f.payload);
	ck_assert_ptr_nonnull(m);
	devq_rx_fini(&rx);
	ck_assert_int_eq(close(sv[0]), 0);
	ck_assert_int_eq(close(sv[1]), 0);
	return m;
}

/* Every record of the ring from a different session, each gone: the reply
 * names each gone session once.  Finding them compared each record with
 * every gone session found before (131,072 records: 8.6e9 comparisons,
 * 14 s of loop); now it is one hash look-up per record.  Bound 5 s,
 * generous (measured: 0.35 s, nearly all of it building the reply); 30 s
 * under sanitizers (DEVQ_SANITIZER set), where the reply alone takes 4. */
START_TEST(gone_sessions_linear)
{
	struct devq_config cfg = { 0 };
	cfg.backend = "cpu";
	cfg.streams = 1;
	cfg.max_op_ns = 1000000000ull;
	cfg.max_buffer_bytes = 1 << 20;
	cfg.max_queues = 8;
	cfg.trace_records = DEVQ_TRACE_MAX_REPLY_OPS;
	struct devq_engine e;
	struct devq_engine_events ev = { .wake = ev_wake, .arm_lazy = ev_arm_lazy,
					 .device_lost = ev_device_lost };
	ck_assert_int_eq(devq_engine_init(&e, &cfg, &ev, NULL), 0);
	struct devq_session *s = devq_session_new(&e, 1234, 1000, 1000);
	ck_assert_ptr_nonnull(s);
	struct devq_trace_ring *t = e.trace;
	ck_assert_uint_eq(t->cap, DEVQ_TRACE_MAX_REPLY_OPS);
	for (uint32_t i = 0; i < t->cap; i++) {
		struct devq_trace_rec *x = &t->recs[i];
		memset(x, 0, sizeof(*x));
		x->session = 1000000 + i; /* no live session has such an id */
		x->uid = 1000;
		x->pid = 4000 + i;
		x->point = 1;
		x->exec = -2;
		x->t[5] = 1 + i;
		snprintf(x->name, sizeof(x->name), "gone-%u", i);
	}
	t->recorded = t->cap;
	/* And one of a live session of the caller's uid: not gone. */
	t->recs[7].session = s->id;

	Devq__TraceRequest req = DEVQ__TRACE_REQUEST__INIT;
	uint64_t t0 = now_ns(), longest = 0;
	devq_tracereq_handle(s, &req);
	unsigned steps = 0;
	/* Built in steps of 2 ms, as the server's loop share runs them: each
	 * returns near its deadline, however many records are left. */
	for (bool done = false; !done; steps++) {
		uint64_t t1 = now_ns();
		done = devq_tracereq_step(s, t1 + 2000000);
		if (now_ns() - t1 > longest)
			longest = now_ns() - t1;
	}
	double ms = (now_ns() - t0) / 1e6;
	Devq__DaemonMessage *m = take_reply(s);
	ck_assert_int_eq(m->body_case, DEVQ__DAEMON_MESSAGE__BODY_TRACE_REPLY);
	const Devq__TraceReply *rep = m->trace_reply;
	const char *san = getenv("DEVQ_SANITIZER");
	double bound = san && *san ? 30000 : 5000;
	fprintf(stderr,
		"TraceRequest over %u records of %zu gone sessions: %.1f ms (bound %.0f) in %u "
		"steps of 2 ms, the longest %.3f ms\n",
		t->cap, rep->n_gone, ms, bound, steps, longest / 1e6);
	ck_assert_uint_eq(rep->n_ops, t->cap);
	ck_assert_uint_eq(rep->n_gone, t->cap - 1);
	ck_assert_uint_eq(rep->n_sessions, 1);
	for (size_t i = 0; i < rep->n_gone; i++)
		ck_assert_uint_ne(rep->gone[i]->id, s->id);
	devq__daemon_message__free_unpacked(m, NULL);
	ck_assert_msg(ms < bound, "one TraceRequest held the loop for %.0f ms", ms);

	devq_session_disconnect(s);
	while (e.dirty) { /* as the server's flush does */
		struct devq_session *d = e.dirty;
		e.dirty = d->dirty_next;
		d->dirty = false;
	}
	devq_session_unhold(s);
	ck_assert_ptr_null(e.sessions);
	devq_engine_fini(&e);
}
END_TEST

int main(void)
{
	Suite *su = suite_create("tracereq");
	TCase *tc = tcase_create("tracereq");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, gone_sessions_linear);
	suite_add_tcase(su, tc);
	SRunner *sr = srunner_create(su);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
