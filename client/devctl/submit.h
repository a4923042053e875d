/* SPDX-License-Identifier: Apache-2.0 */
/* devctl submit: run executables in one devqd session and wait for their
 * completions. */
#ifndef DEVCTL_SUBMIT_H
#define DEVCTL_SUBMIT_H

#include <stdio.h>

void devctl_submit_usage(FILE *f);
/* argv: the arguments after "submit".  Returns devctl's exit status: 0 when
 * every op succeeded, 1 one failed or devqd refused an input, 2 usage, 3
 * devqd unreachable, 4 an --out file not written, 130 interrupted. */
int devctl_submit_main(const char *sock, int argc, char **argv);

#endif
