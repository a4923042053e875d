/* SPDX-License-Identifier: Apache-2.0 */
/* Talking to the service manager (sd_notify): readiness, a live STATUS=
 * line, watchdog pings and shutdown.  Without $NOTIFY_SOCKET every call is
 * a no-op apart from the stall check's log line. */
#ifndef DEVQ_NOTIFY_H
#define DEVQ_NOTIFY_H

struct devq_daemon;

/* Call once the backend is up and the listening socket is polled: sends
 * READY=1 with the first STATUS= and starts the timers that refresh STATUS=
 * and ping the watchdog (at half of $WATCHDOG_USEC), and the SIGHUP
 * handler that reloads the configuration (RELOADING=1 ... READY=1).  Returns 0 or a
 * negative errno (out of memory). */
int devq_notify_ready(struct devq_daemon *d);

/* STOPPING=1 with a last STATUS=; the timers keep running so that a slow
 * drain is not mistaken for a hang. */
void devq_notify_stopping(struct devq_daemon *d);

/* Closes the timers (the loop then frees the state). */
void devq_notify_close(struct devq_daemon *d);

#endif
