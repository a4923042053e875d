/* SPDX-License-Identifier: Apache-2.0 */
/* Names for threads devqd does not start itself.  A new thread inherits
 * its creator's name, so the threads a library starts when loaded (a BLAS
 * pool) or libuv starts in its first uv_queue_work get a name of devqd's
 * choosing (for top -H) when the calling thread wears that name for the
 * call and then takes its own back. */
#ifndef DEVQ_BASE_TNAME_H
#define DEVQ_BASE_TNAME_H

/* The caller's name goes to saved (empty when it cannot be read, and then
 * the name is left alone); the caller is named name. */
void devq_tname_push(const char *name, char saved[16]);
/* The caller's name back from saved (nothing when saved is empty). */
void devq_tname_pop(const char saved[16]);

#endif
