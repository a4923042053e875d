/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Slurm plugin's readers of what slurmctld says, without a cluster:
 * hostlist expressions (ranges, zero padding, several brackets, items) and
 * scontrol show job -d's GRES lines (whole GPUs, shards on one GPU or on
 * several, typed GPUs, the node's own line among others).  check.sh
 * builds it against slurm/spank_devq.c, the spank and slurm calls stubbed,
 * and runs it first.  Prints a Check-style summary; exits non-zero on a
 * failure.
 */
#include "../../slurm/spank_devq.c"

#include <stdarg.h>

/* ---- what slurmd would provide -------------------------------------- */

int spank_remote(spank_t sp)
{
	(void)sp;
	return 0;
}

spank_err_t spank_option_register(spank_t sp, struct spank_option *opt)
{
	(void)sp, (void)opt;
	return ESPANK_SUCCESS;
}

spank_err_t spank_option_getopt(spank_t sp, struct spank_option *opt, char **arg)
{
	(void)sp, (void)opt, (void)arg;
	return ESPANK_ERROR;
}

spank_err_t spank_get_item(spank_t sp, spank_item_t item, ...)
{
	(void)sp, (void)item;
	return ESPANK_ERROR;
}

spank_err_t spank_getenv(spank_t sp, const char *var, char *buf, int len)
{
	(void)sp, (void)var, (void)buf, (void)len;
	return ESPANK_ENV_NOEXIST;
}

spank_err_t spank_setenv(spank_t sp, const char *var, const char *val, int overwrite)
{
	(void)sp, (void)var, (void)val, (void)overwrite;
	return ESPANK_SUCCESS;
}

void slurm_info(const char *fmt, ...)
{
	(void)fmt;
}

void slurm_error(const char *fmt, ...)
{
	(void)fmt;
}

/* ---- the checks ------------------------------------------------------ */

static int checks, failures;

static void expect(bool ok, const char *what)
{
	checks++;
	if (!ok) {
		failures++;
		printf("FAIL: %s\n", what);
	}
}

static void host(const char *list, const char *name, bool want)
{
	char what[256];
	snprintf(what, sizeof(what), "'%s' %s in '%s'", name, want ? "is" : "is not", list);
	expect(hostlist_has(list, strlen(list), name) == want, what);
}

/* shards of GPUs "gpus" on node "node" from scontrol's answer "out". */
static void alloc(const char *out, const char *node, const char *gpus, const char *want)
{
	struct job j = {.id = 1};
	j.ngpus = parse_gpus(gpus, j.gpus);
	unsigned shards[MAX_GPUS] = {0};
	char why[256] = "", got[256] = "", what[1024];
	setenv("SLURMD_NODENAME", node, 1);
	if (alloc_parse(out, &j, shards, why, sizeof(why)) < 0) {
		snprintf(got, sizeof(got), "error");
	} else {
		size_t n = 0;
		for (int i = 0; i < j.ngpus; i++)
			n += (size_t)snprintf(got + n, sizeof(got) - n, "%s%u", i ? "," : "",
					      shards[i]);
	}
	snprintf(what, sizeof(what), "node %s, GPUs %s: shards %s, want %s (%s)", node, gpus,
		 got, want, why);
	expect(!strcmp(got, want), what);
}

int main(void)
{
	host("n1", "n1", true);
	host("n1", "n10", false);
	host("n[1-2]", "n2", true);
	host("n[1-2]", "n3", false);
	host("n[1-2]", "n", false);
	host("n[1-2],login", "login", true);
	host("gpu[01-16]", "gpu07", true);
	host("gpu[01-16]", "gpu7", false);
	host("gpu[01-16]", "gpu17", false);
	host("n[1-10]", "n10", true);
	host("n[1-10]", "n01", false);
	host("n[1,3,5-6]", "n5", true);
	host("n[1,3,5-6]", "n4", false);
	host("rack[1-2]-n[1-4]", "rack2-n3", true);
	host("rack[1-2]-n[1-4]", "rack3-n3", false);
	host("n[1-2]x,m[3-4]", "m4", true);
	host("n[1-2]x,m[3-4]", "n1", false);
	host("a[1-2", "a1", false);

	cfg.shards_per_gpu = 4;
	const char *one = "JobId=1 JobName=x\n"
			  "   JOB_GRES=shard:3\n"
			  "     Nodes=n2 CPU_IDs=0 Mem=0 GRES=shard:3(IDX:0)\n"
			  "   TresPerNode=gres:shard:3\n";
	alloc(one, "n2", "0", "3");
	alloc(one, "n1", "0", "error");
	const char *two = "   JOB_GRES=gpu:3\n"
			  "     Nodes=n1 CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:0)\n"
			  "     Nodes=n2 CPU_IDs=0 Mem=0 GRES=gpu:2(IDX:0-1)\n";
	alloc(two, "n2", "0,1", "4,4");
	alloc(two, "n1", "0", "4");
	alloc("     Nodes=n[1-2] CPU_IDs=0 Mem=0 GRES=shard:2(IDX:0)\n", "n2", "0", "2");
	alloc("     Nodes=g1 CPU_IDs=0-3 Mem=0 GRES=gpu:a100:1(IDX:3),shard:2(IDX:1)\n", "g1", "1,3",
	      "2,4");
	/* Shards over two GPUs: an even part each, at least one. */
	alloc("     Nodes=g1 CPU_IDs=0 Mem=0 GRES=shard:6(IDX:0,2)\n", "g1", "0,2", "3,3");
	alloc("     Nodes=g1 CPU_IDs=0 Mem=0 GRES=shard:1(IDX:0-1)\n", "g1", "0,1", "1,1");
	/* Shards that name no GPU: over the job's. */
	alloc("     Nodes=g1 CPU_IDs=0 Mem=0 GRES=shard:4\n", "g1", "0,1", "2,2");
	/* A GPU no GRES names: 0, which the prolog turns into the least. */
	alloc("     Nodes=g1 CPU_IDs=0 Mem=0 GRES=shard:2(IDX:0)\n", "g1", "0,1", "2,0");
	/* Other GRES, and a line with no GRES, are no GPU's. */
	alloc("     Nodes=g1 CPU_IDs=0 Mem=0 GRES=nic:1(IDX:0)\n", "g1", "0", "0");
	alloc("     Nodes=g1 CPU_IDs=0 Mem=0\n", "g1", "0", "error");

	printf("%d%%: Checks: %d, Failures: %d, Errors: 0\n",
	       checks ? 100 * (checks - failures) / checks : 0, checks, failures);
	return failures != 0;
}
