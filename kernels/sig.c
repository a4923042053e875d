/* SPDX-License-Identifier: Apache-2.0 */
/* Kernel signature parsing and the small type helpers shared by every backend.
 * Grammar (whitespace tolerant, comma separated):
 *   param  := name ':' type                     scalar, passed by value
 *           | name ':' access type '[' shape ']'  buffer
 *   access := in | out | inout
 *   shape  := dim (',' dim)*                  at most DEVQ_MAX_DIMS
 *   dim    := positive integer | name of an earlier u64 scalar
 * A shape of several dims is row-major and contiguous: the buffer holds the
 * product of the dims, elements, last dim fastest. */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "kernels.h"

static const struct {
	const char *name;
	size_t size;
} types[] = {
	[DEVQ_T_U8] = { "u8", 1 },   [DEVQ_T_U32] = { "u32", 4 }, [DEVQ_T_U64] = { "u64", 8 },
	[DEVQ_T_I32] = { "i32", 4 }, [DEVQ_T_I64] = { "i64", 8 }, [DEVQ_T_F32] = { "f32", 4 },
	[DEVQ_T_F64] = { "f64", 8 },
};
#define NTYPES (sizeof types / sizeof types[0])

static int type_ok(enum devq_type t)
{
	return (unsigned)t > 0 && (unsigned)t < NTYPES;
}

size_t devq_type_size(enum devq_type t)
{
	return type_ok(t) ? types[t].size : 0;
}

const char *devq_type_name(enum devq_type t)
{
	return type_ok(t) ? types[t].name : "?";
}

int devq_type_parse(const char *s, size_t len, enum devq_type *t)
{
	for (unsigned i = 1; i < NTYPES; i++) {
		if (strlen(types[i].name) == len && memcmp(types[i].name, s, len) == 0) {
			*t = (enum devq_type)i;
			return 0;
		}
	}
	return -EINVAL;
}

static const char *const access_names[] = {
	[DEVQ_ACC_SCALAR] = "scalar",
	[DEVQ_ACC_IN] = "in",
	[DEVQ_ACC_OUT] = "out",
	[DEVQ_ACC_INOUT] = "inout",
};

const char *devq_access_name(enum devq_access a)
{
	return (unsigned)a <= DEVQ_ACC_INOUT ? access_names[a] : "?";
}

uint64_t devq_mix64(uint64_t z)
{
	z ^= z >> 30;
	z *= 0xbf58476d1ce4e5b9ULL;
	z ^= z >> 27;
	z *= 0x94d049bb133111ebULL;
	z ^= z >> 31;
	return z;
}


int devq_sig_find(const struct devq_sig *sig, const char *name)
{
	for (unsigned i = 0; i < sig->nparams; i++)
		if (strcmp(sig->p[i].name, name) == 0)
			return (int)i;
	return -1;
}

int devq_sig_extent_bytes(const struct devq_sig *sig, unsigned i,
			  const union devq_kval *args, uint64_t *bytes)
{
	if (i >= sig->nparams || sig->p[i].access == DEVQ_ACC_SCALAR)
		return -EINVAL;
	const struct devq_param *p = &sig->p[i];
	uint64_t total = devq_type_size(p->type);
	if (total == 0 || p->ndims == 0 || p->ndims > DEVQ_MAX_DIMS)
		return -EINVAL;
	/* The true product decides, whatever the order of the dims: a zero dim
	 * makes an empty buffer even beside dims whose product overflows. */
	bool overflow = false, empty = false;
	for (unsigned d = 0; d < p->ndims; d++) {
		uint64_t v = p->dim_lit[d];
		if (p->dim_param[d] >= 0) {
			if ((unsigned)p->dim_param[d] >= sig->nparams)
				return -EINVAL;
			v = args[p->dim_param[d]].u64;
		}
		empty |= v == 0;
		overflow |= __builtin_mul_overflow(total, v, &total);
	}
	if (empty) {
		*bytes = 0;
		return 0;
	}
	if (overflow)
		return -EOVERFLOW;
	*bytes = total;
	return 0;
}

/* ---- parser ---- */

struct pstate {
	struct devq_sig sig; /* built here so the caller's copy is untouched on error */
	char *err;
	size_t errlen;
};

/* Messages name the parameter by 1-based position and, once known, its name,
 * because signatures arrive from clients who need to find the mistake. */
static int fail(struct pstate *ps, const char *fmt, ...)
{
	if (!ps->err || ps->errlen == 0)
		return -EINVAL;
	unsigned idx = ps->sig.nparams;
	const char *name = ps->sig.p[idx < DEVQ_MAX_PARAMS ? idx : 0].name;
	int n = idx < DEVQ_MAX_PARAMS && name[0]
			? snprintf(ps->err, ps->errlen, "parameter %u (%s): ", idx + 1, name)
			: snprintf(ps->err, ps->errlen, "parameter %u: ", idx + 1);
	if (n >= 0 && (size_t)n < ps->errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(ps->err + n, ps->errlen - (size_t)n, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

static int fail_at(struct pstate *ps, const char *what, const char *s)
{
	if (*s)
		return fail(ps, "expected %s, found '%.16s'", what, s);
	return fail(ps, "expected %s, found end of input", what);
}

static int is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static const char *skip_ws(const char *s)
{
	while (is_space(*s))
		s++;
	return s;
}

/* A token runs to the next delimiter, so a bad name or type is reported
 * whole ("f16", "a-b") rather than cut at the first odd character. */
static size_t tok_len(const char *s)
{
	size_t n = 0;
	while (s[n] && !is_space(s[n]) && !strchr(":,[]", s[n]))
		n++;
	return n;
}

static int is_alpha_(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static int is_ident(const char *s, size_t len)
{
	if (len == 0 || !is_alpha_(s[0]))
		return 0;
	for (size_t i = 1; i < len; i++)
		if (!is_alpha_(s[i]) && !is_digit(s[i]))
			return 0;
	return 1;
}

static int tok_is(const char *s, size_t len, const char *word)
{
	return strlen(word) == len && memcmp(s, word, len) == 0;
}

static int parse_name(struct pstate *ps, const char **sp)
{
	struct devq_param *p = &ps->sig.p[ps->sig.nparams];
	const char *s = skip_ws(*sp);
	size_t len = tok_len(s);

	if (len == 0)
		return fail_at(ps, "a parameter name", s);
	if (!is_ident(s, len))
		return fail(ps, "invalid name '%.*s' (want [A-Za-z_][A-Za-z0-9_]*)", (int)len, s);
	if (len > DEVQ_MAX_NAME - 1)
		return fail(ps, "name '%.*s' longer than %d characters", (int)len, s,
			    DEVQ_MAX_NAME - 1);
	memcpy(p->name, s, len);
	p->name[len] = '\0';
	if (devq_sig_find(&ps->sig, p->name) >= 0)
		return fail(ps, "duplicate name");
	*sp = s + len;
	return 0;
}

static int parse_type(struct pstate *ps, const char **sp)
{
	struct devq_param *p = &ps->sig.p[ps->sig.nparams];
	const char *s = skip_ws(*sp);
	size_t len = tok_len(s);

	static const enum devq_access acc[] = { DEVQ_ACC_IN, DEVQ_ACC_OUT, DEVQ_ACC_INOUT };
	for (size_t i = 0; i < sizeof acc / sizeof acc[0]; i++) {
		if (tok_is(s, len, devq_access_name(acc[i]))) {
			p->access = acc[i];
			s = skip_ws(s + len);
			len = tok_len(s);
			break;
		}
	}
	if (len == 0)
		return fail_at(ps, "a type", s);
	if (devq_type_parse(s, len, &p->type) < 0)
		return fail(ps, "unknown type '%.*s'", (int)len, s);
	*sp = s + len;
	return 0;
}

static int parse_literal(struct pstate *ps, const char *s, size_t len, uint64_t *v)
{
	uint64_t x = 0;
	for (size_t i = 0; i < len; i++) {
		if (!is_digit(s[i]))
			return fail(ps, "invalid shape '%.*s'", (int)len, s);
		unsigned d = (unsigned)(s[i] - '0');
		if (x > (UINT64_MAX - d) / 10)
			return fail(ps, "shape '%.*s' too large", (int)len, s);
		x = x * 10 + d;
	}
	if (x == 0)
		return fail(ps, "shape must be positive");
	*v = x;
	return 0;
}

/* Only earlier u64 scalars may size a buffer: the daemon then knows every
 * extent once it has read the scalars, in one pass, with no cycles. */
static int parse_dim(struct pstate *ps, const char *s, size_t len)
{
	struct devq_param *p = &ps->sig.p[ps->sig.nparams];
	unsigned d = p->ndims;

	if (len == 0)
		return fail_at(ps, "a dimension", s);
	if (d == DEVQ_MAX_DIMS)
		return fail(ps, "shape has more than %d dimensions", DEVQ_MAX_DIMS);
	p->dim_param[d] = -1;
	p->dim_lit[d] = 0;
	if (is_digit(s[0])) {
		int rc = parse_literal(ps, s, len, &p->dim_lit[d]);
		if (rc < 0)
			return rc;
	} else if (is_ident(s, len)) {
		char name[DEVQ_MAX_NAME] = "";
		if (len < DEVQ_MAX_NAME)
			memcpy(name, s, len);
		int j = name[0] ? devq_sig_find(&ps->sig, name) : -1;
		if (j < 0)
			return fail(ps, "shape '%.*s' is not an earlier parameter", (int)len, s);
		if (ps->sig.p[j].access != DEVQ_ACC_SCALAR || ps->sig.p[j].type != DEVQ_T_U64)
			return fail(ps, "shape '%s' is not a u64 scalar", name);
		p->dim_param[d] = j;
	} else {
		return fail(ps, "invalid shape '%.*s'", (int)len, s);
	}
	p->ndims++;
	return 0;
}

static int parse_shape(struct pstate *ps, const char **sp)
{
	const char *s = *sp + 1; /* past '[' */

	for (;;) {
		s = skip_ws(s);
		size_t len = tok_len(s);
		int rc = parse_dim(ps, s, len);
		if (rc < 0)
			return rc;
		s = skip_ws(s + len);
		if (*s == ']')
			break;
		if (*s != ',')
			return fail_at(ps, "',' or ']'", s);
		s++;
	}
	*sp = s + 1;
	return 0;
}

static int parse_param(struct pstate *ps, const char **sp)
{
	struct devq_param *p = &ps->sig.p[ps->sig.nparams];
	int rc;

	if ((rc = parse_name(ps, sp)) < 0)
		return rc;
	const char *s = skip_ws(*sp);
	if (*s != ':')
		return fail_at(ps, "':' after the name", s);
	s++;
	if ((rc = parse_type(ps, &s)) < 0)
		return rc;
	s = skip_ws(s);
	if (*s == '[') {
		if (p->access == DEVQ_ACC_SCALAR)
			return fail(ps, "scalar has a shape (buffers need in, out or inout)");
		if ((rc = parse_shape(ps, &s)) < 0)
			return rc;
	} else if (p->access != DEVQ_ACC_SCALAR) {
		return fail(ps, "buffer has no shape");
	}
	*sp = s;
	return 0;
}

int devq_sig_parse(const char *text, struct devq_sig *sig, char *err, size_t errlen)
{
	struct pstate ps = { .err = err, .errlen = errlen };
	const char *s;

	if (err && errlen)
		err[0] = '\0';
	if (!text || !sig)
		return -EINVAL;
	s = skip_ws(text);
	while (*s) {
		if (ps.sig.nparams == DEVQ_MAX_PARAMS)
			return fail(&ps, "too many parameters (max %d)", DEVQ_MAX_PARAMS);
		int rc = parse_param(&ps, &s);
		if (rc < 0)
			return rc;
		ps.sig.nparams++;
		s = skip_ws(s);
		if (*s == ',') {
			s = skip_ws(s + 1);
			if (!*s) /* "a:u64," is more likely a truncation than intent */
				return fail(&ps, "empty parameter after trailing ','");
		} else if (*s) {
			ps.sig.nparams--; /* report against the parameter just parsed */
			return fail_at(&ps, "',' or end of input", s);
		}
	}
	ps.sig.duration = -1;
	for (unsigned i = 0; i < ps.sig.nparams; i++)
		if (ps.sig.p[i].access == DEVQ_ACC_SCALAR && ps.sig.p[i].type == DEVQ_T_U64 &&
		    !strcmp(ps.sig.p[i].name, "ns"))
			ps.sig.duration = (int)i;
	*sig = ps.sig;
	return 0;
}
