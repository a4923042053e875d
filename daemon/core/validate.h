/* SPDX-License-Identifier: Apache-2.0 */
/* Checks one submitted op against its executable's signature and the
 * session's buffers; loop thread. */
#ifndef DEVQ_VALIDATE_H
#define DEVQ_VALIDATE_H

#include <stddef.h>

#include "devq.pb-c.h"

struct devq_session;
struct devq_job;

/* Fills op's backend view (kernel, arguments, buffer ranges) from m: 0, or
 * a Devq__Code with err filled in. */
int devq_validate_op(struct devq_session *s, const Devq__Op *m, struct devq_job *op, char *err,
		     size_t errlen);

#endif
