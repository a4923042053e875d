/* SPDX-License-Identifier: Apache-2.0 */
/* The executable repository: executables an administrator adds without
 * rebuilding devqd, one DIR/NAME.exec file each (devqd(8), "EXECUTABLE
 * REPOSITORY"), validated before they are served and rescanned on SIGHUP.
 *
 * Lifetime: a loaded executable (struct devq_exe) is counted, like a
 * buffer: one reference for the table while it is served, one for every op
 * that validated against it, until that op's completion is processed.  A
 * reload that replaces or removes it only drops the table's reference, so an
 * op in flight keeps the code it was validated against; the shared object
 * is dlclosed and the device image unloaded with the last reference.
 *
 * Threads: devq_repo_scan does the slow part (reading files, dlopen, the
 * backend's load_image) and touches no engine state, so it runs on any
 * thread: the server runs a reload's on libuv's thread pool.  Everything
 * else is loop thread only.  Bounds: DEVQ_REPO_MAX executables, at most
 * DEVQ_REPO_MAX_DIRS directories, .exec files of DEVQ_REPO_FILE_MAX bytes. */
#ifndef DEVQ_REPO_H
#define DEVQ_REPO_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "base/idmap.h"
#include "device/backend.h"
#include "core/cost.h"
#include "core/fair.h"
#include "kernels.h"

#define DEVQ_REPO_DEFAULT_DIR "/etc/devqd/executables.d"
#define DEVQ_REPO_MAX 256         /* executables served, all directories together */
#define DEVQ_REPO_MAX_DIRS 16     /* directories in the executables setting */
#define DEVQ_REPO_FILE_MAX 65536  /* bytes of one .exec file */
#define DEVQ_REPO_PATH_MAX 512    /* a directory plus a file name in it */
#define DEVQ_REPO_FIRST_ID 256    /* repository ids; the built-ins are below */

enum { DEVQ_EXE_CPU = 1, DEVQ_EXE_CUDA = 2 };

struct devq_fileid {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
};

struct devq_exe {
	struct devq_kernel k; /* what validation and the backends see */
	struct devq_sig sig;
	uint32_t id;
	unsigned refs;    /* loop thread: the table's and one per op */
	unsigned backends; /* DEVQ_EXE_*: the code the file names */
	char name[DEVQ_MAX_NAME];
	char signature[256];
	char description[256];
	char path[DEVQ_REPO_PATH_MAX]; /* the .exec */
	/* The .exec, the CPU shared object (cpu or cpu-host), the CUDA file
	 * (device image or cuda-host library): a reload replaces the
	 * executable when any of them differs. */
	struct devq_fileid fid[3];
	void *dl[2];  /* dlopen handles: [0] cpu or cpu-host, [1] cuda-host */
	int dl_fd[2]; /* each shared object, open while its dl is (dlopen'd by fd) */
	struct devq_backend *be; /* unload_image for k.dev, host_release */
	_Atomic unsigned releasing; /* host parts whose slots are still being let go */
	struct devq_fair_est est; /* fair.c: its ops' learned device time */
	/* Its cost = line (core/cost.h), compiled; n 0 and "": none. */
	struct devq_cost cost;
	char cost_text[DEVQ_COST_TEXT_MAX + 1];
};

struct devq_repo {
	struct devq_backend *be;
	struct idmap by_id;
	struct devq_exe *exes[DEVQ_REPO_MAX]; /* in scan order: directories, then names */
	unsigned n;
	uint32_t next_id;
	uint64_t reloads; /* scans applied since start */
	/* devqd.conf's rate key (base/config.h, devq_config_rate): set by
	 * the engine, read as executables are served. */
	const char *rates;
};

/* What a scan found: per executable, the new version (exe) or NULL when
 * the one served is unchanged (name). */
struct devq_repo_scan {
	struct devq_exe *exe[DEVQ_REPO_MAX];
	char name[DEVQ_REPO_MAX][DEVQ_MAX_NAME];
	unsigned n;
	unsigned broken; /* files refused, each logged with its reason */
	/* The served executables the scan compares against (referenced by
	 * devq_repo_scan_prepare, let go by devq_repo_apply). */
	struct devq_exe *prev[DEVQ_REPO_MAX];
	unsigned nprev;
};

void devq_repo_init(struct devq_repo *r, struct devq_backend *be);
/* Drops the table's references (at exit, after every op completed). */
void devq_repo_fini(struct devq_repo *r);

/* Loop thread: snapshot of what is served into sc, before a scan. */
void devq_repo_scan_prepare(struct devq_repo *r, struct devq_repo_scan *sc);
/* Any thread.  Scans dirs (':'-separated; NULL: the default directory,
 * which may be missing), validating every NAME.exec and loading what is
 * new or changed; each refused file is one log line naming it and why.
 * be NULL: a check without a device (the device image is not loaded).
 * Returns the number of refused files and directories (0: all good), or a
 * negative errno (out of memory). */
int devq_repo_scan(const char *dirs, struct devq_backend *be, struct devq_repo_scan *sc);
/* Loop thread: serves what sc found (adds, replaces, removes) and empties
 * sc.  Logs each change. */
void devq_repo_apply(struct devq_repo *r, struct devq_repo_scan *sc);
/* Frees what a scan loaded without applying it (a check). */
void devq_repo_scan_discard(struct devq_repo_scan *sc);

/* The executable served as id, or NULL.  No reference taken. */
static inline struct devq_exe *devq_repo_get(const struct devq_repo *r, uint32_t id)
{
	return devq_idmap_get(&r->by_id, id);
}
static inline struct devq_exe *devq_repo_ref(struct devq_exe *e)
{
	e->refs++;
	return e;
}
/* At start, before any op: finds the built-ins marked host (manifest.def's
 * DEVQ_HOST_KERNEL) in be's built-in host library (libdevq-host-cpu.so or
 * libdevq-host-cuda.so, in DIR/host/ next to devqd, else DEVQ_HOSTDIR),
 * checking each symbol devq_host_NAME as a repository host executable is.
 * What is missing or refused is logged and stays unavailable (devctl list
 * says so; a submit is refused).  0, or a negative errno when any is
 * missing. */
int devq_repo_builtins(struct devq_backend *be);

/* Loop thread: drops a reference; the last unloads the code and frees e. */
void devq_repo_put(struct devq_exe *e);

#endif
