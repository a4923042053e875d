/* SPDX-License-Identifier: Apache-2.0 */
/* See bench_util.h. */
#include "bench_util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

uint64_t bu_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int can_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%.100s", path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

int bu_daemon_start(struct bu_daemon *d)
{
	memset(d, 0, sizeof(*d));
	snprintf(d->dir, sizeof(d->dir), "/tmp/devq-bench-XXXXXX");
	if (!mkdtemp(d->dir))
		return -errno;
	snprintf(d->sock, sizeof(d->sock), "%s/devqd.sock", d->dir);
	const char *b = getenv("DEVQ_BUILD");
	char bin[512];
	snprintf(bin, sizeof(bin), "%s/devqd", b && *b ? b : "build");
	static char extra[1024];
	const char *argv[40];
	int n = 0;
	argv[n++] = bin;
	argv[n++] = "--socket";
	argv[n++] = d->sock;
	argv[n++] = "--backend";
	argv[n++] = "cpu";
	const char *ea = getenv("DEVQD_ARGS");
	if (ea && *ea) {
		snprintf(extra, sizeof(extra), "%s", ea);
		for (char *save, *t = strtok_r(extra, " ", &save); t && n < 38;
		     t = strtok_r(NULL, " ", &save))
			argv[n++] = t;
	}
	argv[n] = NULL;
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		execv(argv[0], (char *const *)argv);
		fprintf(stderr, "bench: cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	d->pid = pid;
	for (int i = 0; i < 2000; i++) {
		if (can_connect(d->sock))
			return 0;
		int st;
		if (waitpid(pid, &st, WNOHANG) == pid) {
			d->pid = 0;
			return -ECHILD;
		}
		usleep(5000);
	}
	bu_daemon_stop(d);
	return -ETIMEDOUT;
}

int bu_daemon_stop(struct bu_daemon *d)
{
	if (d->pid <= 0)
		return -1;
	kill(d->pid, SIGTERM);
	int st = 0;
	while (waitpid(d->pid, &st, 0) < 0 && errno == EINTR)
		;
	d->pid = 0;
	unlink(d->sock);
	rmdir(d->dir);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

void bu_sort(uint64_t *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_u64);
}

uint64_t bu_quantile(const uint64_t *s, size_t n, double q)
{
	if (!n)
		return 0;
	size_t i = (size_t)ceil(q * (double)n);
	if (i > 0)
		i--;
	if (i >= n)
		i = n - 1;
	return s[i];
}

double bu_median_d(double *v, size_t n)
{
	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), cmp_d);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void bu_linfit(const double *x, const double *y, size_t n, struct bu_fit *o)
{
	double sx = 0, sy = 0, sxx = 0, sxy = 0;
	for (size_t i = 0; i < n; i++) {
		sx += x[i];
		sy += y[i];
		sxx += x[i] * x[i];
		sxy += x[i] * y[i];
	}
	double den = (double)n * sxx - sx * sx;
	o->b = den != 0 ? ((double)n * sxy - sx * sy) / den : 0;
	o->a = (sy - o->b * sx) / (double)n;
	double my = sy / (double)n, ss_tot = 0, ss_res = 0;
	o->max_rel_resid = 0;
	for (size_t i = 0; i < n; i++) {
		double f = o->a + o->b * x[i], r = y[i] - f;
		ss_res += r * r;
		ss_tot += (y[i] - my) * (y[i] - my);
		double rel = y[i] > 0 ? fabs(r) / y[i] : 0;
		if (rel > o->max_rel_resid)
			o->max_rel_resid = rel;
	}
	o->r2 = ss_tot > 0 ? 1 - ss_res / ss_tot : 1;
}

/* ---- JSON ------------------------------------------------------------ */

static void sep(struct bu_json *j)
{
	if (!j->first[j->depth])
		fputc(',', j->f);
	j->first[j->depth] = 0;
	fputc('\n', j->f);
	for (int i = 0; i < j->depth; i++)
		fputs("  ", j->f);
}

int bu_json_open(struct bu_json *j, const char *name)
{
	const char *dir = getenv("DEVQ_BENCH_OUT");
	char path[512];
	snprintf(path, sizeof(path), "%s/%s.json", dir && *dir ? dir : ".", name);
	memset(j, 0, sizeof(*j));
	j->f = fopen(path, "w");
	if (!j->f) {
		fprintf(stderr, "bench: cannot write %s: %s\n", path, strerror(errno));
		return -errno;
	}
	fputc('{', j->f);
	j->depth = 1;
	j->first[1] = 1;
	return 0;
}

static void put_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', f);
		if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", *s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

void bu_json_key_num(struct bu_json *j, const char *k, double v)
{
	if (!j->f)
		return;
	sep(j);
	put_str(j->f, k);
	if (isfinite(v))
		fprintf(j->f, ": %.6g", v);
	else
		fputs(": null", j->f);
}

void bu_json_key_str(struct bu_json *j, const char *k, const char *v)
{
	if (!j->f)
		return;
	sep(j);
	put_str(j->f, k);
	fputs(": ", j->f);
	put_str(j->f, v);
}

void bu_json_begin_array(struct bu_json *j, const char *k)
{
	if (!j->f)
		return;
	sep(j);
	put_str(j->f, k);
	fputs(": [", j->f);
	j->first[++j->depth] = 1;
}

void bu_json_end_array(struct bu_json *j)
{
	if (!j->f)
		return;
	j->depth--;
	fputs("]", j->f);
}

void bu_json_begin_obj(struct bu_json *j)
{
	if (!j->f)
		return;
	sep(j);
	fputc('{', j->f);
	j->first[++j->depth] = 1;
}

void bu_json_end_obj(struct bu_json *j)
{
	if (!j->f)
		return;
	j->depth--;
	fputc('}', j->f);
}

void bu_json_close(struct bu_json *j)
{
	if (!j->f)
		return;
	fputs("\n}\n", j->f);
	fclose(j->f);
	j->f = NULL;
}

void bu_json_host(struct bu_json *j)
{
	struct utsname u;
	uname(&u);
	double la[3] = { 0, 0, 0 };
	if (getloadavg(la, 3) < 0)
		la[0] = la[1] = la[2] = -1;
	time_t t = time(NULL);
	char date[64];
	strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
	bu_json_key_str(j, "date", date);
	bu_json_key_str(j, "kernel", u.release);
	bu_json_key_num(j, "cores", (double)sysconf(_SC_NPROCESSORS_ONLN));
	bu_json_key_num(j, "loadavg_1m", la[0]);
	const char *ea = getenv("DEVQD_ARGS");
	bu_json_key_str(j, "devqd_args", ea ? ea : "");
}

void bu_print_host(void)
{
	double la[3] = { 0, 0, 0 };
	if (getloadavg(la, 3) < 0)
		la[0] = -1;
	const char *ea = getenv("DEVQD_ARGS");
	printf("# host: %ld cores, load average %.2f; devqd args: %s\n",
	       sysconf(_SC_NPROCESSORS_ONLN), la[0], ea && *ea ? ea : "(none)");
}
