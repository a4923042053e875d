/* SPDX-License-Identifier: Apache-2.0 */
/* Logging, to stderr or, under systemd, to the journal with structured
 * fields.  Knows no devq types: a session event passes its identity as a
 * struct devq_log_ctx (core/session.h's devq_slog fills one in).
 * Any thread. */
#ifndef DEVQ_LOG_H
#define DEVQ_LOG_H

#include <stdint.h>

enum { DEVQ_LOG_ERR, DEVQ_LOG_WARN, DEVQ_LOG_INFO, DEVQ_LOG_DEBUG };

/* Who a session event concerns: journal fields DEVQ_SESSION,
 * DEVQ_CLIENT_PID, DEVQ_CLIENT_UID; "session N: " on stderr. */
struct devq_log_ctx {
	uint64_t session;
	long pid;
	unsigned uid;
};

void devq_log_set_level(int level);
void devq_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A session event: under journald it carries the ctx's fields and, when not
 * negative, DEVQ_QUEUE, DEVQ_POINT and DEVQ_CODE. */
void devq_log_fields(int level, const struct devq_log_ctx *ctx, int code, int64_t queue,
		     int64_t point, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

#define log_err(...) devq_log(DEVQ_LOG_ERR, __VA_ARGS__)
#define log_warn(...) devq_log(DEVQ_LOG_WARN, __VA_ARGS__)
#define log_info(...) devq_log(DEVQ_LOG_INFO, __VA_ARGS__)
#define log_debug(...) devq_log(DEVQ_LOG_DEBUG, __VA_ARGS__)

#endif
