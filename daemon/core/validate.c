/* SPDX-License-Identifier: Apache-2.0 */
/* Validation of one submitted op against the session's handles and the
 * executable's signature.  Only checks and fills the op's arguments: nothing
 * here orders or runs anything.  Every failure names the argument. */
#include <errno.h>
#include <stdbool.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/validate.h"

#include "core/buffer.h"
#include "core/cost.h"
#include "core/engine.h"
#include "core/job.h"
#include "core/repo.h"
#include "core/session.h"

/* validate_kernel's `given`: one bit per parameter. */
_Static_assert(DEVQ_MAX_PARAMS <= 32, "a parameter bit set in a uint32_t");

static const char *case_name(Devq__Arg__ValueCase c)
{
	switch (c) {
	case DEVQ__ARG__VALUE_U64: return "u64";
	case DEVQ__ARG__VALUE_U32: return "u32";
	case DEVQ__ARG__VALUE_I64: return "i64";
	case DEVQ__ARG__VALUE_I32: return "i32";
	case DEVQ__ARG__VALUE_F32: return "f32";
	case DEVQ__ARG__VALUE_F64: return "f64";
	case DEVQ__ARG__VALUE_BUFFER: return "buffer";
	default: return "nothing";
	}
}

static Devq__Arg__ValueCase case_of(enum devq_type t)
{
	switch (t) {
	case DEVQ_T_U32: return DEVQ__ARG__VALUE_U32;
	case DEVQ_T_U64: return DEVQ__ARG__VALUE_U64;
	case DEVQ_T_I32: return DEVQ__ARG__VALUE_I32;
	case DEVQ_T_I64: return DEVQ__ARG__VALUE_I64;
	case DEVQ_T_F32: return DEVQ__ARG__VALUE_F32;
	case DEVQ_T_F64: return DEVQ__ARG__VALUE_F64;
	default: return DEVQ__ARG__VALUE__NOT_SET; /* no u8 scalars on the wire */
	}
}

/* Records that op uses b with the given access (merged when it appears in
 * more than one argument). */
static void use_buf(struct devq_job *op, struct devq_buf *b, unsigned access, unsigned *acc)
{
	for (unsigned i = 0; i < op->nbufs; i++) {
		if (op->bufs[i] == b) {
			acc[i] |= access;
			return;
		}
	}
	acc[op->nbufs] = access;
	op->bufs[op->nbufs++] = b;
}

/* The subject of check_range's errors: a fixed label, or "argument
 * 'NAME'" for a kernel's buffer argument, formatted only when there is an
 * error (check_range runs for every buffer argument of every op). */
static const char *subject(char *buf, size_t n, const char *what, const char *arg)
{
	if (!arg)
		return what;
	snprintf(buf, n, "argument '%s'", arg);
	return buf;
}

/* Resolves a buffer range; returns a code, 0 when it lies inside the buffer
 * and the access is allowed.  Errors name what, or the argument arg when it
 * is not NULL. */
static int check_range(struct devq_session *s, const char *what, const char *arg,
		       const Devq__BufferArg *ba, uint64_t bytes, size_t align, unsigned access,
		       struct devq_buf **out, char *err, size_t n)
{
	char sb[64];
#define WHAT subject(sb, sizeof(sb), what, arg)
	if (!ba) {
		snprintf(err, n, "%s: no buffer given", WHAT);
		return DEVQ__CODE__INVALID_ARGUMENT;
	}
	struct devq_buf *b = devq_idmap_get(&s->bufs, ba->id);
	if (!b) {
		snprintf(err, n, "%s: buffer %" PRIu64 " not found", WHAT, ba->id);
		return DEVQ__CODE__NOT_FOUND;
	}
	if (b->releasing) {
		snprintf(err, n, "%s: buffer %" PRIu64 " is being released", WHAT, ba->id);
		return DEVQ__CODE__FAILED_PRECONDITION;
	}
	if (align > 1 && ba->offset % align) {
		snprintf(err, n, "%s: offset %" PRIu64 " is not a multiple of %zu bytes", WHAT,
			 ba->offset, align);
		return DEVQ__CODE__INVALID_ARGUMENT;
	}
	if (ba->offset > b->size || bytes > b->size - ba->offset) {
		snprintf(err, n,
			 "%s: bytes [%" PRIu64 ", %" PRIu64 "%s) lie outside buffer %" PRIu64
			 " of %" PRIu64 " bytes",
			 WHAT, ba->offset, ba->offset + bytes,
			 ba->offset + bytes < ba->offset ? " (overflow)" : "", ba->id, b->size);
		return DEVQ__CODE__OUT_OF_RANGE;
	}
	if ((access & DEVQ_ACC_OUT) && b->read_only) {
		snprintf(err, n, "%s: buffer %" PRIu64 " was imported read-only", WHAT, ba->id);
		return DEVQ__CODE__PERMISSION_DENIED;
	}
	*out = b;
	return 0;
#undef WHAT
}

/* strcmp(a, b) == 0 for the short names of parameters, without a call. */
static inline bool name_eq(const char *a, const char *b)
{
	while (*a && *a == *b) {
		a++;
		b++;
	}
	return *a == *b;
}

/* The op's cost (core/cost.h), and the bound max-op-ms puts on it: with a
 * rate pinned, or learned from DEVQ_COST_SAMPLES ops (the fastest seen,
 * so a refusal is never a matter of which estimate was current), an op
 * expected to take longer than max-op-ms is refused.  Before that, only
 * the run-time bound applies.  O(the expression), bounded at load.  Out
 * of line: most ops have no cost (a null op), and inlined it cost each of
 * them registers. */
static __attribute__((noinline)) int check_cost(const struct devq_engine *d,
						 const struct devq_kernel *kern,
						 const struct devq_cost *cost, struct devq_job *op,
						 char *err, size_t n)
{
	op->cost = devq_cost_eval(cost, op->b.args);
	op->fcost = true;
	uint64_t rate = devq_fair_refuse_rate(op->festp);
	if (!rate)
		return 0;
	uint64_t ns = devq_cost_ns(op->cost, rate);
	if (ns <= d->cfg.max_op_ns)
		return 0;
	/* The two figures first: a completion's message is 160 bytes. */
	snprintf(err, n,
		 "expected %" PRIu64 " ns exceeds max-op-ms, %" PRIu64 " ns: %s's cost %" PRIu64
		 " at %" PRIu64 "/s (%s)",
		 ns, d->cfg.max_op_ns, kern->name, op->cost, rate,
		 op->festp->pinned ? "pinned rate" : "fastest rate seen");
	return DEVQ__CODE__OUT_OF_RANGE;
}

static int validate_kernel(struct devq_session *s, const Devq__KernelOp *k, struct devq_job *op,
			   unsigned *acc, char *err, size_t n)
{
	struct devq_engine *d = s->e;
	const struct devq_kernel *kern;
	const struct devq_sig *sig;
	const struct devq_cost *cost;
	struct devq_exe *exe = NULL;
	if (k->executable < devq_nkernels) {
		kern = &devq_kernels[k->executable];
		sig = &d->sigs[k->executable];
		cost = &d->costs[k->executable];
	} else if ((exe = devq_repo_get(&d->repo, k->executable))) {
		kern = &exe->k;
		sig = &exe->sig;
		cost = &exe->cost;
	} else {
		snprintf(err, n, "executable %u not found%s", k->executable,
			 k->executable >= DEVQ_REPO_FIRST_ID
				 ? " (removed from the repository? devctl list shows what is served)"
				 : "");
		return DEVQ__CODE__NOT_FOUND;
	}
	if (kern->test_only && !d->cfg.test_faults) {
		snprintf(err, n, "executable %u not found", k->executable);
		return DEVQ__CODE__NOT_FOUND;
	}
	if (!d->be->ops->has_kernel(d->be, kern)) {
		snprintf(err, n, "executable %s has no code for this device (%s)%s", kern->name,
			 d->be->device,
			 exe ? (exe->backends & DEVQ_EXE_CUDA ? ": its repository file names only cuda"
							       : ": its repository file names only cpu")
			     : "");
		return DEVQ__CODE__FAILED_PRECONDITION;
	}
	/* Known from here on, even if its arguments fail: the op recorder
	 * names a failed op by it (devctl trace).  A failed op's kind is
	 * DEVQ_BOP_FAIL, so nothing runs it.  A repository executable stays
	 * loaded until the op's completion is processed, whatever a reload
	 * does meanwhile. */
	op->b.kernel = kern;
	/* What learns its device time (core/fair.h). */
	op->festp = exe ? &exe->est : &d->fair.est_builtin[k->executable];
	if (exe)
		op->exe = devq_repo_ref(exe);
	/* byparam[p] is set where bit p of given is: one word to clear per
	 * op, not the whole array. */
	const Devq__Arg *byparam[DEVQ_MAX_PARAMS];
	uint32_t given = 0;
	for (size_t i = 0; i < k->n_args; i++) {
		const Devq__Arg *a = k->args[i];
		/* Clients name the arguments in the signature's order: the
		 * i-th parameter first, the search (strcmp per name) only for
		 * the others.  The same answer: names are unique. */
		int p = i < sig->nparams && name_eq(sig->p[i].name, a->name)
				? (int)i
				: devq_sig_find(sig, a->name);
		if (p < 0) {
			snprintf(err, n, "%s has no argument '%.40s'", kern->name, a->name);
			return DEVQ__CODE__INVALID_ARGUMENT;
		}
		if (given >> p & 1) {
			snprintf(err, n, "argument '%s' given twice", a->name);
			return DEVQ__CODE__INVALID_ARGUMENT;
		}
		byparam[p] = a;
		given |= 1u << p;
	}
	/* Scalars first: buffer extents are computed from them. */
	for (unsigned p = 0; p < sig->nparams; p++) {
		const struct devq_param *pp = &sig->p[p];
		if (!(given >> p & 1)) {
			snprintf(err, n, "argument '%s' (%s%s%s) missing", pp->name,
				 pp->access ? devq_access_name(pp->access) : "",
				 pp->access ? " " : "", devq_type_name(pp->type));
			return DEVQ__CODE__INVALID_ARGUMENT;
		}
		if (pp->access != DEVQ_ACC_SCALAR)
			continue;
		const Devq__Arg *a = byparam[p];
		if (a->value_case != case_of(pp->type)) {
			snprintf(err, n, "argument '%s': expected %s, got %s", pp->name,
				 devq_type_name(pp->type), case_name(a->value_case));
			return DEVQ__CODE__INVALID_ARGUMENT;
		}
		union devq_kval *v = &op->b.args[p];
		switch (a->value_case) {
		case DEVQ__ARG__VALUE_U64: v->u64 = a->u64; break;
		case DEVQ__ARG__VALUE_U32: v->u32 = a->u32; break;
		case DEVQ__ARG__VALUE_I64: v->i64 = a->i64; break;
		case DEVQ__ARG__VALUE_I32: v->i32 = a->i32; break;
		case DEVQ__ARG__VALUE_F32: v->f32 = a->f32; break;
		case DEVQ__ARG__VALUE_F64: v->f64 = a->f64; break;
		default: break;
		}
		/* A u64 parameter named ns is a duration: the admin bounds it,
		 * and fairness takes it as the op's expected device time. */
		if ((int)p == sig->duration) {
			if (v->u64 > d->cfg.max_op_ns) {
				snprintf(err, n,
					 "argument 'ns': %" PRIu64
					 " ns exceeds the maximum op duration of %" PRIu64 " ns",
					 v->u64, d->cfg.max_op_ns);
				return DEVQ__CODE__OUT_OF_RANGE;
			}
			op->decl_ns = v->u64;
			op->fdecl = true;
		}
	}
	if (__builtin_expect(cost->n != 0, 0)) {
		int code = check_cost(d, kern, cost, op, err, n);
		if (code)
			return code;
	}
	for (unsigned p = 0; p < sig->nparams; p++) {
		const struct devq_param *pp = &sig->p[p];
		if (pp->access == DEVQ_ACC_SCALAR)
			continue;
		const Devq__Arg *a = byparam[p];
		if (a->value_case != DEVQ__ARG__VALUE_BUFFER) {
			snprintf(err, n, "argument '%s': expected a buffer (%s %s[]), got %s", pp->name,
				 devq_access_name(pp->access), devq_type_name(pp->type),
				 case_name(a->value_case));
			return DEVQ__CODE__INVALID_ARGUMENT;
		}
		uint64_t bytes;
		if (devq_sig_extent_bytes(sig, p, op->b.args, &bytes) < 0) {
			/* The dims as given, so the client sees which product
			 * overflowed: "4294967295 x 4294967297 f32". */
			char dims[DEVQ_MAX_DIMS * 24] = "";
			size_t o = 0;
			for (unsigned d = 0; d < pp->ndims && o < sizeof dims; d++) {
				uint64_t v = pp->dim_param[d] >= 0 ? op->b.args[pp->dim_param[d]].u64
								   : pp->dim_lit[d];
				o += (size_t)snprintf(dims + o, sizeof dims - o, "%s%" PRIu64,
						      d ? " x " : "", v);
			}
			snprintf(err, n, "argument '%s': extent overflows 64 bits (%s %s)", pp->name,
				 dims, devq_type_name(pp->type));
			return DEVQ__CODE__OUT_OF_RANGE;
		}
		struct devq_buf *b;
		int code = check_range(s, NULL, pp->name, a->buffer, bytes, devq_type_size(pp->type),
				       pp->access, &b, err, n);
		if (code)
			return code;
		op->b.args[p].u64 = b->devaddr + a->buffer->offset;
		op->arg_bytes += bytes;
		use_buf(op, b, pp->access, acc);
	}
	if (devq_kernel_refuses(kern, op->b.args, err, n))
		return DEVQ__CODE__INVALID_ARGUMENT;
	op->b.kind = DEVQ_BOP_KERNEL;
	op->b.kernel = kern;
	return 0;
}

int devq_validate_op(struct devq_session *s, const Devq__Op *m, struct devq_job *op, char *err,
		     size_t n)
{
	unsigned *acc = op->acc; /* acc[i]: merged access of op->bufs[i] */
	int code;
	struct devq_buf *src, *dst;

	switch (m->body_case) {
	case DEVQ__OP__BODY_KERNEL:
		code = validate_kernel(s, m->kernel, op, acc, err, n);
		break;
	case DEVQ__OP__BODY_COPY:
		if ((code = check_range(s, "copy source", NULL, m->copy->src, m->copy->size, 1,
					DEVQ_ACC_IN, &src, err, n)) ||
		    (code = check_range(s, "copy destination", NULL, m->copy->dst, m->copy->size, 1,
					DEVQ_ACC_OUT, &dst, err, n)))
			break;
		op->b.kind = DEVQ_BOP_COPY;
		op->b.src = src->devaddr + m->copy->src->offset;
		op->b.dst = dst->devaddr + m->copy->dst->offset;
		op->b.size = m->copy->size;
		op->arg_bytes = m->copy->size;
		op->festp = &s->e->fair.est_copy;
		use_buf(op, src, DEVQ_ACC_IN, acc);
		use_buf(op, dst, DEVQ_ACC_OUT, acc);
		break;
	case DEVQ__OP__BODY_FILL:
		if (m->fill->size % 4) {
			snprintf(err, n, "fill: size %" PRIu64 " is not a multiple of 4", m->fill->size);
			code = DEVQ__CODE__INVALID_ARGUMENT;
			break;
		}
		if ((code = check_range(s, "fill destination", NULL, m->fill->dst, m->fill->size, 4,
					DEVQ_ACC_OUT, &dst, err, n)))
			break;
		op->b.kind = DEVQ_BOP_FILL;
		op->b.dst = dst->devaddr + m->fill->dst->offset;
		op->b.size = m->fill->size;
		op->b.pattern = m->fill->pattern;
		op->arg_bytes = m->fill->size;
		op->festp = &s->e->fair.est_fill;
		use_buf(op, dst, DEVQ_ACC_OUT, acc);
		break;
	default:
		snprintf(err, n, "op has no body (kernel, copy or fill)");
		code = DEVQ__CODE__INVALID_ARGUMENT;
		break;
	}
	if (code) {
		op->nbufs = 0;
		return code;
	}
	return 0;
}
