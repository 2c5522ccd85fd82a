/* Lanes: the independent sub-jobs one SDK client keeps on each server so that a step's pushes
 * and pulls overlap on the link (docs/sdk.md, "Lanes"). Lane 0 of job J is J itself; lane
 * k >= 1 is the job named "J/lane<k>". To the server a lane is a job like any other (its own
 * steps, versions, checkpoints and metrics), except that a bearer token of J also grants its
 * lanes. The naming is part of the wire contract (docs/protocol.md, "Lanes"), so the SDK and
 * the server share it here. */
#ifndef GA_LANE_H
#define GA_LANE_H

#include <stddef.h>
#include <stdint.h>

#define GA_LANE_SUFFIX "/lane"
/* Lanes a client may keep per server (lane numbers 0 .. GA_LANE_MAX - 1). */
#define GA_LANE_MAX 16u

/* Writes lane `lane` of `job` into buf[0..cap): job itself for lane 0, else "<job>/lane<k>".
 * Returns the length snprintf would (>= cap: cut). */
int ga_lane_job_name(const char *job, uint32_t lane, char *buf, size_t cap);

/* The length of the job `name` is a lane of: len minus the suffix when name[0..len) ends in
 * "/lane<k>" with k a decimal in [1, GA_LANE_MAX) written without leading zeros and a nonempty
 * rest before it; len otherwise (name is lane 0 of itself). */
size_t ga_lane_base_len(const char *name, size_t len);

#endif
