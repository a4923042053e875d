/* SPDX-License-Identifier: Apache-2.0 */
/* The two built-in gemm executables both host libraries export
 * (manifest.def: gemm_f32, gemm_f32_nt), defined once: each library gives
 * its own run_fn(args, call, nt), init_fn and fini_fn. */
#ifndef DEVQ_HOST_GEMM_EXES_H
#define DEVQ_HOST_GEMM_EXES_H

#include <stdbool.h>

#include "devq/kernel.h"

#define DEVQ_GEMM_EXES(run_fn, init_fn, fini_fn)                                                     \
	static int gemm_nn(const union devq_kval *a, const struct devq_host_call *call)   \
	{                                                                                    \
		return run_fn(a, call, false);                                                  \
	}                                                                                    \
	static int gemm_nt(const union devq_kval *a, const struct devq_host_call *call)   \
	{                                                                                    \
		return run_fn(a, call, true);                                                   \
	}                                                                                    \
	const struct devq_host_exe devq_host_gemm_f32 = {                                    \
		.abi = DEVQ_HOST_ABI, .init = init_fn, .fini = fini_fn, .run = gemm_nn,            \
	};                                                                                   \
	const struct devq_host_exe devq_host_gemm_f32_nt = {                                 \
		.abi = DEVQ_HOST_ABI, .init = init_fn, .fini = fini_fn, .run = gemm_nt,            \
	}

#endif
