/* SPDX-License-Identifier: Apache-2.0 */
/* A client built the way a user builds one: against an installed libdevq,
 * with `pkg-config --cflags --libs devq`.  Checksums 4096 bytes of a known
 * pattern on the daemon named by $DEVQ_SOCKET and prints the result. */
#include <stdio.h>
#include <string.h>

#include <devq.h>

int main(void)
{
	devq *q = NULL;
	if (devq_connect(NULL, "hello", &q) < 0) {
		fprintf(stderr, "hello: %s\n", q ? devq_last_error(q) : "cannot connect");
		devq_disconnect(q);
		return 1;
	}
	const struct devq_exec *e;
	struct devq_buffer *data, *out;
	if (devq_exec_lookup(q, "checksum", &e) < 0 ||
	    devq_buffer_create(q, 4096, DEVQ_BUFFER_SHARED, &data) < 0 ||
	    devq_buffer_create(q, 8, DEVQ_BUFFER_SHARED, &out) < 0 || devq_queue_open(q, 1) < 0) {
		fprintf(stderr, "hello: %s\n", devq_last_error(q));
		devq_disconnect(q);
		return 1;
	}
	for (int i = 0; i < 4096; i++)
		((unsigned char *)data->map)[i] = (unsigned char)(i * 7);
	struct devq_arg a[] = {
		{ .name = "n", .type = DEVQ_ARG_U64, .v.u64 = 4096 },
		{ .name = "data", .type = DEVQ_ARG_BUFFER, .v.buf = { data, 0 } },
		{ .name = "out", .type = DEVQ_ARG_BUFFER, .v.buf = { out, 0 } },
	};
	struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = e, .args = a, .nargs = 3 };
	uint64_t pt;
	struct devq_completion c;
	if (devq_submit(q, &op, 1, &pt) < 0 || devq_wait(q, 1, pt, -1, &c) < 0) {
		fprintf(stderr, "hello: %s\n", devq_last_error(q));
		devq_disconnect(q);
		return 1;
	}
	uint64_t sum;
	memcpy(&sum, out->map, sizeof(sum));
	printf("%s %llu\n", devq_code_name(c.code), (unsigned long long)sum);
	devq_disconnect(q);
	return c.code == DEVQ_OK ? 0 : 1;
}
