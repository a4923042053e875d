/* SPDX-License-Identifier: Apache-2.0 */
/* Job records; see job.h.  Recycled: one malloc/free pair less per op.
 * Loop thread only, like every job's allocation and last unref. */
#include "core/job.h"

#include <stddef.h>
#include <stdlib.h>

#include "base/pool.h"

static struct devq_pool job_pool = { .size = sizeof(struct devq_job),
				      .zero = offsetof(struct devq_job, bufs),
				      .keep = 8192 };

struct devq_job *devq_job_new(void)
{
	struct devq_job *j = devq_pool_get(&job_pool);
	if (j)
		j->refs = 1;
	return j;
}

void devq_job_discard(struct devq_job *j)
{
	devq_pool_put(&job_pool, j);
}

/* The last reference went (devq_job_unref). */
void devq_job_free(struct devq_job *j)
{
	if (j->b.waits != j->winline)
		free(j->b.waits);
	devq_pool_put(&job_pool, j);
}

void devq_job_trim(void)
{
	devq_pool_fini(&job_pool); /* the pool stays usable: it refills on demand */
}

void devq_job_fini(void)
{
	devq_pool_fini(&job_pool);
}
