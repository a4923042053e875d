/* SPDX-License-Identifier: Apache-2.0 */
/* A lost device: what devqd tells its sessions, and how it exits. */
#ifndef DEVQ_LOST_H
#define DEVQ_LOST_H

struct devq_daemon;
struct devq_job;

/* Exit status after the device was lost (EX_UNAVAILABLE): the service
 * manager restarts devqd on a fresh device context. */
#define DEVQ_EXIT_DEVICE_LOST 69
/* After a device loss, how long the ops still in flight may take to report
 * it before devqd exits without them (a sticky fault fails a GPU's streams
 * at once; a CPU op, or a kernel the fault did not abort, would hold the
 * restart for as long as it runs). */
#define DEVQ_LOST_GRACE_NS 1000000000ull

/* lost.c: the device took a sticky fault (job is the first op reporting
 * it): logs it and tells every session, naming the sessions that had work
 * on the device.  The server then stops with DEVQ_EXIT_DEVICE_LOST once the
 * ops in flight have failed. */
void devq_lost_notify(struct devq_daemon *d, const struct devq_job *job);

#endif
