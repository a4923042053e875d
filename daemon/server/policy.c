/* SPDX-License-Identifier: Apache-2.0 */
/* Peer identity and the access policy; see policy.h. */
#include "server/policy.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.h"

/* Debian 12's headers predate it; kernels since 6.5 answer it. */
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

static void describe_add(struct devq_policy *p, const char *text)
{
	size_t len = strlen(p->describe);
	snprintf(p->describe + len, sizeof(p->describe) - len, "%s%s", len ? ", " : "", text);
}

static bool parse_id(const char *s, unsigned long *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v >= (unsigned long)(uid_t)-1)
		return false;
	*out = v;
	return true;
}

/* Splits list at commas and spaces; calls one(item) for each.  Returns the
 * first error. */
static int each_item(const char *list, int (*one)(struct devq_policy *, const char *, char *,
						  size_t),
		     struct devq_policy *p, char *err, size_t errlen)
{
	if (!list)
		return 0;
	const char *s = list;
	while (*s) {
		size_t n = strcspn(s, ", \t");
		if (n) {
			char item[128];
			if (n >= sizeof(item)) {
				snprintf(err, errlen, "name too long: '%.40s...'", s);
				return -EINVAL;
			}
			memcpy(item, s, n);
			item[n] = '\0';
			int r = one(p, item, err, errlen);
			if (r < 0)
				return r;
		}
		s += n;
		s += strspn(s, ", \t");
	}
	return 0;
}

static int add_user(struct devq_policy *p, const char *item, char *err, size_t errlen)
{
	unsigned long id;
	const char *name = item;
	if (!parse_id(item, &id)) {
		struct passwd *pw = getpwnam(item);
		if (!pw) {
			snprintf(err, errlen, "%s: no user named '%s'", p->users_key, item);
			return -EINVAL;
		}
		id = pw->pw_uid;
	}
	if (p->nusers == DEVQ_POLICY_MAX_IDS) {
		snprintf(err, errlen, "%s: more than %d entries", p->users_key,
			 DEVQ_POLICY_MAX_IDS);
		return -EINVAL;
	}
	p->users[p->nusers++] = (uid_t)id;
	char text[160];
	snprintf(text, sizeof(text), "user %s (uid %lu)", name, id);
	describe_add(p, text);
	return 0;
}

static int add_group(struct devq_policy *p, const char *item, char *err, size_t errlen)
{
	unsigned long id;
	if (!parse_id(item, &id)) {
		struct group *gr = getgrnam(item);
		if (!gr) {
			snprintf(err, errlen, "%s: no group named '%s'", p->groups_key, item);
			return -ENOENT;
		}
		id = gr->gr_gid;
	}
	if (p->ngroups == DEVQ_POLICY_MAX_IDS) {
		snprintf(err, errlen, "%s: more than %d entries", p->groups_key,
			 DEVQ_POLICY_MAX_IDS);
		return -EINVAL;
	}
	p->groups[p->ngroups++] = (gid_t)id;
	char text[160];
	snprintf(text, sizeof(text), "group %s (gid %lu)", item, id);
	describe_add(p, text);
	return 0;
}

/* Root and the daemon's own user, then the lists: 0 or the first error
 * (-ENOENT for an unknown group, so that a default one can be forgiven). */
static int policy_fill(struct devq_policy *p, const char *users, const char *groups,
		       const char *users_key, const char *groups_key, char *err, size_t errlen)
{
	memset(p, 0, sizeof(*p));
	p->users_key = users_key;
	p->groups_key = groups_key;
	p->self = geteuid();
	describe_add(p, "root");
	if (p->self != 0) {
		char text[64];
		snprintf(text, sizeof(text), "the daemon's user (uid %u)", (unsigned)p->self);
		describe_add(p, text);
	}
	int r = each_item(users, add_user, p, err, errlen);
	if (r < 0)
		return r;
	return each_item(groups, add_group, p, err, errlen);
}

int devq_policy_init_priority(struct devq_policy *p, const char *users, const char *groups,
			      char *err, size_t errlen)
{
	return policy_fill(p, users, groups, "priority-users", "priority-groups", err, errlen) < 0
		       ? -EINVAL
		       : 0;
}

static bool has_gid(const gid_t *list, unsigned n, gid_t g);

int devq_policy_init_control(struct devq_policy *p, const char *groups, char *err,
			     size_t errlen)
{
	if (policy_fill(p, NULL, groups, "control-users", "control-groups", err, errlen) < 0)
		return -EINVAL;
	/* "root, group ops (gid 990)": the daemon's user is not one of them. */
	char *g = strstr(p->describe, ", group ");
	memmove(p->describe + 4, g ? g : "", g ? strlen(g) + 1 : 1);
	return 0;
}

int devq_policy_init_observer(struct devq_policy *p, const char *groups, char *err,
			      size_t errlen)
{
	/* Unset: the devq-metrics package's group, where it is installed;
	 * a host without it has no observer, and nothing to warn of. */
	int r = policy_fill(p, NULL, groups ? groups : DEVQ_POLICY_OBSERVER_GROUP, "observer-users",
			    "observer-groups", err, errlen);
	if (r == -ENOENT && !groups)
		return 0;
	return r < 0 ? -EINVAL : 0;
}

bool devq_policy_controls(const struct devq_policy *p, const struct devq_peer *peer)
{
	if (peer->uid == 0)
		return true;
	for (unsigned i = 0; i < p->ngroups; i++)
		if (peer->gid == p->groups[i] ||
		    has_gid(peer->groups, peer->ngroups, p->groups[i]))
			return true;
	return false;
}

int devq_policy_init(struct devq_policy *p, const char *users, const char *groups,
		     bool groups_is_default, char *err, size_t errlen)
{
	int r = policy_fill(p, users, groups, "allow-users", "allow-groups", err, errlen);
	if (r == -ENOENT && groups_is_default) {
		/* A host without the package's group: say who still gets in. */
		log_warn("access: %s; only %s may connect", err, p->describe);
		return 0;
	}
	return r < 0 ? -EINVAL : 0;
}

int devq_policy_peer_read(int fd, struct devq_peer *peer)
{
	memset(peer, 0, sizeof(*peer));
	peer->pidfd = -1;
	struct ucred cred;
	socklen_t len = sizeof(cred);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return -errno;
	peer->pid = cred.pid;
	peer->uid = cred.uid;
	peer->gid = cred.gid;
	len = sizeof(peer->groups);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, peer->groups, &len) == 0) {
		peer->ngroups = len / sizeof(gid_t);
		peer->groups_known = true;
	}
	/* A pidfd names the process itself, not a pid number that may be
	 * reused once it exits. */
	int pidfd = -1;
	len = sizeof(pidfd);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) == 0 && pidfd >= 0)
		peer->pidfd = pidfd;
	return 0;
}

static bool has_gid(const gid_t *list, unsigned n, gid_t g)
{
	for (unsigned i = 0; i < n; i++)
		if (list[i] == g)
			return true;
	return false;
}

bool devq_policy_matches(const struct devq_policy *p, const struct devq_peer *peer)
{
	if (peer->uid == 0 || peer->uid == p->self)
		return true;
	for (unsigned i = 0; i < p->nusers; i++)
		if (p->users[i] == peer->uid)
			return true;
	for (unsigned i = 0; i < p->ngroups; i++)
		if (peer->gid == p->groups[i] ||
		    has_gid(peer->groups, peer->ngroups, p->groups[i]))
			return true;
	return false;
}

bool devq_policy_admits(const struct devq_policy *p, const struct devq_peer *peer, char *why,
			size_t whylen)
{
	if (devq_policy_matches(p, peer))
		return true;
	/* No name lookup here: NSS may block the loop, and for a peer we
	 * refuse at that. */
	snprintf(why, whylen,
		 "access denied: uid %u (pid %d) may not use devqd; allowed: %s "
		 "(settings allow-users, allow-groups)",
		 (unsigned)peer->uid, (int)peer->pid, p->describe);
	return false;
}
