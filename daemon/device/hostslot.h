/* SPDX-License-Identifier: Apache-2.0 */
/* Per-stream state of host executables (<devq/kernel.h>), shared by the
 * backends: for each (executable, device stream) pair the slot its init
 * made, and one housekeeping thread per backend that runs what must not
 * run on the daemon's loop nor on a completion thread: every fini, and on
 * CUDA every init (its ops are issued from those threads).
 *
 * An entry is keyed by the executable's struct devq_host_exe (its address
 * in the loaded library): a reload loads the new version at another
 * address, and the old one's entries go with its release, before its
 * library is closed.  Entries: at most one per executable served per
 * stream, so lookups are a short linear walk under one lock, taken only
 * by ops of host executables. */
#ifndef DEVQ_HOSTSLOT_H
#define DEVQ_HOSTSLOT_H

#include <stdbool.h>
#include <stddef.h>

#include "kernels.h"

struct devq_hslots;

/* enter, when not NULL, is called once on the housekeeping thread before
 * any job (CUDA: makes the context current there). */
int devq_hslots_open(unsigned streams, void (*enter)(void *ud), void *ud,
		     struct devq_hslots **out);
/* Runs fini for every slot left (housekeeping thread), then stops it. */
void devq_hslots_close(struct devq_hslots *h);

/* The slot of x on stream, made on the calling thread (a CPU worker) by
 * x->init the first time.  0 with *slot set, or a negative errno with the
 * reason (init's, remembered for the stream) in err. */
int devq_hslots_get_sync(struct devq_hslots *h, const struct devq_host_exe *x, unsigned stream,
			 void *stream_handle, void **slot, char *err, size_t errlen);

/* Like get_sync, but an init runs on the housekeeping thread: returns 1
 * when it has been queued (or is still running), and ready(ud) is called
 * from that thread once it has finished; the caller asks again then. */
int devq_hslots_get_async(struct devq_hslots *h, const struct devq_host_exe *x, unsigned stream,
			  void *stream_handle, void **slot, char *err, size_t errlen,
			  void (*ready)(void *ud), void *ud);

/* No op of x will run any more: its slots are finied on the housekeeping
 * thread, which then calls done(ud) (the caller closes x's library there).
 * Any thread. */
void devq_hslots_release(struct devq_hslots *h, const struct devq_host_exe *x,
			 void (*done)(void *ud), void *ud);

/* The name of the host executable whose run this thread is in, or NULL:
 * what devqd's fatal-signal note names (server/main.c).  Async-signal
 * safe. */
const char *devq_hslots_running(void);

/* Calls x->run (noting name as this thread's running host executable)
 * and writes its failure into msg as "NAME: why" (why: what
 * run wrote into call->err, else the errno's text).  Returns run's
 * result. */
int devq_hslots_call(const struct devq_host_exe *x, const char *name, const union devq_kval *args,
		     struct devq_host_call *call, char *msg, size_t msglen);
/* The same for x->run_units over units [first, last). */
int devq_hslots_call_units(const struct devq_host_exe *x, const char *name,
			   const union devq_kval *args, struct devq_host_call *call, uint64_t first,
			   uint64_t last, char *msg, size_t msglen);

/* Whether x's ops run in slices (<devq/kernel.h> units): abi 2 with
 * units.  The members past run are read only at abi 2: a version-1
 * structure ends at run. */
static inline bool devq_host_sliced(const struct devq_host_exe *x)
{
	return x->abi >= 2 && x->units && x->run_units;
}

#endif
