/* SPDX-License-Identifier: Apache-2.0 */
/* Repository device images on the CUDA backend; see exe_cuda.h. */
#include "device/cuda/exe_cuda.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "device/cuda/fatbin.h"

struct exe_cuda {
	CUmodule mod;
	CUfunction fn;
	int n_param; /* index of the u64 parameter named n, or -1 */
	unsigned nparams;
};

static int read_image(const char *path, char **data, size_t *len, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		snprintf(err, errlen, "%s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return -ENOENT;
	}
	if (st.st_size <= 0 || (uint64_t)st.st_size > DEVQ_EXE_CUDA_MAX_IMAGE) {
		snprintf(err, errlen, "%lld bytes: an image has 1 to %u", (long long)st.st_size,
			 DEVQ_EXE_CUDA_MAX_IMAGE);
		close(fd);
		return -EFBIG;
	}
	size_t n = (size_t)st.st_size;
	char *buf = malloc(n + 1); /* PTX is text: the driver wants it NUL-terminated */
	size_t got = 0;
	while (buf && got < n) {
		ssize_t k = read(fd, buf + got, n - got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	int cerr = close(fd);
	if (!buf) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	if (got != n || cerr < 0) {
		snprintf(err, errlen, "%s", got != n ? "short read" : "close failed");
		free(buf);
		return -EIO;
	}
	buf[n] = '\0';
	*data = buf;
	*len = n;
	return 0;
}

static size_t param_size(const struct devq_param *p)
{
	return p->access == DEVQ_ACC_SCALAR ? devq_type_size(p->type) : sizeof(void *);
}

/* Checks fn's parameters against sig where the driver can say them. */
static int check_params(const struct devq_cuda_drv *drv, CUfunction fn, const struct devq_sig *sig,
			const char *entry, char *err, size_t errlen)
{
	__typeof__(&cuFuncGetParamInfo) info =
		drv->lib ? (__typeof__(&cuFuncGetParamInfo))dlsym(drv->lib, "cuFuncGetParamInfo")
			 : NULL;
	if (!info)
		return 0; /* an older driver: the entry exists, sizes unchecked */
	unsigned i = 0;
	for (; i <= DEVQ_MAX_PARAMS; i++) {
		size_t off = 0, size = 0;
		if (info(fn, i, &off, &size) != CUDA_SUCCESS)
			break;
		if (i < sig->nparams && size != param_size(&sig->p[i])) {
			snprintf(err, errlen,
				 "entry %s: parameter %u is %zu bytes, the signature's '%s' %zu",
				 entry, i, size, sig->p[i].name, param_size(&sig->p[i]));
			return -EINVAL;
		}
	}
	if (i != sig->nparams) {
		snprintf(err, errlen, "entry %s takes %u parameters, the signature has %u", entry, i,
			 sig->nparams);
		return -EINVAL;
	}
	return 0;
}

int devq_exe_cuda_load(const struct devq_cuda_drv *drv, CUcontext ctx, CUdevice dev,
		       const char *path, const char *entry, const struct devq_sig *sig, void **out,
		       char *err, size_t errlen)
{
	*out = NULL;
	char *data;
	size_t len;
	int r = read_image(path, &data, &len, err, errlen);
	if (r < 0)
		return r;
	if (drv->cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
		snprintf(err, errlen, "cuCtxSetCurrent failed");
		free(data);
		return -EIO;
	}
	/* A fatbin: say which image the device would run, or why none. */
	if (len >= 4 && (uint8_t)data[0] == 0x50 && (uint8_t)data[1] == 0xed &&
	    (uint8_t)data[2] == 0x55 && (uint8_t)data[3] == 0xba) {
		int major = 0, minor = 0;
		struct devq_fatbin fb;
		struct devq_fatbin_pick pick;
		char ferr[200];
		if (drv->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
					      dev) == CUDA_SUCCESS &&
		    drv->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
					      dev) == CUDA_SUCCESS) {
			if (devq_fatbin_parse(data, len, &fb, ferr, sizeof(ferr)) < 0) {
				snprintf(err, errlen, "not a valid fatbin: %s", ferr);
				free(data);
				return -ENOEXEC;
			}
			if (devq_fatbin_select(&fb, (unsigned)major, (unsigned)minor, &pick) < 0) {
				snprintf(err, errlen, "no code for sm_%d%d: %.150s", major, minor,
					 pick.reason);
				free(data);
				return -ENOEXEC;
			}
		}
	}
	struct exe_cuda *x = calloc(1, sizeof(*x));
	if (!x) {
		free(data);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	CUresult cr = drv->cuModuleLoadData(&x->mod, data);
	free(data);
	if (cr != CUDA_SUCCESS) {
		snprintf(err, errlen, "cuModuleLoadData: %s%s", devq_cuda_drv_error_name(cr),
			 cr == CUDA_ERROR_NO_BINARY_FOR_GPU
				 ? " (no SASS for this device and no PTX it can compile)"
				 : "");
		free(x);
		return -ENOEXEC;
	}
	cr = drv->cuModuleGetFunction(&x->fn, x->mod, entry);
	if (cr != CUDA_SUCCESS) {
		snprintf(err, errlen, "no entry '%s' in it (%s)", entry,
			 devq_cuda_drv_error_name(cr));
		r = -ENOENT;
	} else {
		r = check_params(drv, x->fn, sig, entry, err, errlen);
	}
	if (r < 0) {
		drv->cuModuleUnload(x->mod);
		free(x);
		return r;
	}
	x->nparams = sig->nparams;
	x->n_param = devq_sig_find(sig, "n");
	if (x->n_param >= 0 && (sig->p[x->n_param].access != DEVQ_ACC_SCALAR ||
				sig->p[x->n_param].type != DEVQ_T_U64))
		x->n_param = -1;
	*out = x;
	return 0;
}

void devq_exe_cuda_unload(const struct devq_cuda_drv *drv, CUcontext ctx, void *img)
{
	struct exe_cuda *x = img;
	if (!x)
		return;
	if (drv->cuCtxSetCurrent(ctx) == CUDA_SUCCESS)
		drv->cuModuleUnload(x->mod);
	free(x);
}

CUresult devq_exe_cuda_launch(const struct devq_cuda_drv *drv, void *img, CUstream s,
			      const union devq_kval *args)
{
	struct exe_cuda *x = img;
	union devq_kval a[DEVQ_MAX_PARAMS];
	void *params[DEVQ_MAX_PARAMS];
	memcpy(a, args, sizeof(a));
	for (unsigned i = 0; i < DEVQ_MAX_PARAMS; i++)
		params[i] = &a[i];
	uint64_t n = x->n_param >= 0 ? a[x->n_param].u64 : 1;
	uint64_t grid = (n + DEVQ_EXE_CUDA_BLOCK - 1) / DEVQ_EXE_CUDA_BLOCK;
	if (grid < 1)
		grid = 1;
	if (grid > 0x7fffffffu)
		return CUDA_ERROR_INVALID_VALUE;
	return drv->cuLaunchKernel(x->fn, (unsigned)grid, 1, 1, DEVQ_EXE_CUDA_BLOCK, 1, 1, 0, s,
				   params, NULL);
}
