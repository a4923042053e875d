/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's versions, as devqd -V and the Hello reply give them: its
 * release, DEVQ_VERSION, is the top-level VERSION file, which the Makefile
 * passes to every object as -DDEVQ_VERSION (tools/check-version.sh fails on
 * a definition here); the protocol versions it speaks are below. */
#ifndef DEVQ_VERSION_H
#define DEVQ_VERSION_H

#ifndef DEVQ_VERSION
#error "DEVQ_VERSION is defined by the Makefile from the VERSION file"
#endif

#define DEVQ_PROTO_MIN 1
#define DEVQ_PROTO_MAX 1

#endif
