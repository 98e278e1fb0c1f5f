/*
 * A finished job's AdminComment in slurmdbd, set through libslurm's accounting API
 * (slurmdb_job_modify), as `sacctmgr modify job` does but without sacctmgr's rewriting of the
 * text: before Slurm 23.02 sacctmgr stores it in lower case (SchedMD bug 14338). Compiled by
 * build.rs against the installed headers, so the layouts of slurmdb_job_cond_t and
 * slurm_selected_step_t are this Slurm's. libslurm is opened at run time (dlopen), so nothing
 * links against it: `heshare` runs where Slurm is absent and only this call needs it.
 *
 * It runs in a child process of `heshare profiles update` (`heshare dbd-admin-comment`), since
 * libslurm may end the process on a configuration it cannot read.
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <slurm/slurm.h>
#include <slurm/slurmdb.h>

typedef void (*init_f)(const char *);
typedef void *(*conn_get_f)(uint16_t *);
typedef int (*conn_close_f)(void **);
typedef int (*conn_commit_f)(void *, bool);
typedef void *(*job_modify_f)(void *, slurmdb_job_cond_t *, slurmdb_job_rec_t *);
typedef slurmdb_job_rec_t *(*create_rec_f)(void);
typedef void (*destroy_rec_f)(void *);
typedef void *(*list_create_f)(void (*)(void *));
typedef void *(*list_append_f)(void *, void *);
typedef int (*list_count_f)(void *);
typedef void (*list_destroy_f)(void *);

/*
 * Sets job `job_id`'s AdminComment on cluster `cluster` to `text` and commits.
 * Returns 0 when slurmdbd changed one job, 1 when it changed none (no such job), -1 on any other
 * failure; `err` then says why.
 */
int hs_dbd_set_admin_comment(const char *libslurm, const char *cluster, uint32_t job_id,
			     const char *text, char *err, size_t errlen)
{
	void *lib = dlopen(libslurm, RTLD_NOW | RTLD_GLOBAL);
	if (!lib) {
		snprintf(err, errlen, "cannot open %s: %s", libslurm, dlerror());
		return -1;
	}
	init_f init = (init_f)dlsym(lib, "slurm_init");
	conn_get_f conn_get = (conn_get_f)dlsym(lib, "slurmdb_connection_get");
	conn_close_f conn_close = (conn_close_f)dlsym(lib, "slurmdb_connection_close");
	conn_commit_f conn_commit = (conn_commit_f)dlsym(lib, "slurmdb_connection_commit");
	job_modify_f job_modify = (job_modify_f)dlsym(lib, "slurmdb_job_modify");
	create_rec_f create_rec = (create_rec_f)dlsym(lib, "slurmdb_create_job_rec");
	destroy_rec_f destroy_rec = (destroy_rec_f)dlsym(lib, "slurmdb_destroy_job_rec");
	list_create_f list_create = (list_create_f)dlsym(lib, "slurm_list_create");
	list_append_f list_append = (list_append_f)dlsym(lib, "slurm_list_append");
	list_count_f list_count = (list_count_f)dlsym(lib, "slurm_list_count");
	list_destroy_f list_destroy = (list_destroy_f)dlsym(lib, "slurm_list_destroy");
	if (!init || !conn_get || !conn_close || !conn_commit || !job_modify || !create_rec ||
	    !destroy_rec || !list_create || !list_append || !list_count || !list_destroy) {
		snprintf(err, errlen, "%s lacks a function of Slurm's accounting API", libslurm);
		return -1;
	}
	init(NULL);

	uint16_t flags = 0;
	void *db = conn_get(&flags);
	if (!db) {
		snprintf(err, errlen, "cannot connect to slurmdbd");
		return -1;
	}
	slurm_selected_step_t step;
	memset(&step, 0, sizeof(step));
	step.array_task_id = NO_VAL;
	step.het_job_offset = NO_VAL;
	step.step_id.job_id = job_id;
	step.step_id.step_het_comp = NO_VAL;
	step.step_id.step_id = NO_VAL;

	slurmdb_job_cond_t cond;
	memset(&cond, 0, sizeof(cond));
	cond.db_flags = SLURMDB_JOB_FLAG_NOTSET;
	cond.flags = JOBCOND_FLAG_NO_DEFAULT_USAGE;
	/* Lists without a destructor: their items are ours, on this stack. */
	cond.cluster_list = list_create(NULL);
	list_append(cond.cluster_list, (void *)cluster);
	cond.step_list = list_create(NULL);
	list_append(cond.step_list, &step);

	slurmdb_job_rec_t *rec = create_rec();
	rec->admin_comment = (char *)text;
	void *changed = job_modify(db, &cond, rec);
	int n = changed ? list_count(changed) : -1;
	/* Not Slurm's to free. */
	rec->admin_comment = NULL;
	destroy_rec(rec);
	list_destroy(cond.cluster_list);
	list_destroy(cond.step_list);
	if (changed)
		list_destroy(changed);
	conn_commit(db, n > 0);
	conn_close(&db);
	if (n < 0) {
		snprintf(err, errlen, "slurmdbd refused the change");
		return -1;
	}
	return n > 0 ? 0 : 1;
}
