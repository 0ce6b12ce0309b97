/*
 * attend_async.c - kvf_attend_start: kvf_attend_batch as a background job
 * (engine/base/jobs.c), so a decode loop overlaps the store's reads and
 * attention of one micro-batch with its own compute of another.
 */
#include <math.h>
#include <string.h>

#include "api/alloc.h"
#include "api/options.h"
#include "api/status.h"
#include "engine/base/fatal.h"
#include "engine/base/jobs.h"
#include "engine/base/store_state.h"

/* What a kvf_attend_start job runs kvf_attend_batch with. */
struct attend_job {
	kvf_store *st;
	uint32_t n_seqs;
	uint64_t *seqs;            /* [n_seqs], a copy */
	uint32_t layer;
	float *q;                  /* [n_seqs][n_q_heads][head_dim], a copy */
	float *out;                /* the caller's */
	kvf_attn_opts opts;        /* a copy; lse and mask are the caller's */
	int has_opts;
};

static kvf_status attend_job_run(void *arg)
{
	struct attend_job *j = arg;

	return kvf_attend_batch(j->st, j->n_seqs, j->seqs, j->layer, j->q,
				j->out, j->has_opts ? &j->opts : NULL);
}

static void attend_job_release(void *arg)
{
	struct attend_job *j = arg;

	kvf_free(j->seqs);
	kvf_free(j->q);
	kvf_free(j);
}

/* start_check - the argument checks kvf_attend_batch would make first */
static kvf_status start_check(kvf_store *st, uint32_t n_seqs,
			      const uint64_t *seqs, uint32_t layer,
			      const float *q, float *out,
			      const kvf_attn_opts *opts, kvf_job **job)
{
	const char *call = "kvf_attend_start";
	kvf_status rc;

	if (job == NULL)
		return kvf_fail(KVF_EINVAL, "%s: job is NULL", call);
	if (st == NULL || q == NULL || out == NULL || (seqs == NULL && n_seqs))
		return kvf_fail(KVF_EINVAL, "%s: %s is NULL", call,
				st == NULL ? "store" : q == NULL ? "q"
					: out == NULL ? "out" : "seqs");
	if ((rc = store_check(st, call)) != KVF_OK)
		return rc;
	if (layer >= st->hdr.n_layers)
		return kvf_fail(KVF_ERANGE, "%s: layer %u out of range (store has %u layers)",
				call, layer, st->hdr.n_layers);
	for (uint32_t i = 0; i < n_seqs; i++)
		for (uint32_t j = 0; j < i; j++)
			if (seqs[i] == seqs[j])
				return kvf_fail(KVF_EINVAL,
						"%s: sequence %llu is given twice",
						call, (unsigned long long)seqs[i]);
	if (opts == NULL)
		return KVF_OK;
	if ((rc = kvf_struct_check(call, "opts", opts, sizeof(*opts))) != KVF_OK)
		return rc;
	if (!isfinite(opts->scale) || opts->scale < 0)
		return kvf_fail(KVF_EINVAL, "%s: opts.scale %g must be finite and >= 0",
				call, (double)opts->scale);
	if (opts->sparse > 2)
		return kvf_fail(KVF_EINVAL, "%s: opts.sparse %u must be 0, 1 or 2",
				call, opts->sparse);
	return KVF_OK;
}

kvf_status kvf_attend_start(kvf_store *st, uint32_t n_seqs,
			    const uint64_t *seqs, uint32_t layer,
			    const float *q, float *out,
			    const kvf_attn_opts *opts, kvf_job **job)
{
	size_t q_floats;
	struct attend_job *j;
	kvf_status rc;

	if ((rc = start_check(st, n_seqs, seqs, layer, q, out, opts, job)) != KVF_OK) {
		if (job)
			*job = NULL;
		return rc;
	}
	*job = NULL;
	q_floats = (size_t)n_seqs * st->hdr.n_q_heads * st->hdr.head_dim;
	j = kvf_calloc(1, sizeof(*j));
	if (j == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_attend_start: out of memory");
	j->seqs = kvf_malloc(n_seqs ? n_seqs * sizeof(uint64_t) : 1);
	j->q = kvf_malloc(q_floats ? q_floats * sizeof(float) : 1);
	if (j->seqs == NULL || j->q == NULL) {
		kvf_free(j->seqs);
		kvf_free(j->q);
		kvf_free(j);
		return kvf_fail(KVF_ENOMEM, "kvf_attend_start: out of memory");
	}
	memcpy(j->seqs, seqs ? seqs : (const uint64_t *)j->seqs,
	       n_seqs * sizeof(uint64_t));
	memcpy(j->q, q, q_floats * sizeof(float));
	j->st = st;
	j->n_seqs = n_seqs;
	j->layer = layer;
	j->out = out;
	if (opts) {
		kvf_attn_opts_init(&j->opts);
		memcpy(&j->opts, opts, opts->struct_size < sizeof(*opts)
			       ? opts->struct_size : sizeof(*opts));
		j->has_opts = 1;
	}
	if ((rc = async_submit(st, "kvf_attend_start", attend_job_run,
			       attend_job_release, j, job)) != KVF_OK)
		attend_job_release(j);
	return rc;
}

