/* devqd.conf: the admin's configuration file.  One table maps each key to a
 * field of struct devq_config; adding a setting is one row in config.c
 * (plus its flag in main.c and its entry in man/devqd.conf.5). */
#ifndef DEVQ_CONFIG_H
#define DEVQ_CONFIG_H

#include <stddef.h>

struct devq_config; /* daemon.h */

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

/* Frees the strings the file supplied (the config's string fields may
 * point at them, so call this last). */
void devq_config_fini(void);

#endif
