/* SPDX-License-Identifier: Apache-2.0 */
/* libdevq-host-cpu.so: the CPU backend's built-in host executables
 * (manifest.def's DEVQ_HOST_KERNEL), on the ABI of <devq/kernel.h>
 * (version 2): gemm_f32 and gemm_f32_nt on OpenBLAS's cblas_sgemm.
 *
 * Units.  C is cut into tiles of T x T (tile_of: 128, 256 for large m and
 * n; smaller at its
 * right and bottom edges), each computed with the full k by one
 * cblas_sgemm: a tile is a unit of <devq/kernel.h>, numbered row by row
 * over the grid of tiles.  The tiles depend on m and n only, and each is
 * always computed by the same call on the same data, so the op's bits do
 * not depend on how devqd groups tiles into slices, on how many threads
 * run a slice, nor on the load: one op gives the same bits alone and
 * under load (before this, the number of parts followed the free cores).
 * Each element is one sgemm dot product over k, within
 * k*2^-23*(|alpha||A||B| + |beta||C|) of the exact result.
 *
 * Threads.  OpenBLAS's own pthread workers spin for a while after each
 * call (OPENBLAS_THREAD_TIMEOUT, ~0.1 s by default): in a daemon that
 * would burn the cores other streams and other processes need, and its one
 * global thread count cannot give each of several concurrent callers a
 * share.  So OpenBLAS runs single-threaded (openblas_set_num_threads(1),
 * where every call runs on its caller), and a slice's tiles are split here
 * into call->threads runs of consecutive tiles (consecutive tiles of a row
 * share A's rows in cache): the first on the worker running the op, the
 * others on the stream's helper threads, made by init (the per-stream
 * slot) and asleep on a condition variable between calls: nothing spins
 * after a gemm.  call->threads is the CPU backend's share of the cores for
 * this op (all of them when it runs alone, ncpu/running when several host
 * ops run), so several streams' gemms do not oversubscribe the cores.
 *
 * FP32 throughout: sgemm accumulates in single precision. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "devq/kernel.h"
#include "gemm_exes.h"

/* Helper threads per stream: a bound on what one stream creates. */
#define GEMM_MAX_HELPERS 63
/* Below this many multiply-adds a split costs more than it saves. */
#define GEMM_SPLIT_MIN (1u << 21)
/* A tile's side: big enough that packing A's rows and B's columns for it
 * (2 x T x k floats) is small next to its 2 x T x T x k flop, small enough
 * that a slice of a few ms holds a tile.  128, and 256 where m and n are
 * both GEMM_BIG or more: there a tile of 128 kept 0.91-0.95x of one
 * call's speed and one of 256 0.96-1.0x (1024^3 on this VM's OpenBLAS,
 * bench/RESULTS.md, "Isolation beside heavy work"), and the op has
 * enough tiles for every core.  A function of m and n alone, so the bits
 * still do not depend on the load. */
#define GEMM_TILE 128u
#define GEMM_TILE_BIG 256u
#define GEMM_BIG 1024u

static uint64_t tile_of(const union devq_kval *a)
{
	return a[0].u64 >= GEMM_BIG && a[1].u64 >= GEMM_BIG ? GEMM_TILE_BIG : GEMM_TILE;
}

struct gemm_task {
	const union devq_kval *args;
	bool nt;
	uint64_t first, last; /* the slice's tiles */
	unsigned parts;
};

struct gemm_pool {
	pthread_mutex_t lock;
	pthread_cond_t go, done;
	pthread_t th[GEMM_MAX_HELPERS];
	bool idle[GEMM_MAX_HELPERS]; /* th[i] runs at SCHED_IDLE (helpers_follow) */
	unsigned nhelpers;
	/* The CPUs the stream's worker may use (when init ran), and the CPU
	 * the helpers are kept off (-1: none; see keep_apart). */
	cpu_set_t cpus;
	bool have_cpus;
	int apart_from;
	unsigned gen;     /* bumped per task */
	unsigned pending; /* helpers' parts not done */
	bool stop;
	struct gemm_task task;
};

struct helper_arg {
	struct gemm_pool *p;
	unsigned index; /* its part: 1.. */
	unsigned seen;  /* the task generation when it was made */
};

/* The helpers run at the priority their caller runs the call at:
 * SCHED_IDLE for bulk work (<devq/kernel.h>, call->bulk), normal
 * otherwise, so that a short op's parts take the cores from a bulk op's
 * as its worker does.  Set by the caller before it wakes them (a helper
 * woken at SCHED_IDLE onto a busy CPU would wait there before it could
 * switch itself), and only for those whose class changes: a syscall per
 * helper when the kind of call changes, not per call.  Best effort: where
 * the switch is refused a helper stays as it was (devqd asks for bulk
 * only where it can switch back: backend_cpu.c). */
static void helpers_follow(struct gemm_pool *p, unsigned n, bool bulk)
{
	struct sched_param sp = { 0 };
	for (unsigned i = 0; i < n; i++)
		if (p->idle[i] != bulk &&
		    pthread_setschedparam(p->th[i], bulk ? SCHED_IDLE : SCHED_OTHER, &sp) == 0)
			p->idle[i] = bulk;
}

static int ld(uint64_t v)
{
	return v ? (int)v : 1; /* BLAS wants a leading dimension >= 1 */
}

static uint64_t cdiv(uint64_t a, uint64_t b)
{
	return a / b + (a % b != 0);
}

/* Tile u of C = alpha*A*op(B) + beta*C, with the full k. */
static void gemm_tile(const union devq_kval *a, bool nt, uint64_t u)
{
	uint64_t m = a[0].u64, n = a[1].u64, k = a[2].u64;
	float alpha = a[3].f32, beta = a[4].f32;
	const float *A = a[5].ptr, *B = a[6].ptr;
	float *C = a[7].ptr;
	uint64_t t = tile_of(a), cols = cdiv(n, t);
	uint64_t r0 = u / cols * t, c0 = u % cols * t;
	uint64_t rows = m - r0 < t ? m - r0 : t;
	uint64_t w = n - c0 < t ? n - c0 : t;
	enum CBLAS_TRANSPOSE tb = nt ? CblasTrans : CblasNoTrans;
	int ldb = nt ? ld(k) : ld(n);
	cblas_sgemm(CblasRowMajor, CblasNoTrans, tb, (int)rows, (int)w, (int)k, alpha, A + r0 * k,
		    ld(k), nt ? B + c0 * k : B + c0, ldb, beta, C + r0 * n + c0, ld(n));
}

/* Part `part` of parts of the tiles [first, last): a run of consecutive
 * tiles. */
static void gemm_part(const union devq_kval *a, bool nt, uint64_t first, uint64_t last,
		      unsigned part, unsigned parts)
{
	uint64_t span = last - first;
	uint64_t u0 = first + span * part / parts, u1 = first + span * (part + 1) / parts;
	for (uint64_t u = u0; u < u1; u++)
		gemm_tile(a, nt, u);
}

static void *helper(void *arg)
{
	struct helper_arg *h = arg;
	struct gemm_pool *p = h->p;
	/* Named for top -H; it would inherit its creator's (devqd-cpu/N). */
	pthread_setname_np(pthread_self(), "devqd-gemm");
	/* Not p->gen read here: the task that made this helper may already
	 * have been posted when the thread starts. */
	unsigned seen = h->seen;
	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->stop && p->gen == seen)
			pthread_cond_wait(&p->go, &p->lock);
		if (p->stop)
			break;
		seen = p->gen;
		struct gemm_task t = p->task;
		if (h->index >= t.parts)
			continue;
		pthread_mutex_unlock(&p->lock);
		gemm_part(t.args, t.nt, t.first, t.last, h->index, t.parts);
		pthread_mutex_lock(&p->lock);
		if (--p->pending == 0)
			pthread_cond_signal(&p->done);
	}
	pthread_mutex_unlock(&p->lock);
	free(h);
	return NULL;
}

static int gemm_init(void *stream, void **slot, char *err, size_t errlen)
{
	(void)stream;
	/* Every call on its caller's thread: see the header comment. */
	openblas_set_num_threads(1);
	struct gemm_pool *p = calloc(1, sizeof(*p));
	if (!p) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->done, NULL);
	p->have_cpus = sched_getaffinity(0, sizeof(p->cpus), &p->cpus) == 0;
	p->apart_from = -1;
	*slot = p;
	return 0;
}

/* Keeps the helpers off the CPU the caller runs on.  A helper woken while
 * every CPU is busy for a moment (the client's poll, the loop going back
 * to sleep) may be placed on its caller's CPU, and the scheduler moves one
 * of the two only after a few milliseconds (an idle CPU that was recently
 * busy does not pull at once): the split gemm then runs as slowly as one
 * part after the other (measured: bench/RESULTS.md, "Clients sleep
 * through long ops; the gemm's helpers kept apart").  Only when the
 * caller's CPU changed since the last call: a syscall per helper, not per
 * gemm.  Best effort: a mask that cannot be set leaves the
 * scheduler to place them. */
static void keep_apart(struct gemm_pool *p)
{
	int cpu = sched_getcpu();
	if (!p->have_cpus || cpu < 0 || cpu >= CPU_SETSIZE || cpu == p->apart_from)
		return;
	cpu_set_t others = p->cpus;
	CPU_CLR(cpu, &others);
	if (!CPU_COUNT(&others))
		return;
	for (unsigned i = 0; i < p->nhelpers; i++)
		(void)pthread_setaffinity_np(p->th[i], sizeof(others), &others);
	p->apart_from = cpu;
}

static void gemm_fini(void *stream, void *slot)
{
	struct gemm_pool *p = slot;
	(void)stream;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->lock);
	for (unsigned i = 0; i < p->nhelpers; i++)
		pthread_join(p->th[i], NULL);
	pthread_cond_destroy(&p->go);
	pthread_cond_destroy(&p->done);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

/* Starts helpers up to want (fewer if threads cannot be made: the parts
 * then shrink to what runs), from the caller's thread, at the priority it
 * runs this call at (bulk: SCHED_IDLE). */
static unsigned grow(struct gemm_pool *p, unsigned want, bool bulk)
{
	if (want > GEMM_MAX_HELPERS)
		want = GEMM_MAX_HELPERS;
	while (p->nhelpers < want) {
		struct helper_arg *h = malloc(sizeof(*h));
		if (!h)
			break;
		h->p = p;
		h->index = p->nhelpers + 1;
		h->seen = p->gen; /* only the caller's thread moves gen */
		if (pthread_create(&p->th[p->nhelpers], NULL, helper, h) != 0) {
			free(h);
			break;
		}
		p->idle[p->nhelpers] = bulk; /* a thread inherits its creator's policy */
		p->nhelpers++;
		p->apart_from = -1; /* the new one has the creator's mask */
	}
	return p->nhelpers;
}

/* The tiles of C; one for an empty C, so that its slice still refuses
 * dims past what BLAS takes (m = 2^31 with n = 0).  Saturating: such dims
 * are refused by the first slice. */
static uint64_t gemm_units(const union devq_kval *a)
{
	uint64_t t = tile_of(a), rows = cdiv(a[0].u64, t), cols = cdiv(a[1].u64, t);
	if (!rows || !cols)
		return 1;
	if (cols > UINT64_MAX / rows)
		return UINT64_MAX;
	return rows * cols;
}

static int gemm_slice(const union devq_kval *a, const struct devq_host_call *call, bool nt,
		      uint64_t first, uint64_t last)
{
	static const char *const dim[3] = { "m", "n", "k" };
	for (int i = 0; i < 3; i++)
		if (a[i].u64 > INT_MAX) {
			snprintf(call->err, call->errlen,
				 "%s = %llu: more than this BLAS takes (%d)", dim[i],
				 (unsigned long long)a[i].u64, INT_MAX);
			return -EOVERFLOW;
		}
	uint64_t m = a[0].u64, n = a[1].u64, k = a[2].u64;
	if (!m || !n || first >= last)
		return 0;
	struct gemm_pool *p = call->slot;
	uint64_t span = last - first;
	unsigned parts = call->threads ? call->threads : 1;
	if (parts > span)
		parts = (unsigned)span;
	uint64_t t = tile_of(a), tm = m < t ? m : t, tn = n < t ? n : t;
	if (span * tm * tn * (k ? k : 1) < GEMM_SPLIT_MIN)
		parts = 1;
	if (parts > 1) {
		unsigned helpers = grow(p, parts - 1, call->bulk != 0);
		if (helpers + 1 < parts)
			parts = helpers + 1;
	}
	if (parts <= 1) {
		gemm_part(a, nt, first, last, 0, 1);
		return 0;
	}
	keep_apart(p);
	helpers_follow(p, parts - 1, call->bulk != 0);
	pthread_mutex_lock(&p->lock);
	p->task = (struct gemm_task){
		.args = a, .nt = nt, .first = first, .last = last, .parts = parts
	};
	p->pending = parts - 1;
	p->gen++;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->lock);
	gemm_part(a, nt, first, last, 0, parts);
	pthread_mutex_lock(&p->lock);
	while (p->pending)
		pthread_cond_wait(&p->done, &p->lock);
	pthread_mutex_unlock(&p->lock);
	return 0;
}

/* The whole op in one call (where devqd does not slice it). */
static int gemm_run(const union devq_kval *a, const struct devq_host_call *call, bool nt)
{
	return gemm_slice(a, call, nt, 0, gemm_units(a));
}

DEVQ_GEMM_EXES_SLICED(gemm_run, gemm_init, gemm_fini, gemm_units, gemm_slice);
