/* SPDX-License-Identifier: Apache-2.0 */
/* What waking a thread on another, idle CPU costs by each means the
 * kernel offers, after idle gaps (issue 28: what a submit path that does
 * not go through the socket could save).  Two processes pinned to CPUs 0
 * (the waker, as devq's client) and 1 (the sleeper, as a confined devqd's
 * loop); after each gap the waker wakes the sleeper, which answers by a
 * store to a shared word that the waker polls for (as libdevq polls the
 * completion page).  Means, interleaved in chunks of CHUNK:
 *
 *   futex         the sleeper in FUTEX_WAIT, the waker's FUTEX_WAKE
 *   socket-read   the sleeper in read() on a Unix stream socket, a
 *                 64-byte write (a Submit frame's size)
 *   socket-epoll  the sleeper in epoll_wait on the socket, then a
 *                 nonblocking recv (devqd's loop: libuv, then recvmsg)
 *   eventfd-epoll the sleeper in epoll_wait on an eventfd, then its read
 *   bell-socket   the sleeper in epoll_wait on the socket and an eventfd;
 *                 the waker writes the eventfd (a doorbell) and then the
 *                 socket; the sleeper recvs, answers, then drains the bell
 *   pipe-epoll    the sleeper in epoll_wait on a pipe's read end, then its
 *                 read; the waker writes a byte (the submit ring's doorbell)
 *
 * Per means: p50 and p99 of the waker's call alone (the send, with the
 * wake-up it starts) and of the round trip to the answer.
 *
 *   wake [--rounds R] [--ops N]        (defaults 5, 200 per gap and means)
 *
 * A benchmark, not a test: the figures go to bench/RESULTS.md. */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

#define CHUNK 25
#define NM 6
#define NGAPS 2
static const char *const m_name[NM] = { "futex", "socket-read", "socket-epoll",
					"eventfd-epoll", "bell-socket", "pipe-epoll" };
static const uint64_t gaps_ns[NGAPS] = { 1000000, 10000000 };

static void pin(int cpu)
{
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	if (sched_setaffinity(0, sizeof(s), &s) < 0) {
		perror("sched_setaffinity");
		exit(1);
	}
}

static void idle_for(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000u), (long)(ns % 1000000000u) };
	while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR)
		;
}

static long futex(atomic_uint *w, int op, unsigned v)
{
	return syscall(SYS_futex, w, op, v, NULL, NULL, 0);
}

static void must(int ok, const char *what)
{
	if (!ok) {
		perror(what);
		exit(1);
	}
}

/* The sleeper's side of n wake-ups by means m; answers i by storing
 * 2i + 2 in *w. */
static void sleeper(int m, int n, atomic_uint *w, int sock, int efd, int prd)
{
	int ep = -1;
	if (m >= 2) {
		struct epoll_event ev = { .events = EPOLLIN };
		must((ep = epoll_create1(EPOLL_CLOEXEC)) >= 0, "epoll_create1");
		must(epoll_ctl(ep, EPOLL_CTL_ADD, m == 3 ? efd : m == 5 ? prd : sock, &ev) == 0,
		     "epoll_ctl");
		if (m == 4)
			must(epoll_ctl(ep, EPOLL_CTL_ADD, efd, &ev) == 0, "epoll_ctl");
	}
	for (unsigned i = 0; i < (unsigned)n; i++) {
		char buf[64];
		uint64_t one;
		struct epoll_event ev;
		switch (m) {
		case 0:
			while (atomic_load(w) != 2 * i + 1)
				futex(w, FUTEX_WAIT, 2 * i);
			break;
		case 1:
			must(read(sock, buf, sizeof(buf)) == sizeof(buf), "read");
			break;
		case 2:
			while (epoll_wait(ep, &ev, 1, -1) != 1)
				;
			must(recv(sock, buf, sizeof(buf), MSG_DONTWAIT) == sizeof(buf), "recv");
			break;
		case 3:
			while (epoll_wait(ep, &ev, 1, -1) != 1)
				;
			must(read(efd, &one, sizeof(one)) == sizeof(one), "read eventfd");
			break;
		case 5:
			while (epoll_wait(ep, &ev, 1, -1) != 1)
				;
			must(read(prd, buf, 1) == 1, "read pipe");
			break;
		default:
			for (;;) {
				while (epoll_wait(ep, &ev, 1, -1) != 1)
					;
				ssize_t k = recv(sock, buf, sizeof(buf), MSG_DONTWAIT);
				if (k == sizeof(buf))
					break;
				must(k < 0 && errno == EAGAIN, "recv");
			}
			break;
		}
		atomic_store(w, 2 * i + 2);
		if (m == 4) /* the bell, drained off the answer's path */
			must(read(efd, &one, sizeof(one)) == sizeof(one) || errno == EAGAIN,
			     "read eventfd");
	}
	_exit(0);
}

/* One chunk of n wake-ups by means m after gap: the waker's call and the
 * round trip, each in ns. */
static void chunk(int m, int n, uint64_t gap, uint64_t *call, uint64_t *rtt)
{
	atomic_uint *w = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int sv[2], pp[2], efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	must(w != MAP_FAILED, "mmap");
	must(efd >= 0, "eventfd");
	must(pipe2(pp, O_CLOEXEC | O_NONBLOCK) == 0, "pipe2");
	must(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
	atomic_store(w, 0);
	pid_t pid = fork();
	must(pid >= 0, "fork");
	if (pid == 0) {
		pin(1);
		sleeper(m, n, w, sv[1], efd, pp[0]);
	}
	idle_for(1000000); /* the sleeper settles and sleeps */
	for (int i = 0; i < n; i++) {
		idle_for(gap);
		char buf[64] = { 0 };
		uint64_t one = 1, t0 = bu_now_ns();
		switch (m) {
		case 0:
			atomic_store(w, 2 * (unsigned)i + 1);
			futex(w, FUTEX_WAKE, 1);
			break;
		case 1:
		case 2:
			must(write(sv[0], buf, sizeof(buf)) == sizeof(buf), "write");
			break;
		case 3:
			must(write(efd, &one, sizeof(one)) == sizeof(one), "write eventfd");
			break;
		case 5:
			must(write(pp[1], buf, 1) == 1, "write pipe");
			break;
		default:
			must(write(efd, &one, sizeof(one)) == sizeof(one), "write eventfd");
			must(write(sv[0], buf, sizeof(buf)) == sizeof(buf), "write");
			break;
		}
		uint64_t t1 = bu_now_ns();
		while (atomic_load(w) != 2 * (unsigned)i + 2)
			;
		call[i] = t1 - t0;
		rtt[i] = bu_now_ns() - t0;
	}
	must(waitpid(pid, NULL, 0) == pid, "waitpid");
	must(close(sv[0]) == 0 && close(sv[1]) == 0 && close(efd) == 0 && close(pp[0]) == 0 &&
		     close(pp[1]) == 0,
	     "close");
	must(munmap(w, 4096) == 0, "munmap");
}

int main(int argc, char **argv)
{
	int rounds = 5, n = 200;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--ops") && i + 1 < argc)
			n = atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: wake [--rounds R] [--ops N]\n");
			return 2;
		}
	}
	n -= n % CHUNK;
	if (n < CHUNK || rounds < 1 || sysconf(_SC_NPROCESSORS_ONLN) < 2) {
		fprintf(stderr, "wake: needs --ops >= %d, --rounds >= 1 and CPUs 0 and 1\n", CHUNK);
		return 2;
	}
	pin(0);
	bu_print_host();
	printf("wake: waker on CPU 0, sleeper on CPU 1, %d wake-ups per gap and means per round, "
	       "chunks of %d interleaved; us\n",
	       n, CHUNK);
	printf("%-5s %-5s %-14s %9s %9s %9s %9s\n", "round", "gap", "means", "call p50", "p99",
	       "rtt p50", "p99");
	uint64_t *call[NM], *rtt[NM];
	for (int m = 0; m < NM; m++) {
		call[m] = calloc((size_t)n, sizeof(uint64_t));
		rtt[m] = calloc((size_t)n, sizeof(uint64_t));
		must(call[m] && rtt[m], "calloc");
	}
	for (int r = 0; r < rounds; r++)
		for (int g = 0; g < NGAPS; g++) {
			for (int c = 0; c < n / CHUNK; c++)
				for (int mm = 0; mm < NM; mm++) {
					int m = (mm + c) % NM;
					chunk(m, CHUNK, gaps_ns[g], call[m] + c * CHUNK,
					      rtt[m] + c * CHUNK);
				}
			for (int m = 0; m < NM; m++) {
				bu_sort(call[m], (size_t)n);
				bu_sort(rtt[m], (size_t)n);
				printf("%-5d %-5s %-14s %9.1f %9.1f %9.1f %9.1f\n", r + 1,
				       g ? "10ms" : "1ms", m_name[m],
				       bu_quantile(call[m], (size_t)n, 0.5) / 1e3,
				       bu_quantile(call[m], (size_t)n, 0.99) / 1e3,
				       bu_quantile(rtt[m], (size_t)n, 0.5) / 1e3,
				       bu_quantile(rtt[m], (size_t)n, 0.99) / 1e3);
			}
			fflush(stdout);
		}
	for (int m = 0; m < NM; m++) {
		free(call[m]);
		free(rtt[m]);
	}
	return 0;
}
