/* SPDX-License-Identifier: Apache-2.0 */
/* Fatbin container parsing and image selection (see fatbin.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "device/cuda/fatbin.h"

#define HDR_SIZE 16u
#define IMG_HDR_MIN 64u
#define VERSION 1u

/* Byte-wise little-endian reads: the container has no alignment guarantee
 * once images of odd header sizes follow each other. */
static uint64_t rd(const unsigned char *p, unsigned bytes)
{
	uint64_t v = 0;
	for (unsigned i = bytes; i-- > 0;)
		v = v << 8 | p[i];
	return v;
}

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return rc;
}

/* Checks what can be checked of a payload stored plain; a compressed one is
 * left to the driver. */
static int check_payload(const struct devq_fatbin_image *img, const unsigned char *p,
			 unsigned idx, char *err, size_t errlen)
{
	static const unsigned char elf[4] = { 0x7f, 'E', 'L', 'F' };

	if (img->compressed)
		return 0;
	if (img->kind == DEVQ_FATBIN_SASS && (img->size < 4 || memcmp(p, elf, 4)))
		return fail(err, errlen, -EINVAL,
			    "image %u (sm_%u SASS) at offset %llu has no ELF header", idx,
			    img->arch, (unsigned long long)img->offset);
	return 0;
}

static int parse_image(const unsigned char *c, uint64_t pos, uint64_t end, unsigned idx,
		       struct devq_fatbin_image *img, uint64_t *next, char *err, size_t errlen)
{
	const unsigned char *h = c + pos;
	uint64_t left = end - pos;

	if (left < IMG_HDR_MIN)
		return fail(err, errlen, -EINVAL,
			    "image %u at offset %llu: %llu bytes left, an image header needs %u",
			    idx, (unsigned long long)pos, (unsigned long long)left, IMG_HDR_MIN);
	uint64_t hsize = rd(h + 4, 4), size = rd(h + 8, 8), csize = rd(h + 16, 4);
	if (hsize < IMG_HDR_MIN || hsize > left)
		return fail(err, errlen, -EINVAL,
			    "image %u at offset %llu: header size %llu outside %u..%llu", idx,
			    (unsigned long long)pos, (unsigned long long)hsize, IMG_HDR_MIN,
			    (unsigned long long)left);
	if (size > left - hsize)
		return fail(err, errlen, -EINVAL,
			    "image %u at offset %llu: payload of %llu bytes runs past the end of "
			    "the container (%llu bytes left)",
			    idx, (unsigned long long)pos, (unsigned long long)size,
			    (unsigned long long)(left - hsize));

	memset(img, 0, sizeof *img);
	img->kind = (unsigned)rd(h, 2);
	img->version_minor = (unsigned)rd(h + 24, 2);
	img->version_major = (unsigned)rd(h + 26, 2);
	img->arch = (unsigned)rd(h + 28, 4);
	img->flags = rd(h + 40, 8);
	img->offset = pos + hsize;
	img->size = size;
	img->compressed = (img->flags & (DEVQ_FATBIN_F_LZ4 | DEVQ_FATBIN_F_ZSTD)) != 0;
	img->raw_size = img->compressed ? rd(h + 56, 8) : size;
	if (img->arch == 0)
		return fail(err, errlen, -EINVAL, "image %u at offset %llu: architecture 0", idx,
			    (unsigned long long)pos);
	if (img->compressed && (csize == 0 || csize > size))
		return fail(err, errlen, -EINVAL,
			    "image %u at offset %llu: compressed size %llu outside 1..%llu", idx,
			    (unsigned long long)pos, (unsigned long long)csize,
			    (unsigned long long)size);
	int rc = check_payload(img, c + img->offset, idx, err, errlen);
	if (rc < 0)
		return rc;
	*next = img->offset + size;
	return 0;
}

int devq_fatbin_parse(const void *data, size_t len, struct devq_fatbin *fb, char *err,
		      size_t errlen)
{
	const unsigned char *c = data;

	if (err && errlen)
		err[0] = '\0';
	if (!fb || (!c && len))
		return fail(err, errlen, -EINVAL, "no fatbin given");
	memset(fb, 0, sizeof *fb);
	if (len < HDR_SIZE)
		return fail(err, errlen, -EINVAL, "truncated: %zu bytes, a fatbin header needs %u",
			    len, HDR_SIZE);
	uint32_t magic = (uint32_t)rd(c, 4);
	unsigned version = (unsigned)rd(c + 4, 2), hsize = (unsigned)rd(c + 6, 2);
	uint64_t body = rd(c + 8, 8);
	if (magic != DEVQ_FATBIN_MAGIC)
		return fail(err, errlen, -EINVAL, "not a fatbin: magic 0x%08x, expected 0x%08x",
			    magic, DEVQ_FATBIN_MAGIC);
	if (version != VERSION)
		return fail(err, errlen, -EINVAL, "fatbin version %u not supported (expected %u)",
			    version, VERSION);
	if (hsize < HDR_SIZE || hsize > len)
		return fail(err, errlen, -EINVAL, "header size %u outside %u..%zu", hsize,
			    HDR_SIZE, len);
	if (body > len - hsize)
		return fail(err, errlen, -EINVAL,
			    "truncated: the header announces %llu bytes of images, %zu follow",
			    (unsigned long long)body, len - hsize);
	if (body < len - hsize)
		return fail(err, errlen, -EINVAL, "%llu bytes after the end of the container",
			    (unsigned long long)(len - hsize - body));

	uint64_t pos = hsize, end = hsize + body;
	while (pos < end) {
		if (fb->nimages == DEVQ_FATBIN_MAX_IMAGES)
			return fail(err, errlen, -E2BIG, "more than %d images",
				    DEVQ_FATBIN_MAX_IMAGES);
		int rc = parse_image(c, pos, end, fb->nimages, &fb->img[fb->nimages], &pos, err,
				     errlen);
		if (rc < 0)
			return rc;
		fb->nimages++;
	}
	if (fb->nimages == 0)
		return fail(err, errlen, -EINVAL, "the container holds no images");
	fb->size = end;
	return 0;
}

void devq_fatbin_image_name(const struct devq_fatbin_image *img, char *buf, size_t len)
{
	const char *a = img->flags & DEVQ_FATBIN_F_ARCH_SPECIFIC ? "a"
			: img->flags & DEVQ_FATBIN_F_FAMILY    ? "f"
							       : "";
	if (img->kind == DEVQ_FATBIN_SASS)
		snprintf(buf, len, "sm_%u%s SASS", img->arch, a);
	else if (img->kind == DEVQ_FATBIN_PTX)
		snprintf(buf, len, "compute_%u%s PTX", img->arch, a);
	else
		snprintf(buf, len, "kind %u image for %u", img->kind, img->arch);
}

/* Whether img can run on a device of architecture dev (major*10 + minor). */
static bool runs_on(const struct devq_fatbin_image *img, unsigned dev)
{
	if (!(img->flags & DEVQ_FATBIN_F_64BIT))
		return false; /* the daemon is a 64-bit process */
	if (img->flags & DEVQ_FATBIN_F_ARCH_SPECIFIC)
		return img->arch == dev;
	if (img->kind == DEVQ_FATBIN_SASS)
		return img->arch / 10 == dev / 10 && img->arch <= dev;
	if (img->kind == DEVQ_FATBIN_PTX)
		return img->arch <= dev;
	return false;
}

/* Appends the names of the images of one kind: "sm_80, sm_90". */
static void list_kind(const struct devq_fatbin *fb, unsigned kind, char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = '\0';
	for (unsigned i = 0; i < fb->nimages && n < len; i++) {
		if (fb->img[i].kind != kind)
			continue;
		char name[48];
		devq_fatbin_image_name(&fb->img[i], name, sizeof name);
		name[strcspn(name, " ")] = '\0';
		int w = snprintf(buf + n, len - n, "%s%s", n ? ", " : "", name);
		if (w < 0)
			break;
		n += (size_t)w;
	}
	if (!buf[0])
		snprintf(buf, len, "none");
}

/* Through vsnprintf: a reason longer than the buffer is cut, which is
 * acceptable for a message, and the compiler does not second-guess it. */
__attribute__((format(printf, 2, 3))) static void say(struct devq_fatbin_pick *pick,
							const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(pick->reason, sizeof pick->reason, fmt, ap);
	va_end(ap);
}

int devq_fatbin_select(const struct devq_fatbin *fb, unsigned major, unsigned minor,
		       struct devq_fatbin_pick *pick)
{
	unsigned dev = major * 10 + minor;
	int sass = -1, ptx = -1;
	char name[48], have_sass[96], have_ptx[96];

	for (unsigned i = 0; i < fb->nimages; i++) {
		const struct devq_fatbin_image *img = &fb->img[i];
		if (!runs_on(img, dev))
			continue;
		int *best = img->kind == DEVQ_FATBIN_SASS ? &sass : &ptx;
		if (*best < 0 || img->arch > fb->img[*best].arch)
			*best = (int)i;
	}
	pick->image = sass >= 0 ? sass : ptx;
	pick->jit = sass < 0 && ptx >= 0;
	list_kind(fb, DEVQ_FATBIN_SASS, have_sass, sizeof have_sass);
	list_kind(fb, DEVQ_FATBIN_PTX, have_ptx, sizeof have_ptx);
	if (pick->image >= 0)
		devq_fatbin_image_name(&fb->img[pick->image], name, sizeof name);
	if (sass >= 0)
		say(pick,
		    "compute capability %u.%u runs the %s image (SASS runs on its own major "
		    "version at an equal or higher minor)",
		    major, minor, name);
	else if (ptx >= 0)
		say(pick,
		    "compute capability %u.%u: no SASS it can run (the module has %s); "
		    "the driver compiles the %s image when the module loads",
		    major, minor, have_sass, name);
	else
		say(pick,
		    "compute capability %u.%u: no SASS it can run (the module has %s) "
		    "and no PTX for %u.%u or lower (the module has %s)",
		    major, minor, have_sass, major, minor, have_ptx);
	return pick->image >= 0 ? pick->image : -ENOEXEC;
}
