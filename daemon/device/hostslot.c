/* SPDX-License-Identifier: Apache-2.0 */
/* Per-stream slots of host executables; see hostslot.h. */
#include "device/hostslot.h"

#include <errno.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HS_MSG 160

enum { HS_READY = 0, HS_PENDING = 1 }; /* < 0: init failed with that errno */

struct hs_entry {
	struct hs_entry *next;
	const struct devq_host_exe *x;
	void *handle; /* the stream as init saw it */
	void *slot;
	int state;
	char msg[HS_MSG];
};

enum hs_kind { HS_INIT, HS_RELEASE, HS_STOP };

struct hs_job {
	struct hs_job *next;
	enum hs_kind kind;
	struct hs_entry *e;            /* INIT */
	const struct devq_host_exe *x; /* RELEASE */
	void (*cb)(void *ud);          /* INIT: ready; RELEASE: done */
	void *ud;
};

struct devq_hslots {
	pthread_mutex_t lock;
	pthread_cond_t work;
	struct hs_entry **by_stream;
	unsigned streams;
	struct hs_job *head, *tail;
	pthread_t thread;
	void (*enter)(void *ud);
	void *ud;
};

static void push(struct devq_hslots *h, struct hs_job *j)
{
	j->next = NULL;
	pthread_mutex_lock(&h->lock);
	if (h->tail)
		h->tail->next = j;
	else
		h->head = j;
	h->tail = j;
	pthread_cond_signal(&h->work);
	pthread_mutex_unlock(&h->lock);
}

/* Unlinks every entry of x (every entry when x is NULL) and finis the
 * ones init made, outside the lock. */
static void drop(struct devq_hslots *h, const struct devq_host_exe *x)
{
	struct hs_entry *gone = NULL;
	pthread_mutex_lock(&h->lock);
	for (unsigned s = 0; s < h->streams; s++)
		for (struct hs_entry **pp = &h->by_stream[s]; *pp;) {
			struct hs_entry *e = *pp;
			if (x && e->x != x) {
				pp = &e->next;
				continue;
			}
			*pp = e->next;
			e->next = gone;
			gone = e;
		}
	pthread_mutex_unlock(&h->lock);
	while (gone) {
		struct hs_entry *e = gone;
		gone = e->next;
		if (e->state == HS_READY && e->x->fini)
			e->x->fini(e->handle, e->slot);
		free(e);
	}
}

static void *housekeeper(void *arg)
{
	struct devq_hslots *h = arg;
	pthread_setname_np(pthread_self(), "devqd-hslots"); /* for top -H */
	if (h->enter)
		h->enter(h->ud);
	for (;;) {
		pthread_mutex_lock(&h->lock);
		while (!h->head)
			pthread_cond_wait(&h->work, &h->lock);
		struct hs_job *j = h->head;
		h->head = j->next;
		if (!h->head)
			h->tail = NULL;
		pthread_mutex_unlock(&h->lock);
		switch (j->kind) {
		case HS_INIT: {
			struct hs_entry *e = j->e;
			void *slot = NULL;
			char msg[HS_MSG] = "";
			int r = e->x->init(e->handle, &slot, msg, sizeof(msg));
			pthread_mutex_lock(&h->lock);
			e->slot = slot;
			e->state = r < 0 ? r : HS_READY;
			memcpy(e->msg, msg, sizeof(msg));
			e->msg[HS_MSG - 1] = '\0';
			pthread_mutex_unlock(&h->lock);
			if (j->cb)
				j->cb(j->ud);
			break;
		}
		case HS_RELEASE:
			drop(h, j->x);
			if (j->cb)
				j->cb(j->ud);
			break;
		case HS_STOP:
			drop(h, NULL);
			free(j);
			return NULL;
		}
		free(j);
	}
}

int devq_hslots_open(unsigned streams, void (*enter)(void *ud), void *ud,
		     struct devq_hslots **out)
{
	struct devq_hslots *h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->by_stream = calloc(streams ? streams : 1, sizeof(*h->by_stream));
	if (!h->by_stream) {
		free(h);
		return -ENOMEM;
	}
	h->streams = streams;
	h->enter = enter;
	h->ud = ud;
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->work, NULL);
	int r = pthread_create(&h->thread, NULL, housekeeper, h);
	if (r) {
		pthread_cond_destroy(&h->work);
		pthread_mutex_destroy(&h->lock);
		free(h->by_stream);
		free(h);
		return -r;
	}
	*out = h;
	return 0;
}

void devq_hslots_close(struct devq_hslots *h)
{
	if (!h)
		return;
	struct hs_job *j = calloc(1, sizeof(*j));
	if (j) {
		j->kind = HS_STOP;
		push(h, j);
	} else {
		/* Out of memory at exit: the thread cannot be told to stop;
		 * leave it (and the slots) to the process's end. */
		return;
	}
	pthread_join(h->thread, NULL);
	pthread_cond_destroy(&h->work);
	pthread_mutex_destroy(&h->lock);
	free(h->by_stream);
	free(h);
}

/* Lock held. */
static struct hs_entry *find(struct devq_hslots *h, const struct devq_host_exe *x, unsigned s)
{
	for (struct hs_entry *e = h->by_stream[s]; e; e = e->next)
		if (e->x == x)
			return e;
	return NULL;
}

/* Lock held: what a known entry says; 1 while its init is pending. */
static int answer(const struct hs_entry *e, void **slot, char *err, size_t errlen)
{
	if (e->state == HS_READY) {
		*slot = e->slot;
		return 0;
	}
	if (e->state < 0)
		snprintf(err, errlen, "%s", e->msg[0] ? e->msg : strerror(-e->state));
	return e->state;
}

/* How both gets start: the answer of the entry made before, or 0 (no init
 * to run), or -EINVAL (no such stream); *miss when the stream has none
 * yet, and then h->lock is held. */
static int lookup(struct devq_hslots *h, const struct devq_host_exe *x, unsigned stream,
		  void **slot, char *err, size_t errlen, bool *miss)
{
	*slot = NULL;
	*miss = false;
	if (!x->init)
		return 0;
	if (stream >= h->streams)
		return -EINVAL;
	pthread_mutex_lock(&h->lock);
	struct hs_entry *e = find(h, x, stream);
	if (!e) {
		*miss = true;
		return 0;
	}
	int r = answer(e, slot, err, errlen);
	pthread_mutex_unlock(&h->lock);
	return r;
}

int devq_hslots_get_sync(struct devq_hslots *h, const struct devq_host_exe *x, unsigned stream,
			 void *stream_handle, void **slot, char *err, size_t errlen)
{
	bool miss;
	int r = lookup(h, x, stream, slot, err, errlen, &miss);
	if (!miss)
		return r;
	pthread_mutex_unlock(&h->lock);
	/* Only this stream's worker makes this entry (a stream runs on one
	 * worker at a time), so it is linked once made. */
	struct hs_entry *e = calloc(1, sizeof(*e));
	if (!e) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	e->x = x;
	e->handle = stream_handle;
	r = x->init(stream_handle, &e->slot, e->msg, sizeof(e->msg));
	e->msg[HS_MSG - 1] = '\0';
	e->state = r < 0 ? r : HS_READY;
	pthread_mutex_lock(&h->lock);
	e->next = h->by_stream[stream];
	h->by_stream[stream] = e;
	r = answer(e, slot, err, errlen);
	pthread_mutex_unlock(&h->lock);
	return r;
}

int devq_hslots_get_async(struct devq_hslots *h, const struct devq_host_exe *x, unsigned stream,
			  void *stream_handle, void **slot, char *err, size_t errlen,
			  void (*ready)(void *ud), void *ud)
{
	bool miss;
	int r = lookup(h, x, stream, slot, err, errlen, &miss);
	if (!miss)
		return r;
	struct hs_entry *e = calloc(1, sizeof(*e));
	struct hs_job *j = calloc(1, sizeof(*j));
	if (!e || !j) {
		pthread_mutex_unlock(&h->lock);
		free(e);
		free(j);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	e->x = x;
	e->handle = stream_handle;
	e->state = HS_PENDING;
	e->next = h->by_stream[stream];
	h->by_stream[stream] = e;
	pthread_mutex_unlock(&h->lock);
	j->kind = HS_INIT;
	j->e = e;
	j->cb = ready;
	j->ud = ud;
	push(h, j);
	return HS_PENDING;
}

void devq_hslots_release(struct devq_hslots *h, const struct devq_host_exe *x,
			 void (*done)(void *ud), void *ud)
{
	struct hs_job *j = calloc(1, sizeof(*j));
	if (!j) {
		/* Out of memory: fini must not run here (the loop thread), so
		 * the slots and the library (done not called) stay as they
		 * are: a leak, not a crash. */
		return;
	}
	j->kind = HS_RELEASE;
	j->x = x;
	j->cb = done;
	j->ud = ud;
	push(h, j);
}

/* Read by a signal handler on the same thread: volatile, set before the
 * call and cleared after. */
static _Thread_local const char *volatile running;

const char *devq_hslots_running(void)
{
	return running;
}

/* One call of x's run (first == last == UINT64_MAX: the whole op) or
 * run_units. */
static int call_one(const struct devq_host_exe *x, const char *name, const union devq_kval *args,
		    struct devq_host_call *call, uint64_t first, uint64_t last, char *msg,
		    size_t msglen)
{
	char why[160] = "";
	call->err = why;
	call->errlen = sizeof(why);
	running = name;
	int r = first == UINT64_MAX ? x->run(args, call) : x->run_units(args, call, first, last);
	running = NULL;
	why[sizeof(why) - 1] = '\0';
	if (r < 0)
		snprintf(msg, msglen, "%s: %.140s", name, why[0] ? why : strerror(-r));
	return r;
}

int devq_hslots_call(const struct devq_host_exe *x, const char *name, const union devq_kval *args,
		     struct devq_host_call *call, char *msg, size_t msglen)
{
	return call_one(x, name, args, call, UINT64_MAX, UINT64_MAX, msg, msglen);
}

int devq_hslots_call_units(const struct devq_host_exe *x, const char *name,
			   const union devq_kval *args, struct devq_host_call *call, uint64_t first,
			   uint64_t last, char *msg, size_t msglen)
{
	return call_one(x, name, args, call, first, last, msg, msglen);
}
