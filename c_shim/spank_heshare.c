/*
 * heshare's SPANK plugin for sbatch/srun/salloc: registers --gpu-share, --gpu-class and
 * --energy-policy and checks their values as the command parses them. It is a separate, small
 * C library so that every sbatch does not load the whole Rust job_submit plugin; the options
 * reach job_submit/heshare in spank_job_env as _SLURM_SPANK_OPTION_heshare_<option>.
 *
 * Build (scripts/install.sh does this):
 *   cc -shared -fPIC -O2 -o spank_heshare.so c_shim/spank_heshare.c
 * The spank_* and slurm_* functions it calls are resolved from the host process at load time,
 * as for every SPANK plugin.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <slurm/spank.h>

SPANK_PLUGIN(heshare, 1);

static int check_share(const char *v)
{
	char *end = NULL;
	long pct;

	if (!v || !*v)
		return -1;
	if (!strcasecmp(v, "auto") || !strcasecmp(v, "exclusive"))
		return 0;
	pct = strtol(v, &end, 10);
	if (end && *end == '%')
		end++;
	return (end && *end == '\0' && pct >= 1 && pct <= 100) ? 0 : -1;
}

static int check_class(const char *v)
{
	if (!v || !*v || strlen(v) > 64)
		return -1;
	for (; *v; v++)
		if (!isalnum((unsigned char)*v) && *v != '-' && *v != '_' && *v != '.')
			return -1;
	return 0;
}

static int check_policy(const char *v)
{
	return (v && (!strcmp(v, "performance") || !strcmp(v, "balanced") || !strcmp(v, "energy"))) ? 0 : -1;
}

static int option_cb(int val, const char *optarg, int remote)
{
	(void)remote;
	switch (val) {
	case 0:
		if (check_share(optarg) == 0)
			return 0;
		slurm_error("heshare: --gpu-share: \"%s\" is not auto, exclusive or a percentage 1..=100", optarg ? optarg : "");
		return -1;
	case 1:
		if (check_class(optarg) == 0)
			return 0;
		slurm_error("heshare: --gpu-class: \"%s\" is not a job class name (letters, digits, '-', '_', '.')", optarg ? optarg : "");
		return -1;
	case 2:
		if (check_policy(optarg) == 0)
			return 0;
		slurm_error("heshare: --energy-policy: \"%s\" is not performance, balanced or energy", optarg ? optarg : "");
		return -1;
	}
	return 0;
}

static struct spank_option options[] = {
	{ "gpu-share", "auto|exclusive|PCT",
	  "heshare: let heshare size the GPU share (auto), keep whole GPUs (exclusive), or ask for PCT (1-100) percent of one GPU through MPS",
	  1, 0, option_cb },
	{ "gpu-class", "NAME",
	  "heshare: the job class (from heshare.toml) heshare predicts the job with, e.g. bert-train",
	  1, 1, option_cb },
	{ "energy-policy", "performance|balanced|energy",
	  "heshare: trade-off for this job: fastest, the cluster's default, or least energy",
	  1, 2, option_cb },
};

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	spank_context_t ctx = spank_context();
	size_t i;

	(void)ac;
	(void)av;
	/* Options are parsed in sbatch/salloc and srun, and forwarded to slurmstepd. */
	if (ctx != S_CTX_ALLOCATOR && ctx != S_CTX_LOCAL && ctx != S_CTX_REMOTE)
		return 0;
	for (i = 0; i < sizeof(options) / sizeof(options[0]); i++)
		if (spank_option_register(sp, &options[i]) != ESPANK_SUCCESS)
			return -1;
	return 0;
}
