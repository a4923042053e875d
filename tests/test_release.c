/* SPDX-License-Identifier: Apache-2.0 */
/* Release hygiene: every file we wrote carries its licence line, and one
 * version — the VERSION file's — is what devqd --version, devctl --version,
 * devq_version() (in libdevq.a and in libdevq.so), pkg-config --modversion
 * devq, the Python package's __version__, the man pages' headers, CHANGELOG.md, packaging/debian/changelog
 * (the .deb's version) and a daemon's HelloReply say.  Run from the top of
 * the tree (make check does), in git or in an unpacked `make dist`
 * tarball. */
#include <check.h>
#include <dirent.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "harness.h"

/* Runs a shell command; its stdout and stderr in out, its exit status
 * returned. */
static int sh(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int sh(char *out, size_t n, const char *fmt, ...)
{
	char body[2048], cmd[2100];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(body, sizeof(body), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "{ %s; } 2>&1", body);
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	size_t got = fread(out, 1, n - 1, p);
	out[got] = '\0';
	int st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* The VERSION file, without its newline. */
static const char *version_file(void)
{
	static char v[64];
	FILE *f = fopen("VERSION", "r");
	ck_assert_msg(f != NULL, "no VERSION file in the current directory");
	ck_assert_ptr_nonnull(fgets(v, sizeof(v), f));
	fclose(f);
	v[strcspn(v, "\n")] = '\0';
	ck_assert_msg(v[0] != '\0', "VERSION is empty");
	return v;
}

START_TEST(test_spdx_in_every_source)
{
	static char out[65536];
	int rc = sh(out, sizeof(out), "sh tools/check-spdx.sh");
	ck_assert_msg(rc == 0, "files without SPDX-License-Identifier: Apache-2.0:\n%s", out);
}
END_TEST

START_TEST(test_changelogs_agree_with_version)
{
	char out[8192];
	int rc = sh(out, sizeof(out), "sh tools/check-version.sh");
	ck_assert_msg(rc == 0, "%s", out);
}
END_TEST

START_TEST(test_built_versions_agree)
{
	const char *v = version_file();
	char out[4096], want[256];

	/* The compiled-in constant, as every object got it. */
	ck_assert_str_eq(DEVQ_VERSION, v);
	/* libdevq.a (linked into this program) and libdevq.so. */
	ck_assert_str_eq(devq_version(), v);
	void *so = dlopen(harness_bin("libdevq.so"), RTLD_NOW | RTLD_LOCAL);
	ck_assert_msg(so != NULL, "dlopen libdevq.so: %s", dlerror());
	const char *(*so_version)(void) = (const char *(*)(void))dlsym(so, "devq_version");
	ck_assert_msg(so_version != NULL, "libdevq.so has no devq_version");
	ck_assert_str_eq(so_version(), v);
	dlclose(so);

	/* devqd --version. */
	ck_assert_int_eq(sh(out, sizeof(out), "%s --version", harness_bin("devqd")), 0);
	snprintf(want, sizeof(want), "devqd %s (protocol %u..%u)\n", v, DEVQ_PROTOCOL_MIN,
		 DEVQ_PROTOCOL_MAX);
	ck_assert_str_eq(out, want);

	/* devctl --version with no daemon: its own version, exit status 0. */
	ck_assert_int_eq(sh(out, sizeof(out), "DEVQ_SOCKET=/nonexistent/devq.sock %s --version",
			    harness_bin("devctl")),
			 0);
	snprintf(want, sizeof(want),
		 "devctl %s (protocol %u..%u)\n"
		 "daemon: not reachable (cannot connect to devqd at /nonexistent/devq.sock: ",
		 v, DEVQ_PROTOCOL_MIN, DEVQ_PROTOCOL_MAX);
	ck_assert_msg(!strncmp(out, want, strlen(want)), "devctl --version said:\n%s", out);

	/* pkg-config --modversion on the generated devq.pc. */
	ck_assert_int_eq(sh(out, sizeof(out), "PKG_CONFIG_PATH=%s pkg-config --modversion devq",
			    harness_bin("")),
			 0);
	snprintf(want, sizeof(want), "%s\n", v);
	ck_assert_str_eq(out, want);

	/* The Python package's __version__, as make python writes it. */
	ck_assert_int_eq(sh(out, sizeof(out), "cat %s", harness_bin("python/devq/_version.py")), 0);
	snprintf(want, sizeof(want), "__version__ = \"%s\"\n", v);
	ck_assert_str_eq(out, want);

	/* The man pages as built: every one of man/, its header filled in. */
	DIR *d = opendir("man");
	ck_assert_ptr_nonnull(d);
	int pages = 0;
	for (struct dirent *e; (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		char rel[300];
		snprintf(rel, sizeof(rel), "man/%s", e->d_name);
		int rc = sh(out, sizeof(out), "grep '^\\.TH ' %s", harness_bin(rel));
		ck_assert_msg(rc == 0, "%s was not built: %s", harness_bin(rel), out);
		snprintf(want, sizeof(want), "\"devq %s\"", v);
		ck_assert_msg(strstr(out, want), "%s: %s", harness_bin(rel), out);
		pages++;
	}
	closedir(d);
	ck_assert_int_ge(pages, 4);
}
END_TEST

/* With a daemon: HelloReply's daemon_version and protocol range, as libdevq
 * and devctl --version show them. */
START_TEST(test_daemon_version_over_the_wire)
{
	const char *v = version_file();
	struct daemon_proc d;
	harness_start(&d, NULL);
	devq *q = conn(d.sock, "version");
	const struct devq_info *in = devq_get_info(q);
	ck_assert_str_eq(in->daemon_version, v);
	ck_assert_uint_eq(in->daemon_min_version, DEVQ_PROTOCOL_MIN);
	ck_assert_uint_eq(in->daemon_max_version, DEVQ_PROTOCOL_MAX);
	ck_assert_uint_eq(in->version, DEVQ_PROTOCOL_MAX);
	devq_disconnect(q);

	char out[4096], want[512];
	ck_assert_int_eq(sh(out, sizeof(out), "%s --socket %s --version", harness_bin("devctl"), d.sock),
			 0);
	snprintf(want, sizeof(want),
		 "devctl %s (protocol %u..%u)\n"
		 "daemon: devqd %s at %s (protocol %u..%u, using %u)\n",
		 v, DEVQ_PROTOCOL_MIN, DEVQ_PROTOCOL_MAX, v, d.sock, DEVQ_PROTOCOL_MIN,
		 DEVQ_PROTOCOL_MAX, DEVQ_PROTOCOL_MAX);
	ck_assert_str_eq(out, want);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("release");
	TCase *t = tcase_create("release");
	tcase_set_timeout(t, harness_slow() ? 300 : 60);
	tcase_add_test(t, test_spdx_in_every_source);
	tcase_add_test(t, test_changelogs_agree_with_version);
	tcase_add_test(t, test_built_versions_agree);
	tcase_add_test(t, test_daemon_version_over_the_wire);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	return harness_main(suite());
}
