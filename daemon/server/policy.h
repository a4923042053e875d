/* SPDX-License-Identifier: Apache-2.0 */
/* Who is on the other end of a connection, and whether they may use devqd.
 *
 * Identity comes from the kernel (SO_PEERCRED, SO_PEERGROUPS, SO_PEERPIDFD),
 * never from anything the client says.  The access policy is decided once,
 * at connect: root, the daemon's own user, the users in allow-users and the
 * members of the groups in allow-groups (default "devq") are admitted. */
#ifndef DEVQ_POLICY_H
#define DEVQ_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define DEVQ_POLICY_MAX_IDS 64
/* Supplementary groups consulted per peer; a peer in more groups than this
 * is judged on its primary group and uid only (SO_PEERGROUPS: ERANGE). */
#define DEVQ_PEER_MAX_GROUPS 256

struct devq_peer {
	pid_t pid;
	uid_t uid;
	gid_t gid;
	gid_t groups[DEVQ_PEER_MAX_GROUPS]; /* supplementary groups (SO_PEERGROUPS) */
	unsigned ngroups;
	bool groups_known; /* SO_PEERGROUPS answered (fits in groups[]) */
	int pidfd;         /* SO_PEERPIDFD, or -1 where the kernel lacks it */
};

struct devq_policy {
	/* The settings the lists come from, for messages: "allow-users"... */
	const char *users_key, *groups_key;
	uid_t users[DEVQ_POLICY_MAX_IDS];
	unsigned nusers;
	gid_t groups[DEVQ_POLICY_MAX_IDS];
	unsigned ngroups;
	uid_t self; /* the daemon's own effective uid: always admitted */
	char describe[256]; /* "root, uid 0, group devq (gid 996)" for refusals */
};

/* Resolves comma-separated user and group lists (names or numbers).  An
 * unknown name in either list is an error naming it, except the default group
 * "devq" (given as default_groups), which may not exist on a host that has
 * not installed the package: then only root and the daemon's user get in,
 * and a warning says so.  Returns 0 or -EINVAL with err filled. */
int devq_policy_init(struct devq_policy *p, const char *users, const char *groups,
		     bool groups_is_default, char *err, size_t errlen);

/* The same lists as a grant: who may open high-priority queues
 * (priority-users, priority-groups).  Root and the daemon's own user hold it
 * without being listed: the daemon's user can restart devqd with any
 * setting, so refusing it would guard nothing.  Every name must resolve (no
 * default group to forgive).  Returns 0 or -EINVAL with err filled. */
int devq_policy_init_priority(struct devq_policy *p, const char *users, const char *groups,
			      char *err, size_t errlen);

/* Who may make admin calls (grant, evict: server/tenants.c): root and the
 * members of groups (control-groups), not the daemon's own user: a grant
 * hands out a socket that bypasses allow-users.  Every name must resolve.
 * Returns 0 or -EINVAL with err filled. */
int devq_policy_init_control(struct devq_policy *p, const char *groups, char *err,
			     size_t errlen);
/* Who sees every tenant's status and metrics without any admin right
 * (observer-groups: a metrics exporter's user): root and the members of
 * groups; NULL: the group devq-exporter's unit runs in, where it exists.
 * Every name given must resolve.  0 or -EINVAL with err filled. */
#define DEVQ_POLICY_OBSERVER_GROUP "devq-metrics"
int devq_policy_init_observer(struct devq_policy *p, const char *groups, char *err,
			      size_t errlen);
/* Root, or a member of one of p's groups (as the kernel saw the peer). */
bool devq_policy_controls(const struct devq_policy *p, const struct devq_peer *peer);

/* Reads the peer's credentials from a connected Unix socket.  pidfd is
 * -1 where SO_PEERPIDFD is unavailable; the caller owns it otherwise. */
int devq_policy_peer_read(int fd, struct devq_peer *peer);

/* true when the peer may use the daemon; otherwise why is filled with a
 * message for the client ("uid 65534 (nobody) is not allowed ..."). */
bool devq_policy_admits(const struct devq_policy *p, const struct devq_peer *peer, char *why,
			size_t whylen);

/* true when the peer is root, the daemon's user, listed in the users or a
 * member (primary or supplementary group, as the kernel saw them at
 * connect) of a listed group.  No name lookups: safe on the loop. */
bool devq_policy_matches(const struct devq_policy *p, const struct devq_peer *peer);

#endif
