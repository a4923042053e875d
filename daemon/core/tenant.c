/* SPDX-License-Identifier: Apache-2.0 */
/* Tenant records; see tenant.h.  A handful per daemon (one per Unix user
 * with a session), so a list. */
#include "core/tenant.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "kernels.h"

struct devq_tenant *devq_tenant_get(struct devq_engine *e, uid_t uid)
{
	struct devq_tenant *t = e->tenants;
	/* Named tenants (granted, or evicted and draining) are not the uid's:
	 * its other connections stay its own tenant. */
	while (t && (t->uid != uid || t->named))
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

bool devq_tenant_name_ok(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n > DEVQ_TENANT_NAME_MAX || name[0] == '.')
		return false;
	/* Only these: the name is a file name, a metrics label and a word in
	 * logs, and none of them needs quoting. */
	return strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") == n;
}

struct devq_tenant *devq_tenant_find(struct devq_engine *e, const char *name)
{
	for (struct devq_tenant *t = e->tenants; t; t = t->next)
		if (t->granted && !strcmp(t->name, name))
			return t;
	return NULL;
}

int devq_tenant_grant(struct devq_engine *e, const char *name, uid_t uid, uint32_t shares,
		      uint32_t of, uint64_t memory_cap, bool priority, struct devq_tenant **out)
{
	struct devq_tenant *t = devq_tenant_find(e, name);
	*out = t;
	if (t && t->uid != uid)
		return -EEXIST;
	if (!t) {
		t = calloc(1, sizeof(*t));
		if (!t)
			return -ENOMEM;
		t->uid = uid;
		snprintf(t->name, sizeof(t->name), "%s", name);
		if (devq_fair_tenant_init(e, t) < 0) {
			free(t);
			return -ENOMEM;
		}
		t->granted = t->named = true;
		t->next = e->tenants;
		e->tenants = t;
		*out = t;
	}
	t->shares = shares;
	t->of = of;
	t->memory_cap = memory_cap;
	t->priority = priority;
	devq_fair_tenant_weight(e, t, shares);
	return 0;
}

void devq_tenant_ungrant(struct devq_engine *e, struct devq_tenant *t)
{
	t->granted = false;
	t->evicting = true;
	if (!t->sessions)
		devq_tenant_maybe_free(e, t);
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
	if (t->named && !t->granted && !t->held) {
		/* An evicted tenant's record has nothing more to say once its
		 * last session is gone (its usage was answered and logged): a
		 * later grant of the name starts afresh. */
		tenant_free(e, t);
		return;
	}
	t->idle_since = devq_now_ns();
	unsigned idle = 0;
	struct devq_tenant *oldest = NULL;
	for (struct devq_tenant *u = e->tenants; u; u = u->next) {
		if (u->sessions || u->granted || u->held)
			continue; /* a grant stays until evicted, and answered */
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
