/* SPDX-License-Identifier: Apache-2.0 */
/* Notices a client must read whole: libdevq keeps the first 255 bytes of
 * an asynchronous error's message (struct devq_error), so a longer one
 * would lose its end silently. */
#ifndef DEVQ_NOTICE_H
#define DEVQ_NOTICE_H

#include <stddef.h>

/* The bytes of a message a client keeps (client/devq.h: message[256]). */
#define DEVQ_NOTICE_KEPT 255

/* Cuts msg in place to at most kept bytes: a longer message ends in "..."
 * at a character boundary (UTF-8), so the reader sees that something was
 * left out (the journal keeps it whole).  Returns the new length. */
size_t devq_notice_fit(char *msg, size_t kept);

#endif
