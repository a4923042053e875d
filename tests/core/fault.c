/* SPDX-License-Identifier: Apache-2.0 */
/* Fault injection for the core tests; see fault.h. */
#include "fault.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/types.h>

/* Counters are atomic: the buffer worker thread calls mmap, munmap,
 * madvise and malloc too. */
struct rule {
	atomic_uint calls, failed;
	atomic_uint first, last; /* failing calls: first..last (last 0: no end) */
	atomic_int err;
	atomic_bool armed;
};

static struct rule rules[FAULT_NCALLS];

void fault_arm(enum fault_call c, unsigned nth, unsigned count, int err)
{
	struct rule *r = &rules[c];
	atomic_store(&r->armed, false);
	atomic_store(&r->calls, 0);
	atomic_store(&r->failed, 0);
	atomic_store(&r->first, nth);
	atomic_store(&r->last, count ? nth + count - 1 : 0);
	atomic_store(&r->err, err);
	atomic_store(&r->armed, nth > 0);
}

void fault_reset(void)
{
	for (unsigned c = 0; c < FAULT_NCALLS; c++)
		fault_arm(c, 0, 0, 0);
}

unsigned fault_calls(enum fault_call c)
{
	return atomic_load(&rules[c].calls);
}

unsigned fault_failed(enum fault_call c)
{
	return atomic_load(&rules[c].failed);
}

/* Counts a call of c; true (errno set) when it is to fail. */
static bool fails(enum fault_call c)
{
	struct rule *r = &rules[c];
	unsigned n = atomic_fetch_add(&r->calls, 1) + 1;
	if (!atomic_load(&r->armed))
		return false;
	unsigned first = atomic_load(&r->first), last = atomic_load(&r->last);
	if (n < first || (last && n > last))
		return false;
	atomic_fetch_add(&r->failed, 1);
	errno = atomic_load(&r->err);
	return true;
}

/* The real calls, which the linker's --wrap names __real_NAME. */
void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
int __real_memfd_create(const char *name, unsigned flags);
int __real_ftruncate(int fd, off_t len);
int __real_fcntl(int fd, int cmd, ...);
void *__real_mmap(void *a, size_t n, int prot, int flags, int fd, off_t off);
int __real_munmap(void *a, size_t n);
int __real_madvise(void *a, size_t n, int advice);
int __real_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg);
int __real_close(int fd);
int __real_fstat(int fd, struct stat *st);
int __real_fstatfs(int fd, struct statfs *st);
int __real_eventfd(unsigned v, int flags);
int __real_pipe2(int p[2], int flags);

void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t k, size_t n);
void *__wrap_realloc(void *p, size_t n);
int __wrap_memfd_create(const char *name, unsigned flags);
int __wrap_ftruncate(int fd, off_t len);
int __wrap_fcntl(int fd, int cmd, ...);
void *__wrap_mmap(void *a, size_t n, int prot, int flags, int fd, off_t off);
int __wrap_munmap(void *a, size_t n);
int __wrap_madvise(void *a, size_t n, int advice);
int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg);
int __wrap_close(int fd);
int __wrap_fstat(int fd, struct stat *st);
int __wrap_fstatfs(int fd, struct statfs *st);
int __wrap_eventfd(unsigned v, int flags);
int __wrap_pipe2(int p[2], int flags);

void *__wrap_malloc(size_t n)
{
	return fails(FAULT_ALLOC) ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t k, size_t n)
{
	return fails(FAULT_ALLOC) ? NULL : __real_calloc(k, n);
}

void *__wrap_realloc(void *p, size_t n)
{
	return fails(FAULT_ALLOC) ? NULL : __real_realloc(p, n);
}

int __wrap_memfd_create(const char *name, unsigned flags)
{
	return fails(FAULT_MEMFD_CREATE) ? -1 : __real_memfd_create(name, flags);
}

int __wrap_ftruncate(int fd, off_t len)
{
	return fails(FAULT_FTRUNCATE) ? -1 : __real_ftruncate(fd, len);
}

/* Every fcntl command the core uses takes an int or nothing. */
int __wrap_fcntl(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	int arg = va_arg(ap, int);
	va_end(ap);
	return fails(FAULT_FCNTL) ? -1 : __real_fcntl(fd, cmd, arg);
}

void *__wrap_mmap(void *a, size_t n, int prot, int flags, int fd, off_t off)
{
	return fails(FAULT_MMAP) ? MAP_FAILED : __real_mmap(a, n, prot, flags, fd, off);
}

/* A failed munmap still unmaps, so that a test of its error path leaks
 * nothing. */
int __wrap_munmap(void *a, size_t n)
{
	if (!fails(FAULT_MUNMAP))
		return __real_munmap(a, n);
	int e = errno;
	__real_munmap(a, n);
	errno = e;
	return -1;
}

int __wrap_madvise(void *a, size_t n, int advice)
{
	return fails(FAULT_MADVISE) ? -1 : __real_madvise(a, n, advice);
}

int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg)
{
	return fails(FAULT_PTHREAD_CREATE) ? errno : __real_pthread_create(t, a, fn, arg);
}

/* Likewise a failed close still closes. */
int __wrap_close(int fd)
{
	if (!fails(FAULT_CLOSE))
		return __real_close(fd);
	int e = errno;
	__real_close(fd);
	errno = e;
	return -1;
}

/* A failed fstat still fills *st as for the file: code that ignores the
 * failure then goes on as if it had succeeded, and a test sees it. */
int __wrap_fstat(int fd, struct stat *st)
{
	if (!fails(FAULT_FSTAT))
		return __real_fstat(fd, st);
	int e = errno;
	__real_fstat(fd, st);
	errno = e;
	return -1;
}

int __wrap_fstatfs(int fd, struct statfs *st)
{
	return fails(FAULT_FSTATFS) ? -1 : __real_fstatfs(fd, st);
}

int __wrap_eventfd(unsigned v, int flags)
{
	return fails(FAULT_EVENTFD) ? -1 : __real_eventfd(v, flags);
}

int __wrap_pipe2(int p[2], int flags)
{
	return fails(FAULT_PIPE2) ? -1 : __real_pipe2(p, flags);
}
