/* SPDX-License-Identifier: Apache-2.0 */
/* devctl submit: executables run in one session, their arguments made from
 * the command line (scalars, buffers from files, buffers shared between
 * ops), and their completions reported. */
#include "devctl/submit.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "devctl/util.h"
#include "devq.h"
#include "kernels.h"

#define MAX_SEGS 64

void devctl_submit_usage(FILE *f)
{
	fprintf(f,
		"  submit EXEC [NAME=VALUE]... [OPTION]... [:: EXEC ...]...\n"
		"      Run executable EXEC and wait for its completion(s).  Arguments:\n"
		"        NAME=VALUE        a scalar (decimal, 0x hex, or a float for f32/f64)\n"
		"        NAME=@FILE        a shared buffer holding FILE's bytes (@-: stdin)\n"
		"        NAME=size:BYTES   a zero-filled shared buffer of BYTES bytes\n"
		"        NAME=%%OTHER       the buffer made for argument OTHER earlier in this\n"
		"                          command (after ::)\n"
		"      A missing u64 dim (n in x:in f32[n], m in a:in f32[m,k]) is taken from the\n"
		"      first buffer whose shape it completes; a missing output buffer of known\n"
		"      size (out:out u64[1]) is created.\n"
		"      Options (per op, after its arguments):\n"
		"        --queue N         submit on queue N (default 0)\n"
		"        --priority P      open that queue with priority normal (default) or\n"
		"                          high (the daemon's high-priority streams)\n"
		"        --repeat N        submit the op N times (default 1)\n"
		"        --wait Q:K        wait for point K of queue Q first (repeatable)\n"
		"        --reset           reset the op's queue first: it runs although an\n"
		"                          earlier op there failed (else dependency_failed)\n"
		"        --deadline-ms N   not started N ms after devqd received it, the op\n"
		"                          never runs: deadline_exceeded, failing its queue\n"
		"        --out NAME=FILE   after completion, write buffer NAME to FILE (-:\n"
		"                          stdout); not when an op failed\n"
		"        --json            one JSON object per completed op, with its exec\n"
		"                          and the results of small output buffers\n"
		"      '::' starts another op in the same session, so ops can share buffers and\n"
		"      wait on each other; conflicting buffer accesses are ordered anyway.\n"
		"      Exit status: 0 when every op succeeded, 1 when one failed or devqd\n"
		"      refused an input, 2 on usage errors, 3 when devqd cannot be reached,\n"
		"      4 when an output file (--out, trace -o/--svg) cannot be written.\n"
		"      With --json, errors are {\"error\":\"...\"} objects on stderr; without\n"
		"      it, a wait over a second shows a progress line when stderr is a tty.\n"
		"      Ctrl-C while waiting disconnects: devqd cancels the ops not yet\n"
		"      started (a running one finishes, a sliced host op such as gemm_f32\n"
		"      stops at its next slice); devctl exits 130.\n");
}

struct named_buf {
	char name[DEVQ_MAX_NAME];
	struct devq_buffer *b;
	const char *file; /* --out target */
};

struct seg {
	const char *exec_name;
	const struct devq_exec *exec;
	struct devq_sig sig;
	char *vals[DEVQ_MAX_PARAMS]; /* argument text by parameter */
	uint32_t queue;
	int priority; /* of its queue, when devctl opens it */
	uint64_t repeat;
	bool reset; /* --reset: its queue is reset before its first op */
	uint64_t deadline_us; /* --deadline-ms: each of its ops' (0: none) */
	struct devq_wait waits[16];
	size_t nwaits;
	struct devq_arg args[DEVQ_MAX_PARAMS];
	struct devq_buffer *bufs[DEVQ_MAX_PARAMS];
	uint64_t first_point; /* of its first op on its queue; the rest follow */
	bool failed;          /* one of its ops failed */
};

struct submit_ctx {
	devq *q;
	struct seg segs[MAX_SEGS];
	size_t nsegs;
	struct named_buf nb[MAX_SEGS * DEVQ_MAX_PARAMS];
	size_t nnb;
	struct {
		const char *name, *file;
	} outs[64];
	size_t nouts;
	bool json;
	FILE *rep; /* the report: stdout, or stderr when --out sends a buffer there */
};

/* Exit status of a failed libdevq call: 3 when devqd could not be reached
 * or the connection broke, 1 when the daemon refused what was asked (a
 * buffer over its limits, ...), as an op that fails. */
static int rc_of(int r)
{
	switch (r) {
	case -ECONNRESET: case -ECONNREFUSED: case -EPIPE: case -ENOTCONN: case -EPROTO:
	case -ETIMEDOUT: case -EPROTONOSUPPORT: case -ENOMEM:
		return 3;
	default:
		return 1;
	}
}

static int parse_uint(const char *s, uint64_t max, uint64_t *out)
{
	char *end;
	errno = 0;
	if (!*s || *s == '-')
		return -EINVAL;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || *end || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

static struct named_buf *find_named(struct submit_ctx *c, const char *name)
{
	for (size_t i = c->nnb; i-- > 0;)
		if (!strcmp(c->nb[i].name, name))
			return &c->nb[i];
	return NULL;
}

static int add_named(struct submit_ctx *c, const char *name, struct devq_buffer *b)
{
	struct named_buf *n = &c->nb[c->nnb++];
	snprintf(n->name, sizeof(n->name), "%s", name);
	n->b = b;
	return 0;
}

static int make_buffer(struct submit_ctx *c, const char *param, const char *val,
		       struct devq_buffer **out)
{
	if (val[0] == '%') {
		struct named_buf *n = find_named(c, val + 1);
		if (!n) {
			devctl_errf("%s: argument '%s': no earlier buffer argument named '%s'\n",
				devctl_prog, param, val + 1);
			return 2;
		}
		*out = n->b;
		return 0;
	}
	uint64_t size;
	int fd = -1;
	char *data = NULL; /* what a pipe or stdin held */
	if (val[0] == '@') {
		bool std = !strcmp(val + 1, "-");
		fd = std ? dup(0) : open(val + 1, O_RDONLY | O_CLOEXEC);
		struct stat st;
		if (fd < 0 || fstat(fd, &st) < 0) {
			devctl_errf("%s: argument '%s': cannot read %s: %s\n", devctl_prog, param,
				val + 1, strerror(errno));
			if (fd >= 0)
				close(fd);
			return 2;
		}
		if (S_ISDIR(st.st_mode)) {
			devctl_errf("%s: argument '%s': cannot read %s: %s\n", devctl_prog, param,
				val + 1, strerror(EISDIR));
			close(fd);
			return 2;
		}
		size = (uint64_t)st.st_size;
		if (!S_ISREG(st.st_mode)) {
			/* A pipe, a terminal, /dev/stdin: its size is what it holds
			 * until end of file. */
			size_t cap = 0, got = 0;
			for (;;) {
				if (got == cap) {
					char *n = realloc(data, cap = cap ? cap * 2 : 65536);
					if (!n) {
						devctl_errf("%s: out of memory\n", devctl_prog);
						free(data);
						close(fd);
						return 3;
					}
					data = n;
				}
				ssize_t k = read(fd, data + got, cap - got);
				if (k < 0 && errno == EINTR)
					continue;
				if (k < 0) {
					devctl_errf("%s: argument '%s': reading %s failed: %s\n",
						    devctl_prog, param,
						    std ? "standard input" : val + 1, strerror(errno));
					free(data);
					close(fd);
					return 2;
				}
				if (k == 0)
					break;
				got += (size_t)k;
			}
			close(fd);
			fd = -1;
			size = got;
		}
		if (size == 0) {
			free(data);
			devctl_errf("%s: argument '%s': %s is empty\n", devctl_prog, param,
				!strcmp(val + 1, "-") ? "standard input" : val + 1);
			if (fd >= 0)
				close(fd);
			return 2;
		}
	} else if (!strncmp(val, "size:", 5)) {
		if (parse_uint(val + 5, UINT64_MAX, &size) < 0 || size == 0) {
			devctl_errf("%s: argument '%s': '%s' is not a positive byte count\n",
				    devctl_prog, param, val + 5);
			return 2;
		}
	} else {
		fprintf(stderr,
			"%s: argument '%s' is a buffer: give @FILE, size:BYTES or %%NAME, not '%s'\n",
			devctl_prog, param, val);
		return 2;
	}
	struct devq_buffer *b;
	int cr = devq_buffer_create(c->q, size, DEVQ_BUFFER_SHARED, &b);
	if (cr < 0) {
		devctl_errf("%s: argument '%s': %s\n", devctl_prog, param, devq_last_error(c->q));
		if (fd >= 0)
			close(fd);
		free(data);
		return rc_of(cr);
	}
	if (data) {
		memcpy(b->map, data, size);
		free(data);
	}
	if (fd >= 0) {
		uint64_t got = 0;
		while (got < size) {
			ssize_t n = read(fd, (char *)b->map + got, size - got);
			if (n <= 0) {
				devctl_errf("%s: argument '%s': reading %s failed: %s\n",
					    devctl_prog, param, val + 1,
					    n < 0 ? strerror(errno) : "shorter than its size");
				close(fd);
				return 2;
			}
			got += (uint64_t)n;
		}
		close(fd);
	}
	add_named(c, param, b);
	*out = b;
	return 0;
}

/* Missing u64 dims are taken from the buffers given: a dim that is the only
 * unknown one in a given buffer's shape is that buffer's element count over
 * the product of its other dims, which must divide it exactly (for [n], the
 * element count).  Buffers are tried in signature order, the first that
 * determines a dim sets it, and the passes repeat, since one buffer's dim
 * can leave another's last unknown. */
static int infer_dims(struct seg *s, union devq_kval *kv, bool *known)
{
	const struct devq_sig *sig = &s->sig;

	for (bool more = true; more;) {
		more = false;
		for (unsigned b = 0; b < sig->nparams; b++) {
			const struct devq_param *bp = &sig->p[b];
			if (bp->access == DEVQ_ACC_SCALAR || !s->bufs[b])
				continue;
			int unknown = -1;
			unsigned n_unknown = 0;
			uint64_t others = 1;
			bool overflow = false;
			for (unsigned d = 0; d < bp->ndims; d++) {
				int q = bp->dim_param[d];
				if (q >= 0 && !known[q]) {
					unknown = q;
					n_unknown++; /* [n,n] counts twice: not inferred */
					continue;
				}
				overflow |= __builtin_mul_overflow(others, q >= 0 ? kv[q].u64 : bp->dim_lit[d],
								   &others);
			}
			if (n_unknown != 1 || overflow || others == 0)
				continue;
			uint64_t elems = s->bufs[b]->size / devq_type_size(bp->type);
			if (elems % others) {
				devctl_errf(
					"%s: %s: cannot infer '%s' from argument '%s': its %" PRIu64
					" elements are not a multiple of %" PRIu64
					" (its other dims); give %s=\n",
					devctl_prog, s->exec_name, sig->p[unknown].name, bp->name,
					elems, others, sig->p[unknown].name);
				return 2;
			}
			kv[unknown].u64 = elems / others;
			s->args[unknown].type = DEVQ_ARG_U64;
			s->args[unknown].v.u64 = kv[unknown].u64;
			known[unknown] = true;
			more = true;
		}
	}
	return 0;
}

/* Turns the segment's argument text into typed arguments. */
static int build_args(struct submit_ctx *c, struct seg *s)
{
	const struct devq_sig *sig = &s->sig;
	int r;
	/* Buffers first: a missing extent is inferred from them. */
	for (unsigned p = 0; p < sig->nparams; p++) {
		const struct devq_param *pp = &sig->p[p];
		if (pp->access == DEVQ_ACC_SCALAR || !s->vals[p])
			continue;
		if ((r = make_buffer(c, pp->name, s->vals[p], &s->bufs[p])))
			return r;
		size_t es = devq_type_size(pp->type);
		if (es > 1 && s->bufs[p]->size % es) {
			fprintf(stderr,
				"%s: argument '%s': %" PRIu64 " bytes is not a whole number of %s "
				"elements (%zu bytes each)\n",
				devctl_prog, pp->name, s->bufs[p]->size, devq_type_name(pp->type),
				es);
			return 2;
		}
	}
	union devq_kval kv[DEVQ_MAX_PARAMS] = { 0 };
	bool known[DEVQ_MAX_PARAMS] = { 0 };
	for (unsigned p = 0; p < sig->nparams; p++) {
		const struct devq_param *pp = &sig->p[p];
		struct devq_arg *a = &s->args[p];
		a->name = pp->name;
		if (pp->access != DEVQ_ACC_SCALAR)
			continue;
		const char *v = s->vals[p];
		if (!v)
			continue; /* a dim, perhaps: inferred below */
		known[p] = true;
		uint64_t u;
		char *end;
		switch (pp->type) {
		case DEVQ_T_U64:
		case DEVQ_T_U32:
			if (parse_uint(v, pp->type == DEVQ_T_U32 ? UINT32_MAX : UINT64_MAX, &u) < 0) {
				devctl_errf("%s: argument '%s': '%s' is not a %s\n", devctl_prog,
					    pp->name, v, devq_type_name(pp->type));
				return 2;
			}
			a->type = pp->type == DEVQ_T_U32 ? DEVQ_ARG_U32 : DEVQ_ARG_U64;
			if (pp->type == DEVQ_T_U32)
				a->v.u32 = (uint32_t)u;
			else
				a->v.u64 = u;
			kv[p].u64 = u;
			break;
		case DEVQ_T_I32:
		case DEVQ_T_I64: {
			errno = 0;
			long long x = strtoll(v, &end, 0);
			if (errno || !*v || *end ||
			    (pp->type == DEVQ_T_I32 && (x < INT32_MIN || x > INT32_MAX))) {
				devctl_errf("%s: argument '%s': '%s' is not a %s\n", devctl_prog,
					    pp->name, v, devq_type_name(pp->type));
				return 2;
			}
			a->type = pp->type == DEVQ_T_I32 ? DEVQ_ARG_I32 : DEVQ_ARG_I64;
			if (pp->type == DEVQ_T_I32)
				a->v.i32 = (int32_t)x;
			else
				a->v.i64 = x;
			break;
		}
		case DEVQ_T_F32:
		case DEVQ_T_F64: {
			errno = 0;
			double x = strtod(v, &end);
			if (errno || !*v || *end) {
				devctl_errf("%s: argument '%s': '%s' is not a number\n",
					    devctl_prog, pp->name, v);
				return 2;
			}
			a->type = pp->type == DEVQ_T_F32 ? DEVQ_ARG_F32 : DEVQ_ARG_F64;
			if (pp->type == DEVQ_T_F32)
				a->v.f32 = (float)x;
			else
				a->v.f64 = x;
			break;
		}
		default:
			devctl_errf("%s: argument '%s': unsupported scalar type\n", devctl_prog,
				    pp->name);
			return 2;
		}
	}
	if ((r = infer_dims(s, kv, known)))
		return r;
	for (unsigned p = 0; p < sig->nparams; p++) {
		const struct devq_param *pp = &sig->p[p];
		if (pp->access == DEVQ_ACC_SCALAR && !known[p]) {
			devctl_errf("%s: %s: argument '%s' (%s) missing\n", devctl_prog,
				    s->exec_name, pp->name, devq_type_name(pp->type));
			return 2;
		}
	}
	/* Output buffers of computable size that were not given are made. */
	for (unsigned p = 0; p < sig->nparams; p++) {
		const struct devq_param *pp = &sig->p[p];
		if (pp->access == DEVQ_ACC_SCALAR)
			continue;
		if (!s->bufs[p]) {
			uint64_t bytes;
			if (pp->access != DEVQ_ACC_OUT ||
			    devq_sig_extent_bytes(sig, p, kv, &bytes) < 0 || bytes == 0) {
				fprintf(stderr,
					"%s: %s: buffer argument '%s' (%s %s[]) missing: give "
					"%s=@FILE or %s=size:BYTES\n",
					devctl_prog, s->exec_name, pp->name,
					devq_access_name(pp->access), devq_type_name(pp->type),
					pp->name, pp->name);
				return 2;
			}
			char spec[40];
			snprintf(spec, sizeof(spec), "size:%" PRIu64, bytes);
			if ((r = make_buffer(c, pp->name, spec, &s->bufs[p])))
				return r;
		}
		s->args[p].type = DEVQ_ARG_BUFFER;
		s->args[p].v.buf.buf = s->bufs[p];
		s->args[p].v.buf.offset = 0;
	}
	return 0;
}

/* The values of an op's small output buffers (checksum's out, reduce's
 * sum): "  NAME = V ..." lines, or with json ,"results":{"NAME":[V,...]}. */
static void print_values(FILE *f, const struct seg *s, bool json)
{
	bool any = false;
	for (unsigned p = 0; p < s->sig.nparams; p++) {
		const struct devq_param *pp = &s->sig.p[p];
		const struct devq_buffer *b = s->bufs[p];
		if (!b || !b->map || b->size > 64 || !(pp->access & DEVQ_ACC_OUT))
			continue;
		size_t es = devq_type_size(pp->type), n = b->size / es, shown = n < 8 ? n : 8;
		if (json) {
			fprintf(f, "%s\"%s\":[", any ? "," : ",\"results\":{", pp->name);
			shown = n;
		} else {
			fprintf(f, "  %s =", pp->name);
		}
		any = true;
		for (size_t i = 0; i < shown; i++) {
			const char *m = (const char *)b->map + i * es;
			const char *sep = json && i ? "," : json ? "" : " ";
			switch (pp->type) {
			case DEVQ_T_U64:
				if (json)
					fprintf(f, "%s%" PRIu64, sep, *(const uint64_t *)m);
				else
					fprintf(f, " %" PRIu64 " (0x%016" PRIx64 ")", *(const uint64_t *)m,
						*(const uint64_t *)m);
				break;
			case DEVQ_T_U32: fprintf(f, "%s%" PRIu32, sep, *(const uint32_t *)m); break;
			case DEVQ_T_F32: fprintf(f, "%s%.9g", sep, (double)*(const float *)m); break;
			case DEVQ_T_F64: fprintf(f, "%s%.17g", sep, *(const double *)m); break;
			default:
				fprintf(f, json ? "%s%u" : "%s0x%02x", sep, *(const unsigned char *)m);
				break;
			}
		}
		if (json)
			fputc(']', f);
		else
			fprintf(f, "%s\n", shown < n ? " ..." : "");
	}
	if (json && any)
		fputc('}', f);
}

static void print_completion(const struct submit_ctx *c, const struct devq_completion *x,
			     const struct seg *s)
{
	const char *exec_name = s ? s->exec_name : "op";
	FILE *f = c->rep;
	struct devq_phases ph;
	devq_timing_phases(&x->t, &ph);
	if (c->json) {
		fprintf(f, "{\"exec\":");
		devctl_json_str(f, exec_name);
		fprintf(f, ",\"status\":\"%s\",\"error\":", devq_code_name(x->code));
		devctl_json_str(f, x->code ? x->message : "");
		fprintf(f, ",\"point\":[%u,%" PRIu64 "],\"timing\":{\"submit_ns\":%" PRIu64
			",\"queued_ns\":%" PRIu64 ",\"device_ns\":%" PRIu64 ",\"sync_ns\":%" PRIu64
			",\"total_ns\":%" PRIu64 "}",
			x->queue, x->point, ph.submit, ph.queued, ph.device, ph.sync, ph.total);
		if (s && !x->code)
			print_values(f, s, true);
		fprintf(f, "}\n");
		return;
	}
	if (x->code) {
		/* A failed queue fails every later op on it until reset:
		 * devctl's way to reset is a flag.  (Whether devqd knew of the
		 * failure when the op came, and said "reset it", or learnt it
		 * when the op's wait failed, depends on timing.) */
		bool hint = x->code == DEVQ_E_DEPENDENCY_FAILED;
		fprintf(f, "%s queue %u point %" PRIu64 ": %s: %s%s\n", exec_name, x->queue,
			x->point, devq_code_name(x->code), x->message,
			hint ? " (devctl: --reset on an op runs it although an earlier op on its "
			       "queue failed)"
			     : "");
		return;
	}
	char a[24], b[24], d[24], e[24], t[24];
	devctl_fmt_ns(a, sizeof(a), ph.submit, 3);
	devctl_fmt_ns(b, sizeof(b), ph.queued, 3);
	devctl_fmt_ns(d, sizeof(d), ph.device, 3);
	devctl_fmt_ns(e, sizeof(e), ph.sync, 3);
	devctl_fmt_ns(t, sizeof(t), ph.total, 3);
	fprintf(f, "%s queue %u point %" PRIu64 ": ok  submit %s  queued %s  device %s  sync %s  "
		"total %s\n",
		exec_name, x->queue, x->point, a, b, d, e, t);
}

/* The segment whose ops completed point (queue, point). */
static struct seg *seg_of(struct submit_ctx *c, uint32_t queue, uint64_t point)
{
	for (size_t i = 0; i < c->nsegs; i++) {
		struct seg *s = &c->segs[i];
		if (s->queue == queue && point >= s->first_point &&
		    point - s->first_point < s->repeat)
			return s;
	}
	return NULL;
}

static int parse_segments(struct submit_ctx *c, int argc, char **argv)
{
	struct seg *s = NULL;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		if (!s) {
			if (c->nsegs == MAX_SEGS) {
				devctl_errf("%s submit: at most %d ops\n", devctl_prog, MAX_SEGS);
				return 2;
			}
			if (a[0] == '-' || strchr(a, '=')) {
				devctl_errf("%s submit: expected an executable name, got '%s'\n",
					devctl_prog, a);
				return 2;
			}
			s = &c->segs[c->nsegs++];
			s->exec_name = a;
			s->repeat = 1;
			continue;
		}
		if (!strcmp(a, "::")) {
			s = NULL;
			continue;
		}
		if (!strcmp(a, "--json")) {
			c->json = true;
			continue;
		}
		if (!strcmp(a, "--reset")) {
			s->reset = true;
			continue;
		}
		if (!strcmp(a, "--queue") || !strcmp(a, "--repeat") || !strcmp(a, "--wait") ||
		    !strcmp(a, "--out") || !strcmp(a, "--priority") || !strcmp(a, "--deadline-ms")) {
			if (i + 1 >= argc) {
				devctl_errf("%s submit: %s needs a value\n", devctl_prog, a);
				return 2;
			}
			const char *v = argv[++i];
			uint64_t x;
			if (!strcmp(a, "--priority")) {
				if (strcmp(v, "normal") && strcmp(v, "high")) {
					fprintf(stderr,
						"%s submit: --priority: '%s' is not normal or high\n",
						devctl_prog, v);
					return 2;
				}
				s->priority = !strcmp(v, "high");
			} else if (!strcmp(a, "--deadline-ms")) {
				/* 0 would mean none: a deadline is at least 1 ms. */
				if (parse_uint(v, UINT64_MAX / 1000, &x) < 0 || x == 0) {
					devctl_errf("%s submit: --deadline-ms: '%s' is not a "
						    "number of milliseconds (1 or more)\n",
						    devctl_prog, v);
					return 2;
				}
				s->deadline_us = x * 1000;
			} else if (!strcmp(a, "--queue")) {
				if (parse_uint(v, UINT32_MAX, &x) < 0) {
					devctl_errf("%s submit: --queue: '%s' is not a queue id\n",
						devctl_prog, v);
					return 2;
				}
				s->queue = (uint32_t)x;
			} else if (!strcmp(a, "--repeat")) {
				if (parse_uint(v, 1000000, &x) < 0 || x == 0) {
					devctl_errf(
						"%s submit: --repeat: '%s' is not in 1..1000000\n",
						devctl_prog, v);
					return 2;
				}
				s->repeat = x;
			} else if (!strcmp(a, "--wait")) {
				char *colon = strchr(v, ':');
				uint64_t qq, kk;
				if (!colon || s->nwaits == 16) {
					devctl_errf(
						"%s submit: --wait: expected QUEUE:POINT, got '%s'\n",
						devctl_prog, v);
					return 2;
				}
				*colon = '\0';
				if (parse_uint(v, UINT32_MAX, &qq) < 0 || parse_uint(colon + 1, UINT64_MAX, &kk) < 0) {
					devctl_errf("%s submit: --wait: expected QUEUE:POINT\n",
						    devctl_prog);
					return 2;
				}
				s->waits[s->nwaits++] = (struct devq_wait){ (uint32_t)qq, kk };
			} else {
				char *eq = strchr(v, '=');
				if (!eq || eq == v || !eq[1] || c->nouts == 64) {
					devctl_errf(
						"%s submit: --out: expected NAME=FILE, got '%s'\n",
						devctl_prog, v);
					return 2;
				}
				*eq = '\0';
				c->outs[c->nouts].name = v;
				c->outs[c->nouts++].file = eq + 1;
			}
			continue;
		}
		if (a[0] == '-') {
			devctl_errf("%s submit: unknown option '%s'\n", devctl_prog, a);
			return 2;
		}
		const char *eq = strchr(a, '=');
		if (!eq || eq == a) {
			devctl_errf("%s submit: expected NAME=VALUE, got '%s'\n", devctl_prog, a);
			return 2;
		}
		/* Resolved against the signature once it is known. */
		for (unsigned p = 0; p < DEVQ_MAX_PARAMS; p++) {
			if (!s->vals[p]) {
				s->vals[p] = (char *)a;
				break;
			}
			if (p == DEVQ_MAX_PARAMS - 1) {
				devctl_errf("%s submit: too many arguments\n", devctl_prog);
				return 2;
			}
		}
	}
	if (!c->nsegs) {
		devctl_errf("%s submit: no executable given (devctl list shows them)\n",
			    devctl_prog);
		return 2;
	}
	return 0;
}

/* Maps the raw NAME=VALUE strings onto the signature's parameters. */
static int bind_names(struct seg *s)
{
	char *raw[DEVQ_MAX_PARAMS];
	memcpy(raw, s->vals, sizeof(raw));
	memset(s->vals, 0, sizeof(s->vals));
	for (unsigned i = 0; i < DEVQ_MAX_PARAMS && raw[i]; i++) {
		char *eq = strchr(raw[i], '=');
		*eq = '\0';
		int p = devq_sig_find(&s->sig, raw[i]);
		if (p < 0) {
			devctl_errf("%s: %s has no argument '%s' (signature: %s)\n", devctl_prog,
				s->exec_name, raw[i], s->exec->signature);
			return 2;
		}
		if (s->vals[p]) {
			devctl_errf("%s: argument '%s' given twice\n", devctl_prog, raw[i]);
			return 2;
		}
		s->vals[p] = eq + 1;
	}
	return 0;
}

/* "-" is standard output. */
static int write_file(const char *path, const void *data, size_t n)
{
	bool std = !strcmp(path, "-");
	FILE *f = std ? stdout : fopen(path, "wb");
	if (!f)
		return -errno;
	size_t w = fwrite(data, 1, n, f);
	int r = std ? fflush(f) : fclose(f);
	return w == n && r == 0 ? 0 : -EIO;
}

/* Whether path can be written, asked before any op runs: an existing file
 * that is not a directory and is writable, or a new one in a writable
 * directory.  0 or -errno; creates nothing. */
static int check_writable(const char *path)
{
	struct stat st;
	if (!strcmp(path, "-"))
		return 0;
	if (stat(path, &st) == 0) {
		if (S_ISDIR(st.st_mode))
			return -EISDIR;
		return access(path, W_OK) < 0 ? -errno : 0;
	}
	if (errno != ENOENT)
		return -errno;
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == dir)
		dir[1] = '\0';
	else
		*slash = '\0';
	if (stat(dir, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	return access(dir, W_OK | X_OK) < 0 ? -errno : 0;
}

/* ", did you mean NAME?" for the executable nearest to a mistyped name: one
 * that starts with it, else the one fewest edits away (at most 3). */
static void suggest(devq *q, const char *name, char *out, size_t n)
{
	const struct devq_exec *l;
	size_t cnt;
	if (devq_exec_list(q, &l, &cnt) < 0)
		return;
	const char *best = NULL;
	size_t bestd = 4, len = strlen(name);
	for (size_t i = 0; i < cnt; i++) {
		if (len && !strncmp(l[i].name, name, len)) {
			best = l[i].name;
			break;
		}
		size_t m = strlen(l[i].name), d[64];
		if (len >= 63 || m >= 63)
			continue;
		/* Levenshtein distance, one row. */
		for (size_t j = 0; j <= m; j++)
			d[j] = j;
		for (size_t a = 1; a <= len; a++) {
			size_t prev = d[0];
			d[0] = a;
			for (size_t j = 1; j <= m; j++) {
				size_t cur = d[j];
				size_t sub = prev + (name[a - 1] != l[i].name[j - 1]);
				size_t best3 = d[j] + 1 < d[j - 1] + 1 ? d[j] + 1 : d[j - 1] + 1;
				d[j] = sub < best3 ? sub : best3;
				prev = cur;
			}
		}
		if (d[m] < bestd) {
			bestd = d[m];
			best = l[i].name;
		}
	}
	if (best)
		snprintf(out, n, "; did you mean %s?", best);
}

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The progress line of a submit that waits (on a terminal, stderr): ops
 * complete and time elapsed, against the time the ops ask for when every
 * op says it (an ns argument: spin, spin_buf). */
static void show_progress(const struct submit_ctx *c, size_t got, size_t total, uint64_t el)
{
	double expect = 0;
	for (size_t i = 0; i < c->nsegs; i++) {
		const struct seg *s = &c->segs[i];
		int p = devq_sig_find(&s->sig, "ns");
		if (p < 0 || s->args[p].type != DEVQ_ARG_U64) {
			expect = 0;
			break;
		}
		expect += (double)s->args[p].v.u64 * (double)s->repeat / 1e9;
	}
	fprintf(stderr, "\r\x1b[K%s: waiting: %zu of %zu ops complete, %.1f s", devctl_prog, got,
		total, (double)el / 1e9);
	if (expect > 0)
		fprintf(stderr, " of about %.1f s", expect);
	fflush(stderr);
}

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig)
{
	(void)sig;
	interrupted = 1;
}

int devctl_submit_main(const char *sock, int argc, char **argv)
{
	struct submit_ctx *c = calloc(1, sizeof(*c));
	if (!c) {
		devctl_errf("%s: out of memory\n", devctl_prog);
		return 3;
	}
	/* The arguments are cut up in place: copies, so that ps still shows
	 * the command as given. */
	char **av = calloc((size_t)argc + 1, sizeof(*av));
	for (int i = 0; av && i < argc; i++)
		if (!(av[i] = strdup(argv[i])))
			argc = i;
	if (!av) {
		devctl_errf("%s: out of memory", devctl_prog);
		free(c);
		return 3;
	}
	int rc = parse_segments(c, argc, av);
	if (rc)
		goto out_free;
	c->rep = stdout;
	for (size_t i = 0; i < c->nouts; i++) {
		int w = check_writable(c->outs[i].file);
		if (w < 0) {
			devctl_errf("%s: --out %s: cannot write %s: %s\n", devctl_prog,
				    c->outs[i].name, c->outs[i].file, strerror(-w));
			rc = 4;
			goto out_free;
		}
		if (!strcmp(c->outs[i].file, "-"))
			c->rep = stderr; /* stdout carries the buffer's bytes alone */
	}
	if ((rc = devctl_connect(sock, &c->q)))
		goto out_free;
	uint32_t opened[MAX_SEGS];
	size_t nopened = 0;
	for (size_t i = 0; i < c->nsegs; i++) {
		struct seg *s = &c->segs[i];
		char err[200];
		if (devq_exec_lookup(c->q, s->exec_name, &s->exec) < 0) {
			char hint[64] = "";
			suggest(c->q, s->exec_name, hint, sizeof(hint));
			devctl_errf("%s: %s%s\n", devctl_prog, devq_last_error(c->q), hint);
			rc = 2;
			goto out;
		}
		if (devq_sig_parse(s->exec->signature, &s->sig, err, sizeof(err)) < 0) {
			devctl_errf("%s: %s: bad signature from devqd: %s\n", devctl_prog,
				    s->exec_name, err);
			rc = 3;
			goto out;
		}
		if ((rc = bind_names(s)) || (rc = build_args(c, s)))
			goto out;
		bool have = false;
		for (size_t k = 0; k < nopened; k++)
			have |= opened[k] == s->queue;
		if (!have) {
			if (devq_queue_open_priority(c->q, s->queue, s->priority) < 0) {
				devctl_errf("%s: %s\n", devctl_prog, devq_last_error(c->q));
				rc = 3;
				goto out;
			}
			opened[nopened++] = s->queue;
		}
	}
	for (size_t i = 0; i < c->nouts; i++) {
		if (!find_named(c, c->outs[i].name)) {
			devctl_errf("%s: --out %s: no buffer argument of that name\n", devctl_prog,
				c->outs[i].name);
			rc = 2;
			goto out;
		}
	}

	/* Everything goes out as one batch per segment, without waiting. */
	size_t total = 0;
	for (size_t i = 0; i < c->nsegs; i++) {
		struct seg *s = &c->segs[i];
		s->first_point = 0;
		struct devq_op op = { .queue = s->queue, .kind = DEVQ_OP_KERNEL, .exec = s->exec,
				      .args = s->args, .nargs = s->sig.nparams,
				      .waits = s->waits, .nwaits = s->nwaits };
		if (s->reset && devq_queue_reset(c->q, s->queue) < 0) {
			devctl_errf("%s: %s\n", devctl_prog, devq_last_error(c->q));
			rc = 3;
			goto out;
		}
		/* The same options for every op of the segment. */
		struct devq_op_ext ext[256];
		for (size_t k = 0; k < 256; k++)
			ext[k] = (struct devq_op_ext){ .size = sizeof(ext[k]),
						       .deadline_us = s->deadline_us };
		for (uint64_t k = 0; k < s->repeat;) {
			struct devq_op batch[256];
			size_t n = 0;
			uint64_t pts[256];
			for (; n < 256 && k < s->repeat; n++, k++)
				batch[n] = op;
			int sr = devq_submit_ex(c->q, batch, n, pts, s->deadline_us ? ext : NULL);
			if (sr < 0) {
				devctl_errf("%s: %s\n", devctl_prog, devq_last_error(c->q));
				rc = rc_of(sr) == 3 ? 3 : 1;
				goto out;
			}
			if (!s->first_point)
				s->first_point = pts[0];
			total += n;
		}
	}
	bool failed = false, lost = false;
	struct sigaction sa = { .sa_handler = on_interrupt }, old_int, old_term;
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	uint64_t t_wait = mono_ns();
	bool progress = !c->json && isatty(2), shown = false;
	for (size_t got = 0; got < total; got++) {
		struct devq_completion x;
		int wr;
		while ((wr = devq_next_completion(c->q, &x, 100)) == -ETIMEDOUT && !interrupted) {
			uint64_t el = mono_ns() - t_wait;
			if (progress && el > 1000000000ull) {
				show_progress(c, got, total, el);
				shown = true;
			}
		}
		if (shown) {
			fputs("\r\x1b[K", stderr);
			shown = false;
		}
		if (interrupted) {
			devctl_errf("%s: interrupted with %zu of %zu ops not complete: "
				    "disconnecting; devqd cancels those not started (a running "
				    "one finishes)",
				    devctl_prog, total - got, total);
			rc = 130;
			goto out;
		}
		if (wr < 0) {
			devctl_errf("%s: %s\n", devctl_prog, devq_last_error(c->q));
			rc = 3;
			goto out;
		}
		struct seg *s = seg_of(c, x.queue, x.point);
		print_completion(c, &x, s);
		if (x.code != DEVQ_OK) {
			failed = true;
			lost = lost || x.code == DEVQ_E_DEVICE_LOST;
			if (s)
				s->failed = true;
		}
	}
	fflush(c->rep);
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	/* After a device loss the daemon sends its notice (reconnect and
	 * re-import; a refusal of this uid) on the socket, while the op's own
	 * record may have come first through the completion page: wait up to
	 * a second for it (the daemon exits right after, which ends it too). */
	struct devq_error e;
	int pr = 0;
	for (int i = 0;; i++) {
		bool told = false;
		while (devq_next_error(c->q, &e) == 1) {
			devctl_errf("%s: %s: %s: %s\n", devctl_prog, e.request,
				    devq_code_name(e.code), e.message);
			failed = told = true;
		}
		if (!lost || told || pr < 0 || i == 100)
			break;
		usleep(10000);
		pr = devq_poll(c->q);
	}
	/* A failed op's buffers hold nothing worth showing or keeping. */
	if (!c->json)
		for (size_t i = 0; i < c->nsegs; i++)
			if (!c->segs[i].failed)
				print_values(c->rep, &c->segs[i], false);
	bool unwritten = false;
	for (size_t i = 0; i < c->nouts; i++) {
		if (failed) {
			devctl_errf("%s: --out %s: %s not written: an op failed\n", devctl_prog,
				c->outs[i].name, c->outs[i].file);
			continue;
		}
		struct named_buf *n = find_named(c, c->outs[i].name);
		int r = write_file(c->outs[i].file, n->b->map, n->b->size);
		if (r < 0) {
			devctl_errf("%s: --out %s: cannot write %s: %s\n", devctl_prog,
				    c->outs[i].name, c->outs[i].file, strerror(-r));
			unwritten = true;
		}
	}
	rc = failed ? 1 : unwritten ? 4 : 0;
	/* Give the buffers back and see each released: nothing left behind. */
	for (size_t i = 0; i < c->nnb; i++) {
		struct devq_buffer *b = c->nb[i].b;
		if (!b)
			continue;
		for (size_t j = i + 1; j < c->nnb; j++)
			if (c->nb[j].b == b)
				c->nb[j].b = NULL;
		if (devq_buffer_release(c->q, b) < 0 || devq_buffer_wait_released(c->q, b, 30000) < 0) {
			devctl_errf("%s: release: %s\n", devctl_prog, devq_last_error(c->q));
			rc = rc ? rc : 3;
			break;
		}
	}
out:
	devq_disconnect(c->q);
out_free:
	free(c);
	for (int i = 0; i < argc; i++)
		free(av[i]);
	free(av);
	return rc;
}
