/* SPDX-License-Identifier: Apache-2.0 */
/* What several devctl subcommands print the same way: JSON strings,
 * durations for people, errors and the connection's failure. */
#ifndef DEVCTL_UTIL_H
#define DEVCTL_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "devq.h"

/* s as a JSON string literal: '"' and '\\' escaped with a backslash,
 * control characters (below 0x20) as \u00XX, every other byte as it is, so
 * UTF-8 passes through (devctl list/status --json). */
void devctl_json_str(FILE *f, const char *s);
/* The same, but bytes 0x7f and above are written as \u00XX of their own
 * value too: the output is 7-bit and valid JSON whatever s holds (a client
 * name need not be UTF-8), at the price of non-ASCII text reading as
 * Latin-1 (devctl trace's files, which viewers must always load). */
void devctl_json_str_ascii(FILE *f, const char *s);

/* ns for people, into buf of n bytes: "N ns" below 10 us, "N.N us" below
 * 10 ms, else milliseconds with ms_decimals decimals (devctl submit prints
 * 3, devctl top 2 to fit its columns). */
void devctl_fmt_ns(char *buf, size_t n, uint64_t ns, int ms_decimals);

/* A duration in the unit that fits it, into buf of n bytes: "850 ns",
 * "4.95 µs", "100 ms", "1.50 s" (three significant digits, the number
 * below 1000 in ns, µs and ms; UTF-8 µ).  For pictures (devctl trace's
 * SVG), where a reader compares magnitudes at a glance. */
void devctl_fmt_dur(char *buf, size_t n, uint64_t ns);

/* A hint after a failed devq_connect's message, by its result and its
 * handle q (NULL when none was made): how to start devqd or name its
 * socket, or the socket's permissions when connect(2) itself was refused
 * ("" when there is none to give, e.g. the daemon refused). */
const char *devctl_conn_hint(int r, const devq *q);

/* "devctl", which every error line starts with ("devctl: ...", "devctl
 * submit: ..."). */
extern const char devctl_prog[];

/* Set by main when the command's arguments hold --json: devctl_errf then
 * writes {"error":"..."} objects, which a script reading stderr can parse. */
extern bool devctl_json_errors;

/* An error on stderr: the formatted line (one trailing newline or none), or
 * with devctl_json_errors its message, less the "devctl...: " it starts
 * with, as an {"error":"..."} object. */
void devctl_errf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* devq_connect as the verbs connect: 0 with *q, or the failure reported
 * with devctl_errf (and a hint), *q NULL and exit status 3. */
int devctl_connect(const char *sock, devq **q);

#endif
