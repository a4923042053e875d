/* SPDX-License-Identifier: Apache-2.0 */
/* The executable repository; see repo.h and devqd(8). */
#include "core/repo.h"

#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/config.h"
#include "base/log.h"
#include "base/tname.h"

/* ---- lifetime --------------------------------------------------------- */

/* Any thread: closes the shared objects and frees e. */
static void exe_close(struct devq_exe *e)
{
	for (int i = 0; i < 2; i++) {
		if (e->dl[i] && dlclose(e->dl[i]) != 0)
			log_err("executables: %s: dlclose: %s", e->path, dlerror());
		if (e->dl_fd[i] >= 0 && close(e->dl_fd[i]) < 0)
			log_err("executables: %s: close: %s", e->path, strerror(errno));
	}
	free(e);
}

/* The backend's housekeeping thread: one host part's slots are finied;
 * the last closes the library (never before: fini is its code). */
static void host_released(void *ud)
{
	struct devq_exe *e = ud;
	if (atomic_fetch_sub(&e->releasing, 1) == 1)
		exe_close(e);
}

static void exe_free(struct devq_exe *e)
{
	if (e->k.dev && e->be && e->be->ops->unload_image)
		e->be->ops->unload_image(e->be, e->k.dev);
	const struct devq_host_exe *h[2] = { e->k.cpu_host, e->k.cuda_host };
	unsigned n = (h[0] != NULL) + (h[1] != NULL);
	if (n && e->be && e->be->ops->host_release) {
		/* Their fini runs on the backend's thread, not here (the loop
		 * thread): the library is closed there, after it. */
		atomic_store(&e->releasing, n);
		for (int i = 0; i < 2; i++)
			if (h[i])
				e->be->ops->host_release(e->be, h[i], host_released, e);
		return;
	}
	exe_close(e);
}

void devq_repo_put(struct devq_exe *e)
{
	if (e && --e->refs == 0)
		exe_free(e);
}

void devq_repo_init(struct devq_repo *r, struct devq_backend *be)
{
	memset(r, 0, sizeof(*r));
	r->be = be;
	r->next_id = DEVQ_REPO_FIRST_ID;
}

void devq_repo_fini(struct devq_repo *r)
{
	for (unsigned i = 0; i < r->n; i++)
		devq_repo_put(r->exes[i]);
	r->n = 0;
	devq_idmap_fini(&r->by_id);
}

/* ---- checks ----------------------------------------------------------- */

/* The rule sudo applies to sudoers.d: a regular file (or, for dir, a
 * directory) owned by root or by the daemon's user, writable by nobody
 * else.  0, or -EPERM with the reason in why. */
static int owner_ok(const struct stat *st, bool dir, char *why, size_t n)
{
	if (dir ? !S_ISDIR(st->st_mode) : !S_ISREG(st->st_mode)) {
		snprintf(why, n, "not a %s", dir ? "directory" : "regular file");
		return -EPERM;
	}
	if (st->st_uid != 0 && st->st_uid != geteuid()) {
		snprintf(why, n, "owned by uid %u, not by root or the daemon's user (uid %u)",
			 (unsigned)st->st_uid, (unsigned)geteuid());
		return -EPERM;
	}
	if (st->st_mode & (S_IWGRP | S_IWOTH)) {
		snprintf(why, n, "writable by its %s (mode %04o)",
			 st->st_mode & S_IWOTH ? "others" : "group", (unsigned)(st->st_mode & 07777));
		return -EPERM;
	}
	return 0;
}

static void fileid_of(const struct stat *st, struct devq_fileid *id)
{
	id->dev = st->st_dev;
	id->ino = st->st_ino;
	id->size = st->st_size;
	id->mtime = st->st_mtim;
}

static bool fileid_eq(const struct devq_fileid *a, const struct devq_fileid *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
	       a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec;
}

/* [a-z_][a-z0-9_]{0,30} */
static bool name_ok(const char *s, size_t len)
{
	if (len < 1 || len > DEVQ_MAX_NAME - 1 || !(islower((unsigned char)s[0]) || s[0] == '_'))
		return false;
	for (size_t i = 1; i < len; i++)
		if (!(s[i] == '_' || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9')))
			return false;
	return true;
}

/* ---- one .exec file --------------------------------------------------- */

struct exec_text {
	char signature[256];
	char cpu[256], cpu_symbol[DEVQ_MAX_NAME * 2];
	char cuda[256], cuda_entry[128];
	char cpu_host[256], cpu_host_symbol[128];
	char cuda_host[256], cuda_host_symbol[128];
	char description[256];
	/* cost = EXPR (core/cost.h); where its value starts, for errors
	 * naming the column. */
	char cost[DEVQ_COST_TEXT_MAX + 1];
	unsigned cost_line, cost_col;
};

/* A file the .exec names: relative to its directory, no "..". */
static int rel_path_ok(const char *v)
{
	if (v[0] == '/')
		return -1;
	for (const char *p = v; *p;) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);
		if (n == 2 && p[0] == '.' && p[1] == '.')
			return -1;
		p += n + (slash ? 1 : 0);
	}
	return 0;
}

/* Parses the key = value lines of buf (NUL-terminated) into t. */
static int parse_exec(char *buf, struct exec_text *t, char *why, size_t n)
{
	static const struct {
		const char *key;
		size_t off, size;
	} keys[] = {
#define K(k, f) { k, offsetof(struct exec_text, f), sizeof(((struct exec_text *)0)->f) }
		K("signature", signature), K("cpu", cpu), K("cpu-symbol", cpu_symbol),
		K("cuda", cuda), K("cuda-entry", cuda_entry), K("description", description),
		K("cpu-host", cpu_host), K("cpu-host-symbol", cpu_host_symbol),
		K("cuda-host", cuda_host), K("cuda-host-symbol", cuda_host_symbol),
		K("cost", cost),
#undef K
	};
	unsigned seen[sizeof(keys) / sizeof(keys[0])] = { 0 };
	unsigned lineno = 0;
	memset(t, 0, sizeof(*t));
	for (char *line = buf, *next; line; line = next) {
		lineno++;
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		char *hash = strchr(line, '#');
		if (hash)
			*hash = '\0';
		char *key, *value, *start = line;
		int kv = devq_config_split(line, &key, &value);
		if (kv == 0)
			continue;
		if (kv < 0) {
			snprintf(why, n, "line %u: expected 'key = value'", lineno);
			return -EINVAL;
		}
		size_t k = 0;
		while (k < sizeof(keys) / sizeof(keys[0]) && strcmp(keys[k].key, key))
			k++;
		if (k == sizeof(keys) / sizeof(keys[0])) {
			snprintf(why, n, "line %u: unknown key '%.40s'", lineno, key);
			return -EINVAL;
		}
		if (seen[k]) {
			snprintf(why, n, "line %u: %s given twice (first at line %u)", lineno, key,
				 seen[k]);
			return -EINVAL;
		}
		seen[k] = lineno;
		if (!*value) {
			snprintf(why, n, "line %u: %s: empty value", lineno, key);
			return -EINVAL;
		}
		if (strlen(value) >= keys[k].size) {
			snprintf(why, n, "line %u: %s: longer than %zu bytes", lineno, key,
				 keys[k].size - 1);
			return -EINVAL;
		}
		memcpy((char *)t + keys[k].off, value, strlen(value) + 1);
		if (keys[k].off == offsetof(struct exec_text, cost)) {
			t->cost_line = lineno;
			t->cost_col = (unsigned)(value - start) + 1;
		}
	}
	if (!t->signature[0]) {
		snprintf(why, n, "no signature");
		return -EINVAL;
	}
	if (!t->cpu[0] && !t->cuda[0] && !t->cpu_host[0] && !t->cuda_host[0]) {
		snprintf(why, n, "names no code (cpu, cuda, cpu-host or cuda-host)");
		return -EINVAL;
	}
	/* One kind of code per backend: the backend would not know which to
	 * run. */
	if ((t->cpu[0] && t->cpu_host[0]) || (t->cuda[0] && t->cuda_host[0])) {
		snprintf(why, n, "%s: give one of them, not both",
			 t->cpu[0] && t->cpu_host[0] ? "cpu and cpu-host" : "cuda and cuda-host");
		return -EINVAL;
	}
	static const struct {
		const char *key;
		size_t off;
	} paths[] = {
		{ "cpu", offsetof(struct exec_text, cpu) },
		{ "cuda", offsetof(struct exec_text, cuda) },
		{ "cpu-host", offsetof(struct exec_text, cpu_host) },
		{ "cuda-host", offsetof(struct exec_text, cuda_host) },
	};
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		const char *v = (const char *)t + paths[i].off;
		if (v[0] && rel_path_ok(v) < 0) {
			snprintf(why, n, "%s: must be a path inside the directory", paths[i].key);
			return -EINVAL;
		}
	}
	return 0;
}

/* Reads the .exec at path (open by fd so the checked file is the one
 * read). */
static int read_exec(const char *path, char *buf, size_t cap, struct stat *st, char *why,
		     size_t n)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0) {
		snprintf(why, n, "%s", errno == ELOOP ? "a symbolic link" : strerror(errno));
		return -EPERM;
	}
	int r = 0;
	if (fstat(fd, st) < 0) {
		snprintf(why, n, "%s", strerror(errno));
		r = -EIO;
	} else if ((r = owner_ok(st, false, why, n)) == 0) {
		if (st->st_size >= (off_t)cap) {
			snprintf(why, n, "larger than %zu bytes", cap - 1);
			r = -EFBIG;
		} else {
			size_t got = 0;
			ssize_t k;
			while (got < cap - 1 && (k = read(fd, buf + got, cap - 1 - got)) != 0) {
				if (k < 0) {
					if (errno == EINTR)
						continue;
					snprintf(why, n, "read: %s", strerror(errno));
					r = -EIO;
					break;
				}
				got += (size_t)k;
			}
			buf[got] = '\0';
			if (!r && memchr(buf, '\0', got)) {
				snprintf(why, n, "not a text file");
				r = -EINVAL;
			}
		}
	}
	if (close(fd) < 0 && !r) {
		snprintf(why, n, "close: %s", strerror(errno));
		r = -EIO;
	}
	return r;
}

/* Opens the shared object at path (named rel in the .exec under key) as
 * e->dl[slot], checks it and resolves sym in it into *fn; fid is where its
 * identity goes. */
static int dl_load(struct devq_exe *e, int slot, const char *key, const char *path,
		   const char *rel, const char *sym, struct devq_fileid *fid, void **fn, char *why,
		   size_t n)
{
	e->dl_fd[slot] = open(path, O_RDONLY | O_CLOEXEC);
	if (e->dl_fd[slot] < 0) {
		snprintf(why, n, "%s %.200s: %s", key, rel, strerror(errno));
		return -ENOENT;
	}
	struct stat st;
	if (fstat(e->dl_fd[slot], &st) < 0) {
		snprintf(why, n, "%s %.200s: %s", key, rel, strerror(errno));
		return -EIO;
	}
	char rule[160];
	if (owner_ok(&st, false, rule, sizeof(rule)) < 0) {
		snprintf(why, n, "%s %.200s: %s", key, rel, rule);
		return -EPERM;
	}
	fileid_of(&st, fid);
	/* By its fd, under a name never used before: ld.so hands back an
	 * object already loaded under the name asked for (the previous
	 * version, still used by an op, had this path), and remembers every
	 * name an object was asked for under, so "/proc/self/fd/N" alone
	 * would find an older version opened through an earlier fd N.  The
	 * name is /proc/self/fd/N with the bits of a counter spelled as "./"
	 * or "fd/../" components in front: unique, and the same file. */
	static atomic_uint seq;
	unsigned c = atomic_fetch_add(&seq, 1);
	char fdpath[32 * 6 + 64] = "/proc/self/";
	size_t len = strlen(fdpath);
	for (unsigned b = 0; b < 32; b++) {
		const char *part = (c >> b) & 1 ? "fd/../" : "./";
		memcpy(fdpath + len, part, strlen(part) + 1);
		len += strlen(part);
	}
	snprintf(fdpath + len, sizeof(fdpath) - len, "fd/%d", e->dl_fd[slot]);
	e->dl[slot] = dlopen(fdpath, RTLD_NOW | RTLD_LOCAL);
	if (!e->dl[slot]) {
		const char *m = dlerror();
		snprintf(why, n, "%s %.100s: dlopen: %.200s", key, rel, m ? m : "failed");
		return -ENOEXEC;
	}
	(void)dlerror();
	void *f = dlsym(e->dl[slot], sym);
	/* The symbol must be the object's own, not one of a library it
	 * links (cpu-symbol = free would find libc's). */
	Dl_info info;
	struct link_map *lm = NULL;
	if (!f || !dladdr(f, &info) || dlinfo(e->dl[slot], RTLD_DI_LINKMAP, &lm) != 0 || !lm ||
	    !info.dli_fname || strcmp(info.dli_fname, lm->l_name)) {
		snprintf(why, n, "%s %.200s: no symbol '%s' in it", key, rel, sym);
		return -ENOENT;
	}
	*fn = f;
	return 0;
}

static int load_cpu(struct devq_exe *e, const char *path, const char *rel, const char *sym,
		    char *why, size_t n)
{
	void *fn;
	int r = dl_load(e, 0, "cpu", path, rel, sym, &e->fid[1], &fn, why, n);
	if (!r)
		e->k.cpu = (devq_cpu_fn)fn;
	return r;
}

/* A host executable's description: its ABI version must be one this
 * devqd reads (1 or 2: another version's structure cannot be read), and
 * it must run something.  Members past run are read only at version 2: a
 * version-1 structure ends at run. */
static int host_check(const struct devq_host_exe *x, const char *key, const char *rel,
		      const char *sym, char *why, size_t n)
{
	if (x->abi != 1 && x->abi != DEVQ_HOST_ABI) {
		snprintf(why, n, "%s %.150s: '%s' has host ABI version %u; this devqd runs versions "
			 "1 and %u (<devq/kernel.h> DEVQ_HOST_ABI)", key, rel, sym, (unsigned)x->abi,
			 (unsigned)DEVQ_HOST_ABI);
		return -ENOEXEC;
	}
	if (!x->run) {
		snprintf(why, n, "%s %.150s: '%s' has no run function", key, rel, sym);
		return -ENOEXEC;
	}
	if (x->abi >= 2 && !x->units != !x->run_units) {
		snprintf(why, n, "%s %.150s: '%s' has %s but not %s (both or neither)", key, rel, sym,
			 x->units ? "units" : "run_units", x->units ? "run_units" : "units");
		return -ENOEXEC;
	}
	return 0;
}

/* An ABI-2 structure's cost, where the NAME.exec declares none (the file,
 * which its owner edits without a rebuild, wins): compiled once here as a
 * `cost =` line is.  A text past DEVQ_COST_TEXT_MAX is refused, read no
 * further than one byte past it. */
static int host_cost(struct devq_exe *e, const struct devq_host_exe *x, const char *key,
		     const char *rel, const char *sym, char *why, size_t n)
{
	if (x->abi < 2 || !x->cost || e->cost_text[0])
		return 0;
	size_t len = strnlen(x->cost, DEVQ_COST_TEXT_MAX + 1);
	char cerr[160];
	if (len > DEVQ_COST_TEXT_MAX) {
		snprintf(why, n, "%s %.150s: '%s' cost: longer than %u characters", key, rel, sym,
			 (unsigned)DEVQ_COST_TEXT_MAX);
		return -ENOEXEC;
	}
	if (devq_cost_compile(x->cost, &e->sig, &e->cost, cerr, sizeof(cerr)) < 0) {
		snprintf(why, n, "%s %.150s: '%s' cost: %s", key, rel, sym, cerr);
		return -ENOEXEC;
	}
	memcpy(e->cost_text, x->cost, len);
	e->cost_text[len] = '\0';
	return 0;
}

static int load_host(struct devq_exe *e, int cuda, const char *path, const char *rel,
		     const char *sym, char *why, size_t n)
{
	const char *key = cuda ? "cuda-host" : "cpu-host";
	void *fn;
	int r = dl_load(e, cuda, key, path, rel, sym, &e->fid[cuda ? 2 : 1], &fn, why, n);
	if (!r)
		r = host_check(fn, key, rel, sym, why, n);
	if (!r)
		r = host_cost(e, fn, key, rel, sym, why, n);
	if (!r && cuda)
		e->k.cuda_host = fn;
	else if (!r)
		e->k.cpu_host = fn;
	return r;
}

static int load_cuda(struct devq_exe *e, struct devq_backend *be, const char *path,
		     const char *rel, const char *entry, char *why, size_t n)
{
	struct stat st;
	if (stat(path, &st) < 0) {
		snprintf(why, n, "cuda %.200s: %s", rel, strerror(errno));
		return -ENOENT;
	}
	char rule[160];
	if (owner_ok(&st, false, rule, sizeof(rule)) < 0) {
		snprintf(why, n, "cuda %.200s: %s", rel, rule);
		return -EPERM;
	}
	fileid_of(&st, &e->fid[2]);
	if (!be || !be->ops->load_image)
		return 0; /* nothing here runs device images: only the file is checked */
	char err[200];
	void *dev = NULL;
	int r = be->ops->load_image(be, path, entry, &e->sig, &dev, err, sizeof(err));
	if (r < 0) {
		snprintf(why, n, "cuda %.100s: %s", rel, err);
		return r;
	}
	e->k.dev = dev;
	e->be = be;
	return 0;
}

/* Validates dir/file (file: "NAME.exec").  0 with *out NULL when the served
 * prev is unchanged, 0 with *out a new executable, or -errno with why. */
static int load_one(const char *dir, const char *file, struct devq_backend *be,
		    struct devq_exe *prev, struct devq_exe **out, char *why, size_t n)
{
	*out = NULL;
	struct devq_exe *e = calloc(1, sizeof(*e));
	char *buf = malloc(DEVQ_REPO_FILE_MAX);
	if (!e || !buf) {
		free(e);
		free(buf);
		snprintf(why, n, "out of memory");
		return -ENOMEM;
	}
	e->dl_fd[0] = e->dl_fd[1] = -1;
	e->refs = 1;
	size_t len = strlen(file) - 5;
	memcpy(e->name, file, len);
	e->name[len] = '\0';
	snprintf(e->path, sizeof(e->path), "%s/%s", dir, file);
	struct stat st;
	struct exec_text t;
	int r = read_exec(e->path, buf, DEVQ_REPO_FILE_MAX, &st, why, n);
	if (!r)
		r = parse_exec(buf, &t, why, n);
	free(buf);
	if (r)
		goto fail;
	fileid_of(&st, &e->fid[0]);
	char sigerr[160];
	if (devq_sig_parse(t.signature, &e->sig, sigerr, sizeof(sigerr)) < 0) {
		snprintf(why, n, "signature: %s", sigerr);
		r = -EINVAL;
		goto fail;
	}
	if (t.cost[0]) {
		/* Compiled here, once: a submit evaluates it.  The error
		 * names the column in the file's line, not in the value. */
		char cerr[160];
		if (devq_cost_compile(t.cost, &e->sig, &e->cost, cerr, sizeof(cerr)) < 0) {
			unsigned col = 0;
			const char *c = cerr;
			if (sscanf(cerr, "column %u: ", &col) == 1 && (c = strchr(cerr, ':')))
				c += 2;
			snprintf(why, n, "line %u, column %u: cost: %s", t.cost_line,
				 t.cost_col + (col ? col - 1 : 0), col ? c : cerr);
			r = -EINVAL;
			goto fail;
		}
		memcpy(e->cost_text, t.cost, sizeof(e->cost_text));
	}
	memcpy(e->signature, t.signature, sizeof(e->signature));
	memcpy(e->description, t.description, sizeof(e->description));
	e->k.name = e->name;
	e->k.signature = e->signature;
	e->k.repository = true;
	char cpu[DEVQ_REPO_PATH_MAX + 256], cuda[DEVQ_REPO_PATH_MAX + 256];
	/* The CPU file is cpu or cpu-host, the CUDA one cuda or cuda-host
	 * (parse_exec allows one of each pair). */
	const char *cpu_rel = t.cpu[0] ? t.cpu : t.cpu_host;
	const char *cuda_rel = t.cuda[0] ? t.cuda : t.cuda_host;
	snprintf(cpu, sizeof(cpu), "%s/%s", dir, cpu_rel);
	snprintf(cuda, sizeof(cuda), "%s/%s", dir, cuda_rel);
	/* Unchanged when the .exec and every file it names are the same
	 * files as those served: stat only, nothing loaded again. */
	if (prev && !strcmp(prev->path, e->path) && fileid_eq(&prev->fid[0], &e->fid[0])) {
		struct devq_fileid f1 = { 0 }, f2 = { 0 };
		struct stat s2;
		char rule[160];
		bool same = true;
		if (cpu_rel[0]) {
			same = stat(cpu, &s2) == 0 && owner_ok(&s2, false, rule, sizeof(rule)) == 0;
			if (same)
				fileid_of(&s2, &f1);
		}
		if (same && cuda_rel[0]) {
			same = stat(cuda, &s2) == 0 && owner_ok(&s2, false, rule, sizeof(rule)) == 0;
			if (same)
				fileid_of(&s2, &f2);
		}
		if (same && fileid_eq(&f1, &prev->fid[1]) && fileid_eq(&f2, &prev->fid[2])) {
			free(e);
			return 0;
		}
	}
	if (t.cpu[0]) {
		if ((r = load_cpu(e, cpu, t.cpu, t.cpu_symbol[0] ? t.cpu_symbol : e->name, why, n)))
			goto fail;
		e->backends |= DEVQ_EXE_CPU;
	}
	if (t.cuda[0]) {
		if ((r = load_cuda(e, be, cuda, t.cuda, t.cuda_entry[0] ? t.cuda_entry : e->name, why, n)))
			goto fail;
		e->backends |= DEVQ_EXE_CUDA;
	}
	if (t.cpu_host[0]) {
		if ((r = load_host(e, 0, cpu, t.cpu_host,
				   t.cpu_host_symbol[0] ? t.cpu_host_symbol : e->name, why, n)))
			goto fail;
		e->backends |= DEVQ_EXE_CPU;
	}
	if (t.cuda_host[0]) {
		if ((r = load_host(e, 1, cuda, t.cuda_host,
				   t.cuda_host_symbol[0] ? t.cuda_host_symbol : e->name, why, n)))
			goto fail;
		e->backends |= DEVQ_EXE_CUDA;
	}
	/* The backend that runs it lets its host parts go (exe_free). */
	if (e->k.cpu_host || e->k.cuda_host)
		e->be = be;
	*out = e;
	return 0;
fail:
	exe_free(e);
	return r;
}

/* ---- scan and apply --------------------------------------------------- */

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The .exec files of dir, sorted (shadowing between files must not
 * depend on readdir's order).  *names freed by the caller, each too. */
static int list_dir(const char *dir, char ***names, size_t *count)
{
	*names = NULL;
	*count = 0;
	DIR *d = opendir(dir);
	if (!d)
		return -errno;
	size_t n = 0, cap = 0;
	char **v = NULL;
	int r = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);
		if (len < 6 || strcmp(de->d_name + len - 5, ".exec"))
			continue;
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 16;
			char **nv = realloc(v, nc * sizeof(*nv));
			if (!nv) {
				r = -ENOMEM;
				break;
			}
			v = nv;
			cap = nc;
		}
		if (!(v[n] = strdup(de->d_name))) {
			r = -ENOMEM;
			break;
		}
		n++;
	}
	if (closedir(d) < 0 && !r)
		r = -errno;
	if (r) {
		for (size_t i = 0; i < n; i++)
			free(v[i]);
		free(v);
		return r;
	}
	if (n)
		qsort(v, n, sizeof(*v), cmp_str);
	*names = v;
	*count = n;
	return 0;
}

void devq_repo_scan_prepare(struct devq_repo *r, struct devq_repo_scan *sc)
{
	memset(sc, 0, sizeof(*sc));
	for (unsigned i = 0; i < r->n; i++)
		sc->prev[sc->nprev++] = devq_repo_ref(r->exes[i]);
}

static bool claimed(const struct devq_repo_scan *sc, const char *name)
{
	for (unsigned i = 0; i < sc->n; i++)
		if (!strcmp(sc->name[i], name))
			return true;
	return false;
}

static int scan_dir(const char *dir, bool is_default, struct devq_backend *be,
		    struct devq_repo_scan *sc, char (*shadow)[DEVQ_REPO_PATH_MAX])
{
	struct stat st;
	char why[512];
	if (stat(dir, &st) < 0) {
		if (errno == ENOENT && is_default) {
			log_info("executables: %s does not exist: no repository executables", dir);
			return 0;
		}
		log_err("executables: %s: %s", dir, strerror(errno));
		return 1;
	}
	if (owner_ok(&st, true, why, sizeof(why)) < 0) {
		log_err("executables: %s: %s; nothing in it is loaded", dir, why);
		return 1;
	}
	char **names;
	size_t count;
	int r = list_dir(dir, &names, &count);
	if (r < 0) {
		if (r == -ENOMEM)
			return r;
		log_err("executables: %s: %s", dir, strerror(-r));
		return 1;
	}
	int broken = 0;
	for (size_t i = 0; i < count; i++) {
		const char *file = names[i];
		size_t len = strlen(file) - 5;
		char name[DEVQ_MAX_NAME];
		if (!name_ok(file, len)) {
			log_err("executables: %s/%s: '%.*s' is not a valid executable name "
				"([a-z_][a-z0-9_]{0,30})",
				dir, file, (int)(len > 64 ? 64 : len), file);
			broken++;
			continue;
		}
		memcpy(name, file, len);
		name[len] = '\0';
		const struct devq_kernel *bi = devq_kernel_find(name);
		if (bi) {
			log_err("executables: %s/%s: shadows the built-in executable %s", dir, file,
				name);
			broken++;
			continue;
		}
		if (claimed(sc, name)) {
			unsigned j = 0;
			while (strcmp(sc->name[j], name))
				j++;
			log_err("executables: %s/%s: shadows %s", dir, file, shadow[j]);
			broken++;
			continue;
		}
		if (sc->n == DEVQ_REPO_MAX) {
			log_err("executables: %s/%s: more than %u executables; not loaded", dir, file,
				DEVQ_REPO_MAX);
			broken++;
			continue;
		}
		struct devq_exe *prev = NULL;
		for (unsigned j = 0; j < sc->nprev && !prev; j++)
			if (!strcmp(sc->prev[j]->name, name))
				prev = sc->prev[j];
		struct devq_exe *e;
		r = load_one(dir, file, be, prev, &e, why, sizeof(why));
		if (r == -ENOMEM)
			break;
		if (r) {
			log_err("executables: %s/%s: %s", dir, file, why);
			broken++;
			continue;
		}
		memcpy(sc->name[sc->n], name, sizeof(name));
		snprintf(shadow[sc->n], DEVQ_REPO_PATH_MAX, "%s/%s", dir, file);
		sc->exe[sc->n++] = e;
	}
	for (size_t i = 0; i < count; i++)
		free(names[i]);
	free(names);
	return r == -ENOMEM ? r : broken;
}

int devq_repo_scan(const char *dirs, struct devq_backend *be, struct devq_repo_scan *sc)
{
	char(*shadow)[DEVQ_REPO_PATH_MAX] = calloc(DEVQ_REPO_MAX, sizeof(*shadow));
	if (!shadow)
		return -ENOMEM;
	const char *list = dirs ? dirs : DEVQ_REPO_DEFAULT_DIR;
	int broken = 0;
	unsigned ndirs = 0;
	for (const char *p = list; *p;) {
		const char *colon = strchr(p, ':');
		size_t len = colon ? (size_t)(colon - p) : strlen(p);
		char dir[DEVQ_REPO_PATH_MAX - 64];
		if (len == 0) {
			p += 1;
			continue;
		}
		if (++ndirs > DEVQ_REPO_MAX_DIRS) {
			log_err("executables: more than %u directories; %.*s and later ones ignored",
				DEVQ_REPO_MAX_DIRS, (int)(len > 200 ? 200 : len), p);
			broken++;
			break;
		}
		if (len >= sizeof(dir)) {
			log_err("executables: %.*s...: directory name longer than %zu bytes", 100, p,
				sizeof(dir) - 1);
			broken++;
		} else {
			memcpy(dir, p, len);
			dir[len] = '\0';
			while (len > 1 && dir[len - 1] == '/')
				dir[--len] = '\0';
			/* The default directory may be missing, however it was named. */
			int r = scan_dir(dir, !dirs || !strcmp(dir, DEVQ_REPO_DEFAULT_DIR), be, sc,
					 shadow);
			if (r < 0) {
				free(shadow);
				return r;
			}
			broken += r;
		}
		p += len + (colon ? 1 : 0);
		if (colon && !colon[1])
			break;
	}
	free(shadow);
	sc->broken = (unsigned)broken;
	return broken;
}

void devq_repo_scan_discard(struct devq_repo_scan *sc)
{
	for (unsigned i = 0; i < sc->n; i++)
		if (sc->exe[i])
			devq_repo_put(sc->exe[i]);
	for (unsigned i = 0; i < sc->nprev; i++)
		devq_repo_put(sc->prev[i]);
	sc->n = sc->nprev = 0;
}

static struct devq_exe *find_name(struct devq_exe *const *v, unsigned n, const char *name)
{
	for (unsigned i = 0; i < n; i++)
		if (!strcmp(v[i]->name, name))
			return v[i];
	return NULL;
}

void devq_repo_apply(struct devq_repo *r, struct devq_repo_scan *sc)
{
	struct devq_exe *next[DEVQ_REPO_MAX];
	unsigned nn = 0;
	unsigned added = 0, replaced = 0, removed = 0;
	for (unsigned i = 0; i < sc->n; i++) {
		struct devq_exe *old = find_name(r->exes, r->n, sc->name[i]);
		struct devq_exe *e = sc->exe[i];
		if (!e) { /* unchanged */
			if (old) {
				next[nn++] = old;
				continue;
			}
			/* Cannot happen: scans are applied one at a time. */
			log_err("executables: %s vanished during a reload", sc->name[i]);
			continue;
		}
		if (old) {
			e->id = old->id;
			log_notice("executables: %s (id %u) replaced from %s; ops in flight keep "
				   "the old code",
				   e->name, e->id, e->path);
			replaced++;
		} else {
			e->id = r->next_id++;
			if (r->next_id < DEVQ_REPO_FIRST_ID)
				r->next_id = DEVQ_REPO_FIRST_ID;
			log_info("executables: %s (id %u) from %s: %s%s%s", e->name, e->id, e->path,
				 e->backends & DEVQ_EXE_CPU ? "cpu" : "",
				 e->backends == (DEVQ_EXE_CPU | DEVQ_EXE_CUDA) ? ", " : "",
				 e->backends & DEVQ_EXE_CUDA ? "cuda" : "");
			added++;
		}
		/* A replacement takes the slot its predecessor frees, so only an
		 * addition can fail (out of memory). */
		if (old)
			devq_idmap_del(&r->by_id, old->id);
		if (devq_idmap_put(&r->by_id, e->id, e) < 0) {
			log_err("executables: %s: out of memory; not served", e->path);
			continue; /* e freed with the scan; old, if any, goes below */
		}
		sc->exe[i] = NULL;
		/* devqd.conf's rate key, before any op can use it. */
		e->est.pinned = devq_config_rate(r->rates, e->name);
		next[nn++] = e;
	}
	for (unsigned i = 0; i < r->n; i++) {
		struct devq_exe *old = r->exes[i];
		bool kept = false;
		for (unsigned j = 0; j < nn && !kept; j++)
			kept = next[j] == old;
		if (kept)
			continue;
		if (devq_idmap_get(&r->by_id, old->id) == old) {
			devq_idmap_del(&r->by_id, old->id);
			log_notice("executables: %s (id %u) removed", old->name, old->id);
			removed++;
		}
		devq_repo_put(old); /* the table's reference */
	}
	memcpy(r->exes, next, nn * sizeof(*next));
	r->n = nn;
	r->reloads++;
	if (r->reloads > 1)
		log_notice("executables: reloaded: %u served (%u added, %u replaced, %u removed), "
			   "%u files refused",
			   nn, added, replaced, removed, sc->broken);
	else
		log_info("executables: %u served, %u files refused", nn, sc->broken);
	devq_repo_scan_discard(sc);
}

/* ---- built-ins on the host ABI ----------------------------------------- */

#ifndef DEVQ_HOSTDIR
#define DEVQ_HOSTDIR "/usr/local/lib/devq"
#endif

/* Where the built-in host library of backend be is: $DEVQ_HOST_DIR, else
 * next to devqd (DIR/host/, a build tree), else DEVQ_HOSTDIR (the
 * install).  0 with the
 * path, or -ENOENT with the places looked at in why. */
static int builtin_path(const char *file, char *path, size_t n, char *why, size_t wn)
{
	char self[DEVQ_REPO_PATH_MAX];
	ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	char here[DEVQ_REPO_PATH_MAX] = "";
	if (len > 0) {
		self[len] = '\0';
		char *slash = strrchr(self, '/');
		if (slash) {
			*slash = '\0';
			snprintf(here, sizeof(here), "%.400s/host", self);
		}
	}
	/* $DEVQ_HOST_DIR first: a devqd started through another loader
	 * (the GPU bundle's) sees that loader as /proc/self/exe. */
	const char *env = getenv("DEVQ_HOST_DIR");
	const char *dirs[3] = { env ? env : "", here, DEVQ_HOSTDIR };
	for (int i = 0; i < 3; i++) {
		if (!dirs[i][0])
			continue;
		snprintf(path, n, "%s/%s", dirs[i], file);
		if (access(path, F_OK) == 0)
			return 0;
	}
	snprintf(why, wn, "no %s in %s%s%.200s%s%s", file, env ? env : "", env ? ", " : "", here,
		 here[0] ? " or " : "", DEVQ_HOSTDIR);
	return -ENOENT;
}

int devq_repo_builtins(struct devq_backend *be)
{
	bool cuda = !strcmp(be->name, "cuda");
	if (!cuda && strcmp(be->name, "cpu"))
		return 0; /* a test backend: runs no host code */
	const char *file = cuda ? "libdevq-host-cuda.so" : "libdevq-host-cpu.so";
	char path[DEVQ_REPO_PATH_MAX + 64], why[400];
	unsigned want = 0, got = 0;
	for (size_t i = 0; i < devq_nkernels; i++)
		want += devq_kernels[i].host;
	if (!want)
		return 0;
	if (builtin_path(file, path, sizeof(path), why, sizeof(why)) < 0) {
		log_err("built-ins: %s: the %u host built-ins (gemm_f32...) are unavailable", why, want);
		return -ENOENT;
	}
	struct stat st;
	char rule[160];
	if (stat(path, &st) < 0) {
		int e = errno;
		log_err("built-ins: %s: %s; host built-ins unavailable", path, strerror(e));
		return -e;
	}
	if (owner_ok(&st, false, rule, sizeof(rule)) < 0) {
		log_err("built-ins: %s: %s; host built-ins unavailable", path, rule);
		return -EPERM;
	}
	/* Never closed: built-ins live as long as devqd.  A BLAS library
	 * starts its thread pool when loaded, from this thread: its threads
	 * are named "devqd-host" (base/tname.h). */
	char own[16];
	devq_tname_push("devqd-host", own);
	void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	devq_tname_pop(own);
	if (!dl) {
		const char *m = dlerror();
		log_err("built-ins: %s: dlopen: %s; host built-ins unavailable", path,
			m ? m : "failed");
		return -ENOEXEC;
	}
	for (size_t i = 0; i < devq_nkernels; i++) {
		struct devq_kernel *k = &devq_kernels[i];
		if (!k->host)
			continue;
		char sym[DEVQ_MAX_NAME + 16];
		snprintf(sym, sizeof(sym), "devq_host_%s", k->name);
		const struct devq_host_exe *x = dlsym(dl, sym);
		if (!x) {
			log_err("built-ins: %s: no symbol '%s' in it; %s unavailable", path, sym, k->name);
			continue;
		}
		if (host_check(x, cuda ? "cuda-host" : "cpu-host", path, sym, why, sizeof(why)) < 0) {
			log_err("built-ins: %s; %s unavailable", why, k->name);
			continue;
		}
		if (cuda)
			k->cuda_host = x;
		else
			k->cpu_host = x;
		got++;
	}
	log_info("built-ins: %u of %u host built-ins from %s", got, want, path);
	return got == want ? 0 : -ENOENT;
}
