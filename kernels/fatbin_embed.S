/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA kernels' fatbin, built by nvcc into $(BUILD)/kernels/, carried
 * inside devqd so the daemon never depends on a file at run time.  The
 * build passes the path as DEVQ_FATBIN_PATH (a quoted string).
 *
 *   extern const unsigned char devq_fatbin_data[];  the container
 *   extern const uint64_t devq_fatbin_size;          its size in bytes
 *
 * The data is 16-byte aligned: cuModuleLoadData reads the container's
 * 8-byte fields in place. */
#ifndef DEVQ_FATBIN_PATH
#error "DEVQ_FATBIN_PATH must name the fatbin to embed"
#endif

	.section .rodata.devq_fatbin, "a", @progbits
	.balign 16
	.globl devq_fatbin_data
	.type devq_fatbin_data, @object
devq_fatbin_data:
	.incbin DEVQ_FATBIN_PATH
devq_fatbin_end:
	.size devq_fatbin_data, devq_fatbin_end - devq_fatbin_data

	.balign 8
	.globl devq_fatbin_size
	.type devq_fatbin_size, @object
devq_fatbin_size:
	.quad devq_fatbin_end - devq_fatbin_data
	.size devq_fatbin_size, 8

	.section .note.GNU-stack, "", @progbits
