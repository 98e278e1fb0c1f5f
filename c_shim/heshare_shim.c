/*
 * heshare's C shim: the only code that knows the layout of Slurm's job_desc_msg_t. It is
 * compiled by build.rs against the installed <slurm/slurm.h>, so field offsets always match the
 * running Slurm. It copies pointers in and out and nothing else: it calls no Slurm function (the
 * Rust side looks those up at init with dlsym), so the plugin has no link-time Slurm symbol.
 */
#include <stdint.h>
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>

/* The job_desc_msg_t fields heshare reads, as plain pointers. */
typedef struct {
	const char *tres_per_node;
	const char *tres_per_job;
	const char *admin_comment;
	const char *features;
	const char *prefer;
	char **spank_job_env;
	uint32_t spank_job_env_size;
	uint32_t nice;
	uint32_t user_id;
	uint32_t time_limit; /* minutes; NO_VAL or INFINITE when not given */
	uint32_t min_cpus; /* NO_VAL when not given */
	uint64_t pn_min_memory; /* MiB per node, or per CPU with MEM_PER_CPU; NO_VAL64 when not given */
	int batch; /* 1 for sbatch (a script), 0 for srun/salloc allocations */
	/* What a job's profile keys are made of. */
	const char *name;
	const char *script;
	const char *account;
	char **argv;
	uint32_t argc;
	/* Nodes asked for (-N MIN[-MAX]); NO_VAL or 0 when not given. */
	uint32_t min_nodes;
	uint32_t max_nodes;
} hs_job_view;

void hs_job_view_fill(const job_desc_msg_t *d, hs_job_view *out)
{
	out->tres_per_node = d->tres_per_node;
	out->tres_per_job = d->tres_per_job;
	out->admin_comment = d->admin_comment;
	out->features = d->features;
	out->prefer = d->prefer;
	out->spank_job_env = d->spank_job_env;
	out->spank_job_env_size = d->spank_job_env_size;
	out->nice = d->nice;
	out->user_id = d->user_id;
	out->time_limit = d->time_limit;
	out->min_cpus = d->min_cpus;
	out->pn_min_memory = d->pn_min_memory;
	out->batch = d->script != NULL;
	out->name = d->name;
	out->script = d->script;
	out->account = d->account;
	out->argv = d->argv;
	out->argc = d->argc;
	out->min_nodes = d->min_nodes;
	out->max_nodes = d->max_nodes;
}

/* Addresses of the fields heshare writes; the caller swaps pointers allocated by Slurm's xmalloc. */
char **hs_job_tres_per_node(job_desc_msg_t *d) { return &d->tres_per_node; }
char **hs_job_tres_per_job(job_desc_msg_t *d) { return &d->tres_per_job; }
char **hs_job_admin_comment(job_desc_msg_t *d) { return &d->admin_comment; }
char **hs_job_features(job_desc_msg_t *d) { return &d->features; }
char **hs_job_prefer(job_desc_msg_t *d) { return &d->prefer; }
char ***hs_job_spank_env(job_desc_msg_t *d) { return &d->spank_job_env; }
uint32_t *hs_job_spank_env_size(job_desc_msg_t *d) { return &d->spank_job_env_size; }
uint32_t *hs_job_nice(job_desc_msg_t *d) { return &d->nice; }
/* Slurm sets it to NO_VAL before job_submit so that only the plugin sets it at submission. */
uint32_t *hs_job_site_factor(job_desc_msg_t *d) { return &d->site_factor; }

/* Constants whose values live in the headers. */
uint32_t hs_slurm_version_number(void) { return SLURM_VERSION_NUMBER; }
uint32_t hs_nice_offset(void) { return NICE_OFFSET; }
uint32_t hs_no_val(void) { return NO_VAL; }
uint32_t hs_infinite(void) { return INFINITE; }
uint64_t hs_no_val64(void) { return NO_VAL64; }
uint64_t hs_mem_per_cpu(void) { return MEM_PER_CPU; }
/* Flags the snapshot thread passes and node state flags it skips: function-like macros
 * (SLURM_BIT) in some releases, which bindgen cannot evaluate. */
uint16_t hs_show_all(void) { return SHOW_ALL; }
uint16_t hs_show_detail(void) { return SHOW_DETAIL; }
uint64_t hs_node_state_unusable(void) { return NODE_STATE_DRAIN | NODE_STATE_NO_RESPOND; }
/* Power saving (powered down, powering up, powering down). */
uint64_t hs_node_state_powered_down(void) { return NODE_STATE_POWERED_DOWN; }
uint64_t hs_node_state_powering_up(void) { return NODE_STATE_POWERING_UP; }
uint64_t hs_node_state_powering_down(void) { return NODE_STATE_POWERING_DOWN; }
int hs_eslurm_invalid_gres(void) { return ESLURM_INVALID_GRES; }

/* For tests of the exported entry points: a zeroed job description as slurm_init_job_desc_msg
 * leaves the fields heshare reads (nice and user_id unset), and its release. Fields are freed
 * with the allocator the test installed. */
#include <stdlib.h>

job_desc_msg_t *hs_test_job_desc_new(void)
{
	job_desc_msg_t *d = calloc(1, sizeof(*d));
	if (d) {
		d->nice = NO_VAL;
		d->site_factor = NO_VAL;
		d->user_id = NO_VAL;
		d->time_limit = NO_VAL;
		d->min_cpus = NO_VAL;
		d->pn_min_memory = NO_VAL64;
	}
	return d;
}

void hs_test_job_desc_free(job_desc_msg_t *d) { free(d); }
