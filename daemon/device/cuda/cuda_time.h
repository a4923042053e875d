/* SPDX-License-Identifier: Apache-2.0 */
/* Device timestamps on the host clock.  CUDA events give device times only
 * relative to each other (cuEventElapsedTime, float milliseconds), so the
 * backend records a calibration event while reading CLOCK_MONOTONIC just
 * before the record and just after cuEventSynchronize returns: the device
 * stamped the event somewhere inside that bracket, so its midpoint is the
 * event's host time within half the bracket's width.  An op's event then
 * maps to  cal.host + elapsed(cal, event) * rate.
 *
 * Error bound of a mapped time, elapsed E ms from the calibration:
 *   half the bracket (a spinning cuEventSynchronize: a few µs)
 * + the event timer's resolution (about 0.5 µs, per the CUDA documentation)
 * + float rounding of E in ms (E * 2^-24, 60 ns at E = 1 s)
 * + clock rate mismatch left after correction, |rate error| * E.
 * The rate is measured between consecutive calibrations (host delta over
 * device delta), so a steady drift between the GPU timer and the host
 * clock (NTP slews CLOCK_MONOTONIC by up to 500 ppm) cancels; the backend
 * recalibrates every second, so E stays near 1 s and the rate term is the
 * change of slew within a second.  devq_cuda_time_error_ns computes the bound
 * with DEVQ_CAL_RATE_ERR for that residual. */
#ifndef DEVQ_CUDA_TIME_H
#define DEVQ_CUDA_TIME_H

#include <stdbool.h>
#include <stdint.h>

#define DEVQ_CAL_PERIOD_NS 1000000000ull /* recalibrate this often */
#define DEVQ_CAL_RESOLUTION_NS 500u      /* CUDA event timer resolution */
#define DEVQ_CAL_RATE_ERR 20e-6          /* residual rate error assumed */
#define DEVQ_CAL_RATE_LIMIT 1e-3         /* measured rates further from 1 are noise */

struct devq_cal {
	bool valid;
	uint64_t host_ns;   /* the calibration event's host time (bracket midpoint) */
	uint64_t half_ns;   /* half the bracket: the error of host_ns */
	double rate;        /* host ns per device ns */
};

/* A new calibration from a bracket [t0, t1].  prev (may be invalid or
 * NULL) and device_ms, the device time from prev's event to this one, give
 * the rate; pass device_ms <= 0 when unknown. */
void devq_cuda_time_update(struct devq_cal *c, const struct devq_cal *prev, uint64_t t0, uint64_t t1,
		     double device_ms);

/* Host time of an event elapsed_ms after (negative: before) the
 * calibration event; 0 when the calibration is invalid or the result would
 * fall before the epoch. */
uint64_t devq_cuda_time_map(const struct devq_cal *c, float elapsed_ms);

/* The bound above for a time mapped at elapsed_ms. */
uint64_t devq_cuda_time_error_ns(const struct devq_cal *c, float elapsed_ms);

/* Whether it is time to recalibrate. */
bool devq_cuda_time_stale(const struct devq_cal *c, uint64_t now_ns);

#endif
