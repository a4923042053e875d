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

/* An engine with a ring of DEVQ_TRACE_MAX_REPLY_OPS records, no transport. */
static void engine_with_ring(struct devq_engine *e)
{
	static struct devq_config cfg;
	memset(&cfg, 0, sizeof(cfg));
	cfg.backend = "cpu";
	cfg.streams = 1;
	cfg.max_op_ns = 1000000000ull;
	cfg.max_buffer_bytes = 1 << 20;
	cfg.max_queues = 8;
	cfg.trace_records = DEVQ_TRACE_MAX_REPLY_OPS;
	static struct devq_engine_events ev = { .wake = ev_wake,
						.device_lost = ev_device_lost };
	ck_assert_int_eq(devq_engine_init(e, &cfg, &ev, NULL), 0);
	ck_assert_uint_eq(e->trace->cap, DEVQ_TRACE_MAX_REPLY_OPS);
	/* The builder thread, as the server has it (its eventfd is not
	 * read: the tests poll devq_tracereq_collect). */
	ck_assert_int_ge(devq_tracereq_start(), 0);
}

/* Every slot of the ring filled: record i of gone session 1000000 + i, of
 * uid uids[i % 2]. */
static void fill_ring(struct devq_trace_ring *t, const uid_t uids[2])
{
	for (uint32_t i = 0; i < t->cap; i++) {
		struct devq_trace_rec *x = &t->recs[i];
		memset(x, 0, sizeof(*x));
		x->session = 1000000 + i; /* no live session has such an id */
		x->uid = uids[i % 2];
		x->pid = 4000 + i;
		x->point = 1;
		x->exec = -2;
		x->t[5] = 1 + i;
		snprintf(x->name, sizeof(x->name), "gone-%u", i);
	}
	t->recorded = t->cap;
	t->writing = t->cap;
}

static void engine_done(struct devq_engine *e, struct devq_session **ss, size_t n)
{
	for (size_t i = 0; i < n; i++)
		devq_session_disconnect(ss[i]);
	while (e->dirty) { /* as the server's flush does */
		struct devq_session *d = e->dirty;
		e->dirty = d->dirty_next;
		d->dirty = false;
	}
	for (size_t i = 0; i < n; i++)
		devq_session_unhold(ss[i]);
	devq_tracereq_fini();
	ck_assert_ptr_null(e->sessions);
	devq_engine_fini(e);
}

/* Every record of the ring from a different session, each gone: the reply
 * names each gone session once.  Finding them compared each record with
 * every gone session found before (131,072 records: 8.6e9 comparisons,
 * 14 s of loop); now it is one hash look-up per record.  Bound 5 s,
 * generous (measured: 0.35 s, nearly all of it building the reply); 30 s
 * under sanitizers (DEVQ_SANITIZER set), where the reply alone takes 4.
 * The ops are packed on the builder thread; the loop's part (collect and
 * the last step, which packs the sessions) is timed on its own. */
START_TEST(gone_sessions_linear)
{
	struct devq_engine e;
	engine_with_ring(&e);
	struct devq_session *s = devq_session_new(&e, 1234, 1000, 1000);
	ck_assert_ptr_nonnull(s);
	struct devq_trace_ring *t = e.trace;
	fill_ring(t, (const uid_t[2]){ 1000, 1000 });
	/* And one of a live session of the caller's uid: not gone. */
	t->recs[7].session = s->id;

	Devq__TraceRequest req = DEVQ__TRACE_REQUEST__INIT;
	uint64_t t0 = now_ns(), longest = 0;
	devq_tracereq_handle(s, &req);
	ck_assert(devq_tracereq_pending(s));
	unsigned steps = 0;
	for (bool done = false; !done; steps++) {
		uint64_t t1 = now_ns();
		devq_tracereq_collect();
		done = devq_tracereq_step(s, t1 + 2000000);
		if (now_ns() - t1 > longest)
			longest = now_ns() - t1;
		if (!done)
			usleep(1000);
	}
	double ms = (now_ns() - t0) / 1e6;
	Devq__DaemonMessage *m = take_reply(s);
	ck_assert_int_eq(m->body_case, DEVQ__DAEMON_MESSAGE__BODY_TRACE_REPLY);
	const Devq__TraceReply *rep = m->trace_reply;
	const char *san = getenv("DEVQ_SANITIZER");
	double bound = san && *san ? 30000 : 5000;
	fprintf(stderr,
		"TraceRequest over %u records of %zu gone sessions: %.1f ms (bound %.0f); the "
		"loop's longest step %.3f ms\n",
		t->cap, rep->n_gone, ms, bound, longest / 1e6);
	ck_assert_uint_eq(rep->n_ops, t->cap);
	ck_assert_uint_eq(rep->n_gone, t->cap - 1);
	ck_assert_uint_eq(rep->n_sessions, 1);
	for (size_t i = 0; i < rep->n_gone; i++)
		ck_assert_uint_ne(rep->gone[i]->id, s->id);
	devq__daemon_message__free_unpacked(m, NULL);
	ck_assert_msg(ms < bound, "one TraceRequest took %.0f ms", ms);
	engine_done(&e, &s, 1);
}
END_TEST

/* The builder takes requests by tenant (here the uid: sessions made
 * without admission have no tenant), the least served first: one request
 * of uid 1001 queued behind three of uid 1000 is done before the second
 * of those, where the order of arrival would put it last.  Each sees half
 * the ring, so each request is the same work. */
START_TEST(builder_serves_tenants_in_turn)
{
	struct devq_engine e;
	engine_with_ring(&e);
	struct devq_session *ss[4];
	for (int i = 0; i < 4; i++) {
		ss[i] = devq_session_new(&e, 1234 + i, i < 3 ? 1000 : 1001, 1000);
		ck_assert_ptr_nonnull(ss[i]);
	}
	fill_ring(e.trace, (const uid_t[2]){ 1000, 1001 });
	Devq__TraceRequest req = DEVQ__TRACE_REQUEST__INIT;
	for (int i = 0; i < 4; i++)
		devq_tracereq_handle(ss[i], &req);
	/* The builder's order, as the loop sees it: how many requests were
	 * handed back before each (by an earlier collect). */
	int before[4], seen = 0;
	bool back[4] = { false };
	while (seen < 4) {
		devq_tracereq_collect();
		int now = 0;
		for (int i = 0; i < 4; i++) {
			if (!back[i] && !devq_tracereq_pending(ss[i])) {
				back[i] = true;
				before[i] = seen;
				now++;
			}
		}
		seen += now;
		usleep(100);
	}
	for (int i = 0; i < 4; i++) {
		ck_assert(devq_tracereq_step(ss[i], now_ns() + 2000000));
		Devq__DaemonMessage *m = take_reply(ss[i]);
		ck_assert_int_eq(m->body_case, DEVQ__DAEMON_MESSAGE__BODY_TRACE_REPLY);
		ck_assert_uint_eq(m->trace_reply->n_ops, e.trace->cap / 2);
		devq__daemon_message__free_unpacked(m, NULL);
	}
	fprintf(stderr, "builder: requests handed back after 0..3 others: %d %d %d, uid 1001's %d\n",
		before[0], before[1], before[2], before[3]);
	ck_assert_msg(before[3] <= 1, "uid 1001's request was handed back after %d of uid 1000's",
		      before[3]);
	engine_done(&e, ss, 4);
}
END_TEST

/* A session that closes while the builder has its request: the request is
 * dropped when the builder hands it back (LeakSanitizer checks the
 * sanitizer runs), and nothing is queued to the session. */
START_TEST(cancelled_while_building)
{
	struct devq_engine e;
	engine_with_ring(&e);
	struct devq_session *s = devq_session_new(&e, 1234, 1000, 1000);
	struct devq_session *other = devq_session_new(&e, 1235, 1000, 1000);
	ck_assert_ptr_nonnull(s);
	ck_assert_ptr_nonnull(other);
	fill_ring(e.trace, (const uid_t[2]){ 1000, 1000 });
	Devq__TraceRequest req = DEVQ__TRACE_REQUEST__INIT;
	devq_tracereq_handle(s, &req);
	devq_tracereq_handle(other, &req);
	ck_assert(devq_tracereq_pending(s));
	devq_tracereq_abort(s); /* what session_close does */
	ck_assert_ptr_null(s->trace_job);
	ck_assert(!devq_tracereq_pending(s));
	ck_assert(devq_tracereq_step(s, now_ns())); /* nothing left to build */
	/* The other request goes on and completes. */
	while (!devq_tracereq_step(other, now_ns() + 2000000)) {
		usleep(1000);
		devq_tracereq_collect();
	}
	ck_assert_uint_eq(s->tx.bytes, 0);
	Devq__DaemonMessage *m = take_reply(other);
	ck_assert_uint_eq(m->trace_reply->n_ops, e.trace->cap);
	devq__daemon_message__free_unpacked(m, NULL);
	struct devq_session *ss[2] = { s, other };
	engine_done(&e, ss, 2);
}
END_TEST

/* The reader's side of the ring's sequence lock (devq_trace_read): record
 * a is whole while the record written after it in its slot, a + cap, has
 * not begun (writing <= a + cap) and gone from writing = a + cap + 1 on;
 * a record not yet recorded is never read. */
START_TEST(ring_read_bounds)
{
	struct devq_engine e;
	engine_with_ring(&e);
	struct devq_trace_ring *t = e.trace;
	fill_ring(t, (const uid_t[2]){ 1000, 1000 });
	struct devq_trace_rec x;
	uint64_t cap = t->cap, a = 5;
	t->recorded = cap; /* records 0 .. cap-1 */
	t->writing = cap;
	ck_assert(devq_trace_read(t, a, &x));
	ck_assert_uint_eq(x.pid, 4000 + a);
	ck_assert(!devq_trace_read(t, cap, &x)); /* not yet recorded */
	ck_assert(devq_trace_read(t, cap - 1, &x));
	t->writing = a + cap; /* record a + cap - 1 being written: not a's slot */
	ck_assert(devq_trace_read(t, a, &x));
	uint32_t uid;
	uint64_t observed;
	ck_assert(devq_trace_peek(t, a, &uid, &observed));
	ck_assert_uint_eq(observed, 1 + a);
	t->writing = a + cap + 1; /* record a + cap being written: a's slot */
	ck_assert(!devq_trace_read(t, a, &x));
	ck_assert(!devq_trace_peek(t, a, &uid, &observed));
	t->recorded = a + cap + 1; /* and done: a is gone */
	ck_assert(!devq_trace_read(t, a, &x));
	ck_assert(!devq_trace_peek(t, a, &uid, &observed));
	ck_assert(devq_trace_read(t, a + 1, &x));
	ck_assert(devq_trace_peek(t, a + 1, &uid, &observed));
	ck_assert(!devq_trace_peek(t, a + cap + 1, &uid, &observed)); /* not yet recorded */
	engine_done(&e, NULL, 0);
}
END_TEST

int main(void)
{
	Suite *su = suite_create("tracereq");
	TCase *tc = tcase_create("tracereq");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, gone_sessions_linear);
	tcase_add_test(tc, builder_serves_tenants_in_turn);
	tcase_add_test(tc, cancelled_while_building);
	tcase_add_test(tc, ring_read_bounds);
	suite_add_tcase(su, tc);
	SRunner *sr = srunner_create(su);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
