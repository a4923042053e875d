/* SPDX-License-Identifier: Apache-2.0 */
/* Device loss.  After a sticky fault (CUDA: illegal address, launch failure)
 * the context is poisoned and every stream reports the same error; the CUDA
 * documentation says the process must be restarted.  So devqd reports the
 * error on every op in flight (the backend does that), tells every session
 * which sessions had work on the device, and exits with a distinct status so
 * systemd (Restart=on-failure; the socket unit keeps the listening socket)
 * starts a fresh daemon.  Which kernel faulted is unknowable once every
 * stream reports the error, so attribution is exact only when one session
 * had work on the device.  Only admins (root, the admin group) are told
 * which other sessions had work; the log always names them. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "server/lost.h"
#include "server/daemon.h"
#include "server/notice.h"

#include "base/config.h"
#include "base/log.h"
#include "core/job.h"
#include "core/outbox.h"
#include "core/session.h"

#define LOST_MSG 480
/* What every notice starts with: what the client must do. */
#define LOST_ADVICE                                                             \
	"device lost, devqd restarts: reconnect and re-import shared buffers " \
	"(device buffers are gone)"

static void describe(const struct devq_session *s, char *buf, size_t n)
{
	snprintf(buf, n, "session %llu (pid %d, uid %u, '%.40s')", (unsigned long long)s->id,
		 (int)s->pid, (unsigned)s->uid, s->name);
}

void devq_lost_notify(struct devq_daemon *d, const struct devq_job *op)
{
	char who[LOST_MSG] = "", one[128];
	unsigned busy = 0;
	const struct devq_session *culprit = NULL;
	bool one_uid = true; /* every busy session is the culprit's uid */
	size_t len = 0;

	for (struct devq_session *s = d->e.sessions; s; s = s->next) {
		if (!s->ops_in_flight)
			continue;
		busy++;
		if (culprit && culprit->uid != s->uid)
			one_uid = false;
		culprit = s;
		if (len >= sizeof(who) - 1)
			continue; /* full: the count below still says how many */
		describe(s, one, sizeof(one));
		int w = snprintf(who + len, sizeof(who) - len, "%s%s", len ? ", " : "", one);
		len = w < 0 || (size_t)w >= sizeof(who) - len ? sizeof(who) - 1 : len + (size_t)w;
	}
	char cause[LOST_MSG + 160];
	if (busy == 1)
		snprintf(cause, sizeof(cause), "caused by %s, the only session with work on the device",
			 who);
	else
		snprintf(cause, sizeof(cause), "%u sessions had work on the device: %s", busy, who);
	log_err("device lost: %s; %s; stopping with status %d for a restart", op->b.msg, cause,
		DEVQ_EXIT_DEVICE_LOST);

	/* The loss is that uid's when only its sessions had work: counted,
	 * and past lost-refuse-after the uid is refused for a while
	 * (culprit.c).  Recorded before the restart this loss causes.  Root
	 * and the admin group are not counted: they are never refused. */
	char refusal[160] = "";
	if (culprit && one_uid && !culprit->admin) { /* admins are never refused */
		const struct devq_config *cfg = &d->e.cfg;
		unsigned losses = devq_culprit_record(&d->culprits, (uint32_t)culprit->uid, cfg,
						      (int64_t)time(NULL));
		if (losses && losses >= cfg->lost_refuse_after) {
			snprintf(refusal, sizeof(refusal),
				 "; uid %u is refused for %llu s (%u device losses)",
				 (unsigned)culprit->uid, (unsigned long long)cfg->lost_refuse_s,
				 losses);
			devq_slog(DEVQ_LOG_ERR, culprit, DEVQ__CODE__DEVICE_LOST, -1, -1,
				  "uid %u refused for %llu s: its work lost the device %u times, "
				  "each within lost-refuse-s of the last (lost-refuse-after %u)",
				  (unsigned)culprit->uid, (unsigned long long)cfg->lost_refuse_s,
				  losses, cfg->lost_refuse_after);
		} else if (losses) {
			devq_slog(DEVQ_LOG_WARN, culprit, DEVQ__CODE__DEVICE_LOST, -1, -1,
				  "device loss %u of uid %u (refused at %u within %llu s)", losses,
				  (unsigned)culprit->uid, cfg->lost_refuse_after,
				  (unsigned long long)cfg->lost_refuse_s);
		}
	}

	/* The advice first, and the whole notice within what a client keeps
	 * (DEVQ_NOTICE_KEPT, cut with "..." past it): who else had work (pids,
	 * uids, names) and the faulting op's own message go only to admins and
	 * to that op's session; a non-admin learns that the device was lost,
	 * whether its own work was running, and what to do.  The log above
	 * has it all. */
	for (struct devq_session *s = d->e.sessions; s; s = s->next) {
		if (!s->connected || !s->hello_done)
			continue;
		/* An admin is told whose work it was; anyone else only whether
		 * its own work was in flight, in words that do not depend on
		 * the other sessions ("your work faulted the device" would tell
		 * it that no one else had work). */
		const char *role = "you had no work on the device";
		if (s->ops_in_flight && !s->admin)
			role = "your work was in flight when the device faulted: it fails";
		else if (s->ops_in_flight)
			role = s == culprit && busy == 1 ? "your work faulted the device"
							 : "your work in flight fails";
		bool own = op->s == s;
		char msg[sizeof(cause) + sizeof(refusal) + 320]; /* cut to DEVQ_NOTICE_KEPT below */
		const char *told = s->admin || (culprit && s->uid == culprit->uid) ? refusal : "";
		if (s->admin)
			snprintf(msg, sizeof(msg), "%s. %s%s; %s; device error: %.120s", LOST_ADVICE,
				 role, told, cause, op->b.msg);
		else
			snprintf(msg, sizeof(msg), "%s. %s%s%s%.120s", LOST_ADVICE, role, told,
				 own ? "; device error: " : "", own ? op->b.msg : "");
		devq_notice_fit(msg, DEVQ_NOTICE_KEPT);
		devq_outbox_error(s, DEVQ__CODE__DEVICE_LOST, "device", NULL, NULL, "%s", msg);
	}
}
