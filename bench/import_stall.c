/* SPDX-License-Identifier: Apache-2.0 */
/* How long devqd's loop stalls while a client imports (or creates) a large
 * buffer: one client imports a memfd of SIZE_MB (default 4096) and
 * releases it, three times, while another pings the daemon with GetStatus
 * back to back.  The worst ping is the loop's worst stall (plus one round
 * trip); the import's own time is when BufferReady came, the prefault
 * done.  Usage: import_stall [SIZE_MB]  (make bench-import-stall). */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "devq.h"

static uint64_t harness_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static devq *conn(const char *sock, const char *name)
{
	devq *q = NULL;
	if (devq_connect(sock, name, &q) != 0) {
		fprintf(stderr, "connect: %s\n", q ? devq_last_error(q) : "?");
		exit(1);
	}
	return q;
}

static _Atomic int busy = 1;
static uint64_t worst_ns, pings, over10, over50;

static void *pinger(void *arg)
{
	devq *q = conn(arg, "pinger");
	while (atomic_load(&busy)) {
		uint64_t t0 = harness_now_ns();
		struct devq_status *st;
		if (devq_get_status(q, &st) != 0)
			abort();
		devq_status_free(st);
		uint64_t dt = harness_now_ns() - t0;
		worst_ns = dt > worst_ns ? dt : worst_ns;
		pings++;
		over10 += dt > 10000000;
		over50 += dt > 50000000;
	}
	devq_disconnect(q);
	return NULL;
}

int main(int argc, char **argv)
{
	uint64_t mb = argc > 1 ? strtoull(argv[1], NULL, 10) : 4096;
	char arg[32];
	snprintf(arg, sizeof(arg), "%llu", (unsigned long long)(mb > 4096 ? mb : 4096));
	char dir[] = "/tmp/devq-import-stall-XXXXXX", sock[64], bin[256];
	if (!mkdtemp(dir))
		return 1;
	snprintf(sock, sizeof(sock), "%s/s", dir);
	const char *build = getenv("DEVQ_BUILD");
	snprintf(bin, sizeof(bin), "%s/devqd", build && *build ? build : "build");
	pid_t pid = fork();
	if (pid == 0) {
		execl(bin, "devqd", "--socket", sock, "--backend", "cpu", "--max-buffer-mb", arg,
		      "--quota-user-pinned-mb", arg, (char *)NULL);
		_exit(127);
	}
	devq *q = NULL;
	for (int i = 0; i < 500 && !q; i++) {
		usleep(10000);
		if (devq_connect(sock, "importer", &q) != 0) {
			devq_disconnect(q);
			q = NULL;
		}
	}
	if (!q)
		return 1;
	struct { char sock[64]; } d;
	memcpy(d.sock, sock, sizeof(sock));
	pthread_t t;
	/* Idle first: the round trip with nothing going on. */
	pthread_create(&t, NULL, pinger, d.sock);
	usleep(300000);
	atomic_store(&busy, 0);
	pthread_join(t, NULL);
	printf("idle: %llu pings, worst %.2f ms\n", (unsigned long long)pings, worst_ns / 1e6);
	worst_ns = pings = 0;
	atomic_store(&busy, 1);
	pthread_create(&t, NULL, pinger, d.sock);
	for (int i = 0; i < 3; i++) {
		int fd = memfd_create("import_stall", MFD_CLOEXEC | MFD_ALLOW_SEALING);
		if (fd < 0 || ftruncate(fd, (off_t)(mb << 20)) < 0 ||
		    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) < 0)
			return 1;
		struct devq_buffer *b;
		uint64_t t0 = harness_now_ns();
		if (devq_buffer_import(q, fd, mb << 20, 0, &b) != 0) {
			fprintf(stderr, "import: %s\n", devq_last_error(q));
			return 1;
		}
		uint64_t t1 = harness_now_ns();
		if (devq_buffer_release(q, b) != 0 || devq_buffer_wait_released(q, b, 60000) != 0)
			return 1;
		uint64_t t2 = harness_now_ns();
		close(fd);
		printf("import of %llu MiB: BufferReady after %.0f ms, BufferReleased %.0f ms after "
		       "the release\n",
		       (unsigned long long)mb, (t1 - t0) / 1e6, (t2 - t1) / 1e6);
	}
	atomic_store(&busy, 0);
	pthread_join(t, NULL);
	printf("meanwhile: %llu pings (GetStatus round trips), worst %.2f ms, %llu over 10 ms, "
	       "%llu over 50 ms\n",
	       (unsigned long long)pings, worst_ns / 1e6, (unsigned long long)over10,
	       (unsigned long long)over50);
	/* Control: the same prefault by this process, the daemon idle. */
	worst_ns = pings = over10 = over50 = 0;
	atomic_store(&busy, 1);
	pthread_create(&t, NULL, pinger, d.sock);
	uint64_t c0 = harness_now_ns();
	int cfd = memfd_create("control", MFD_CLOEXEC);
	if (cfd < 0 || ftruncate(cfd, (off_t)(mb << 20)) < 0)
		return 1;
	void *p = mmap(NULL, mb << 20, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, cfd, 0);
	if (p == MAP_FAILED)
		return 1;
	munmap(p, mb << 20);
	close(cfd);
	uint64_t c1 = harness_now_ns();
	atomic_store(&busy, 0);
	pthread_join(t, NULL);
	printf("control (this process prefaults %llu MiB itself, %.0f ms): %llu pings, worst %.2f "
	       "ms, %llu over 10 ms, %llu over 50 ms\n",
	       (unsigned long long)mb, (c1 - c0) / 1e6, (unsigned long long)pings, worst_ns / 1e6,
	       (unsigned long long)over10, (unsigned long long)over50);
	devq_disconnect(q);
	kill(pid, SIGTERM);
	int st;
	waitpid(pid, &st, 0);
	unlink(sock);
	rmdir(dir);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
