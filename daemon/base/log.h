/* SPDX-License-Identifier: Apache-2.0 */
/* Logging, to stderr or, under systemd, to the journal with structured
 * fields.  Knows no devq types: a session event passes its identity as a
 * struct devq_log_ctx (core/session.h's devq_slog fills one in).
 * Any thread. */
#ifndef DEVQ_LOG_H
#define DEVQ_LOG_H

#include <stdint.h>

/* The default level is NOTICE: errors, warnings, and the few lines an
 * operator needs once (the socket, the backend and why, the limits, a stop).
 * -v adds INFO (a line per client event), -vv DEBUG. */
enum { DEVQ_LOG_ERR, DEVQ_LOG_WARN, DEVQ_LOG_NOTICE, DEVQ_LOG_INFO, DEVQ_LOG_DEBUG };

/* Who a session event concerns: journal fields DEVQ_SESSION,
 * DEVQ_CLIENT_PID, DEVQ_CLIENT_UID (and DEVQ_TENANT for a granted
 * tenant's); "session N: " on stderr.  An event of
 * a uid with no session (a refusal remembered across restarts) has session
 * 0 and pid 0: only DEVQ_CLIENT_UID, and no prefix. */
struct devq_log_ctx {
	uint64_t session;
	long pid;
	unsigned uid;
	const char *tenant; /* a granted tenant's name: DEVQ_TENANT (NULL: none) */
};

/* Where a line was logged: the journal's CODE_FILE, CODE_LINE and
 * CODE_FUNC name the caller, not this helper (the macros fill it in). */
struct devq_log_src {
	const char *file;
	int line;
	const char *func;
};
#define DEVQ_LOG_HERE (&(const struct devq_log_src){ __FILE__, __LINE__, __func__ })

void devq_log_set_level(int level);
void devq_log_at(const struct devq_log_src *src, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* A session event: under journald it carries the ctx's fields and, when not
 * negative, DEVQ_QUEUE, DEVQ_POINT and DEVQ_CODE. */
void devq_log_fields_at(const struct devq_log_src *src, int level, const struct devq_log_ctx *ctx,
			int code, int64_t queue, int64_t point, const char *fmt, ...)
	__attribute__((format(printf, 7, 8)));

#define devq_log(...) devq_log_at(DEVQ_LOG_HERE, __VA_ARGS__)
#define devq_log_fields(...) devq_log_fields_at(DEVQ_LOG_HERE, __VA_ARGS__)
#define log_err(...) devq_log(DEVQ_LOG_ERR, __VA_ARGS__)
#define log_warn(...) devq_log(DEVQ_LOG_WARN, __VA_ARGS__)
#define log_notice(...) devq_log(DEVQ_LOG_NOTICE, __VA_ARGS__)
#define log_info(...) devq_log(DEVQ_LOG_INFO, __VA_ARGS__)
#define log_debug(...) devq_log(DEVQ_LOG_DEBUG, __VA_ARGS__)

#endif
