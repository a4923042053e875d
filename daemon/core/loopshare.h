/* SPDX-License-Identifier: Apache-2.0 */
/* The loop thread's time, shared by tenant: what one tenant's requests took
 * of the current loop turn (the server's frames_idle/session_frames).  One
 * per tenant, kept in its usage record; the server alone reads and writes
 * it, on the loop thread.  Plain data: the core keeps it, the server
 * decides with it. */
#ifndef DEVQ_LOOPSHARE_H
#define DEVQ_LOOPSHARE_H

#include <stdint.h>

struct devq_session;

struct devq_loop_share {
	/* Loop time the tenant's requests took beyond what its turns allowed:
	 * each turn forgives one budget (DEVQ_FRAMES_SLICE_NS), so a request
	 * that ran past it is paid for with the turns after. */
	uint64_t spent_ns;
	uint64_t turn;     /* the loop turn spent_ns was last brought up to */
	uint64_t rr_last;  /* its session served last from the yielded ones */
	/* Scratch of one frames_idle pass: the tenant's next yielded session
	 * in turn (by id after rr_last) and its first one. */
	uint64_t pass;
	struct devq_session *pass_next, *pass_first;
	struct devq_loop_share *pass_link;
};

#endif
