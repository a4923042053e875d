/* SPDX-License-Identifier: Apache-2.0 */
/* The two built-in gemm executables both host libraries export
 * (manifest.def: gemm_f32, gemm_f32_nt), defined once: each library gives
 * its own run_fn(args, call, nt), init_fn and fini_fn; the CPU one also
 * units_fn(args) and slice_fn(args, call, nt, first, last) (tiles of C,
 * <devq/kernel.h>'s units). */
#ifndef DEVQ_HOST_GEMM_EXES_H
#define DEVQ_HOST_GEMM_EXES_H

#include <stdbool.h>

#include "devq/kernel.h"

/* The run calls of both, on one run_fn. */
#define DEVQ_GEMM_RUNS(run_fn)                                                             \
	static int gemm_nn(const union devq_kval *a, const struct devq_host_call *call)   \
	{                                                                                    \
		return run_fn(a, call, false);                                                  \
	}                                                                                    \
	static int gemm_nt(const union devq_kval *a, const struct devq_host_call *call)   \
	{                                                                                    \
		return run_fn(a, call, true);                                                   \
	}

#define DEVQ_GEMM_EXES(run_fn, init_fn, fini_fn)                                           \
	DEVQ_GEMM_RUNS(run_fn)                                                               \
	const struct devq_host_exe devq_host_gemm_f32 = {                                    \
		.abi = DEVQ_HOST_ABI, .init = init_fn, .fini = fini_fn, .run = gemm_nn,            \
	};                                                                                   \
	const struct devq_host_exe devq_host_gemm_f32_nt = {                                 \
		.abi = DEVQ_HOST_ABI, .init = init_fn, .fini = fini_fn, .run = gemm_nt,            \
	}

/* Their cost in flop, in the language of NAME.exec's `cost =`. */
#define DEVQ_GEMM_COST "2*m*n*k"

#define DEVQ_GEMM_EXES_SLICED(run_fn, init_fn, fini_fn, units_fn, slice_fn)                  \
	DEVQ_GEMM_RUNS(run_fn)                                                               \
	static int gemm_nn_units(const union devq_kval *a, const struct devq_host_call *call, \
				 uint64_t first, uint64_t last)                              \
	{                                                                                    \
		return slice_fn(a, call, false, first, last);                                   \
	}                                                                                    \
	static int gemm_nt_units(const union devq_kval *a, const struct devq_host_call *call, \
				 uint64_t first, uint64_t last)                              \
	{                                                                                    \
		return slice_fn(a, call, true, first, last);                                    \
	}                                                                                    \
	const struct devq_host_exe devq_host_gemm_f32 = {                                    \
		.abi = DEVQ_HOST_ABI, .init = init_fn, .fini = fini_fn, .run = gemm_nn,            \
		.units = units_fn, .run_units = gemm_nn_units, .cost = DEVQ_GEMM_COST,             \
	};                                                                                   \
	const struct devq_host_exe devq_host_gemm_f32_nt = {                                 \
		.abi = DEVQ_HOST_ABI, .init = init_fn, .fini = fini_fn, .run = gemm_nt,            \
		.units = units_fn, .run_units = gemm_nt_units, .cost = DEVQ_GEMM_COST,             \
	}

#endif
