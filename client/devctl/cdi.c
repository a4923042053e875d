/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CDI specs for devq.  A container reaches devqd through its Unix socket,
 * so a devq "device" is a bind mount of that socket plus DEVQ_SOCKET: no
 * device node, no driver library.  cdiVersion 0.5.0 because Debian 12's
 * podman 4.3 refuses 0.6.0, and 0.5.0 has all this needs.  (0.5.0 cannot
 * add supplementary groups, so a non-root container reaches devqd through
 * a tenant socket owned by its uid: devctl admin grant --cdi.)
 */
#include "devctl/cdi.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devctl/util.h"
#include "devq.h"

#define MAX_GPUS 1024

void devctl_cdi_usage(FILE *f)
{
	fprintf(f,
		"  cdi generate [--output FILE] [--socket-dir DIR]\n"
		"      Write a CDI spec (cdiVersion 0.5.0, kind devq.dev/gpu) giving containers\n"
		"      devqd's sockets: device gpuN is devqd@N's socket (DIR/gpuN.sock, DIR\n"
		"      default /run/devqd), gpu0 devqd.service's (DIR/devqd.sock) when there\n"
		"      are no instances, or the one socket --socket/--device names; device\n"
		"      all gives every one (DEVQ_SOCKET the first, DEVQ_SOCKETS all).\n"
		"      FILE defaults to %s; '-' is stdout.\n"
		"      podman run --device devq.dev/gpu=gpu0 ...\n",
		DEVCTL_CDI_SPEC);
}

struct sock {
	unsigned gpu;
	char path[108]; /* sun_path */
};

static int by_gpu(const void *a, const void *b)
{
	const struct sock *x = a, *y = b;
	return x->gpu < y->gpu ? -1 : x->gpu > y->gpu;
}

/* Paths go into "DEVQ_SOCKET=..." and the comma-separated DEVQ_SOCKETS. */
static bool usable_path(const char *p)
{
	if (p[0] != '/' || strlen(p) >= sizeof(((struct sock *)0)->path))
		return false;
	for (const char *c = p; *c; c++)
		if (*c == ',' || (unsigned char)*c < 0x20)
			return false;
	return true;
}

/* devqd@N's sockets in dir, gpuN.sock, sorted by N. */
static int scan(const char *dir, struct sock *s, size_t *n)
{
	*n = 0;
	DIR *d = opendir(dir);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	struct dirent *e;
	while ((e = readdir(d))) {
		const char *nm = e->d_name;
		if (strncmp(nm, "gpu", 3) || !(nm[3] >= '0' && nm[3] <= '9'))
			continue;
		char *end;
		unsigned long g = strtoul(nm + 3, &end, 10);
		if (strcmp(end, ".sock") || g >= MAX_GPUS || (nm[3] == '0' && nm[4] != '.'))
			continue;
		char p[512];
		snprintf(p, sizeof(p), "%s/%s", dir, nm);
		struct stat st;
		if (lstat(p, &st) < 0 || !S_ISSOCK(st.st_mode) || !usable_path(p))
			continue;
		if (*n == MAX_GPUS)
			break;
		s[*n].gpu = (unsigned)g;
		/* usable_path() checked that p fits; memcpy, not snprintf, so that
		 * no compiler sees a 512-byte string going into 108 bytes. */
		memcpy(s[*n].path, p, strlen(p) + 1);
		(*n)++;
	}
	closedir(d);
	qsort(s, *n, sizeof(*s), by_gpu);
	return 0;
}

/* One device's containerEdits: the sockets bind-mounted at their own paths
 * (DEVQ_SOCKET then means the same inside and out), DEVQ_SOCKET the first.
 * devqd.socket and devqd@N.socket keep their files across restarts of the
 * service, so a running container keeps reaching devqd. */
static void yaml_edits(FILE *f, const struct sock *s, size_t n)
{
	fprintf(f, "    containerEdits:\n      env:\n        - ");
	char env[160];
	snprintf(env, sizeof(env), "DEVQ_SOCKET=%s", s[0].path);
	devctl_json_str(f, env);
	fprintf(f, "\n        - \"DEVQ_SOCKETS=");
	for (size_t i = 0; i < n; i++) {
		fputs(i ? "," : "", f);
		/* usable_path() let no character through that JSON escapes but
		 * '"' and '\\'. */
		for (const char *c = s[i].path; *c; c++) {
			if (*c == '"' || *c == '\\')
				fputc('\\', f);
			fputc(*c, f);
		}
	}
	fprintf(f, "\"\n      mounts:\n");
	for (size_t i = 0; i < n; i++) {
		fprintf(f, "        - hostPath: ");
		devctl_json_str(f, s[i].path);
		fprintf(f, "\n          containerPath: ");
		devctl_json_str(f, s[i].path);
		fprintf(f, "\n          options: [\"bind\"]\n");
	}
}

/* Writes data to path through a temporary file and rename(2): a runtime
 * reading the directory sees the old spec or the new one, never half. */
static int write_atomic(const char *path, const char *data, size_t len, char *err, size_t n)
{
	char tmp[4200];
	snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0) {
		snprintf(err, n, "cannot write %s: %s", tmp, strerror(errno));
		return -1;
	}
	/* The runtime (root) and anyone listing devices read it. */
	fchmod(fd, 0644);
	size_t off = 0;
	while (off < len) {
		ssize_t k = write(fd, data + off, len - off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			snprintf(err, n, "cannot write %s: %s", tmp, strerror(errno));
			close(fd);
			unlink(tmp);
			return -1;
		}
		off += (size_t)k;
	}
	if (fsync(fd) < 0 || close(fd) < 0) {
		snprintf(err, n, "cannot write %s: %s", tmp, strerror(errno));
		unlink(tmp);
		return -1;
	}
	if (rename(tmp, path) < 0) {
		snprintf(err, n, "cannot write %s: %s", path, strerror(errno));
		unlink(tmp);
		return -1;
	}
	return 0;
}

/* mkdir -p of path's directory, 0755: /etc/cdi or /var/run/cdi may not
 * exist before the first spec. */
static int make_parent(const char *path, char *err, size_t n)
{
	char d[4096];
	snprintf(d, sizeof(d), "%s", path);
	char *slash = strrchr(d, '/');
	if (!slash || slash == d)
		return 0;
	*slash = '\0';
	for (char *p = d + 1;; p++) {
		if (*p == '/' || !*p) {
			char c = *p;
			*p = '\0';
			if (mkdir(d, 0755) < 0 && errno != EEXIST) {
				snprintf(err, n, "cannot create %s: %s", d, strerror(errno));
				return -1;
			}
			if (!c)
				break;
			*p = c;
		}
	}
	return 0;
}

static int cmd_generate(const char *sock, int argc, char **argv)
{
	const char *out = DEVCTL_CDI_SPEC, *dir = "/run/devqd";
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		const char **dst = !strcmp(a, "--output") || !strcmp(a, "-o") ? &out
				   : !strcmp(a, "--socket-dir")		    ? &dir
									    : NULL;
		if (dst) {
			if (i + 1 >= argc || !argv[i + 1][0]) {
				fprintf(stderr, "devctl cdi generate: %s needs a value\n", a);
				return 2;
			}
			*dst = argv[++i];
		} else if (!strncmp(a, "--output=", 9)) {
			out = a + 9;
		} else if (!strncmp(a, "--socket-dir=", 13)) {
			dir = a + 13;
		} else {
			fprintf(stderr, "devctl cdi generate: unknown argument '%s' (see devctl cdi --help)\n", a);
			return 2;
		}
	}
	struct sock *s = calloc(MAX_GPUS, sizeof(*s));
	if (!s) {
		fprintf(stderr, "devctl cdi generate: out of memory\n");
		return 1;
	}
	size_t n = 0;
	if (sock) {
		if (!usable_path(sock)) {
			fprintf(stderr, "devctl cdi generate: --socket %s: not an absolute path "
					"without commas shorter than 108 bytes\n", sock);
			free(s);
			return 2;
		}
		snprintf(s[0].path, sizeof(s[0].path), "%s", sock);
		s[0].gpu = 0;
		n = 1;
	} else {
		int r = scan(dir, s, &n);
		if (r < 0) {
			fprintf(stderr, "devctl cdi generate: cannot read %s: %s\n", dir, strerror(-r));
			free(s);
			return 1;
		}
		if (!n) {
			/* No instances: devqd.service's socket is GPU 0. */
			snprintf(s[0].path, sizeof(s[0].path), "%s/devqd.sock", dir);
			s[0].gpu = 0;
			if (!usable_path(s[0].path)) {
				fprintf(stderr, "devctl cdi generate: --socket-dir %s: not usable\n", dir);
				free(s);
				return 2;
			}
			n = 1;
		}
	}
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f) {
		fprintf(stderr, "devctl cdi generate: out of memory\n");
		free(s);
		return 1;
	}
	fprintf(f, "# devq's GPUs for containers: devctl cdi generate (devctl(1)).\n"
		   "# Each device bind-mounts devqd's socket and sets DEVQ_SOCKET.\n"
		   "cdiVersion: \"0.5.0\"\n"
		   "kind: \"devq.dev/gpu\"\n"
		   "devices:\n");
	for (size_t i = 0; i < n; i++) {
		fprintf(f, "  - name: \"gpu%u\"\n", s[i].gpu);
		yaml_edits(f, &s[i], 1);
	}
	fprintf(f, "  - name: \"all\"\n");
	yaml_edits(f, s, n);
	fclose(f);
	int rc = 0;
	if (!strcmp(out, "-")) {
		fwrite(buf, 1, len, stdout);
	} else {
		char err[4400];
		if (make_parent(out, err, sizeof(err)) < 0 ||
		    write_atomic(out, buf, len, err, sizeof(err)) < 0) {
			fprintf(stderr, "devctl cdi generate: %s\n", err);
			rc = 4;
		} else {
			fprintf(stderr, "devctl cdi generate: %s: %zu GPU%s (%s", out, n,
				n == 1 ? "" : "s", s[0].path);
			for (size_t i = 1; i < n; i++)
				fprintf(stderr, ", %s", s[i].path);
			fprintf(stderr, ")\n");
		}
	}
	free(buf);
	free(s);
	return rc;
}

int devctl_cdi_main(const char *sock, int argc, char **argv)
{
	if (argc < 1) {
		devctl_cdi_usage(stderr);
		return 2;
	}
	if (!strcmp(argv[0], "generate"))
		return cmd_generate(sock, argc - 1, argv + 1);
	fprintf(stderr, "devctl cdi: unknown subcommand '%s' (known: generate)\n", argv[0]);
	return 2;
}

static void tenant_spec_path(const char *tenant, char *out, size_t n)
{
	snprintf(out, n, "%s/devq.dev-tenant_%s.json", DEVCTL_CDI_RUN_DIR, tenant);
}

int devctl_cdi_tenant_write(const char *tenant, const char *socket, char *err, size_t n)
{
	if (!usable_path(socket)) {
		snprintf(err, n, "tenant socket %s cannot go into a CDI spec", socket);
		return -1;
	}
	char path[256];
	tenant_spec_path(tenant, path, sizeof(path));
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f) {
		snprintf(err, n, "out of memory");
		return -1;
	}
	fprintf(f, "{\"cdiVersion\":\"0.5.0\",\"kind\":\"devq.dev/tenant\",\"devices\":[{\"name\":");
	devctl_json_str(f, tenant);
	fprintf(f, ",\"containerEdits\":{\"env\":[\"DEVQ_SOCKET=");
	for (const char *c = socket; *c; c++) {
		if (*c == '"' || *c == '\\')
			fputc('\\', f);
		fputc(*c, f);
	}
	/* The tenant directory, not the socket file: devqd makes the socket
	 * anew when it restarts, and a bind mount of the old file would stay
	 * dead in a running container, while the shipped unit keeps the
	 * directory (RuntimeDirectoryPreserve=restart).  It lists nothing
	 * (0711), and each socket in it admits its own uid only. */
	char dir[108];
	snprintf(dir, sizeof(dir), "%s", socket);
	char *slash = strrchr(dir, '/');
	if (slash && slash != dir)
		*slash = '\0';
	fprintf(f, "\"],\"mounts\":[{\"hostPath\":");
	devctl_json_str(f, dir);
	fprintf(f, ",\"containerPath\":");
	devctl_json_str(f, dir);
	fprintf(f, ",\"options\":[\"bind\"]}]}}]}\n");
	fclose(f);
	int r = make_parent(path, err, n);
	if (!r)
		r = write_atomic(path, buf, len, err, n);
	free(buf);
	return r;
}

int devctl_cdi_tenant_remove(const char *tenant, char *err, size_t n)
{
	char path[256];
	tenant_spec_path(tenant, path, sizeof(path));
	if (unlink(path) < 0 && errno != ENOENT) {
		snprintf(err, n, "cannot remove %s: %s", path, strerror(errno));
		return -1;
	}
	return 0;
}
