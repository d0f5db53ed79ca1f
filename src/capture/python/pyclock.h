/*
 * pyclock — Python's timestamps on the host's clock.
 *
 * The bridge stamps with time.monotonic_ns() (CLOCK_MONOTONIC); the host's
 * clock may be the TSC (src/common/clock.h), within microseconds of
 * CLOCK_MONOTONIC and drifting at most 500 ppm against it while it slews.
 * pyclock converts with calibration points (the offset host minus
 * monotonic, measured at one instant) taken when a conversion needs one:
 *
 *   - a timestamp with a point at most 50 us before it takes that
 *     point's offset (25 ns of drift at worst);
 *   - an older one (the bridge hands a step's phases over at its end)
 *     takes the offset interpolated between the latest point before it
 *     and the first after it, that one taken now when there is none;
 *   - one older than every point kept takes the oldest point's offset.
 *
 * The points around a timestamp never change once chosen (points are only
 * added after it), so one timestamp converted twice (the end of a phase,
 * the start of the next) gives one host time, and spans the bridge times
 * nest with events the host stamps as they ran (a 10 ms old offset was
 * seen to move a phase's end 0.35 us into the next operator).
 */
#ifndef PROFHOST_PYCLOCK_H
#define PROFHOST_PYCLOCK_H

#include <stdint.h>

/* `mono_ts` (CLOCK_MONOTONIC ns, at most now) on the host's clock. Any
 * thread (a short mutex). */
int64_t pyclock_host_time(int64_t mono_ts);

/* Moves a span [*start_ns, *end_ns] (CLOCK_MONOTONIC ns, ended) to the
 * host's clock: it ends no later than now (a conversion may land
 * microseconds ahead while the clock slews, and a phase ending right
 * before a step boundary would then end after it) and starts no later
 * than it ends. Any thread. */
void pyclock_span(int64_t *start_ns, int64_t *end_ns);

#endif
