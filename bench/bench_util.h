/* SPDX-License-Identifier: Apache-2.0 */
/* Shared pieces of the devq benchmarks: a private devqd, clocks, order
 * statistics, least squares and a minimal JSON writer.  Nothing here asserts
 * speed: the programs print what they measured and write it as JSON. */
#ifndef DEVQ_BENCH_UTIL_H
#define DEVQ_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

uint64_t bu_now_ns(void);

/* A devqd of our own on a socket in a fresh temporary directory.  The
 * binary is $DEVQ_BUILD/devqd (default build/devqd); extra arguments come
 * from $DEVQD_ARGS (split on spaces), so the same run can be repeated with a
 * daemon option on and off (e.g. a trace recorder). */
struct bu_daemon {
	pid_t pid;
	char dir[64];
	char sock[128];
};
int bu_daemon_start(struct bu_daemon *d);
int bu_daemon_stop(struct bu_daemon *d); /* SIGTERM and wait: exit status */

/* Sorts v in place. */
void bu_sort(uint64_t *v, size_t n);
/* q-quantile (0..1) of sorted v, nearest rank. */
uint64_t bu_quantile(const uint64_t *sorted, size_t n, double q);
double bu_median_d(double *v, size_t n);

/* y = a + b x by least squares; r2 and the largest relative residual
 * |y - fit| / y over the points. */
struct bu_fit {
	double a, b, r2, max_rel_resid;
};
void bu_linfit(const double *x, const double *y, size_t n, struct bu_fit *out);

/* JSON: one object per file, flat keys and arrays of flat objects. */
struct bu_json {
	FILE *f;
	int depth;
	int first[8];
};
int bu_json_open(struct bu_json *j, const char *name); /* $DEVQ_BENCH_OUT/name.json */
void bu_json_key_num(struct bu_json *j, const char *k, double v);
void bu_json_key_str(struct bu_json *j, const char *k, const char *v);
void bu_json_begin_array(struct bu_json *j, const char *k);
void bu_json_end_array(struct bu_json *j);
void bu_json_begin_obj(struct bu_json *j);
void bu_json_end_obj(struct bu_json *j);
void bu_json_close(struct bu_json *j);

/* Host facts recorded with every result: cores, load average, kernel. */
void bu_json_host(struct bu_json *j);
void bu_print_host(void);

#endif
