/* SPDX-License-Identifier: Apache-2.0 */
/* The executable repository (daemon/core/repo.c) inside the engine, against a
 * fake backend that loads "device images" through the load_image hook and
 * completes ops only when a test says so: the contract a real device
 * backend relies on, checked without one.  An op validated against a
 * repository executable keeps its image loaded until its completion is
 * processed, whatever a rescan does meanwhile; a replacement keeps its id;
 * a removed id answers not_found; the image is unloaded exactly once, after
 * the last op that used it. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/buffer.h"
#include "core/engine.h"
#include "core/job.h"
#include "core/outbox.h"
#include "core/repo.h"
#include "core/sched.h"
#include "core/session.h"
#include "core/timeline.h"
#include "devq.pb-c.h"
#include "fake_mem.h"

/* ---- the fake backend: every op waits for complete() ------------------ */

#define FAKE_MAX 64

struct fake {
	struct devq_backend be;
	struct devq_bop *ops[FAKE_MAX];
	unsigned n;
	unsigned loads, unloads;
};

struct image {
	unsigned serial; /* which load made it */
	char entry[64];
};

static struct fake *FK;

/* Like the CUDA backend: a repository kernel runs when an image is loaded. */
static bool fake_has_kernel(struct devq_backend *b, const struct devq_kernel *k)
{
	(void)b;
	return !k->repository || k->dev != NULL;
}

static int fake_enqueue(struct devq_backend *b, struct devq_bop *op)
{
	struct fake *f = (struct fake *)b;
	ck_assert_uint_lt(f->n, FAKE_MAX);
	f->ops[f->n++] = op;
	return 0;
}

/* An "image" is a file whose first line names the entries it has. */
static int fake_load_image(struct devq_backend *b, const char *path, const char *entry,
			   const struct devq_sig *sig, void **dev, char *err, size_t errlen)
{
	struct fake *f = (struct fake *)b;
	(void)sig;
	char line[256] = "";
	FILE *fp = fopen(path, "re");
	if (!fp || !fgets(line, sizeof(line), fp)) {
		if (fp)
			fclose(fp);
		snprintf(err, errlen, "unreadable");
		return -EIO;
	}
	fclose(fp);
	if (!strstr(line, entry)) {
		snprintf(err, errlen, "no entry '%s' in it", entry);
		return -ENOENT;
	}
	struct image *im = calloc(1, sizeof(*im));
	ck_assert_ptr_nonnull(im);
	im->serial = ++f->loads;
	snprintf(im->entry, sizeof(im->entry), "%s", entry);
	*dev = im;
	return 0;
}

static void fake_unload_image(struct devq_backend *b, void *dev)
{
	((struct fake *)b)->unloads++;
	free(dev);
}

static unsigned unloads_at_destroy; /* what had been unloaded when the backend went */

static void fake_destroy(struct devq_backend *b)
{
	ck_assert_uint_eq(((struct fake *)b)->n, 0);
	unloads_at_destroy = ((struct fake *)b)->unloads;
	free(b);
}

static const struct devq_backend_ops fake_ops = {
	.destroy = fake_destroy,
	.map_host = fake_map_host,
	.unmap_host = fake_unmap_host,
	.alloc = fake_alloc,
	.free = fake_free,
	.has_kernel = fake_has_kernel,
	.enqueue = fake_enqueue,
	.load_image = fake_load_image,
	.unload_image = fake_unload_image,
};

static int fake_open(const struct devq_backend_config *bc, struct devq_backend **out)
{
	struct fake *f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->be.ops = &fake_ops;
	f->be.name = "fake";
	f->be.streams = bc->streams + bc->high_streams;
	f->be.high_streams = bc->high_streams;
	f->be.on_complete = bc->on_complete;
	f->be.ud = bc->ud;
	FK = f;
	*out = &f->be;
	return 0;
}

/* ---- the engine, a session, a repository directory --------------------- */

static struct devq_engine E;
static char dir[64];

static void ev_wake(void *ud)
{
	(void)ud;
}

static void ev_device_lost(void *ud, const struct devq_job *j)
{
	(void)ud, (void)j;
}

static void flush_dirty(void)
{
	while (E.dirty) {
		struct devq_session *s = E.dirty;
		E.dirty = s->dirty_next;
		s->dirty = false;
		devq_outbox_push_completions(s);
		devq_session_maybe_free(s);
	}
}

static struct devq_session *up(void)
{
	struct devq_config cfg = { 0 };
	cfg.backend = "cpu";
	cfg.streams = 2;
	cfg.max_op_ns = 1000000000ull;
	cfg.max_buffer_bytes = 1 << 20;
	cfg.max_queues = 8;
	struct devq_engine_events ev = { .wake = ev_wake,
					 .device_lost = ev_device_lost };
	ck_assert_int_eq(devq_engine_init(&E, &cfg, &ev, fake_open), 0);
	struct devq_session *s = devq_session_new(&E, 1234, 1000, 1000);
	ck_assert_ptr_nonnull(s);
	char why[200];
	ck_assert_int_eq(devq_session_admit(s, why, sizeof(why)), 0);
	struct devq_timeline *q;
	ck_assert_int_eq(devq_timeline_open(s, 1, 0, &q, why, sizeof(why)), 0);
	snprintf(dir, sizeof(dir), "/tmp/devq-repo-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_int_eq(chmod(dir, 0755), 0);
	return s;
}

static void down(struct devq_session *s)
{
	devq_session_disconnect(s);
	flush_dirty();
	devq_session_unhold(s);
	flush_dirty();
	ck_assert_uint_eq(E.ops_in_flight, 0);
	devq_engine_fini(&E);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	ck_assert_int_eq(system(cmd), 0);
}

/* Writes dir/name (0644) by rename, as install(1) does. */
static void put(const char *name, const char *text)
{
	char tmp[128], path[128];
	snprintf(tmp, sizeof(tmp), "%s/.%s.new", dir, name);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(tmp, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(chmod(tmp, 0644), 0);
	ck_assert_int_eq(rename(tmp, path), 0);
}

/* A rescan as SIGHUP does one, applied at once: the number refused. */
static int rescan(void)
{
	struct devq_repo_scan *sc = malloc(sizeof(*sc));
	ck_assert_ptr_nonnull(sc);
	devq_repo_scan_prepare(&E.repo, sc);
	int r = devq_repo_scan(dir, E.be, sc);
	ck_assert_int_ge(r, 0);
	devq_repo_apply(&E.repo, sc);
	free(sc);
	return r;
}

static void submit(struct devq_session *s, uint32_t exe)
{
	Devq__Op op = DEVQ__OP__INIT;
	Devq__KernelOp k = DEVQ__KERNEL_OP__INIT;
	Devq__Arg a = DEVQ__ARG__INIT, *ap = &a;
	a.name = "n";
	a.value_case = DEVQ__ARG__VALUE_U64;
	a.u64 = 1;
	k.executable = exe;
	k.n_args = 1;
	k.args = &ap;
	op.queue = 1;
	op.body_case = DEVQ__OP__BODY_KERNEL;
	op.kernel = &k;
	char err[160];
	ck_assert_int_eq(devq_sched_submit(s, &op, 1, err, sizeof(err)), 0);
}

/* Completes the backend's oldest outstanding op: its code. */
static int complete_first(void)
{
	ck_assert_uint_gt(FK->n, 0);
	struct devq_bop *b = FK->ops[0];
	memmove(&FK->ops[0], &FK->ops[1], (FK->n - 1) * sizeof(FK->ops[0]));
	FK->n--;
	int code = b->kind == DEVQ_BOP_FAIL ? b->code : 0;
	b->t_start = b->t_handoff + 1;
	b->t_end = b->t_start + 1;
	E.be->on_complete(E.be->ud, b);
	devq_sched_drain(&E);
	flush_dirty();
	return code;
}

static const struct image *image_of(const struct devq_bop *b)
{
	ck_assert(b->kernel && b->kernel->repository);
	return b->kernel->dev;
}

/* ---- tests ------------------------------------------------------------- */

START_TEST(test_image_outlives_reload_until_last_op)
{
	struct devq_session *s = up();
	put("img1", "k\n");
	put("k.exec", "signature = n:u64\ncuda = img1\n");
	ck_assert_int_eq(rescan(), 0);
	ck_assert_uint_eq(E.repo.n, 1);
	uint32_t id = E.repo.exes[0]->id;
	ck_assert_uint_ge(id, DEVQ_REPO_FIRST_ID);
	ck_assert_uint_eq(FK->loads, 1);

	submit(s, id); /* validated against image 1 */
	ck_assert_uint_eq(FK->n, 1);
	ck_assert_uint_eq(image_of(FK->ops[0])->serial, 1);

	/* Replaced: same id, new image; image 1 stays for the op in flight. */
	put("img1", "k k\n");
	ck_assert_int_eq(rescan(), 0);
	ck_assert_uint_eq(E.repo.exes[0]->id, id);
	ck_assert_uint_eq(FK->loads, 2);
	ck_assert_uint_eq(FK->unloads, 0);
	submit(s, id);
	ck_assert_uint_eq(image_of(FK->ops[1])->serial, 2);

	/* An unchanged repository loads nothing again. */
	ck_assert_int_eq(rescan(), 0);
	ck_assert_uint_eq(FK->loads, 2);

	/* Removed: a submit by the id is refused; both images still used. */
	char path[128];
	snprintf(path, sizeof(path), "%s/k.exec", dir);
	ck_assert_int_eq(unlink(path), 0);
	ck_assert_int_eq(rescan(), 0);
	ck_assert_uint_eq(E.repo.n, 0);
	ck_assert_uint_eq(FK->unloads, 0);
	submit(s, id);
	ck_assert_uint_eq(FK->n, 3);
	ck_assert_int_eq(FK->ops[2]->kind, DEVQ_BOP_FAIL);
	ck_assert_int_eq(FK->ops[2]->code, DEVQ__CODE__NOT_FOUND);

	/* Each image is unloaded with the completion of its last op. */
	ck_assert_int_eq(complete_first(), 0);
	ck_assert_uint_eq(FK->unloads, 1);
	ck_assert_int_eq(complete_first(), 0);
	ck_assert_uint_eq(FK->unloads, 2);
	ck_assert_int_eq(complete_first(), DEVQ__CODE__NOT_FOUND);
	ck_assert_uint_eq(FK->unloads, 2);
	down(s);
}
END_TEST

START_TEST(test_image_refused_without_entry)
{
	struct devq_session *s = up();
	put("img", "other\n");
	put("k.exec", "signature = n:u64\ncuda = img\n");
	put("j.exec", "signature = n:u64\ncuda = img\ncuda-entry = other\n");
	ck_assert_int_eq(rescan(), 1); /* k: no entry 'k' */
	ck_assert_uint_eq(E.repo.n, 1);
	ck_assert_str_eq(E.repo.exes[0]->name, "j");
	ck_assert_uint_eq(FK->loads, 1);
	down(s);
}
END_TEST

START_TEST(test_served_images_unloaded_at_exit)
{
	struct devq_session *s = up();
	put("img", "a b\n");
	put("a.exec", "signature = n:u64\ncuda = img\n");
	put("b.exec", "signature = n:u64\ncuda = img\n");
	ck_assert_int_eq(rescan(), 0);
	ck_assert_uint_eq(FK->loads, 2);
	submit(s, E.repo.exes[0]->id);
	ck_assert_int_eq(complete_first(), 0);
	ck_assert_uint_eq(FK->unloads, 0); /* still served */
	/* At exit both are unloaded, before the backend goes. */
	unloads_at_destroy = 0;
	down(s);
	ck_assert_uint_eq(unloads_at_destroy, 2);
}
END_TEST

/* An extent that overflows names its dims as written, a literal one
 * included: the client sees which product overflowed. */
START_TEST(test_overflow_names_literal_dims)
{
	struct devq_session *s = up();
	put("img1", "wide\n");
	put("wide.exec", "signature = n:u64, x:in f32[n, 4611686018427387904]\ncuda = img1\n");
	ck_assert_int_eq(rescan(), 0);
	ck_assert_uint_eq(E.repo.n, 1);
	int fd = -1;
	char err[200];
	ck_assert_int_eq(devq_buffer_create(s, 5, 64, DEVQ__BUFFER_KIND__SHARED, &fd, err,
					    sizeof(err)),
			 0);
	ck_assert_int_eq(close(fd), 0);
	Devq__Op op = DEVQ__OP__INIT;
	Devq__KernelOp k = DEVQ__KERNEL_OP__INIT;
	Devq__Arg n = DEVQ__ARG__INIT, x = DEVQ__ARG__INIT, *ap[] = { &n, &x };
	Devq__BufferArg b = DEVQ__BUFFER_ARG__INIT;
	n.name = "n";
	n.value_case = DEVQ__ARG__VALUE_U64;
	n.u64 = 3;
	b.id = 5;
	x.name = "x";
	x.value_case = DEVQ__ARG__VALUE_BUFFER;
	x.buffer = &b;
	k.executable = E.repo.exes[0]->id;
	k.n_args = 2;
	k.args = ap;
	op.queue = 1;
	op.body_case = DEVQ__OP__BODY_KERNEL;
	op.kernel = &k;
	ck_assert_int_eq(devq_sched_submit(s, &op, 1, err, sizeof(err)), 0);
	ck_assert_uint_eq(FK->n, 1);
	ck_assert_int_eq(FK->ops[0]->kind, DEVQ_BOP_FAIL);
	ck_assert_str_eq(FK->ops[0]->msg, "argument 'x': extent overflows 64 bits "
					  "(3 x 4611686018427387904 f32)");
	ck_assert_int_eq(complete_first(), DEVQ__CODE__OUT_OF_RANGE);
	down(s);
}
END_TEST

int main(void)
{
	Suite *su = suite_create("repo_core");
	TCase *tc = tcase_create("repo_core");
	tcase_add_test(tc, test_image_outlives_reload_until_last_op);
	tcase_add_test(tc, test_image_refused_without_entry);
	tcase_add_test(tc, test_served_images_unloaded_at_exit);
	tcase_add_test(tc, test_overflow_names_literal_dims);
	suite_add_tcase(su, tc);
	SRunner *sr = srunner_create(su);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
