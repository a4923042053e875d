/* SPDX-License-Identifier: Apache-2.0 */
/* Calibration arithmetic for CUDA event times: see cuda_time.h. */
#include <math.h>

#include "device/cuda/cuda_time.h"

void devq_cuda_time_update(struct devq_cal *c, const struct devq_cal *prev, uint64_t t0, uint64_t t1,
		     double device_ms)
{
	if (t1 < t0) {
		uint64_t t = t0;
		t0 = t1;
		t1 = t;
	}
	struct devq_cal n = {
		.valid = true,
		.host_ns = t0 + (t1 - t0) / 2,
		.half_ns = (t1 - t0 + 1) / 2,
		.rate = 1.0,
	};
	if (prev && prev->valid && device_ms > 0 && n.host_ns > prev->host_ns) {
		double r = (double)(n.host_ns - prev->host_ns) / (device_ms * 1e6);
		/* Over short spans the brackets dominate the measurement; a rate
		 * further than DEVQ_CAL_RATE_LIMIT from 1 is theirs, not the
		 * clocks': keep the previous estimate then. */
		if (fabs(r - 1.0) <= DEVQ_CAL_RATE_LIMIT)
			n.rate = r;
		else
			n.rate = prev->rate;
	} else if (prev && prev->valid) {
		n.rate = prev->rate;
	}
	*c = n;
}

uint64_t devq_cuda_time_map(const struct devq_cal *c, float elapsed_ms)
{
	if (!c->valid)
		return 0;
	double off = (double)elapsed_ms * 1e6 * c->rate;
	double t = (double)c->host_ns + off;
	if (t <= 0)
		return 0;
	/* Round to the nearest ns; doubles hold CLOCK_MONOTONIC ns exactly
	 * for 104 days of uptime and to within 1 ns for far longer. */
	return (uint64_t)llround(t);
}

uint64_t devq_cuda_time_error_ns(const struct devq_cal *c, float elapsed_ms)
{
	double e = fabs((double)elapsed_ms) * 1e6;
	double bound = (double)c->half_ns + DEVQ_CAL_RESOLUTION_NS + e * 0x1p-24 +
		       e * DEVQ_CAL_RATE_ERR;
	return (uint64_t)ceil(bound);
}

bool devq_cuda_time_stale(const struct devq_cal *c, uint64_t now_ns)
{
	return !c->valid || now_ns < c->host_ns || now_ns - c->host_ns >= DEVQ_CAL_PERIOD_NS;
}
