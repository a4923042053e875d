// SPDX-License-Identifier: Apache-2.0
// The CUDA code of the example repository executable scale_u32.  devqd
// launches the entry with the signature's parameters in order (scalars by
// value, buffers as device pointers) in blocks of 256 threads, enough of
// them for one thread per element of n: each thread checks its index.
extern "C" __global__ void scale_u32(unsigned long long n, unsigned int k, unsigned int *x)
{
	unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		x[i] *= k;
}
