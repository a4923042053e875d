/* SPDX-License-Identifier: Apache-2.0 */
/* The Prometheus text builder (client/promtext.c) on statuses made here:
 * plain uid tenants bounded at DEVQ_PROMTEXT_UID_TENANTS (exactly that
 * many: no "other"; one past: "other" sums the rest, histograms included),
 * granted tenants never folded, a grant's labels after tenant (keys devq
 * sets itself dropped), several instances with each family's HELP and
 * TYPE once, devq_up 0 for one not reached, per-session families only when
 * asked.  No daemon: the counts are exact. */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devq.h"
#include "promtext.h"

/* A status of nuid uid tenants ("uid:1000"...) with ops_done 1..nuid and
 * device_ns 1000 each, plus one granted tenant "job_1" with labels. */
static struct devq_status *make_status(size_t nuid)
{
	struct devq_status *s = calloc(1, sizeof(*s));
	ck_assert_ptr_nonnull(s);
	snprintf(s->backend, sizeof(s->backend), "cpu");
	snprintf(s->device, sizeof(s->device), "host \"CPU\"");
	snprintf(s->gpu, sizeof(s->gpu), "0");
	snprintf(s->uuid, sizeof(s->uuid), "CPU-abc");
	s->ntenants = nuid + 1;
	s->tenants = calloc(s->ntenants, sizeof(*s->tenants));
	s->tenant_extra = calloc(s->ntenants, sizeof(*s->tenant_extra));
	ck_assert(s->tenants && s->tenant_extra);
	for (size_t i = 0; i < s->ntenants; i++) {
		struct devq_tenant_info *t = &s->tenants[i];
		struct devq_tenant_extra *x = &s->tenant_extra[i];
		if (i < nuid)
			snprintf(t->name, sizeof(t->name), "uid:%zu", 1000 + i);
		else
			snprintf(t->name, sizeof(t->name), "job_1");
		t->weight = 1;
		t->ops_done = i + 1;
		t->device_ns = 1000;
		x->nop_seconds = 1;
		struct devq_histogram *h = &x->op_seconds[0];
		snprintf(h->phase, sizeof(h->phase), "queued");
		h->nbounds = 2;
		h->le_ns[0] = 50000;
		h->le_ns[1] = 100000;
		h->counts[0] = 1;
		h->counts[2] = 1;
		h->count = 2;
		h->sum_ns = 200000;
	}
	struct devq_tenant_extra *gx = &s->tenant_extra[nuid];
	snprintf(gx->labels[0], sizeof(gx->labels[0]), "job=42");
	snprintf(gx->labels[1], sizeof(gx->labels[1]), "gpu=9"); /* devq's own: dropped */
	snprintf(gx->labels[2], sizeof(gx->labels[2]), "team=ml");
	gx->nlabels = 3;
	return s;
}

static void free_status(struct devq_status *s)
{
	free(s->tenants);
	free(s->tenant_extra);
	free(s);
}

static char *render(const struct devq_promtext_instance *in, size_t n, bool exporter,
		    bool sessions)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	ck_assert_ptr_nonnull(f);
	struct devq_promtext_opts o = { .sessions = sessions, .exporter = exporter };
	ck_assert_int_eq(devq_promtext_write(f, in, n, &o), 0);
	ck_assert_int_eq(fclose(f), 0);
	return buf;
}

static size_t count(const char *text, const char *what)
{
	size_t n = 0;
	for (const char *p = text; (p = strstr(p, what)); p += strlen(what))
		n++;
	return n;
}

static const char *line_with(const char *text, const char *what)
{
	const char *p = strstr(text, what);
	ck_assert_msg(p, "no '%s' in the text", what);
	return p;
}

/* Exactly DEVQ_PROMTEXT_UID_TENANTS uid tenants: each its own, no "other". */
START_TEST(uid_tenants_at_bound)
{
	struct devq_status *s = make_status(DEVQ_PROMTEXT_UID_TENANTS);
	struct devq_promtext_instance in = { .s = s, .gpu = "0" };
	char *t = render(&in, 1, false, false);
	ck_assert_uint_eq(count(t, "devq_tenant_ops_total{gpu=\"0\",UUID=\"CPU-abc\",tenant=\"uid:"),
			  DEVQ_PROMTEXT_UID_TENANTS);
	ck_assert_uint_eq(count(t, "tenant=\"other\""), 0);
	free(t);
	free_status(s);
}
END_TEST

/* One past, and 40 past: the bound's worth of their own, the rest summed
 * as "other" (ops, device time, histogram); the granted tenant keeps its
 * row and its labels, a label named like devq's own is dropped. */
START_TEST(uid_tenants_past_bound)
{
	static const size_t past[] = { 1, 40 };
	for (size_t k = 0; k < 2; k++) {
		size_t n = DEVQ_PROMTEXT_UID_TENANTS + past[k];
		struct devq_status *s = make_status(n);
		struct devq_promtext_instance in = { .s = s, .gpu = "0" };
		char *t = render(&in, 1, false, false);
		ck_assert_uint_eq(count(t, "devq_tenant_ops_total{gpu=\"0\",UUID=\"CPU-abc\",tenant=\"uid:"),
				  DEVQ_PROMTEXT_UID_TENANTS);
		/* ops_done of tenants 257..n: (257 + n) * (n - 256) / 2 */
		unsigned long long sum = 0;
		for (size_t i = DEVQ_PROMTEXT_UID_TENANTS; i < n; i++)
			sum += i + 1;
		char want[200];
		snprintf(want, sizeof(want),
			 "devq_tenant_ops_total{gpu=\"0\",UUID=\"CPU-abc\",tenant=\"other\"} %llu\n", sum);
		ck_assert_msg(strstr(t, want), "no '%s'", want);
		snprintf(want, sizeof(want),
			 "devq_tenant_op_seconds_count{gpu=\"0\",UUID=\"CPU-abc\",tenant=\"other\","
			 "phase=\"queued\"} %zu\n", 2 * past[k]);
		ck_assert_msg(strstr(t, want), "no '%s'", want);
		snprintf(want, sizeof(want),
			 "devq_tenant_op_seconds_bucket{gpu=\"0\",UUID=\"CPU-abc\",tenant=\"other\","
			 "phase=\"queued\",le=\"+Inf\"} %zu\n", 2 * past[k]);
		ck_assert_msg(strstr(t, want), "no '%s'", want);
		line_with(t, "devq_tenant_weight{gpu=\"0\",UUID=\"CPU-abc\",tenant=\"job_1\",job=\"42\","
			     "team=\"ml\"} 1\n");
		ck_assert_uint_eq(count(t, "gpu=\"9\""), 0);
		free(t);
		free_status(s);
	}
}
END_TEST

/* Two instances and one not reached: each family once, every series with
 * its gpu, devq_up 1, 1 and 0; label values escaped; no session family
 * unless asked. */
START_TEST(exporter_instances)
{
	struct devq_status *a = make_status(1), *b = make_status(2);
	snprintf(b->gpu, sizeof(b->gpu), "1");
	a->nsessions = 1;
	struct devq_session_info si = { .id = 7, .pid = 1, .uid = 2 };
	snprintf(si.name, sizeof(si.name), "x");
	a->sessions = &si;
	struct devq_promtext_instance in[3] = { { .s = a, .gpu = "0" }, { .s = b, .gpu = "1" },
						{ .s = NULL, .gpu = "2" } };
	char *t = render(in, 3, true, false);
	ck_assert_uint_eq(count(t, "# TYPE devq_tenant_weight gauge\n"), 1);
	ck_assert_uint_eq(count(t, "# TYPE devq_up gauge\n"), 1);
	line_with(t, "devq_up{gpu=\"0\"} 1\n");
	line_with(t, "devq_up{gpu=\"1\"} 1\n");
	line_with(t, "devq_up{gpu=\"2\"} 0\n");
	line_with(t, "devq_ops_completed_total{gpu=\"1\"} 0\n");
	ck_assert_uint_eq(count(t, "{gpu=\"2\""), 1); /* devq_up only */
	line_with(t, "device=\"host \\\"CPU\\\"\"");
	line_with(t, "devq_tenant_ops_total{gpu=\"1\",UUID=\"CPU-abc\",tenant=\"uid:1001\"} 2\n");
	ck_assert_ptr_null(strstr(t, "devq_session_"));
	free(t);
	t = render(in, 3, true, true);
	line_with(t, "devq_session_ops_completed_total{gpu=\"0\",session=\"7\",pid=\"1\",uid=\"2\","
		     "name=\"x\"} 0\n");
	free(t);
	a->sessions = NULL;
	free_status(a);
	free_status(b);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("promtext");
	TCase *tc = tcase_create("promtext");
	tcase_add_test(tc, uid_tenants_at_bound);
	tcase_add_test(tc, uid_tenants_past_bound);
	tcase_add_test(tc, exporter_instances);
	suite_add_tcase(s, tc);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
