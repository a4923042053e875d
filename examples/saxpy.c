/* SPDX-License-Identifier: Apache-2.0 */
/* A complete libdevq client: y = a*x + y on devqd, checked on the CPU.
 *
 * Build and run against a daemon (see README, "Client library"):
 *   cc -o saxpy examples/saxpy.c -Iclient -Lbuild -ldevq
 *   build/devqd --socket /tmp/devq.sock &
 *   DEVQ_SOCKET=/tmp/devq.sock LD_LIBRARY_PATH=build ./saxpy
 * or, installed: cc -o saxpy saxpy.c $(pkg-config --cflags --libs devq)
 * (statically: pkg-config --static --libs devq, with -l:libdevq.a).
 *
 * Prints "ok: ..." and exits 0 when every element is right. */
#include <stdio.h>
#include <stdlib.h>

#include "devq.h"

#define N 1024

int main(void)
{
	devq *q = NULL;
	/* NULL: $DEVQ_SOCKET, else the system daemon's socket. */
	if (devq_connect(NULL, "saxpy-example", &q) < 0) {
		fprintf(stderr, "connect: %s\n", q ? devq_last_error(q) : "out of memory");
		devq_disconnect(q);
		return 1;
	}
	const struct devq_exec *saxpy;
	struct devq_buffer *x, *y;
	/* Shared buffers: memory mapped here and in the daemon. */
	if (devq_exec_lookup(q, "saxpy_f32", &saxpy) < 0 ||
	    devq_buffer_create(q, N * sizeof(float), DEVQ_BUFFER_SHARED, &x) < 0 ||
	    devq_buffer_create(q, N * sizeof(float), DEVQ_BUFFER_SHARED, &y) < 0)
		goto fail;
	float *xs = x->map, *ys = y->map;
	for (int i = 0; i < N; i++) {
		xs[i] = (float)i;
		ys[i] = 1.0f;
	}
	/* No queue is open by default: open queue 0 before submitting on it. */
	if (devq_queue_open(q, 0) < 0)
		goto fail;
	struct devq_arg args[] = { DEVQ_U64("n", N), DEVQ_F32("a", 2.0f), DEVQ_BUF("x", x, 0),
				   DEVQ_BUF("y", y, 0) };
	struct devq_op op = { .queue = 0, .kind = DEVQ_OP_KERNEL, .exec = saxpy, .args = args,
			      .nargs = sizeof(args) / sizeof(args[0]) };
	uint64_t point;
	if (devq_submit(q, &op, 1, &point) < 0)
		goto fail;
	/* Validation errors, a refused queue, a device error: all come back
	 * here, as the completion's code. */
	struct devq_completion c;
	if (devq_wait(q, 0, point, 10000, &c) < 0)
		goto fail;
	if (c.code != DEVQ_OK) {
		fprintf(stderr, "saxpy_f32 failed: %s: %s\n", devq_code_name(c.code), c.message);
		devq_disconnect(q);
		return 1;
	}
	for (int i = 0; i < N; i++) {
		float d = ys[i] - (2.0f * (float)i + 1.0f);
		if (d < -1e-3f || d > 1e-3f) {
			fprintf(stderr, "y[%d] = %g, want %g\n", i, (double)ys[i], 2.0 * i + 1);
			devq_disconnect(q);
			return 1;
		}
	}
	struct devq_phases ph;
	devq_timing_phases(&c.t, &ph);
	printf("ok: y = 2x + 1 for %d floats, device %llu ns, total %llu ns\n", N,
	       (unsigned long long)ph.device, (unsigned long long)ph.total);
	devq_disconnect(q); /* frees the buffers too */
	return 0;
fail:
	fprintf(stderr, "saxpy: %s\n", devq_last_error(q));
	devq_disconnect(q);
	return 1;
}
