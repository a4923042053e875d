/* SPDX-License-Identifier: Apache-2.0 */
/* Tenant records; see tenant.h.  A handful per daemon (one per Unix user
 * with a session), so a list. */
#include "core/tenant.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/engine.h"
#include "kernels.h"

struct devq_tenant *devq_tenant_get(struct devq_engine *e, uid_t uid)
{
	struct devq_tenant *t = e->tenants;
	while (t && t->uid != uid)
		t = t->next;
	if (t) {
		t->idle_since = 0;
		return t;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->uid = uid;
	snprintf(t->name, sizeof(t->name), "uid:%u", (unsigned)uid);
	if (devq_fair_tenant_init(e, t) < 0) {
		free(t);
		return NULL;
	}
	t->next = e->tenants;
	e->tenants = t;
	return t;
}

static void tenant_free(struct devq_engine *e, struct devq_tenant *t)
{
	struct devq_tenant **pp = &e->tenants;
	while (*pp != t)
		pp = &(*pp)->next;
	*pp = t->next;
	devq_fair_tenant_fini(t);
	free(t);
}

void devq_tenant_maybe_free(struct devq_engine *e, struct devq_tenant *t)
{
	if (!t || t->sessions)
		return;
	t->idle_since = devq_now_ns();
	unsigned idle = 0;
	struct devq_tenant *oldest = NULL;
	for (struct devq_tenant *u = e->tenants; u; u = u->next) {
		if (u->sessions)
			continue;
		idle++;
		if (!oldest || u->idle_since < oldest->idle_since)
			oldest = u;
	}
	if (idle > DEVQ_TENANT_IDLE_MAX)
		tenant_free(e, oldest);
}

void devq_tenant_free_all(struct devq_engine *e)
{
	while (e->tenants)
		tenant_free(e, e->tenants);
}
