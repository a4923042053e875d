/* SPDX-License-Identifier: Apache-2.0 */
/* Replays the fuzz target's seed corpus (tests/fuzz/corpus) and every kept
 * crasher (tests/fuzz/regress) through the same in-process devqd driver the
 * libFuzzer target uses, one input per forked test, so `make check` guards
 * every crash the fuzzer ever found.  The driver itself aborts on a broken
 * invariant (a leaked fd, buffer or session, a hang, a malformed reply); on
 * top of that, ok-* seeds (what a correct client sends) must complete every
 * op they submit without a single Error, and edge-* seeds must each be
 * refused somewhere, so the corpus really is what its names say. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devq.pb-c.h"
#include "frame.h"
#include "fuzz_session.h"

#define MAXFILES 512

static char files[MAXFILES][300];
static int nfiles;

static void scan(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return; /* regress/ may be empty and so absent from git */
	struct dirent *e;
	while ((e = readdir(d)) && nfiles < MAXFILES) {
		if (e->d_name[0] == '.' || !strcmp(e->d_name, "README"))
			continue;
		snprintf(files[nfiles++], sizeof(files[0]), "%s/%s", dir, e->d_name);
	}
	closedir(d);
}

static uint8_t *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
	uint8_t *buf = malloc(1 << 20);
	ck_assert_ptr_nonnull(buf);
	*len = fread(buf, 1, 1 << 20, f);
	fclose(f);
	return buf;
}

/* The ops a seed submits, read from its own frames (records -> byte stream
 * -> frames -> ClientMessage), independently of the daemon. */
static size_t ops_in(const uint8_t *p, size_t n)
{
	static uint8_t stream[1 << 20];
	size_t len = 0, off = 0, ops = 0;
	while (off + 5 <= n) {
		size_t l = p[off + 3] | (size_t)p[off + 4] << 8;
		bool ring = p[off] & 0x20;
		off += 5;
		if (l > n - off)
			l = n - off;
		if (ring) {
			/* A submit-ring entry: one ClientMessage, no frame. */
			Devq__ClientMessage *m = devq__client_message__unpack(NULL, l, p + off);
			ck_assert_msg(m != NULL, "an ok seed holds a malformed ClientMessage");
			if (m->body_case == DEVQ__CLIENT_MESSAGE__BODY_SUBMIT)
				ops += m->submit->n_ops;
			devq__client_message__free_unpacked(m, NULL);
			off += l;
			continue;
		}
		memcpy(stream + len, p + off, l);
		len += l;
		off += l;
	}
	for (size_t i = 0; i + DEVQ_FRAME_HDR <= len;) {
		size_t plen = stream[i] | (size_t)stream[i + 1] << 8 | (size_t)stream[i + 2] << 16 |
			      (size_t)stream[i + 3] << 24;
		ck_assert_msg(i + DEVQ_FRAME_HDR + plen <= len, "truncated frame in an ok seed");
		Devq__ClientMessage *m =
			devq__client_message__unpack(NULL, plen, stream + i + DEVQ_FRAME_HDR);
		ck_assert_msg(m != NULL, "an ok seed holds a malformed ClientMessage");
		if (m->body_case == DEVQ__CLIENT_MESSAGE__BODY_SUBMIT)
			ops += m->submit->n_ops;
		devq__client_message__free_unpacked(m, NULL);
		i += DEVQ_FRAME_HDR + plen;
	}
	return ops;
}

START_TEST(replay)
{
	const char *path = files[_i];
	const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	size_t len;
	uint8_t *data = slurp(path, &len);
	LLVMFuzzerTestOneInput(data, len);
	const struct fuzz_stats *st = &fuzz_stats;
	if (!strncmp(base, "ok-", 3)) {
		size_t want = ops_in(data, len);
		ck_assert_msg(st->errors == 0, "%s: %zu Errors from the daemon", base, st->errors);
		ck_assert_msg(st->completions == want, "%s: %zu completions for %zu ops", base,
			      st->completions, want);
		ck_assert_msg(st->failed == 0, "%s: %zu ops failed", base, st->failed);
		ck_assert_msg(st->frames >= 1, "%s: no HelloReply", base);
	} else if (!strncmp(base, "edge-", 5)) {
		ck_assert_msg(st->errors + st->failed > 0, "%s: nothing was refused", base);
	}
	free(data);
}
END_TEST

static int by_name(const void *a, const void *b)
{
	return strcmp(a, b);
}

int main(void)
{
	const char *dir = getenv("DEVQ_FUZZ_DIR");
	char path[256];
	snprintf(path, sizeof(path), "%s/corpus", dir && *dir ? dir : "tests/fuzz");
	scan(path);
	size_t seeds = (size_t)nfiles;
	snprintf(path, sizeof(path), "%s/regress", dir && *dir ? dir : "tests/fuzz");
	scan(path);
	/* No inputs is a broken checkout, not a pass. */
	if (!seeds) {
		fprintf(stderr, "no seed corpus under %s\n", dir && *dir ? dir : "tests/fuzz");
		return EXIT_FAILURE;
	}
	qsort(files, seeds, sizeof(files[0]), by_name);
	qsort(files + seeds, (size_t)nfiles - seeds, sizeof(files[0]), by_name);
	printf("replaying %zu seeds and %zu kept crashers\n", seeds, (size_t)nfiles - seeds);
	Suite *s = suite_create("fuzz_replay");
	TCase *tc = tcase_create("replay");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, replay, 0, nfiles);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
