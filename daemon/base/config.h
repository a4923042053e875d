/* SPDX-License-Identifier: Apache-2.0 */
/* devqd.conf: the admin's configuration file.  One table maps each key to a
 * field of struct devq_config; adding a setting is one row in config.c
 * (plus its flag in main.c and its entry in man/devqd.conf.5). */
#ifndef DEVQ_CONFIG_H
#define DEVQ_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Every setting of the daemon: flags and devqd.conf fill it in, the layers
 * above read it. */
struct devq_config {
	const char *socket_path;
	const char *backend; /* "cpu", "cuda" or "auto" */
	int device;          /* GPU ordinal for the CUDA backend */
	unsigned streams;
	unsigned priority_streams; /* high-priority streams, besides `streams` */
	int verbose;
	uint64_t max_op_ns;       /* admin bound on one op's duration */
	uint64_t max_buffer_bytes;
	uint32_t max_frame;
	unsigned max_queues;      /* per session */
	uint64_t stop_grace_ns;   /* shutdown: how long in-flight work may take */
	/* Watchdog: ops in flight and no completion for this long means the
	 * device or a completion thread is stuck (notify.c stops pinging). */
	uint64_t stall_ns;
	/* Expected time per core of one slice of a sliced host op (CPU
	 * backend): how late a cancel or max-op-ms can stop it. */
	uint64_t slice_ns;
	bool test_faults;         /* expose the fault-injection kernel (tests) */
	/* Device losses (server/culprit.c): a uid whose work lost the device
	 * lost_refuse_after times, each within lost_refuse_s seconds of the
	 * last, is refused for lost_refuse_s (0: never).  state_dir keeps the
	 * record across restarts (NULL: $STATE_DIRECTORY, or none). */
	unsigned lost_refuse_after;
	uint64_t lost_refuse_s;
	const char *state_dir;
	/* Admin calls (grant, evict): root and the members of these groups
	 * (comma-separated; NULL: root only).  Granted tenants' sockets go in
	 * tenants_dir (NULL: the socket path without ".sock", plus
	 * ".tenants"). */
	const char *control_groups;
	/* Members see every tenant's status and metrics, as root does, and
	 * may make no admin call (NULL: group devq-metrics, where it exists). */
	const char *observer_groups;
	const char *tenants_dir;
	/* A uid with a live grant works through its tenant socket only: a
	 * non-admin connection of it on the main socket is refused, so that
	 * its cap and weight cannot be sidestepped (requests/admin.h). */
	bool grant_exclusive;
	unsigned trace_records;   /* core/trace.c: op records kept (0: off) */
	const char *admin_group;  /* may trace every user's sessions (NULL: root only) */
	/* Tenancy (policy.c, quota.c, fair.c); 0 or NULL means the default,
	 * which devq_quota_defaults fills in. */
	const char *allow_users, *allow_groups; /* comma-separated; groups: "devq" */
	/* Who may open high-priority queues besides root and the daemon's
	 * user (policy.c): comma-separated, default nobody. */
	const char *priority_users, *priority_groups;
	unsigned fair_k;                        /* ops per device stream inside the backend */
	const char *fair_shares;                /* "user:weight,...": tenants' weights */
	uint64_t fair_window_ns;                /* expected device time per stream handed over */
	unsigned q_session_ops, q_user_ops;     /* ops in flight: backpressure */
	unsigned q_session_buffers, q_user_buffers;
	uint64_t q_session_pinned, q_user_pinned; /* bytes of shared buffers */
	uint64_t q_session_device, q_user_device; /* bytes of device buffers */
	unsigned q_user_queues, q_user_sessions;
	unsigned q_session_fds;                 /* received fds not yet claimed */
	uint64_t q_outbound;                    /* unsent bytes before a disconnect */
	/* Executable repository directories, ':'-separated (core/repo.c);
	 * NULL: the default directory, which may be missing. */
	const char *executables;
	/* Pinned rates (core/cost.h): "NAME=UNITS/s[,NAME=UNITS/s]...", at
	 * most DEVQ_CONFIG_RATES_MAX, each executable once; NULL: none.  Set
	 * by `rate = LIST`, `rate.NAME = UNITS/s` lines and --rate
	 * NAME=UNITS/s flags, which add to (or replace the rate of a name
	 * in) what is there; devq_config_rate reads it. */
	const char *rate;
};

#define DEVQ_CONFIG_RATES_MAX 64

#define DEVQ_FAIR_K_DEFAULT 16
#define DEVQ_FAIR_WINDOW_NS_DEFAULT 1000000ull
/* 2 ms: a cancel, an eviction or max-op-ms stops a sliced op within about
 * that much time (plus one unit where units are longer), and other host
 * ops waiting for cores get them as soon, while a slice's own cost (a lock
 * round trip to take and give back cores, a wake-up of the gemm's helpers
 * and a wait for them, two clock reads) is paid a few hundred times a
 * second per core, not thousands (devqd.conf(5), slice-us). */
#define DEVQ_SLICE_NS_DEFAULT 2000000ull

#define DEVQ_CONFIG_DEFAULT_PATH "/etc/devqd/devqd.conf"

/* Finds --config FILE (or -c FILE, --config=FILE) in argv without consuming
 * anything, so main's getopt still sees every flag and flags override the
 * file.  Loads that file, or the default path when it exists.  An explicit
 * file that is missing is an error; a missing default file is not.
 * Returns 0, or a negative errno after printing "FILE:LINE: problem". */
int devq_config_load_argv(struct devq_config *cfg, int argc, char *const *argv);

/* Parses one file into cfg; the first problem is written to err as
 * "FILE:LINE: ..." and a negative errno returned.  Values already in cfg
 * stay unless the file sets them. */
int devq_config_load(struct devq_config *cfg, const char *path, char *err, size_t errlen);

/* Sets one key from its text value, as a file line would. */
int devq_config_set(struct devq_config *cfg, const char *key, const char *value, char *err,
		    size_t errlen);

/* SIGHUP: reads the file loaded at start again and applies, at once, the
 * keys marked reloadable whose value changed, unless a command-line flag
 * set them; other changes are logged as needing a restart.  A file with a
 * mistake changes nothing: "FILE:LINE: ..." in err and a negative errno. */
int devq_config_reload(struct devq_config *cfg, char *err, size_t errlen);
/* How many -v the command line gave (they add to the file's verbose). */
int devq_config_verbose_flags(void);

/* The i-th key of the table, NULL past the end (documentation checks). */
const char *devq_config_key_name(size_t i);
/* Whether SIGHUP applies key at once (documentation checks). */
bool devq_config_key_reloadable(const char *key);
/* Whether argv[i] is the value of a --verbose before it: a number, in the
 * config's syntax (--verbose N sets the key; a bare --verbose adds one). */
bool devq_config_verbose_has_value(int argc, char *const *argv, int i);

/* Writes every key's value in cfg as a devqd.conf line ("key = value", in
 * the key's own unit), "# key is not set" for a string left NULL: the
 * effective settings (devqd --print-config), which read back as a file
 * give the same config. */
void devq_config_dump(FILE *f, const struct devq_config *cfg);

/* The rate pinned for executable name in a devq_config's rate list, in
 * units per second; 0 when none.  O(length of the list): for load time,
 * not per op. */
uint64_t devq_config_rate(const char *rates, const char *name);

/* Frees the strings the file supplied (the config's string fields may
 * point at them, so call this last). */
void devq_config_fini(void);

/* s without leading and trailing white space (in place). */
char *devq_config_trim(char *s);
/* One "key = value" line (comments already cut by the caller), trimmed in
 * place: 1 with key and value set, 0 for a blank line, -EINVAL without '='
 * (key then points at the trimmed line). */
int devq_config_split(char *line, char **key, char **value);

#endif
