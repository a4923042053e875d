/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's version, as devqd -V and the Hello reply give it. */
#ifndef DEVQ_VERSION_H
#define DEVQ_VERSION_H

#define DEVQ_VERSION "0.1.0"

#endif
