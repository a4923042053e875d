/* SPDX-License-Identifier: Apache-2.0 */
/* Reading nvcc's fatbin container and choosing the image a device runs.
 * Pure C: the CUDA backend uses it to check, before accepting executables,
 * that the module has code for the selected device, and the tests use it to
 * show what the build put in the fatbin (these machines have no cuobjdump).
 *
 * Layout (little-endian; read from nvcc 13 output and checked against
 * public descriptions of the format):
 *   container header, 16 bytes:
 *     u32 magic 0xba55ed50, u16 version 1, u16 header size (16),
 *     u64 bytes of images that follow the header
 *   then images back to back, each a header followed by its payload:
 *     +0  u16 kind (1 PTX, 2 ELF = SASS)   +2  u16 header version
 *     +4  u32 header size (64, 72, 80, 112) +8  u64 payload size (padded)
 *     +16 u32 compressed size (0: stored)  +20 u32 (extension offset)
 *     +24 u16 image version minor          +26 u16 image version major
 *     +28 u32 arch (sm_XY/compute_XY as XY) +32 u32 name offset, +36 length
 *     +40 u64 flags                        +48 u64 reserved
 *     +56 u64 decompressed size
 *   the payload starts `header size` bytes after the image header. */
#ifndef DEVQ_FATBIN_H
#define DEVQ_FATBIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DEVQ_FATBIN_MAGIC 0xba55ed50u
#define DEVQ_FATBIN_MAX_IMAGES 32

enum devq_fatbin_kind {
	DEVQ_FATBIN_PTX = 1,
	DEVQ_FATBIN_SASS = 2, /* an ELF cubin */
};

/* Image flags (only those devq looks at). */
#define DEVQ_FATBIN_F_64BIT 0x1ull
#define DEVQ_FATBIN_F_DEBUG 0x2ull
#define DEVQ_FATBIN_F_LZ4 0x2000ull  /* compressed with LZ4 (older toolkits) */
#define DEVQ_FATBIN_F_ZSTD 0x8000ull /* compressed with zstd (nvcc 13) */
#define DEVQ_FATBIN_F_ARCH_SPECIFIC 0x100000ull /* sm_XYa: exactly X.Y */
#define DEVQ_FATBIN_F_FAMILY 0x200000ull        /* sm_XYf */

struct devq_fatbin_image {
	unsigned kind;  /* enum devq_fatbin_kind, or the raw value of another kind */
	unsigned arch;  /* XY of sm_XY / compute_XY (major*10 + minor) */
	unsigned version_major, version_minor; /* PTX: the ISA version */
	uint64_t flags;
	uint64_t offset;   /* of the payload, from the start of the container */
	uint64_t size;     /* payload bytes as stored, padding included */
	uint64_t raw_size; /* bytes once decompressed; size when stored plain */
	bool compressed;
};

struct devq_fatbin {
	uint64_t size; /* the container: header plus images */
	unsigned nimages;
	struct devq_fatbin_image img[DEVQ_FATBIN_MAX_IMAGES];
};

/* Parses the container in data[0..len) into fb.  Returns 0, or -EINVAL
 * (malformed, truncated or not a fatbin) / -E2BIG (more images than
 * DEVQ_FATBIN_MAX_IMAGES) with a message naming the problem in err.  Reads
 * nothing outside data[0..len), whatever the headers claim. */
int devq_fatbin_parse(const void *data, size_t len, struct devq_fatbin *fb, char *err,
		      size_t errlen);

struct devq_fatbin_pick {
	int image; /* index into fb->img, or -1: nothing runs on the device */
	bool jit;  /* PTX that the driver compiles when the module loads */
	char reason[256];
};

/* What the driver loads for a device of compute capability major.minor:
 * SASS built for the same major version and a minor no higher than the
 * device's (exactly the device's for arch-specific sm_XYa), the highest
 * such; else PTX for an architecture no higher than the device's, the
 * highest, compiled at load; else nothing.  Returns the image index, or
 * -ENOEXEC when no image can run; pick->reason says why either way. */
int devq_fatbin_select(const struct devq_fatbin *fb, unsigned major, unsigned minor,
		       struct devq_fatbin_pick *pick);

/* "sm_90 SASS", "compute_90 PTX", "sm_90a SASS", "kind 16 image for 90". */
void devq_fatbin_image_name(const struct devq_fatbin_image *img, char *buf, size_t len);

#endif
