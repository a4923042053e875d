/* SPDX-License-Identifier: Apache-2.0 */
/* Shared by devctl's verbs (submit.c, status.c, trace.c, top.c, ...):
 * JSON strings, durations, errors and the connection. */
#include "devctl/util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>

static void json_str(FILE *f, const char *s, bool ascii)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20 || (ascii && c >= 0x7f))
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

void devctl_json_str(FILE *f, const char *s)
{
	json_str(f, s, false);
}

void devctl_json_str_ascii(FILE *f, const char *s)
{
	json_str(f, s, true);
}

void devctl_fmt_ns(char *buf, size_t n, uint64_t ns, int ms_decimals)
{
	if (ns < 10000)
		snprintf(buf, n, "%" PRIu64 " ns", ns);
	else if (ns < 10000000)
		snprintf(buf, n, "%.1f us", (double)ns / 1e3);
	else
		snprintf(buf, n, "%.*f ms", ms_decimals, (double)ns / 1e6);
}

void devctl_fmt_dur(char *buf, size_t n, uint64_t ns)
{
	static const char *const unit[] = { "ns", "µs", "ms", "s" };
	if (ns < 1000) {
		snprintf(buf, n, "%" PRIu64 " ns", ns);
		return;
	}
	double v = (double)ns;
	int u = 0;
	/* 999.95 µs would print as "1000 µs": step up before rounding does. */
	while (u < 3 && v >= 999.5) {
		v /= 1000;
		u++;
	}
	snprintf(buf, n, "%.*f %s", v < 9.995 ? 2 : v < 99.95 ? 1 : 0, v, unit[u]);
}

/* libdevq's message when connect(2) itself failed (client/libdevq.c,
 * open_socket); a refusal by the daemon reads "permission_denied: ...". */
#define CONNECT_FAILED "cannot connect to devqd at "

const char *devctl_conn_hint(int r, const devq *q)
{
	/* A permission error is the socket's only when connect(2) said so:
	 * the daemon's own refusal (access policy, a uid refused after device
	 * losses) says why itself, and the socket is not the fix. */
	if ((r == -EACCES || r == -EPERM) && q &&
	    strncmp(devq_last_error(q), CONNECT_FAILED, strlen(CONNECT_FAILED)) != 0)
		return "";
	switch (r) {
	case -ENOENT:
		return " (is devqd running? start it, or point DEVQ_SOCKET or --socket at its "
		       "socket)";
	case -ECONNREFUSED:
		return " (nothing listens there: a stale socket of a devqd that is gone; start "
		       "devqd)";
	case -EACCES:
	case -EPERM:
		/* libdevq names the group to join when it can tell: once is
		 * enough. */
		if (q && strstr(devq_last_error(q), "usermod"))
			return "";
		/* The socket is mode 0660: its group is devqd.socket's
		 * SocketGroup= (devq), or devqd's own group when it binds the
		 * socket itself.  No flag of devqd's changes it. */
		return " (no permission on the socket: join its group, devq as packaged "
		       "(sudo usermod -aG devq $USER, then log in again), or run as devqd's "
		       "user)";
	default:
		return "";
	}
}

const char devctl_prog[] = "devctl";

bool devctl_json_errors;

void devctl_errf(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	size_t n = strlen(msg);
	if (n && msg[n - 1] == '\n')
		msg[--n] = '\0';
	if (!devctl_json_errors) {
		fprintf(stderr, "%s\n", msg);
		return;
	}
	/* The message without the "devctl: " every line starts with. */
	const char *m = msg;
	if (!strncmp(m, "devctl", 6)) {
		const char *c = strstr(m, ": ");
		if (c)
			m = c + 2;
	}
	fputs("{\"error\":", stderr);
	devctl_json_str(stderr, m);
	fputs("}\n", stderr);
}

int devctl_connect(const char *sock, devq **q)
{
	int r = devq_connect(sock, "devctl", q);
	if (r < 0) {
		devctl_errf("%s: %s%s", devctl_prog, *q ? devq_last_error(*q) : strerror(-r),
			    devctl_conn_hint(r, *q));
		devq_disconnect(*q);
		*q = NULL;
		return 3;
	}
	return 0;
}
