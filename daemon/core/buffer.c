/* SPDX-License-Identifier: Apache-2.0 */
/* Buffers: creating and importing memfds safely, device memory, and the
 * deferred release that keeps a buffer mapped until its last consumer has
 * completed. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "core/buffer.h"

#include "base/log.h"
#include "core/engine.h"
#include "core/job.h"
#include "core/outbox.h"
#include "core/quota.h"
#include "core/session.h"

#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008U
#endif
/* linux/magic.h: the file systems a memfd lives on. */
#define DEVQ_TMPFS_MAGIC 0x01021994
#define DEVQ_HUGETLBFS_MAGIC 0x958458f6

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#define MADV_POPULATE_WRITE 23
#endif

/* ---- the buffer worker: large buffers made and unmade off the loop ----- */

/* A job names its buffer (b) when the loop must hear that it is done:
 * BufferReady (or the error) waits for an install, and BufferReleased
 * (with the quota's credit) for an unmap, so a client is told a large
 * buffer is ready only once it is, and what it holds in the daemon is
 * charged until the memory is really gone.  That bounds the worker's
 * backlog by the quotas: a client that creates and releases large buffers
 * in a loop waits for each.  The worker reads only the job, never b (the
 * loop owns it). */
struct bg_job {
	struct bg_job *next;
	struct devq_buf *b; /* NULL: nobody waits (a mapping never installed) */
	struct devq_backend *be;
	void *addr;       /* the host mapping; NULL for a device buffer */
	size_t len;       /* of the mapping, or of the device buffer */
	uint64_t devaddr; /* UNMAP of a device buffer; INSTALL's result */
	bool read_only;
	bool unpin; /* UNMAP: the backend's mapping (or allocation) goes first */
	enum { BG_INSTALL, BG_UNMAP } what;
	int err; /* INSTALL: 0, or the backend's negative errno */
	uint64_t id;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_t thread;
	bool started, stop;
	struct bg_job *head, *tail;
	struct bg_job *done; /* finished jobs with a buffer, newest first */
} bg = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

/* The worker works in steps of this many bytes: a munmap holds the
 * process's mmap lock for writing, and a page fault or mmap on the loop
 * thread meanwhile waits for it; in steps, each wait is short. */
#define BG_STEP (16u << 20)

static void bg_unmap(struct bg_job *j)
{
	/* Every op that used it has completed (the release waited for the
	 * last): the device lets go of it first, then the host mapping goes. */
	if (j->unpin) {
		if (j->addr)
			j->be->ops->unmap_host(j->be, j->addr, j->len);
		else
			j->be->ops->free(j->be, j->devaddr, j->len);
	}
	char *p = j->addr;
	for (size_t off = 0; p && off < j->len; off += BG_STEP) {
		size_t n = j->len - off < BG_STEP ? j->len - off : BG_STEP;
		if (munmap(p + off, n) < 0)
			log_err("buffer %llu: munmap of %zu bytes at %zu failed: %s (mapping "
				"leaked)", (unsigned long long)j->id, n, off, strerror(errno));
	}
}

static void bg_install(struct bg_job *j)
{
	if (!j->addr) { /* device memory, zeroed (the backend's alloc) */
		j->err = j->be->ops->alloc(j->be, j->len, &j->devaddr);
		return;
	}
	/* Prefault, so the first ops do not pay for it; a kernel without
	 * MADV_POPULATE_* (before 5.14) leaves it to the first touch. */
	char *p = j->addr;
	int advice = j->read_only ? MADV_POPULATE_READ : MADV_POPULATE_WRITE;
	for (size_t off = 0; off < j->len; off += BG_STEP) {
		size_t n = j->len - off < BG_STEP ? j->len - off : BG_STEP;
		if (madvise(p + off, n, advice) < 0) {
			if (errno != EINVAL)
				log_warn("buffer %llu: prefaulting %zu bytes: %s",
					 (unsigned long long)j->id, j->len, strerror(errno));
			break;
		}
	}
	/* Then pinned for the device (CUDA: cuMemHostRegister, seconds for
	 * GiBs); no op can use the buffer before BufferReady. */
	j->err = j->be->ops->map_host(j->be, j->addr, j->len, j->read_only, &j->devaddr);
}

static void bg_run(struct bg_job *j)
{
	if (j->what == BG_UNMAP)
		bg_unmap(j);
	else
		bg_install(j);
}

/* A finished job goes back to the loop (any thread). */
static void bg_report(struct bg_job *j)
{
	if (!j->b) {
		free(j);
		return;
	}
	struct devq_engine *e = j->b->s->e;
	pthread_mutex_lock(&bg.lock);
	j->next = bg.done;
	bg.done = j;
	pthread_mutex_unlock(&bg.lock);
	e->ev.wake(e->ev.ud);
}

static void *bg_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "devqd-buffer"); /* for top -H */
	pthread_mutex_lock(&bg.lock);
	for (;;) {
		while (!bg.head && !bg.stop)
			pthread_cond_wait(&bg.cond, &bg.lock);
		struct bg_job *j = bg.head;
		if (!j)
			break; /* stop, and nothing left */
		bg.head = j->next;
		if (!bg.head)
			bg.tail = NULL;
		pthread_mutex_unlock(&bg.lock);
		bg_run(j);
		bg_report(j);
		pthread_mutex_lock(&bg.lock);
	}
	pthread_mutex_unlock(&bg.lock);
	return NULL;
}

/* Hands a copy of the job to the worker, or runs it here when there is none
 * (after fini, or no thread could be made): either way it is reported to
 * the loop.  False only when no copy could be allocated: then *t ran here,
 * with its results in it, and nothing is reported; the caller finishes it
 * at once (bg_done when it names a buffer). */
static bool bg_submit(struct bg_job *t)
{
	struct bg_job *j = malloc(sizeof(*j));
	if (!j) {
		bg_run(t);
		return false;
	}
	*j = *t;
	j->next = NULL;
	pthread_mutex_lock(&bg.lock);
	if (!bg.started && !bg.stop && pthread_create(&bg.thread, NULL, bg_main, NULL) == 0)
		bg.started = true;
	if (bg.started) {
		if (bg.tail)
			bg.tail->next = j;
		else
			bg.head = j;
		bg.tail = j;
		pthread_cond_signal(&bg.cond);
		pthread_mutex_unlock(&bg.lock);
		return true;
	}
	pthread_mutex_unlock(&bg.lock);
	bg_run(j);
	bg_report(j);
	return true;
}

/* The worker unmaps b: unpins (or frees) it if installed, then its host
 * mapping; BufferReleased once done. */
static void bg_done(struct bg_job *j);
static void unmap_later(struct devq_buf *b)
{
	struct bg_job j = { .b = b, .be = b->s->e->be, .addr = b->host,
			    .len = b->host ? b->map_len : b->size, .devaddr = b->devaddr,
			    .unpin = b->mapped, .what = BG_UNMAP, .id = b->id };
	if (!bg_submit(&j))
		bg_done(&j);
}

static void close_fd(int fd, uint64_t id);

void devq_buffer_collect(struct devq_engine *e)
{
	(void)e; /* one worker per process */
	for (;;) {
		pthread_mutex_lock(&bg.lock);
		struct bg_job *j = bg.done, *fifo = NULL;
		bg.done = NULL;
		pthread_mutex_unlock(&bg.lock);
		if (!j)
			return;
		while (j) { /* oldest first */
			struct bg_job *n = j->next;
			j->next = fifo;
			fifo = j;
			j = n;
		}
		while (fifo) {
			struct bg_job *n = fifo->next;
			bg_done(fifo);
			free(fifo);
			fifo = n;
		}
	}
}

void devq_buffer_worker_fini(struct devq_engine *e)
{
	pthread_mutex_lock(&bg.lock);
	bool started = bg.started;
	bg.stop = true;
	pthread_cond_signal(&bg.cond);
	pthread_mutex_unlock(&bg.lock);
	if (started)
		pthread_join(bg.thread, NULL);
	pthread_mutex_lock(&bg.lock);
	bg.started = false; /* stop stays: anything later runs inline */
	pthread_mutex_unlock(&bg.lock);
	devq_buffer_collect(e); /* what finished, and what that started */
}

/* Maps a memfd for a buffer: small ones prefaulted here (MAP_POPULATE),
 * large ones by the worker. */
static void *host_map(struct devq_buf *b, int prot, int fd)
{
	b->bg = b->map_len >= DEVQ_BUFFER_BG_BYTES;
	void *p = mmap(NULL, b->map_len, prot, MAP_SHARED | (b->bg ? 0 : MAP_POPULATE), fd, 0);
	return p;
}

/* Unmaps the host mapping of a buffer that was never installed or whose
 * pinning failed (nobody waits for it), logging a failure: one that fails
 * (a length the kernel rounded differently) would leak the pages silently. */
static void host_unmap(struct devq_buf *b)
{
	if (b->bg) {
		struct bg_job j = { .addr = b->host, .len = b->map_len, .what = BG_UNMAP,
				    .id = b->id };
		bg_submit(&j);
		return;
	}
	if (munmap(b->host, b->map_len) < 0)
		log_err("buffer %llu: munmap of %zu bytes failed: %s (mapping leaked)",
			(unsigned long long)b->id, b->map_len, strerror(errno));
	/* b->host stays: account() tells shared from device buffers by it. */
}

static void account(struct devq_buf *b, int sign)
{
	struct devq_session *s = b->s;
	uint64_t bytes = b->size;
	devq_quota_charge_buffer(s, bytes, !b->host, sign);
	if (sign > 0) {
		s->nbufs++;
		s->e->nbufs++;
		s->bytes_mapped += bytes;
		s->e->bytes_mapped += bytes;
	} else {
		s->nbufs--;
		s->e->nbufs--;
		s->bytes_mapped -= bytes;
		s->e->bytes_mapped -= bytes;
	}
}

static int check_new(struct devq_session *s, uint64_t id, uint64_t size, char *err, size_t n)
{
	if (devq_idmap_get(&s->bufs, id)) {
		snprintf(err, n, "buffer id %llu is already in use", (unsigned long long)id);
		return DEVQ__CODE__INVALID_ARGUMENT;
	}
	if (size == 0) {
		snprintf(err, n, "buffer %llu: size 0", (unsigned long long)id);
		return DEVQ__CODE__INVALID_ARGUMENT;
	}
	if (size > s->e->cfg.max_buffer_bytes) {
		snprintf(err, n, "buffer %llu: size %llu exceeds the maximum %llu bytes",
			 (unsigned long long)id, (unsigned long long)size,
			 (unsigned long long)s->e->cfg.max_buffer_bytes);
		return DEVQ__CODE__RESOURCE_EXHAUSTED;
	}
	return 0;
}

static struct devq_buf *buf_new(struct devq_session *s, uint64_t id, uint64_t size,
				Devq__BufferKind kind)
{
	struct devq_buf *b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	b->s = s;
	b->id = id;
	b->size = size;
	b->kind = kind;
	b->ready_fd = -1;
	return b;
}

static int install_error(const struct devq_buf *b, int r, char *err, size_t n)
{
	snprintf(err, n, "buffer %llu: %s failed: %s", (unsigned long long)b->id,
		 b->host ? "pinning" : "device allocation", strerror(-r));
	return DEVQ__CODE__RESOURCE_EXHAUSTED;
}

/* Enters the buffer in the session, charged; a small one mapped (shared)
 * for the device or allocated (device) here, a large one by the worker
 * (devq_buffer_reply_ready). */
static int buf_install(struct devq_buf *b, char *err, size_t n)
{
	struct devq_backend *be = b->s->e->be;
	if (!b->bg) {
		int r = b->host ? be->ops->map_host(be, b->host, b->map_len, b->read_only,
						    &b->devaddr)
				: be->ops->alloc(be, b->size, &b->devaddr);
		if (r < 0)
			return install_error(b, r, err, n);
		b->mapped = true;
	}
	int r = devq_idmap_put(&b->s->bufs, b->id, b);
	if (r < 0) {
		if (b->mapped && b->host)
			be->ops->unmap_host(be, b->host, b->map_len);
		else if (b->mapped)
			be->ops->free(be, b->devaddr, b->size);
		b->mapped = false;
		snprintf(err, n, "buffer %llu: out of memory", (unsigned long long)b->id);
		return DEVQ__CODE__RESOURCE_EXHAUSTED;
	}
	account(b, +1);
	return 0;
}

int devq_buffer_create(struct devq_session *s, uint64_t id, uint64_t size, Devq__BufferKind kind,
		    int *fd_out, char *err, size_t errlen)
{
	int code = check_new(s, id, size, err, errlen);
	if (code)
		return code;
	if (kind != DEVQ__BUFFER_KIND__SHARED && kind != DEVQ__BUFFER_KIND__DEVICE) {
		snprintf(err, errlen, "buffer %llu: unknown kind %d", (unsigned long long)id, kind);
		return DEVQ__CODE__INVALID_ARGUMENT;
	}
	code = devq_quota_buffer(s, id, size, kind == DEVQ__BUFFER_KIND__DEVICE, err, errlen);
	if (code)
		return code;
	struct devq_buf *b = buf_new(s, id, size, kind);
	if (!b)
		goto nomem;
	int fd = -1;
	b->bg = size >= DEVQ_BUFFER_BG_BYTES; /* a shared one: host_map says it again */
	if (kind == DEVQ__BUFFER_KIND__SHARED) {
		char name[48];
		snprintf(name, sizeof(name), "devq-s%llu-b%llu", (unsigned long long)s->id,
			 (unsigned long long)id);
		fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_NOEXEC_SEAL);
		if (fd < 0 && errno == EINVAL) /* kernel without MFD_NOEXEC_SEAL */
			fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
		if (fd < 0 || ftruncate(fd, (off_t)size) < 0 ||
		    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
			snprintf(err, errlen, "buffer %llu: memfd of %llu bytes: %s",
				 (unsigned long long)id, (unsigned long long)size, strerror(errno));
			goto fail;
		}
		b->map_len = size;
		b->host = host_map(b, PROT_READ | PROT_WRITE, fd);
		if (b->host == MAP_FAILED) {
			b->host = NULL;
			snprintf(err, errlen, "buffer %llu: mmap: %s", (unsigned long long)id,
				 strerror(errno));
			goto fail;
		}
	}
	code = buf_install(b, err, errlen);
	if (code) {
		if (b->host)
			host_unmap(b);
		close_fd(fd, id);
		free(b);
		return code;
	}
	*fd_out = fd;
	return 0;
fail:
	if (b && b->host)
		host_unmap(b);
	close_fd(fd, id);
	free(b);
	return DEVQ__CODE__RESOURCE_EXHAUSTED;
nomem:
	snprintf(err, errlen, "buffer %llu: out of memory", (unsigned long long)id);
	return DEVQ__CODE__RESOURCE_EXHAUSTED;
}

/* A memfd is the only thing we map: its size can be pinned with seals, so a
 * client cannot truncate it under a running op (no SIGBUS, which could not
 * cover device DMA anyway). */
static int is_memfd(int fd)
{
	char path[64], target[256];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(path, target, sizeof(target) - 1);
	if (n < 0)
		return 0;
	target[n] = '\0';
	return strncmp(target, "/memfd:", 7) == 0;
}

int devq_buffer_import(struct devq_session *s, uint64_t id, uint64_t size, bool read_only, int fd,
		    char *err, size_t errlen)
{
	int code = check_new(s, id, size, err, errlen);
	if (!code)
		code = devq_quota_buffer(s, id, size, false, err, errlen);
	if (code)
		return code;
	unsigned long long uid = (unsigned long long)id;
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !is_memfd(fd)) {
		snprintf(err, errlen, "import buffer %llu: the fd is not a memfd", uid);
		return DEVQ__CODE__INVALID_ARGUMENT;
	}
	/* Only memfds on tmpfs (memfd_create without MFD_HUGETLB).  A hugetlb
	 * memfd's pages can vanish under a read: the client punches a hole and
	 * holds every free huge page, and the daemon's next read dies of
	 * SIGBUS; its mapping is also rounded up to the huge page size. */
	struct statfs sf;
	if (fstatfs(fd, &sf) < 0) {
		snprintf(err, errlen, "import buffer %llu: fstatfs: %s", uid, strerror(errno));
		return DEVQ__CODE__INVALID_ARGUMENT;
	}
	if (sf.f_type != DEVQ_TMPFS_MAGIC) {
		snprintf(err, errlen,
			 "import buffer %llu: %s memfds are not accepted (their pages can vanish "
			 "under the daemon's reads); use memfd_create without MFD_HUGETLB",
			 uid, sf.f_type == DEVQ_HUGETLBFS_MAGIC ? "hugetlb" : "non-tmpfs");
		return DEVQ__CODE__FAILED_PRECONDITION;
	}
	if (!(seals & F_SEAL_SHRINK)) {
		snprintf(err, errlen,
			 "import buffer %llu: memfd is not sealed with F_SEAL_SHRINK "
			 "(it could be truncated under a running op)", uid);
		return DEVQ__CODE__FAILED_PRECONDITION;
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "import buffer %llu: fstat failed", uid);
		return DEVQ__CODE__INVALID_ARGUMENT;
	}
	if ((uint64_t)st.st_size < size) {
		snprintf(err, errlen, "import buffer %llu: memfd holds %lld bytes, %llu declared",
			 uid, (long long)st.st_size, (unsigned long long)size);
		return DEVQ__CODE__OUT_OF_RANGE;
	}
	int acc = fcntl(fd, F_GETFL) & O_ACCMODE;
	bool writable = acc == O_RDWR && !(seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE));
	if (!read_only && !writable) {
		snprintf(err, errlen,
			 "import buffer %llu: memfd does not allow writing; import it read-only", uid);
		return DEVQ__CODE__PERMISSION_DENIED;
	}
	struct devq_buf *b = buf_new(s, id, size, DEVQ__BUFFER_KIND__SHARED);
	if (!b) {
		snprintf(err, errlen, "import buffer %llu: out of memory", uid);
		return DEVQ__CODE__RESOURCE_EXHAUSTED;
	}
	b->read_only = read_only;
	b->imported = true;
	b->map_len = size;
	/* Prefaulted (MAP_POPULATE here, or by the worker when large), so the
	 * memory is charged before the first op rather than mid-op. */
	b->host = host_map(b, read_only ? PROT_READ : PROT_READ | PROT_WRITE, fd);
	if (b->host == MAP_FAILED) {
		snprintf(err, errlen, "import buffer %llu: mmap: %s", uid, strerror(errno));
		free(b);
		return DEVQ__CODE__RESOURCE_EXHAUSTED;
	}
	code = buf_install(b, err, errlen);
	if (code) {
		host_unmap(b);
		free(b);
		return code;
	}
	return 0;
}

/* The last of a buffer: its quota and counters credited, BufferReleased
 * sent, the memory freed.  For a large one, once the worker has unmapped
 * it. */
static void buf_finish(struct devq_buf *b)
{
	struct devq_session *s = b->s;
	account(b, -1);
	if (s->connected) {
		Devq__BufferReleased rel = DEVQ__BUFFER_RELEASED__INIT;
		rel.id = b->id;
		Devq__DaemonMessage m = DEVQ__DAEMON_MESSAGE__INIT;
		m.body_case = DEVQ__DAEMON_MESSAGE__BODY_BUFFER_RELEASED;
		m.buffer_released = &rel;
		devq_outbox_send(s, &m, NULL, 0);
	}
	log_debug("session %llu: buffer %llu released", (unsigned long long)s->id,
		  (unsigned long long)b->id);
	free(b);
}

static void buf_free(struct devq_buf *b)
{
	struct devq_session *s = b->s;
	struct devq_backend *be = s->e->be;
	devq_idmap_del(&s->bufs, b->id);
	if (!b->bg && b->host)
		be->ops->unmap_host(be, b->host, b->map_len);
	else if (!b->bg)
		be->ops->free(be, b->devaddr, b->size);
	if (b->last_writer)
		devq_job_unref(b->last_writer);
	b->last_writer = NULL;
	for (unsigned i = 0; i < b->nreaders; i++)
		devq_job_unref(b->readers[i]);
	free(b->readers);
	b->readers = NULL;
	b->nreaders = 0;
	if (b->bg) {
		/* The worker unpins (or frees) and unmaps it, after its install
		 * if that still runs; the rest when it reports back (bg_done). */
		if (b->bg_busy)
			b->unmap_due = true;
		else
			unmap_later(b);
		return;
	}
	if (b->host && munmap(b->host, b->map_len) < 0)
		log_err("buffer %llu: munmap of %zu bytes failed: %s (mapping leaked)",
			(unsigned long long)b->id, b->map_len, strerror(errno));
	buf_finish(b);
	/* The caller decides when the session may go: it may still use it. */
}

void devq_buffer_release(struct devq_buf *b)
{
	b->releasing = true;
	if (b->inflight == 0)
		buf_free(b);
}

void devq_buffer_put(struct devq_buf *b)
{
	if (--b->inflight == 0 && b->releasing)
		buf_free(b);
}

static void send_ready(struct devq_buf *b, int fd)
{
	Devq__BufferReady r = DEVQ__BUFFER_READY__INIT;
	r.id = b->id;
	r.size = b->size;
	r.kind = b->kind;
	r.has_fd = fd >= 0;
	Devq__DaemonMessage m = DEVQ__DAEMON_MESSAGE__INIT;
	m.body_case = DEVQ__DAEMON_MESSAGE__BODY_BUFFER_READY;
	m.buffer_ready = &r;
	devq_outbox_send(b->s, &m, fd >= 0 ? &fd : NULL, fd >= 0); /* the tx owns fd */
}

static void close_fd(int fd, uint64_t id)
{
	if (fd >= 0 && close(fd) < 0)
		log_err("buffer %llu: close: %s", (unsigned long long)id, strerror(errno));
}

void devq_buffer_reply_ready(struct devq_buf *b, int fd)
{
	if (!b->bg) {
		send_ready(b, fd);
		return;
	}
	b->bg_busy = true;
	b->ready_fd = fd;
	b->s->populating++;
	struct bg_job j = { .b = b, .be = b->s->e->be, .addr = b->host,
			    .len = b->host ? b->map_len : b->size, .read_only = b->read_only,
			    .what = BG_INSTALL, .id = b->id };
	if (!bg_submit(&j))
		bg_done(&j);
}

/* The worker could not pin (or allocate) b, which the session still holds:
 * the request fails as it would have at once, and b goes, uncharged. */
static void install_failed(struct devq_buf *b, int r)
{
	struct devq_session *s = b->s;
	char err[200];
	int code = install_error(b, r, err, sizeof(err));
	devq_idmap_del(&s->bufs, b->id);
	account(b, -1);
	close_fd(b->ready_fd, b->id);
	if (s->connected) {
		struct devq_buf key = { .id = b->id };
		devq_outbox_error(s, code, b->imported ? "import_buffer" : "create_buffer", &key,
				   NULL, "%s", err);
	}
	if (b->host)
		host_unmap(b);
	free(b);
}

/* Loop thread: a job of b's is done. */
static void bg_done(struct bg_job *j)
{
	struct devq_buf *b = j->b;
	struct devq_session *s = b->s;
	if (j->what == BG_UNMAP) {
		buf_finish(b);
		devq_outbox_mark_dirty(s); /* the server frees it once nothing is left */
		return;
	}
	/* Installed (or not): the session is read again once BufferReady (or
	 * the error) is out. */
	b->bg_busy = false;
	s->populating--;
	devq_outbox_mark_dirty(s);
	if (j->err == 0) {
		b->devaddr = j->devaddr;
		b->mapped = true;
	}
	if (b->releasing) { /* the session went meanwhile */
		close_fd(b->ready_fd, b->id);
		b->ready_fd = -1;
		if (b->unmap_due)
			unmap_later(b);
		return;
	}
	if (j->err < 0) {
		install_failed(b, j->err);
		return;
	}
	if (s->connected)
		send_ready(b, b->ready_fd);
	else
		close_fd(b->ready_fd, b->id);
	b->ready_fd = -1;
}
