/* SPDX-License-Identifier: Apache-2.0 */
/* Boundaries: each limit devqd documents, at exactly the limit and one
 * past it, against a real devqd (CPU backend), for the limits no other test
 * checks that way (tests/README.md, "Boundaries", lists every limit and the
 * tests of each).  The accepted range of every numeric devqd.conf key comes
 * from the table below, which says what man/devqd.conf.5 says, and is
 * checked against the man page too: a wrong number in the daemon's key table
 * or in the page fails here. */
#include <check.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "devq.h"
#include "cpage_layout.h"
#include "devq.pb-c.h"
#include "frame.h"
#include "harness.h"
#include "hostile.h"
#include "kernels.h"

/* ---- devqd.conf: every numeric key's accepted range ------------------- */

/* As devqd.conf(5) states them.  flag: devqd takes --KEY VALUE as well
 * (verbose is -v, which takes no value). */
static const struct key_range {
	const char *key;
	uint64_t min, max;
	bool flag;
} ranges[] = {
	{ "device", 0, 1023, true },
	{ "streams", 1, 256, true },
	{ "priority-streams", 0, 64, true },
	{ "max-op-ms", 1, 86400000, true },
	{ "max-buffer-mb", 1, 1073741824, true },
	{ "max-queues", 1, 65536, true },
	{ "verbose", 0, 2, false },
	{ "stall-timeout-ms", 1000, 86400000, true },
	{ "slice-us", 100, 1000000, true },
	{ "trace-records", 0, 1048576, true },
	{ "lost-refuse-after", 1, 1000, true },
	{ "lost-refuse-s", 0, 2592000, true },
	{ "fair-k", 1, 4096, true },
	{ "fair-window-us", 10, 10000000, true },
	{ "quota-session-ops", 1, 16777216, true },
	{ "quota-user-ops", 1, 67108864, true },
	{ "quota-session-buffers", 1, 16777216, true },
	{ "quota-user-buffers", 1, 67108864, true },
	{ "quota-session-pinned-mb", 1, 1073741824, true },
	{ "quota-user-pinned-mb", 1, 1073741824, true },
	{ "quota-session-device-mb", 1, 1073741824, true },
	{ "quota-user-device-mb", 1, 1073741824, true },
	{ "quota-user-queues", 1, 16777216, true },
	{ "quota-user-sessions", 1, 1048576, true },
	{ "quota-session-fds", 506, 65536, true },
	{ "quota-outbound-kb", 4, 1073741824, true },
};

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
	size_t cap = 1 << 16, n = 0;
	char *b = malloc(cap);
	ck_assert_ptr_nonnull(b);
	size_t got;
	while ((got = fread(b + n, 1, cap - n - 1, f)) > 0) {
		n += got;
		if (n + 1 == cap) {
			b = realloc(b, cap *= 2);
			ck_assert_ptr_nonnull(b);
		}
	}
	b[n] = '\0';
	fclose(f);
	return b;
}

/* roff to words: "\-" is "-", font changes go, lines join with spaces. */
static void plain(const char *in, size_t n, char *out, size_t outlen)
{
	size_t j = 0;
	for (size_t i = 0; i < n && j + 1 < outlen; i++) {
		if (in[i] == '\\' && i + 1 < n && in[i + 1] == '-') {
			out[j++] = '-';
			i++;
		} else if (in[i] == '\\' && i + 2 < n && in[i + 1] == 'f') {
			i += 2;
		} else if (in[i] == '"') {
			continue;
		} else if (isspace((unsigned char)in[i])) {
			if (j && out[j - 1] != ' ')
				out[j++] = ' ';
		} else {
			out[j++] = in[i];
		}
	}
	out[j] = '\0';
}

/* Whether some entry (.TP) of man/devqd.conf.5 for key says "MIN to MAX"
 * (MAX also as 2^N). */
static bool documented(const char *man, const struct key_range *k)
{
	char want[64], want2[64] = "";
	snprintf(want, sizeof(want), "%" PRIu64 " to %" PRIu64, k->min, k->max);
	for (int b = 0; b < 64; b++)
		if (k->max == 1ull << b)
			snprintf(want2, sizeof(want2), "%" PRIu64 " to 2^%d", k->min, b);
	for (const char *p = man; (p = strstr(p, "\n.TP\n")); p++) {
		const char *head = p + 5, *eol = strchr(head, '\n');
		if (!eol)
			break;
		char h[512];
		plain(head, (size_t)(eol - head), h, sizeof(h));
		/* The entry's head names the key as a word: ".BI max\-op\-ms ..." */
		bool names = false;
		size_t kl = strlen(k->key);
		for (const char *q = h; (q = strstr(q, k->key)); q++)
			if (q > h && q[-1] == ' ' && (q[kl] == ' ' || q[kl] == '\0'))
				names = true;
		if (!names)
			continue;
		const char *end = eol;
		for (const char *s = eol; *s; s++) {
			if (s[0] == '\n' && s[1] == '.' &&
			    (!strncmp(s + 2, "TP", 2) || !strncmp(s + 2, "SS", 2) ||
			     !strncmp(s + 2, "SH", 2))) {
				end = s;
				break;
			}
			end = s + 1;
		}
		static char body[8192];
		plain(eol, (size_t)(end - eol), body, sizeof(body));
		if (strstr(body, want) || (want2[0] && strstr(body, want2)))
			return true;
	}
	return false;
}

/* devqd --check-config on a file holding file_line (may be NULL) with the
 * flags flag_key flag_value (may be NULL); its exit status, output in out. */
static int check_config(const char *dir, const char *file_line, const char *flag_key,
			const char *flag_value, char *out, size_t outlen, char *path, size_t plen)
{
	snprintf(path, plen, "%s/bounds.conf", dir);
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	if (file_line)
		fprintf(f, "%s\n", file_line);
	ck_assert_int_eq(fclose(f), 0);
	char cmd[1024];
	if (flag_key)
		snprintf(cmd, sizeof(cmd), "%s --check-config -c %s --socket %s/none.sock --%s %s 2>&1",
			 harness_bin("devqd"), path, dir, flag_key, flag_value);
	else
		snprintf(cmd, sizeof(cmd), "%s --check-config -c %s --socket %s/none.sock 2>&1",
			 harness_bin("devqd"), path, dir);
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	size_t n = fread(out, 1, outlen - 1, p);
	out[n] = '\0';
	int st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* Each key at its documented minimum and maximum is accepted, one below
 * and one above refused with exit 2 and a message naming the key, the value
 * and the range: from the file (with its line) and as a flag. */
START_TEST(config_key_ranges)
{
	const struct key_range *k = &ranges[_i];
	char *man = slurp("man/devqd.conf.5");
	ck_assert_msg(documented(man, k), "man/devqd.conf.5 does not say %s is %" PRIu64
		      " to %" PRIu64, k->key, k->min, k->max);
	free(man);

	char dir[] = "/tmp/devq-bounds-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	char in[2][24], outside[2][24];
	snprintf(in[0], sizeof(in[0]), "%" PRIu64, k->min);
	snprintf(in[1], sizeof(in[1]), "%" PRIu64, k->max);
	if (k->min)
		snprintf(outside[0], sizeof(outside[0]), "%" PRIu64, k->min - 1);
	else
		snprintf(outside[0], sizeof(outside[0]), "-1");
	snprintf(outside[1], sizeof(outside[1]), "%" PRIu64, k->max + 1);
	char out[2048], path[128], line[128], want[256];
	for (int i = 0; i < 2; i++) {
		snprintf(line, sizeof(line), "%s = %s", k->key, in[i]);
		int rc = check_config(dir, line, NULL, NULL, out, sizeof(out), path, sizeof(path));
		ck_assert_msg(rc == 0 && strstr(out, "configuration OK"), "'%s': exit %d: %s", line,
			      rc, out);
		snprintf(line, sizeof(line), "%s = %s", k->key, outside[i]);
		rc = check_config(dir, line, NULL, NULL, out, sizeof(out), path, sizeof(path));
		snprintf(want, sizeof(want), "%s:1: %s: '%s' is not a number in %" PRIu64 "..%" PRIu64,
			 path, k->key, outside[i], k->min, k->max);
		ck_assert_msg(rc == 2 && strstr(out, want), "'%s': exit %d, wanted '%s' in: %s", line,
			      rc, want, out);
		if (!k->flag)
			continue;
		rc = check_config(dir, NULL, k->key, in[i], out, sizeof(out), path, sizeof(path));
		ck_assert_msg(rc == 0 && strstr(out, "configuration OK"), "--%s %s: exit %d: %s",
			      k->key, in[i], rc, out);
		rc = check_config(dir, NULL, k->key, outside[i], out, sizeof(out), path, sizeof(path));
		snprintf(want, sizeof(want), "--%s: '%s' is not a number in %" PRIu64 "..%" PRIu64,
			 k->key, outside[i], k->min, k->max);
		ck_assert_msg(rc == 2 && strstr(out, want), "--%s %s: exit %d, wanted '%s' in: %s",
			      k->key, outside[i], rc, want, out);
	}
	unlink(path);
	rmdir(dir);
}
END_TEST

/* ---- the protocol: frames and fds --------------------------------------- */

/* A GetStatus of exactly len payload bytes: the message, then an unknown
 * length-delimited field (number 1000) padding it, which protobuf skips. */
static uint8_t *padded_status(size_t len)
{
	Devq__GetStatus gs = DEVQ__GET_STATUS__INIT;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_GET_STATUS;
	m.get_status = &gs;
	size_t base = devq__client_message__get_packed_size(&m);
	uint8_t *p = calloc(1, len);
	ck_assert_ptr_nonnull(p);
	devq__client_message__pack(&m, p);
	size_t i = base;
	/* tag: field 1000, wire type 2 = 8002 = varint 0xc2 0x3e */
	p[i++] = 0xc2;
	p[i++] = 0x3e;
	/* The length varint's own size depends on the length: 3 bytes for
	 * anything from 16384 to 2097151. */
	size_t pad = len - i - 3;
	ck_assert_uint_ge(pad, 16384);
	ck_assert_uint_lt(pad, 2097152);
	p[i++] = (uint8_t)(0x80 | (pad & 0x7f));
	p[i++] = (uint8_t)(0x80 | ((pad >> 7) & 0x7f));
	p[i++] = (uint8_t)(pad >> 14);
	ck_assert_uint_eq(i + pad, len);
	return p;
}

/* HelloReply.max_frame (1 MiB): a frame of exactly that many payload bytes
 * is served; one byte more is refused from its header, and the connection
 * closed. */
START_TEST(frame_size_at_bound_and_past)
{
	struct daemon_proc d;
	harness_start(&d, NULL);
	devq *q = conn(d.sock, "info");
	ck_assert_uint_eq(devq_get_info(q)->max_frame, DEVQ_FRAME_MAX_DEFAULT);
	ck_assert_uint_eq(DEVQ_FRAME_MAX_DEFAULT, 1048576);
	devq_disconnect(q);

	struct raw r;
	raw_open(&r, &d);
	raw_hello(&r);
	uint8_t *p = padded_status(DEVQ_FRAME_MAX_DEFAULT);
	raw_send_payload(&r, DEVQ_FRAME_CLIENT, p, DEVQ_FRAME_MAX_DEFAULT);
	free(p);
	devq__daemon_message__free_unpacked(raw_expect(&r, DEVQ__DAEMON_MESSAGE__BODY_STATUS),
					    NULL);
	raw_expect_alive(&r);
	/* One past: the header alone is refused. */
	uint8_t buf[DEVQ_FRAME_HDR + 64];
	memset(buf, 0, sizeof(buf));
	header(buf, DEVQ_FRAME_MAX_DEFAULT + 1, DEVQ_FRAME_CLIENT, 0);
	raw_write(&r, buf, sizeof(buf));
	raw_expect_error(&r, DEVQ_E_PROTOCOL_ERROR, "maximum", NULL);
	raw_expect_closed(&r);
	raw_close(&r);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* n copies of fd on one sendmsg of len bytes (raw_sendmsg carries 4). */
static void send_fds(int sock, const void *data, size_t len, int fd, unsigned n)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * DEVQ_FDS_PER_MSG)];
	} ctl;
	ck_assert_uint_le(n, DEVQ_FDS_PER_MSG);
	memset(&ctl, 0, sizeof(ctl));
	struct iovec iov = { (void *)data, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			     .msg_controllen = CMSG_SPACE(sizeof(int) * n) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int) * n);
	for (unsigned i = 0; i < n; i++)
		memcpy(CMSG_DATA(c) + i * sizeof(int), &fd, sizeof(int));
	ck_assert_int_eq(sendmsg(sock, &mh, MSG_NOSIGNAL), (ssize_t)len);
}

/* The daemon's open fds once they stop changing. */
static int settled_fds(const struct daemon_proc *d)
{
	int last = -1, same = 0;
	for (int i = 0; i < 500; i++) {
		int n = harness_fd_count(d->pid);
		same = n == last ? same + 1 : 0;
		if (same >= 5)
			return n;
		last = n;
		usleep(10000);
	}
	return last;
}

/* The frame of a GetStatus: header declaring nfds, then its payload. */
static size_t status_frame(uint8_t *buf, size_t cap, uint16_t nfds)
{
	Devq__GetStatus gs = DEVQ__GET_STATUS__INIT;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_GET_STATUS;
	m.get_status = &gs;
	size_t len = devq__client_message__get_packed_size(&m);
	ck_assert_uint_le(DEVQ_FRAME_HDR + len, cap);
	header(buf, (uint32_t)len, DEVQ_FRAME_CLIENT, nfds);
	devq__client_message__pack(&m, buf + DEVQ_FRAME_HDR);
	return DEVQ_FRAME_HDR + len;
}

/* HelloReply.max_fds (253, the kernel's SCM_MAX_FD): a frame declaring and
 * carrying 253 fds is served (and the fds, which GetStatus does not use,
 * closed); a header declaring 254 is a protocol error. */
START_TEST(fds_per_frame_at_bound_and_past)
{
	struct daemon_proc d;
	harness_start(&d, NULL);
	devq *q = conn(d.sock, "info");
	ck_assert_uint_eq(devq_get_info(q)->max_fds, DEVQ_FDS_PER_MSG);
	ck_assert_uint_eq(DEVQ_FDS_PER_MSG, 253);
	devq_disconnect(q);
	int base = settled_fds(&d);

	int memfd = memfd_create("fds", MFD_CLOEXEC);
	ck_assert_int_ge(memfd, 0);
	struct raw r;
	raw_open(&r, &d);
	raw_hello(&r);
	int with_conn = settled_fds(&d);
	uint8_t buf[64];
	size_t len = status_frame(buf, sizeof(buf), DEVQ_FDS_PER_MSG);
	send_fds(r.fd, buf, len, memfd, DEVQ_FDS_PER_MSG);
	devq__daemon_message__free_unpacked(raw_expect(&r, DEVQ__DAEMON_MESSAGE__BODY_STATUS),
					    NULL);
	raw_expect_alive(&r);
	/* The 253 are closed again. */
	ck_assert_int_eq(settled_fds(&d), with_conn);

	len = status_frame(buf, sizeof(buf), DEVQ_FDS_PER_MSG + 1);
	send_fds(r.fd, buf, len, memfd, DEVQ_FDS_PER_MSG);
	raw_expect_error(&r, DEVQ_E_PROTOCOL_ERROR, NULL, NULL);
	raw_expect_closed(&r);
	raw_close(&r);
	close(memfd);
	ck_assert_int_eq(settled_fds(&d), base);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* quota-session-fds at its minimum, 506 = two frames' 253: a frame whose
 * last byte comes with the next frame's 253 fds while its own 253 are still
 * queued is served; 507 fds queued at once are refused, naming the key. */
START_TEST(session_fds_at_bound_and_past)
{
	struct daemon_proc d;
	const char *args[] = { "--quota-session-fds", "506", NULL };
	harness_start(&d, args);
	int base = settled_fds(&d);
	int memfd = memfd_create("fds", MFD_CLOEXEC);
	ck_assert_int_ge(memfd, 0);

	struct raw r;
	raw_open(&r, &d);
	raw_hello(&r);
	uint8_t a[64], b[64], mid[128];
	size_t la = status_frame(a, sizeof(a), DEVQ_FDS_PER_MSG);
	size_t lb = status_frame(b, sizeof(b), DEVQ_FDS_PER_MSG);
	/* A without its last byte, with its 253 fds; then A's last byte and
	 * B without its last byte, with B's 253: one recvmsg takes those, so
	 * 506 are queued before A is complete; then B's last byte. */
	send_fds(r.fd, a, la - 1, memfd, DEVQ_FDS_PER_MSG);
	usleep(100000); /* the daemon reads A's part before the rest is there */
	mid[0] = a[la - 1];
	memcpy(mid + 1, b, lb - 1);
	send_fds(r.fd, mid, lb, memfd, DEVQ_FDS_PER_MSG);
	raw_write(&r, b + lb - 1, 1);
	for (int i = 0; i < 2; i++)
		devq__daemon_message__free_unpacked(
			raw_expect(&r, DEVQ__DAEMON_MESSAGE__BODY_STATUS), NULL);
	raw_expect_alive(&r);
	raw_close(&r);
	ck_assert_int_eq(settled_fds(&d), base);

	/* A header trickling in: 253 fds on its first byte, 253 on its
	 * second (506, at the quota), 1 on its third. */
	raw_open(&r, &d);
	raw_hello(&r);
	status_frame(a, sizeof(a), 0);
	send_fds(r.fd, a, 1, memfd, DEVQ_FDS_PER_MSG);
	send_fds(r.fd, a + 1, 1, memfd, DEVQ_FDS_PER_MSG);
	usleep(100000);
	/* At the quota: nothing said yet. */
	struct pollfd pfd = { .fd = r.fd, .events = POLLIN };
	ck_assert_int_eq(poll(&pfd, 1, 0), 0);
	send_fds(r.fd, a + 2, 1, memfd, 1);
	raw_expect_error(&r, DEVQ_E_PROTOCOL_ERROR, "quota-session-fds", NULL);
	raw_expect_closed(&r);
	raw_close(&r);
	close(memfd);
	ck_assert_int_eq(settled_fds(&d), base);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* ---- quotas of buffer memory ---------------------------------------------- */

/* Creating a buffer of size bytes: 0, or -ENOSPC naming quota. */
static void create_refused(devq *q, uint64_t size, enum devq_buffer_kind kind, const char *quota)
{
	struct devq_buffer *b = NULL;
	int r = devq_buffer_create(q, size, kind, &b);
	ck_assert_msg(r == -ENOSPC, "%" PRIu64 " bytes past %s: %d (%s)", size, quota, r,
		      devq_last_error(q));
	ck_assert_msg(strstr(devq_last_error(q), quota), "message does not name %s: %s", quota,
		      devq_last_error(q));
}

static void create_ok(devq *q, uint64_t size, enum devq_buffer_kind kind)
{
	struct devq_buffer *b = NULL;
	int r = devq_buffer_create(q, size, kind, &b);
	ck_assert_msg(r == 0, "%" PRIu64 " bytes: %d (%s)", size, r, devq_last_error(q));
}

/* quota-{session,user}-{pinned,device}-mb: a session fills its quota to the
 * byte, then one byte more is refused; a second session of the same uid
 * fills the user's quota to the byte, then one byte more is refused. */
START_TEST(buffer_memory_quotas_at_bound_and_past)
{
	struct daemon_proc d;
	const char *args[] = { "--quota-session-pinned-mb", "2", "--quota-user-pinned-mb", "3",
			       "--quota-session-device-mb", "2", "--quota-user-device-mb", "3",
			       NULL };
	harness_start(&d, args);
	devq *a = conn(d.sock, "a"), *b = conn(d.sock, "b");
	static const struct {
		enum devq_buffer_kind kind;
		const char *session, *user;
	} kinds[] = {
		{ DEVQ_BUFFER_SHARED, "quota-session-pinned-mb", "quota-user-pinned-mb" },
		{ DEVQ_BUFFER_DEVICE, "quota-session-device-mb", "quota-user-device-mb" },
	};
	for (int i = 0; i < 2; i++) {
		create_ok(a, 1 << 20, kinds[i].kind);
		create_ok(a, (1 << 20) - 1, kinds[i].kind);
		create_ok(a, 1, kinds[i].kind); /* the session's 2 MiB, exactly */
		create_refused(a, 1, kinds[i].kind, kinds[i].session);
		create_ok(b, 1 << 20, kinds[i].kind); /* the user's 3 MiB, exactly */
		create_refused(b, 1, kinds[i].kind, kinds[i].user);
	}
	/* Pinned memory that a session imports counts the same. */
	int fd = memfd_create("import", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, 4096), 0);
	ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
	struct devq_buffer *imp;
	ck_assert_int_eq(devq_buffer_import(a, fd, 1, 0, &imp), -ENOSPC);
	ck_assert_msg(strstr(devq_last_error(a), "quota-session-pinned-mb"), "%s",
		      devq_last_error(a));
	close(fd);
	devq_disconnect(a);
	devq_disconnect(b);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* ---- names -------------------------------------------------------------- */

/* The session name a raw Hello with this client_name gets, from Status. */
static void hello_name(const struct daemon_proc *d, const char *name, char *out, size_t n)
{
	struct raw r;
	raw_open(&r, d);
	Devq__Hello h = DEVQ__HELLO__INIT;
	h.min_version = DEVQ_PROTOCOL_MIN;
	h.max_version = DEVQ_PROTOCOL_MAX;
	h.client_name = (char *)name;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_HELLO;
	m.hello = &h;
	raw_send(&r, &m);
	Devq__DaemonMessage *rep = raw_expect(&r, DEVQ__DAEMON_MESSAGE__BODY_HELLO_REPLY);
	uint64_t id = rep->hello_reply->session;
	devq__daemon_message__free_unpacked(rep, NULL);
	raw_get_status(&r);
	rep = raw_expect(&r, DEVQ__DAEMON_MESSAGE__BODY_STATUS);
	out[0] = '\0';
	bool found = false;
	for (size_t i = 0; i < rep->status->n_sessions; i++)
		if (rep->status->sessions[i]->id == id) {
			snprintf(out, n, "%s", rep->status->sessions[i]->name);
			found = true;
		}
	ck_assert_msg(found, "session %" PRIu64 " is not in its own status", id);
	devq__daemon_message__free_unpacked(rep, NULL);
	raw_close(&r);
}

/* Hello.client_name is kept to 63 characters: 63 whole, 64 cut to 63. */
START_TEST(client_name_at_bound_and_past)
{
	struct daemon_proc d;
	harness_start(&d, NULL);
	char name[80], got[256];
	for (int i = 0; i < 64; i++)
		name[i] = (char)('a' + i % 26);
	name[63] = '\0';
	hello_name(&d, name, got, sizeof(got));
	ck_assert_str_eq(got, name);
	name[63] = 'Z';
	name[64] = '\0';
	hello_name(&d, name, got, sizeof(got));
	ck_assert_uint_eq(strlen(got), 63);
	ck_assert_int_eq(strncmp(got, name, 63), 0);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* ---- signatures ----------------------------------------------------------- */

/* A buffer shape of DEVQ_MAX_DIMS (4) dims is served and sized as their
 * product; 5 are refused (the refusal alone is in test_kernels). */
START_TEST(shape_dims_at_bound_and_past)
{
	ck_assert_int_eq(DEVQ_MAX_DIMS, 4);
	struct devq_sig s;
	char err[160] = "";
	ck_assert_msg(devq_sig_parse("a:u64, b:u64, x:in u32[a,b,3,a]", &s, err, sizeof(err)) == 0,
		      "%s", err);
	ck_assert_uint_eq(s.p[2].ndims, 4);
	union devq_kval args[3] = { { .u64 = 2 }, { .u64 = 5 } };
	uint64_t bytes = 0;
	ck_assert_int_eq(devq_sig_extent_bytes(&s, 2, args, &bytes), 0);
	ck_assert_uint_eq(bytes, 2 * 5 * 3 * 2 * 4);
	ck_assert_int_eq(devq_sig_parse("a:u64, b:u64, x:in u32[a,b,3,a,1]", &s, err, sizeof(err)),
			 -EINVAL);
	ck_assert_msg(strstr(err, "more than 4 dimensions"), "%s", err);
}
END_TEST

/* ---- trace records ------------------------------------------------------- */

/* A trace record keeps DEVQ_TRACE_MAX_WAITS (8) waits and counts the rest:
 * an op waiting on 8 points in flight on 8 other queues lists all 8,
 * waits_dropped 0; on 9, it lists 8, waits_dropped 1. */
START_TEST(trace_waits_at_bound_and_past)
{
	struct daemon_proc d;
	harness_start(&d, NULL);
	devq *q = conn(d.sock, "waits");
	const struct devq_exec *spin = exe(q, "spin");
	for (uint32_t i = 1; i <= 11; i++)
		ck_assert_int_eq(devq_queue_open(q, i), 0);
	struct devq_arg hold[] = { a_u64("ns", 50000000) }, none[] = { a_u64("ns", 0) };
	for (int nw = 8; nw <= 9; nw++) {
		/* 9 holders on queues 1..9, then the waiter on queue 10 or 11,
		 * in one batch: every point it waits on is still in flight. */
		struct devq_op ops[10];
		struct devq_wait w[9];
		uint64_t pts[10];
		for (int i = 0; i < 9; i++)
			ops[i] = (struct devq_op){ .queue = (uint32_t)(i + 1), .kind = DEVQ_OP_KERNEL,
						   .exec = spin, .args = hold, .nargs = 1 };
		ck_assert_int_eq(devq_submit(q, ops, 9, pts), 0);
		for (int i = 0; i < nw; i++)
			w[i] = (struct devq_wait){ (uint32_t)(i + 1), pts[i] };
		uint32_t wq = nw == 8 ? 10 : 11;
		ops[0] = (struct devq_op){ .queue = wq, .kind = DEVQ_OP_KERNEL, .exec = spin,
					   .args = none, .nargs = 1, .waits = w, .nwaits = (size_t)nw };
		uint64_t p;
		ck_assert_int_eq(devq_submit(q, ops, 1, &p), 0);
		struct devq_completion c;
		ck_assert_int_eq(devq_wait(q, wq, p, 10000, &c), 0);
		ck_assert_int_eq(c.code, DEVQ_OK);
		struct devq_trace *t;
		struct devq_trace_query all = { 0 };
		ck_assert_int_eq(devq_trace_get(q, &all, &t), 0);
		const struct devq_trace_op *op = NULL;
		for (size_t i = 0; i < t->nops; i++)
			if (t->ops[i].queue == wq && t->ops[i].point == p)
				op = &t->ops[i];
		ck_assert_ptr_nonnull(op);
		ck_assert_uint_eq(op->nwaits, 8);
		ck_assert_uint_eq(op->waits_dropped, (unsigned)nw - 8);
		for (size_t i = 0; i < op->nwaits; i++)
			ck_assert_int_eq(op->waits[i].kind, DEVQ_TRACE_WAIT_EXPLICIT);
		devq_trace_free(t);
		/* The holders finish before the next round. */
		for (uint32_t i = 1; i <= 9; i++)
			ck_assert_int_eq(devq_wait(q, i, pts[i - 1], 10000, &c), 0);
	}
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* ---- an op's expected time: cost / rate against max-op-ms ---------------- */

/* A gemm_f32 of m x n x k (cost 2*m*n*k) on queue 1, its completion. */
static struct devq_completion gemm(devq *q, struct devq_buffer *a, struct devq_buffer *b,
				   struct devq_buffer *c, uint64_t m, uint64_t n, uint64_t k)
{
	struct devq_arg args[] = { a_u64("m", m),	a_u64("n", n),	 a_u64("k", k),
				   a_f32("alpha", 1), a_f32("beta", 0), a_buf("a", a, 0),
				   a_buf("b", b, 0),	 a_buf("c", c, 0) };
	struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "gemm_f32"),
			      .args = args, .nargs = 8 };
	uint64_t p;
	ck_assert_int_eq(devq_submit(q, &op, 1, &p), 0);
	struct devq_completion cp;
	ck_assert_int_eq(devq_wait(q, 1, p, 10000, &cp), 0);
	return cp;
}

/* checksum (cost n, bytes) of n bytes of data on queue 1, its completion. */
static struct devq_completion checksum(devq *q, struct devq_buffer *data,
				       struct devq_buffer *out, uint64_t n)
{
	struct devq_arg args[] = { a_u64("n", n), a_buf("data", data, 0), a_buf("out", out, 0) };
	struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "checksum"),
			      .args = args, .nargs = 3 };
	uint64_t p;
	ck_assert_int_eq(devq_submit(q, &op, 1, &p), 0);
	struct devq_completion cp;
	ck_assert_int_eq(devq_wait(q, 1, p, 10000, &cp), 0);
	return cp;
}

/* With max-op-ms 1000 and rate.checksum pinned at 10^6 bytes/s, a
 * checksum of 10^6 bytes is expected to take exactly max-op-ms: it runs;
 * one byte more is refused out_of_range, its message naming its expected
 * time and the limit.  The same with rate.gemm_f32 at 2000 flop/s: a gemm
 * of 10 x 10 x 10 (2000 flop) runs, 1 x 1 x 1001 (2002 flop, the next
 * cost up a gemm can have) is refused, and so is one whose cost
 * saturates.  The list says the rates are pinned. */
START_TEST(op_time_at_bound_and_past)
{
	struct daemon_proc d;
	const char *const extra[] = { "--max-op-ms", "1000", "--rate", "gemm_f32=2000/s",
				      "--rate", "checksum=1000000/s", NULL };
	harness_start(&d, extra);
	devq *q = conn(d.sock, "cost");
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	struct devq_buffer *data = mkbuf(q, 1000001), *out = mkbuf(q, 8);
	struct devq_completion cp = checksum(q, data, out, 1000000);
	ck_assert_msg(cp.code == DEVQ_OK, "%d: %s", cp.code, cp.message);
	cp = checksum(q, data, out, 1000001);
	ck_assert_int_eq(cp.code, DEVQ_E_OUT_OF_RANGE);
	ck_assert_msg(strstr(cp.message, "expected 1000001000 ns exceeds max-op-ms, 1000000000 ns: "
					 "checksum's cost 1000001 at 1000000/s (pinned rate)"),
		      "%s", cp.message);
	ck_assert_int_eq(devq_queue_reset(q, 1), 0);
	/* gemm_f32's code is the built-in host library (OpenBLAS), which a
	 * tree built without it (make mutate's) lacks: then only its listing. */
	bool have_gemm = !devq_exec_info(q, exe(q, "gemm_f32"))->unavailable;
	struct devq_buffer *a = mkbuf(q, 8192), *b = mkbuf(q, 8192), *c = mkbuf(q, 8192);
	uint64_t rate = 0;
	int pinned = 0;
	unsigned samples = 9;
	const char *cost = devq_exec_cost(q, exe(q, "gemm_f32"), &rate, &pinned, &samples);
	ck_assert_ptr_nonnull(cost);
	ck_assert_str_eq(cost, "2*m*n*k");
	ck_assert_uint_eq(rate, 2000);
	ck_assert_int_eq(pinned, 1);
	ck_assert_uint_eq(samples, 0);
	if (!have_gemm) {
		printf("SKIP op_time_at_bound_and_past: gemm_f32 has no code here\n");
		devq_disconnect(q);
		ck_assert_int_eq(harness_stop(&d), 0);
		return;
	}
	cp = gemm(q, a, b, c, 10, 10, 10);
	ck_assert_msg(cp.code == DEVQ_OK, "%d: %s", cp.code, cp.message);
	cp = gemm(q, a, b, c, 1, 1, 1001);
	ck_assert_int_eq(cp.code, DEVQ_E_OUT_OF_RANGE);
	ck_assert_msg(strstr(cp.message, "expected 1001000000 ns exceeds max-op-ms, 1000000000 ns: "
					 "gemm_f32's cost 2002 at 2000/s (pinned rate)"),
		      "%s", cp.message);
	ck_assert_int_eq(devq_queue_reset(q, 1), 0);
	cp = gemm(q, a, b, c, 1ull << 40, 1ull << 40, 1ull << 40);
	ck_assert_int_eq(cp.code, DEVQ_E_OUT_OF_RANGE);
	ck_assert_msg(strstr(cp.message, "expected 18446744073709551615 ns exceeds max-op-ms, "
					 "1000000000 ns"),
		      "%s", cp.message);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* A TraceReply carries at most 131072 ops (DEVQ_TRACE_MAX_REPLY_OPS),
 * whatever the ring holds: with a ring of 131073, 131072 recorded ops come
 * whole, and after one more the newest 131072 come, marked truncated. */
START_TEST(trace_reply_at_bound_and_past)
{
	const uint32_t cap = 131072;
	struct daemon_proc d;
	const char *args[] = { "--trace-records", "131073", NULL };
	harness_start(&d, args);
	devq *q = conn(d.sock, "many");
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	struct devq_arg none[] = { a_u64("ns", 0) };
	enum { BATCH = 4096 };
	static struct devq_op ops[BATCH];
	for (int i = 0; i < BATCH; i++)
		ops[i] = (struct devq_op){ .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "spin"),
					   .args = none, .nargs = 1, .no_timing = true };
	static uint64_t pts[BATCH];
	struct devq_completion c;
	for (uint32_t done = 0; done < cap; done += BATCH) {
		ck_assert_int_eq(devq_submit(q, ops, BATCH, pts), 0);
		ck_assert_int_eq(devq_wait(q, 1, pts[BATCH - 1], 30000, &c), 0);
		ck_assert_int_eq(c.code, DEVQ_OK);
	}
	struct devq_trace *t;
	struct devq_trace_query all = { 0 };
	ck_assert_int_eq(devq_trace_get(q, &all, &t), 0);
	ck_assert_uint_eq(t->capacity, cap + 1);
	ck_assert_uint_eq(t->recorded, cap);
	ck_assert_uint_eq(t->nops, cap);
	ck_assert(!t->truncated);
	ck_assert_uint_eq(t->ops[0].point, 1);
	devq_trace_free(t);

	ck_assert_int_eq(devq_submit(q, ops, 1, pts), 0);
	ck_assert_int_eq(devq_wait(q, 1, pts[0], 30000, &c), 0);
	ck_assert_int_eq(devq_trace_get(q, &all, &t), 0);
	ck_assert_uint_eq(t->recorded, cap + 1);
	ck_assert_uint_eq(t->nops, cap);
	ck_assert(t->truncated);
	ck_assert_uint_eq(t->ops[0].point, 2);
	ck_assert_uint_eq(t->ops[cap - 1].point, cap + 1);
	devq_trace_free(t);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* ---- metrics ------------------------------------------------------------- */

/* One op as uid, in a child process (root only: it setuids). */
static void op_as(const struct daemon_proc *d, uid_t uid)
{
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* gid 0 stays primary: --allow-groups root admits the child. */
		if (setuid(uid) < 0)
			_exit(10);
		devq *q = NULL;
		if (devq_connect(d->sock, "user", &q) < 0 || devq_queue_open(q, 1) < 0)
			_exit(11);
		const struct devq_exec *e = NULL;
		if (devq_exec_lookup(q, "spin", &e) < 0)
			_exit(13);
		struct devq_arg a[] = { DEVQ_U64("ns", 0) };
		struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = e, .args = a,
				      .nargs = 1 };
		uint64_t p;
		struct devq_completion c;
		if (!e || devq_submit(q, &op, 1, &p) < 0 || devq_wait(q, 1, p, 10000, &c) < 0 ||
		    c.code != DEVQ_OK)
			_exit(12);
		devq_disconnect(q);
		_exit(0);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "uid %u: status %d", (unsigned)uid,
		      st);
}

static const struct devq_user_info *user_of(const struct devq_status *s, uint32_t uid)
{
	for (size_t i = 0; i < s->nusers; i++)
		if (s->users[i].uid == uid)
			return &s->users[i];
	return NULL;
}

/* Status.users has a row for each of 255 uids; the ops of every uid past
 * them are counted together under uid 4294967295 (proto/README.md). */
START_TEST(metrics_users_at_bound_and_past)
{
	if (geteuid() != 0) {
		fprintf(stderr, "SKIP: metrics_users_at_bound_and_past needs root to setuid\n");
		return;
	}
	struct daemon_proc d;
	const char *args[] = { "--allow-groups", "root", NULL };
	harness_start(&d, args);
	ck_assert_int_eq(chmod(d.dir, 0755), 0);
	ck_assert_int_eq(chmod(d.sock, 0666), 0);
	const uid_t first = 20000;
	for (uid_t i = 0; i < 255; i++)
		op_as(&d, first + i);
	devq *w = conn(d.sock, "watch");
	struct devq_status *s;
	ck_assert_int_eq(devq_get_status(w, &s), 0);
	ck_assert_uint_eq(s->nusers, 255);
	ck_assert_ptr_null(user_of(s, UINT32_MAX));
	ck_assert_uint_eq(user_of(s, first + 254)->ops_completed, 1);
	devq_status_free(s);
	/* The 256th uid and the 257th share the last row; known uids keep
	 * theirs. */
	op_as(&d, first + 255);
	op_as(&d, first + 256);
	op_as(&d, first);
	ck_assert_int_eq(devq_get_status(w, &s), 0);
	ck_assert_uint_eq(s->nusers, 256);
	ck_assert_ptr_null(user_of(s, first + 255));
	ck_assert_ptr_nonnull(user_of(s, UINT32_MAX));
	ck_assert_uint_eq(user_of(s, UINT32_MAX)->ops_completed, 2);
	ck_assert_uint_eq(user_of(s, first)->ops_completed, 2);
	devq_status_free(s);
	devq_disconnect(w);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* ---- the completion page ------------------------------------------------- */

/* A raw Hello asking for the completion page: the published page, mapped
 * read-only, and CompletionPage.slots. */
static const struct devq_cpage_hdr *hello_page(struct raw *r, uint32_t *slots, size_t *size)
{
	Devq__Hello h = DEVQ__HELLO__INIT;
	h.min_version = DEVQ_PROTOCOL_MIN;
	h.max_version = DEVQ_PROTOCOL_MAX;
	h.client_name = "page";
	h.completion_page = true;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_HELLO;
	m.hello = &h;
	raw_send(r, &m);
	uint64_t deadline = harness_now_ns() + (uint64_t)HOSTILE_WAIT_MS * 1000000u;
	for (;;) {
		struct devq_frame f;
		int k = devq_rx_next(&r->rx, &f);
		ck_assert_int_ge(k, 0);
		if (k == 1) {
			Devq__DaemonMessage *x = devq__daemon_message__unpack(NULL, f.len, f.payload);
			ck_assert_ptr_nonnull(x);
			ck_assert_int_eq(x->body_case, DEVQ__DAEMON_MESSAGE__BODY_HELLO_REPLY);
			ck_assert_ptr_nonnull(x->hello_reply->completion_page);
			ck_assert_uint_eq(f.nfds, 3);
			*slots = x->hello_reply->completion_page->slots;
			*size = x->hello_reply->completion_page->size;
			devq__daemon_message__free_unpacked(x, NULL);
			void *p = mmap(NULL, *size, PROT_READ, MAP_SHARED, f.fds[0], 0);
			ck_assert_ptr_ne(p, MAP_FAILED);
			devq_frame_close_fds(&f);
			return p;
		}
		ck_assert_msg(harness_now_ns() < deadline, "no HelloReply");
		struct pollfd pf = { .fd = r->fd, .events = POLLIN };
		ck_assert_int_ge(poll(&pf, 1, 100), 0);
		ssize_t got = devq_rx_recv(&r->rx, r->fd, MSG_DONTWAIT);
		ck_assert_msg(got > 0 || got == -EAGAIN, "recv: %zd", got);
	}
}

/* The open slot of queue id in the page, or NULL. */
static const struct devq_cpage_slot *slot_of(const struct devq_cpage_hdr *h, uint32_t id)
{
	const struct devq_cpage_slot *sl = devq_cpage_slots((struct devq_cpage_hdr *)h);
	for (uint32_t i = 0; i < h->used; i++)
		if (sl[i].open && sl[i].queue == id)
			return &sl[i];
	return NULL;
}

/* A completion page has min(max-queues, 1024) queue slots, one per queue
 * in the order they open: the 1024th queue has the last slot, the 1025th
 * none and completes through the socket alone. */
START_TEST(completion_page_slots_at_bound_and_past)
{
	struct daemon_proc d;
	const char *args[] = { "--max-queues", "1025", NULL };
	harness_start(&d, args);
	devq *lib = conn(d.sock, "ids");
	uint32_t exe_id_spin = exe(lib, "spin")->id;
	devq_disconnect(lib);
	struct raw r;
	raw_open(&r, &d);
	uint32_t slots;
	size_t size;
	const struct devq_cpage_hdr *h = hello_page(&r, &slots, &size);
	ck_assert_uint_eq(slots, 1024);
	ck_assert_uint_eq(h->nslots, 1024);
	for (uint32_t i = 1; i <= 1025; i++)
		raw_open_queue(&r, i);
	raw_expect_alive(&r); /* every open handled */
	ck_assert_uint_eq(h->used, 1024);
	ck_assert_ptr_nonnull(slot_of(h, 1024));
	ck_assert_ptr_null(slot_of(h, 1025));
	/* Both queues serve ops; the 1025th's completion comes on the socket. */
	for (uint32_t q = 1024; q <= 1025; q++) {
		Devq__Op op = DEVQ__OP__INIT;
		Devq__KernelOp k = DEVQ__KERNEL_OP__INIT;
		Devq__Arg a = DEVQ__ARG__INIT;
		Devq__Arg *args1[] = { &a };
		a.name = "ns";
		a.value_case = DEVQ__ARG__VALUE_U64;
		a.u64 = 0;
		k.executable = exe_id_spin;
		k.n_args = 1;
		k.args = args1;
		op.queue = q;
		op.body_case = DEVQ__OP__BODY_KERNEL;
		op.kernel = &k;
		raw_submit_op(&r, &op);
		raw_expect_completion(&r, q, 1, DEVQ__CODE__OK, NULL, NULL);
	}
	ck_assert_uint_eq(slot_of(h, 1024)->completed, 1);
	munmap((void *)h, size);
	raw_close(&r);

	/* Below 1024 the page has max-queues slots. */
	ck_assert_int_eq(harness_stop(&d), 0);
	const char *few[] = { "--max-queues", "3", NULL };
	harness_start(&d, few);
	raw_open(&r, &d);
	h = hello_page(&r, &slots, &size);
	ck_assert_uint_eq(slots, 3);
	munmap((void *)h, size);
	raw_close(&r);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* ---- Suite ------------------------------------------------------------- */

static Suite *suite(void)
{
	Suite *s = suite_create("bounds");
	TCase *cfg = tcase_create("config");
	tcase_add_loop_test(cfg, config_key_ranges, 0, (int)(sizeof(ranges) / sizeof(ranges[0])));
	tcase_set_timeout(cfg, harness_slow() ? 300 : 30);
	suite_add_tcase(s, cfg);
	TCase *p = tcase_create("protocol");
	tcase_add_test(p, frame_size_at_bound_and_past);
	tcase_add_test(p, fds_per_frame_at_bound_and_past);
	tcase_add_test(p, session_fds_at_bound_and_past);
	tcase_add_test(p, client_name_at_bound_and_past);
	tcase_add_test(p, shape_dims_at_bound_and_past);
	tcase_add_test(p, trace_waits_at_bound_and_past);
	tcase_add_test(p, trace_reply_at_bound_and_past);
	tcase_add_test(p, completion_page_slots_at_bound_and_past);
	tcase_add_test(p, op_time_at_bound_and_past);
	tcase_set_timeout(p, harness_slow() ? 300 : 30);
	suite_add_tcase(s, p);
	TCase *q = tcase_create("quotas");
	tcase_add_test(q, buffer_memory_quotas_at_bound_and_past);
	tcase_add_test(q, metrics_users_at_bound_and_past);
	tcase_set_timeout(q, harness_slow() ? 300 : 30);
	suite_add_tcase(s, q);
	return s;
}

int main(void)
{
	return harness_main(suite());
}
