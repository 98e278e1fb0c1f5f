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
	char **spank_job_env;
	uint32_t spank_job_env_size;
	uint32_t nice;
	uint32_t user_id;
} hs_job_view;

void hs_job_view_fill(const job_desc_msg_t *d, hs_job_view *out)
{
	out->tres_per_node = d->tres_per_node;
	out->tres_per_job = d->tres_per_job;
	out->admin_comment = d->admin_comment;
	out->spank_job_env = d->spank_job_env;
	out->spank_job_env_size = d->spank_job_env_size;
	out->nice = d->nice;
	out->user_id = d->user_id;
}

/* Addresses of the fields heshare writes; the caller swaps pointers allocated by Slurm's xmalloc. */
char **hs_job_tres_per_node(job_desc_msg_t *d) { return &d->tres_per_node; }
char **hs_job_admin_comment(job_desc_msg_t *d) { return &d->admin_comment; }
char ***hs_job_spank_env(job_desc_msg_t *d) { return &d->spank_job_env; }
uint32_t *hs_job_spank_env_size(job_desc_msg_t *d) { return &d->spank_job_env_size; }
uint32_t *hs_job_nice(job_desc_msg_t *d) { return &d->nice; }

/* Constants whose values live in the headers. */
uint32_t hs_slurm_version_number(void) { return SLURM_VERSION_NUMBER; }
uint32_t hs_nice_offset(void) { return NICE_OFFSET; }
uint32_t hs_no_val(void) { return NO_VAL; }
int hs_eslurm_invalid_gres(void) { return ESLURM_INVALID_GRES; }

/*
 * SPANK options for sbatch/srun/salloc, laid out by <slurm/spank.h> itself. Slurm keeps a
 * pointer to each registered option, so they live in static storage. The callback is Rust's.
 */
#include <slurm/spank.h>

extern int hs_spank_option_cb(int val, const char *optarg, int remote);

static struct spank_option hs_options[] = {
	{ "gpu-share", "auto|exclusive|PCT",
	  "heshare: let heshare size the GPU share (auto), keep whole GPUs (exclusive), or ask for PCT (1-100) percent of one GPU through MPS",
	  1, 0, hs_spank_option_cb },
	{ "gpu-class", "NAME",
	  "heshare: the job class (from heshare.toml) heshare predicts the job with, e.g. bert-train",
	  1, 1, hs_spank_option_cb },
	{ "energy-policy", "performance|balanced|energy",
	  "heshare: trade-off for this job: fastest, the cluster's default, or least energy",
	  1, 2, hs_spank_option_cb },
};

int hs_spank_option_count(void) { return (int)(sizeof(hs_options) / sizeof(hs_options[0])); }
struct spank_option *hs_spank_option(int i) { return &hs_options[i]; }
int hs_spank_ctx_allocator(void) { return S_CTX_ALLOCATOR; }
int hs_spank_ctx_local(void) { return S_CTX_LOCAL; }
int hs_spank_ctx_remote(void) { return S_CTX_REMOTE; }

/* For tests of the exported entry points: a zeroed job description as slurm_init_job_desc_msg
 * leaves the fields heshare reads (nice and user_id unset), and its release. Fields are freed
 * with the allocator the test installed. */
#include <stdlib.h>

job_desc_msg_t *hs_test_job_desc_new(void)
{
	job_desc_msg_t *d = calloc(1, sizeof(*d));
	if (d) {
		d->nice = NO_VAL;
		d->user_id = NO_VAL;
	}
	return d;
}

void hs_test_job_desc_free(job_desc_msg_t *d) { free(d); }
