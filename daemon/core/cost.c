/* SPDX-License-Identifier: Apache-2.0 */
/* Cost expressions: a recursive-descent compiler to a postfix program, and
 * its evaluator; see cost.h for the language and its arithmetic. */
#include "core/cost.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

enum {
	C_LIT = 1,
	C_U64, /* load a u64 argument */
	C_U32, /* load a u32 argument */
	C_ADD,
	C_SUB,
	C_MUL,
	C_DIV,
	C_MIN,
	C_MAX,
};

struct cparse {
	const char *text, *p;
	const struct devq_sig *sig;
	struct devq_cost *c;
	unsigned depth;
	char *err;
	size_t errlen;
};

static int fail_at(struct cparse *ps, const char *at, const char *what, const char *arg)
{
	snprintf(ps->err, ps->errlen, "column %u: %s%s", (unsigned)(at - ps->text) + 1, what,
		 arg ? arg : "");
	return -EINVAL;
}

static void skip_ws(struct cparse *ps)
{
	while (*ps->p == ' ' || *ps->p == '\t')
		ps->p++;
}

static int emit(struct cparse *ps, const char *at, uint8_t op, uint8_t param, uint64_t lit)
{
	struct devq_cost *c = ps->c;
	if (c->n == DEVQ_COST_MAX) {
		char m[64];
		snprintf(m, sizeof(m), "longer than %d numbers, names and operators",
			 DEVQ_COST_MAX);
		return fail_at(ps, at, m, NULL);
	}
	c->op[c->n] = op;
	c->param[c->n] = param;
	c->lit[c->n] = lit;
	c->n++;
	return 0;
}

static int expr(struct cparse *ps);

/* '(' expr ')' with the nesting bound; at: where the '(' is. */
static int group(struct cparse *ps, const char *at)
{
	if (++ps->depth > DEVQ_COST_DEPTH) {
		char m[64];
		snprintf(m, sizeof(m), "parentheses nested deeper than %d", DEVQ_COST_DEPTH);
		return fail_at(ps, at, m, NULL);
	}
	int r = expr(ps);
	ps->depth--;
	return r;
}

static int expect(struct cparse *ps, char ch)
{
	skip_ws(ps);
	if (*ps->p != ch) {
		char m[48];
		snprintf(m, sizeof(m), "expected '%c', found ", ch);
		return fail_at(ps, ps->p, m, *ps->p ? "something else" : "the end");
	}
	ps->p++;
	return 0;
}

static int factor(struct cparse *ps)
{
	skip_ws(ps);
	const char *at = ps->p;
	if (isdigit((unsigned char)*at)) {
		uint64_t v = 0;
		while (isdigit((unsigned char)*ps->p)) {
			unsigned d = (unsigned)(*ps->p - '0');
			if (v > (UINT64_MAX - d) / 10)
				return fail_at(ps, at, "number does not fit 64 bits", NULL);
			v = v * 10 + d;
			ps->p++;
		}
		return emit(ps, at, C_LIT, 0, v);
	}
	if (*at == '(') {
		ps->p++;
		int r = group(ps, at);
		return r ? r : expect(ps, ')');
	}
	if (!(isalpha((unsigned char)*at) || *at == '_'))
		return fail_at(ps, at, *at ? "expected a number, a name or '('" : "unexpected end",
			       NULL);
	size_t len = 0;
	while (isalnum((unsigned char)at[len]) || at[len] == '_')
		len++;
	ps->p = at + len;
	char name[DEVQ_MAX_NAME];
	if (len >= sizeof(name))
		return fail_at(ps, at, "name too long", NULL);
	memcpy(name, at, len);
	name[len] = '\0';
	skip_ws(ps);
	if (*ps->p == '(' && (!strcmp(name, "min") || !strcmp(name, "max"))) {
		const char *open = ps->p++;
		int r;
		if ((r = group(ps, open)) || (r = expect(ps, ',')) || (r = group(ps, open)) ||
		    (r = expect(ps, ')')))
			return r;
		return emit(ps, at, name[1] == 'i' ? C_MIN : C_MAX, 0, 0);
	}
	int p = devq_sig_find(ps->sig, name);
	if (p < 0)
		return fail_at(ps, at, "no argument named ", name);
	const struct devq_param *pp = &ps->sig->p[p];
	if (pp->access != DEVQ_ACC_SCALAR || (pp->type != DEVQ_T_U64 && pp->type != DEVQ_T_U32)) {
		char m[96];
		snprintf(m, sizeof(m), "'%s' is not a u32 or u64 scalar argument", name);
		return fail_at(ps, at, m, NULL);
	}
	return emit(ps, at, pp->type == DEVQ_T_U64 ? C_U64 : C_U32, (uint8_t)p, 0);
}

static int term(struct cparse *ps)
{
	int r = factor(ps);
	for (;;) {
		if (r)
			return r;
		skip_ws(ps);
		const char *at = ps->p;
		if (*at != '*' && *at != '/')
			return 0;
		ps->p++;
		r = factor(ps);
		if (r)
			return r;
		/* x / 0 with a literal 0 is always a mistake: refused here
		 * rather than saturating at every submit. */
		struct devq_cost *c = ps->c;
		if (*at == '/' && c->op[c->n - 1] == C_LIT && c->lit[c->n - 1] == 0)
			return fail_at(ps, at, "division by 0", NULL);
		r = emit(ps, at, *at == '*' ? C_MUL : C_DIV, 0, 0);
	}
}

static int expr(struct cparse *ps)
{
	int r = term(ps);
	for (;;) {
		if (r)
			return r;
		skip_ws(ps);
		const char *at = ps->p;
		if (*at != '+' && *at != '-')
			return 0;
		ps->p++;
		r = term(ps);
		if (!r)
			r = emit(ps, at, *at == '+' ? C_ADD : C_SUB, 0, 0);
	}
}

int devq_cost_compile(const char *text, const struct devq_sig *sig, struct devq_cost *c,
		      char *err, size_t errlen)
{
	memset(c, 0, sizeof(*c));
	struct cparse ps = { .text = text, .p = text, .sig = sig, .c = c, .err = err,
			     .errlen = errlen };
	size_t len = strlen(text);
	if (len > DEVQ_COST_TEXT_MAX) {
		snprintf(err, errlen, "column %d: longer than %d characters", DEVQ_COST_TEXT_MAX + 1,
			 DEVQ_COST_TEXT_MAX);
		return -EINVAL;
	}
	int r = expr(&ps);
	if (!r) {
		skip_ws(&ps);
		if (*ps.p)
			r = fail_at(&ps, ps.p, "expected an operator or the end", NULL);
	}
	if (r)
		c->n = 0;
	return r;
}

/* Saturating arithmetic: UINT64_MAX is "too much to count" and stays so. */
static inline uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static inline uint64_t sat_sub(uint64_t a, uint64_t b)
{
	return a == UINT64_MAX ? a : a > b ? a - b : 0;
}

static inline uint64_t sat_mul(uint64_t a, uint64_t b)
{
	return b && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

static inline uint64_t sat_div(uint64_t a, uint64_t b)
{
	return !b || a == UINT64_MAX ? UINT64_MAX : a / b;
}

uint64_t devq_cost_eval(const struct devq_cost *c, const union devq_kval *args)
{
	/* Each instruction pushes at most one value: n bounds the stack. */
	uint64_t st[DEVQ_COST_MAX];
	unsigned sp = 0;
	for (unsigned i = 0; i < c->n; i++) {
		uint64_t b;
		switch (c->op[i]) {
		case C_LIT: st[sp++] = c->lit[i]; continue;
		case C_U64: st[sp++] = args[c->param[i]].u64; continue;
		case C_U32: st[sp++] = args[c->param[i]].u32; continue;
		default: break;
		}
		/* A binary operator: the compiler put two operands before it. */
		b = st[--sp];
		uint64_t *a = &st[sp - 1];
		switch (c->op[i]) {
		case C_ADD: *a = sat_add(*a, b); break;
		case C_SUB: *a = sat_sub(*a, b); break;
		case C_MUL: *a = sat_mul(*a, b); break;
		case C_DIV: *a = sat_div(*a, b); break;
		case C_MIN: *a = *a < b ? *a : b; break;
		default: *a = *a > b ? *a : b; break;
		}
	}
	return sp ? st[0] : 0;
}

uint64_t devq_cost_ns(uint64_t cost, uint64_t per_s)
{
	if (!per_s)
		return UINT64_MAX;
	unsigned __int128 ns = ((unsigned __int128)cost * 1000000000u + per_s - 1) / per_s;
	return ns > UINT64_MAX ? UINT64_MAX : (uint64_t)ns;
}

uint64_t devq_cost_rate(uint64_t cost, uint64_t ns)
{
	unsigned __int128 r = (unsigned __int128)cost * 1000000000u / (ns ? ns : 1);
	return r > UINT64_MAX ? UINT64_MAX : r ? (uint64_t)r : 1;
}
