/* SPDX-License-Identifier: Apache-2.0 */
/* Uids whose work keeps losing the device (culprit.h).  The state file:
 *   devqd lost-uids 1
 *   UID LOSSES LAST_EPOCH_SECONDS
 *   ...
 * written whole to a temporary file, synced and renamed over the old one. */
#include "server/culprit.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/config.h"
#include "base/log.h"

#define HEADER "devqd lost-uids 1"

static bool enabled(const struct devq_config *cfg)
{
	return cfg->lost_refuse_s > 0 && cfg->lost_refuse_after > 0;
}

static bool expired(const struct devq_culprit *e, const struct devq_config *cfg, int64_t now_s)
{
	return now_s - e->last_s >= (int64_t)cfg->lost_refuse_s;
}

static bool refused(const struct devq_culprit *e, const struct devq_config *cfg, int64_t now_s)
{
	return enabled(cfg) && e->losses >= cfg->lost_refuse_after && !expired(e, cfg, now_s);
}

static void fmt_time(int64_t t, char *out, size_t len)
{
	time_t tt = (time_t)t;
	struct tm tm;
	if (!gmtime_r(&tt, &tm) || !strftime(out, len, "%Y-%m-%d %H:%M:%S UTC", &tm))
		snprintf(out, len, "%" PRId64, t);
}

/* Parses the file's text; false (with why) on the first bad line. */
static bool parse(struct devq_culprits *c, FILE *f, char *why, size_t len)
{
	char line[128];
	unsigned lineno = 1, ignored = 0;
	if (!fgets(line, sizeof(line), f) || strcmp(line, HEADER "\n")) {
		snprintf(why, len, "line 1: not '%s'", HEADER);
		return false;
	}
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		unsigned long long uid, losses;
		long long last;
		char end;
		if (!strchr(line, '\n') ||
		    sscanf(line, "%llu %llu %lld%c", &uid, &losses, &last, &end) != 4 || end != '\n' ||
		    uid > UINT32_MAX - 1 || losses == 0 || losses > UINT32_MAX || last < 0) {
			snprintf(why, len, "line %u: not 'UID LOSSES SECONDS'", lineno);
			return false;
		}
		if (c->n == DEVQ_CULPRIT_MAX) {
			ignored++;
			continue;
		}
		c->e[c->n++] = (struct devq_culprit){ (uint32_t)uid, (uint32_t)losses, last };
	}
	if (ferror(f)) {
		snprintf(why, len, "read: %s", strerror(errno));
		return false;
	}
	if (ignored)
		log_warn("%s: %u uids past the first %u ignored", c->path, ignored,
			 DEVQ_CULPRIT_MAX);
	return true;
}

void devq_culprit_load(struct devq_culprits *c, const char *state_dir, const char *instance,
		       const struct devq_config *cfg, int64_t now_s)
{
	c->n = 0;
	c->path[0] = '\0';
	if (!state_dir || !*state_dir) {
		log_info("no state directory: uids that lose the device are remembered only "
			 "until devqd exits");
		return;
	}
	if ((size_t)snprintf(c->path, sizeof(c->path), "%s/lost-uids.%s", state_dir, instance) >=
	    sizeof(c->path)) {
		log_warn("state directory %s: path too long; uids that lose the device are not "
			 "remembered across restarts", state_dir);
		c->path[0] = '\0';
		return;
	}
	FILE *f = fopen(c->path, "re");
	if (!f) {
		if (errno != ENOENT)
			log_warn("%s: %s; ignoring it", c->path, strerror(errno));
		return;
	}
	char why[128];
	bool ok = parse(c, f, why, sizeof(why));
	if (fclose(f) != 0 && ok) {
		snprintf(why, sizeof(why), "close: %s", strerror(errno));
		ok = false;
	}
	if (!ok) {
		log_warn("%s: %s; ignoring the file (no uid is refused for past device losses)",
			 c->path, why);
		c->n = 0;
		return;
	}
	/* Expired entries go; what stays refused is said once, at the default
	 * level, as the startup lines are. */
	unsigned k = 0;
	for (unsigned i = 0; i < c->n; i++) {
		struct devq_culprit *e = &c->e[i];
		if (e->last_s > now_s) /* the clock went back: no refusal longer than set */
			e->last_s = now_s;
		if (cfg->lost_refuse_s && expired(e, cfg, now_s))
			continue;
		if (refused(e, cfg, now_s)) {
			char until[40];
			fmt_time(e->last_s + (int64_t)cfg->lost_refuse_s, until, sizeof(until));
			/* DEVQ_CLIENT_UID, as on that uid's refusals. */
			devq_log_fields(DEVQ_LOG_NOTICE, &(struct devq_log_ctx){ .uid = e->uid },
					-1, -1, -1,
					"uid %u refused until %s: its work lost the device %u "
					"times (lost-refuse-after %u, lost-refuse-s %llu; %s)",
					(unsigned)e->uid, until, (unsigned)e->losses,
					cfg->lost_refuse_after,
					(unsigned long long)cfg->lost_refuse_s, c->path);
		}
		c->e[k++] = *e;
	}
	c->n = k;
}

static void save(const struct devq_culprits *c)
{
	if (!c->path[0])
		return;
	char tmp[PATH_MAX + 8];
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.new", c->path) >= sizeof(tmp))
		return;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		log_err("%s: %s; the uid is not remembered across the restart", tmp,
			strerror(errno));
		return;
	}
	FILE *f = fdopen(fd, "w");
	if (!f) {
		log_err("%s: %s", tmp, strerror(errno));
		if (close(fd) < 0)
			log_err("%s: close: %s", tmp, strerror(errno));
		return;
	}
	fprintf(f, HEADER "\n");
	for (unsigned i = 0; i < c->n; i++)
		fprintf(f, "%u %u %" PRId64 "\n", (unsigned)c->e[i].uid, (unsigned)c->e[i].losses,
			c->e[i].last_s);
	bool ok = fflush(f) == 0 && fsync(fd) == 0;
	int err = errno;
	if (fclose(f) != 0 && ok) {
		ok = false;
		err = errno;
	}
	if (!ok || rename(tmp, c->path) < 0) {
		log_err("%s: %s; the uid is not remembered across the restart", c->path,
			strerror(ok ? errno : err));
		if (unlink(tmp) < 0 && errno != ENOENT)
			log_err("%s: unlink: %s", tmp, strerror(errno));
	}
}

unsigned devq_culprit_record(struct devq_culprits *c, uint32_t uid, const struct devq_config *cfg,
			     int64_t now_s)
{
	if (!enabled(cfg))
		return 0;
	struct devq_culprit *e = NULL;
	for (unsigned i = 0; i < c->n && !e; i++)
		if (c->e[i].uid == uid)
			e = &c->e[i];
	if (!e) {
		if (c->n < DEVQ_CULPRIT_MAX) {
			e = &c->e[c->n++];
		} else {
			/* Full: the uid whose last loss is oldest is forgotten. */
			e = &c->e[0];
			for (unsigned i = 1; i < c->n; i++)
				if (c->e[i].last_s < e->last_s)
					e = &c->e[i];
		}
		*e = (struct devq_culprit){ uid, 0, now_s };
	}
	if (expired(e, cfg, now_s))
		e->losses = 0;
	if (e->losses < UINT32_MAX)
		e->losses++;
	e->last_s = now_s;
	save(c);
	return e->losses;
}

bool devq_culprit_refuses(const struct devq_culprits *c, uint32_t uid,
			  const struct devq_config *cfg, int64_t now_s, char *why, size_t len)
{
	for (unsigned i = 0; i < c->n; i++) {
		const struct devq_culprit *e = &c->e[i];
		if (e->uid != uid)
			continue;
		if (!refused(e, cfg, now_s))
			return false;
		char until[40];
		int64_t end = e->last_s + (int64_t)cfg->lost_refuse_s;
		fmt_time(end, until, sizeof(until));
		snprintf(why, len,
			 "uid %u is refused until %s (%lld s): its work lost the device %u times, "
			 "each time devqd had to restart; an admin can lift this (devqd(8), "
			 "lost-refuse-s)",
			 (unsigned)uid, until, (long long)(end - now_s), (unsigned)e->losses);
		return true;
	}
	return false;
}

unsigned devq_culprit_describe(const struct devq_culprits *c, const struct devq_config *cfg,
			       int64_t now_s, char *out, size_t len)
{
	unsigned k = 0;
	size_t used = 0;
	out[0] = '\0';
	for (unsigned i = 0; i < c->n; i++) {
		if (!refused(&c->e[i], cfg, now_s))
			continue;
		k++;
		if (used < len) {
			int w = snprintf(out + used, len - used, "%s%u",
					 k == 1 ? "uids refused after device losses: " : ", ",
					 (unsigned)c->e[i].uid);
			used = w < 0 ? len : used + (size_t)w;
		}
	}
	return k;
}

unsigned devq_culprit_list(const struct devq_culprits *c, const struct devq_config *cfg,
			   int64_t now_s, struct devq_refused_uid *out, unsigned max)
{
	unsigned k = 0;
	for (unsigned i = 0; i < c->n && k < max; i++) {
		const struct devq_culprit *e = &c->e[i];
		if (refused(e, cfg, now_s))
			out[k++] = (struct devq_refused_uid){ e->uid, e->losses,
							     e->last_s + (int64_t)cfg->lost_refuse_s };
	}
	return k;
}
