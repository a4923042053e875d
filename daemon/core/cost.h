/* SPDX-License-Identifier: Apache-2.0 */
/* Cost expressions: how much work an op of an executable asks for, as a
 * function of its scalar arguments (gemm: 2*m*n*k flop; a streaming kernel:
 * bytes).  Written on a manifest line (kernels/manifest.def) or as
 * `cost = EXPR` in a repository NAME.exec; compiled once, when the manifest
 * or the file is loaded, into a short postfix program that each submit
 * evaluates in O(its length), which the compiler bounds.
 *
 * Language:
 *   expr   := term (('+' | '-') term)*
 *   term   := factor (('*' | '/') factor)*
 *   factor := NUMBER | NAME | '(' expr ')' | ('min' | 'max') '(' expr ',' expr ')'
 * NUMBER is a decimal integer that fits 64 bits; NAME a u32 or u64 scalar
 * argument of the signature.  Usual precedence, left to right.
 *
 * Arithmetic saturates: a sum or product past 2^64-1 is 2^64-1 (UINT64_MAX,
 * "too much to count"), which then stays so through every later operation
 * (UINT64_MAX - x and UINT64_MAX / x are UINT64_MAX); a difference below 0
 * is 0; x / 0 at run time is UINT64_MAX (an argument that makes the
 * divisor 0 asks for more than any bound); a literal 0 divisor is refused
 * when compiled.  No overflow, no undefined behaviour, whatever the
 * arguments.
 *
 * Rates turn a cost into expected device time: UNITS per second, learned
 * from completed ops (core/fair.c) or pinned by devqd.conf's rate key. */
#ifndef DEVQ_COST_H
#define DEVQ_COST_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

/* Bounds of one expression: its text, its compiled length (numbers,
 * names and operators) and the nesting of parentheses. */
#define DEVQ_COST_TEXT_MAX 128
#define DEVQ_COST_MAX 32
#define DEVQ_COST_DEPTH 8

struct devq_cost {
	uint8_t n; /* instructions; 0: no cost declared */
	uint8_t op[DEVQ_COST_MAX];
	uint8_t param[DEVQ_COST_MAX];  /* the argument a load reads */
	uint64_t lit[DEVQ_COST_MAX];   /* the value a literal pushes */
};

/* Compiles text against sig into c.  0, or -EINVAL with err saying what
 * and where: "column C: ...", C counting from 1. */
int devq_cost_compile(const char *text, const struct devq_sig *sig, struct devq_cost *c,
		      char *err, size_t errlen);
/* The cost of an op whose scalar arguments are args (validated): c->n > 0. */
uint64_t devq_cost_eval(const struct devq_cost *c, const union devq_kval *args);

/* Expected ns of cost at per_s units per second, rounded up, saturating
 * at UINT64_MAX; per_s > 0.  Rounded up so that "expected time <= limit"
 * is exactly cost * 10^9 <= limit * per_s. */
uint64_t devq_cost_ns(uint64_t cost, uint64_t per_s);
/* The rate one op showed: cost done in ns of device time, in units per
 * second (rounded down, at least 1, saturating). */
uint64_t devq_cost_rate(uint64_t cost, uint64_t ns);

#endif
