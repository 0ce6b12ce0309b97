/*
 * optim_step.c - kvf_opt_step: check the gradient, then read the committed
 * generation in batches, update each chunk with the compute/optim.h
 * kernels straight into its new place, and commit the new generation
 * (optim_commit.c).  On a memory store every worker updates a share of
 * each batch; on other media a worker reads batch b + 1 while batch b is
 * updated and placed.  A file of its own: it is the hot path, and its
 * batching (plan, load, update, fill) is used by no other call.
 *
 * Locking: dur.lock, world shared, then the sequence lock, held for the
 * whole step (engine/optim/optim_int.h).
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "api/status.h"
#include "compute/half.h"
#include "engine/base/fatal.h"
#include "engine/base/key.h"
#include "engine/segments/openseg.h"
#include "engine/optim/optim_int.h"
#include "engine/base/pool.h"
#include "engine/reads/readpath.h"
#include "engine/segments/segtable.h"
#include "engine/sequences/seq.h"
#include "engine/sequences/seq_state.h"
#include "engine/sequences/seq_stream.h"

/* gradients of fewer values are summed on one thread */
#define OPTIM_SUMSQ_SPLIT_MIN (1u << 20)

#define OPTIM_SPLIT 8u /* tasks a batch is split into when the state is in
			* memory: workers join in as they come free */

/* load_batch - chunks [c0, c0 + n) of every kept state, generation gen,
 * into src[half]: where the memory media keeps them, else read into the
 * work pages of half, every state's reads in flight at once.  The
 * committed generation is all written (optim_commit_gen flushed it), so the
 * reads may run while the step places the new one. */
static kvf_status load_batch(kvf_opt *o, struct seq *seq, uint64_t c0,
			     uint32_t n, uint32_t gen, uint32_t half)
{
	uint64_t idx[OPTIM_BATCH];
	uint32_t k = 0;

	if (o->st->hdr.media != KVF_MEDIA_MEMORY) {
		for (uint32_t s = 0; s < 3; s++) {
			if (!optim_state_kept(o->states, s))
				continue;
			for (uint32_t j = 0; j < n; j++) {
				float *w = optim_work_page(o, half, s, j);

				o->want[k++] = (struct page_read){
					&seq->optim[s * 2 + gen], c0 + j,
					(unsigned char *)w };
				o->src[half][s][j] = w;
			}
		}
		return stream_read_into(o->st, seq, o->want, k, o->io);
	}
	for (uint32_t j = 0; j < n; j++)
		idx[j] = c0 + j;
	for (uint32_t s = 0; s < 3; s++) {
		struct load_ctx l = { o, half, s };
		kvf_status rc;

		if (!optim_state_kept(o->states, s))
			continue;
		/* stream_read_entries hands pages out as (position, page) */
		rc = stream_read_entries(o->st, seq, &seq->optim[s * 2 + gen], idx, n,
					 optim_load_page, &l);
		if (rc != KVF_OK)
			return rc;
	}
	return KVF_OK;
}

static size_t dtype_size(kvf_dtype d)
{
	return d == KVF_DTYPE_F32 ? 4 : 2;
}

struct sumsq_ctx {
	const struct kvc_optim *k;
	const kvf_grad *g;
	double part[OPTIM_SPLIT];
};

static kvf_status sumsq_task(void *arg, uint32_t i)
{
	struct sumsq_ctx *c = arg;
	uint64_t a = c->g->n * i / OPTIM_SPLIT, z = c->g->n * (i + 1) / OPTIM_SPLIT;

	c->part[i] = kvc_optim_grad_sumsq(c->k,
					  (const char *)c->g->values +
						  a * dtype_size(c->g->dtype),
					  (size_t)(z - a), c->g->dtype);
	return KVF_OK;
}

/* grad_sumsq - the sum of the squared values, on every worker for a large
 * gradient; the parts are fixed and added in order, so the result does
 * not depend on which thread ran which */
static double grad_sumsq(kvf_opt *o, const kvf_grad *g)
{
	struct sumsq_ctx c = { .k = o->k, .g = g };
	double sum = 0;

	if (g->n < OPTIM_SUMSQ_SPLIT_MIN ||
	    pool_run(o->st->pool, OPTIM_SPLIT, sumsq_task, &c) != KVF_OK)
		return kvc_optim_grad_sumsq(o->k, g->values, g->n, g->dtype);
	for (uint32_t i = 0; i < OPTIM_SPLIT; i++)
		sum += c.part[i];
	return sum;
}

/* check_grad - the gradient's shape and values, before anything moves;
 * *scale gets grad_scale times the clipping coefficient */
static kvf_status check_grad(kvf_opt *o, const char *call,
			     const kvf_opt_config *cfg, const kvf_grad *g,
			     float *scale)
{
	double sumsq;

	if (g == NULL)
		return kvf_fail(KVF_EINVAL, "%s: grad is NULL", call);
	if ((unsigned)g->dtype > KVF_DTYPE_F32)
		return kvf_fail(KVF_EINVAL, "%s: grad dtype %d is not a kvf_dtype",
				call, (int)g->dtype);
	if (g->indices == NULL && g->n != o->n_params)
		return kvf_fail(KVF_EINVAL,
				"%s: a dense gradient has %llu values, the optimizer has %llu parameters",
				call, (unsigned long long)g->n,
				(unsigned long long)o->n_params);
	if (g->indices && g->n > o->n_params)
		return kvf_fail(KVF_EINVAL, "%s: %llu sparse entries for %llu parameters",
				call, (unsigned long long)g->n,
				(unsigned long long)o->n_params);
	if (g->values == NULL && g->n > 0)
		return kvf_fail(KVF_EINVAL, "%s: grad values are NULL", call);
	if (g->indices) {
		size_t bad =
			kvc_optim_grad_check(g->indices, g->n, o->n_params);

		if (bad < g->n)
			return kvf_fail(g->indices[bad] >= o->n_params ? KVF_ERANGE : KVF_EINVAL,
					"%s: sparse index %u at position %zu %s",
					call, g->indices[bad], bad,
					g->indices[bad] >= o->n_params
						? "is past n_params"
						: "is not above the one before (indices must ascend)");
	}
	sumsq = grad_sumsq(o, g);
	if (!isfinite(sumsq))
		return kvf_fail(KVF_ERANGE,
				"%s: the gradient holds NaN or infinity; nothing changed",
				call);
	*scale = cfg->grad_scale > 0 ? cfg->grad_scale : 1.0f;
	if (cfg->max_grad_norm > 0)
		*scale *= kvc_optim_clip_coef(sqrt(sumsq) * *scale,
					      cfg->max_grad_norm);
	/* the kernels scale each value in fp32: a finite gradient that a
	 * scale above 1 takes past FLT_MAX would step by an infinity */
	if (*scale > 1.0f && sqrt(sumsq) * *scale > FLT_MAX) {
		double big = 0;

		for (uint64_t i = 0; i < g->n; i++)
			big = fmax(big, fabs((double)kvc_elt(g->values, i, g->dtype)));
		if (big * *scale > FLT_MAX)
			return kvf_fail(KVF_ERANGE,
					"%s: a gradient value of %g times the scale %g (grad_scale, clipping) overflows fp32; nothing changed",
					call, big, (double)*scale);
	}
	return KVF_OK;
}

/* What the tasks of one batch share. */
struct step_ctx {
	kvf_opt *o;
	struct seq *seq;
	const kvf_grad *g;
	void *params_out;
	const struct kvc_optim_step *step;
	size_t gsz;      /* bytes per gradient value */
	uint32_t gen;    /* committed generation, read */
	uint32_t cur;    /* half of the batch being updated */
	uint64_t c0;     /* its first chunk */
	uint32_t n;      /* its chunks */
	uint32_t next_n; /* chunks of the batch after it (0: none) */
	uint32_t split;  /* 1: tasks share the update (the state is in
			  * memory); 0: task 1 loads the next batch */
};

/* plan_batch - where each new chunk of the batch goes: the free slots of
 * the open segments (params first, then m, then v: the order they are
 * placed in), and the work pages of half `half` for those that do not fit.
 * fit: first shorten *n to the chunks whose pages all fit (at least one),
 * so that none waits in a work page to be copied once more. */
static kvf_status plan_batch(kvf_opt *o, struct seq *seq, uint64_t c0,
			     uint32_t *n, uint32_t gen, uint32_t half, int fit)
{
	kvf_store *st = o->st;
	unsigned char *slot[KVF_MEDIA_MAX_STRIPES] = { NULL };
	uint32_t room[KVF_MEDIA_MAX_STRIPES], used[KVF_MEDIA_MAX_STRIPES] = { 0 };

	for (uint32_t j = 0; j < *n; j++)
		for (uint32_t s = 0; s < 3; s++) {
			uint32_t stripe = stream_stripe(st, optim_sid(s, gen), c0 + j);

			if (!optim_state_kept(o->states, s))
				continue;
			if (slot[stripe] == NULL) {
				kvf_status rc = openseg_slot(st, seq, stripe, &slot[stripe]);

				if (rc != KVF_OK)
					return rc;
				room[stripe] = openseg_room(st, seq, stripe);
			}
			if (fit && ++used[stripe] > room[stripe] && j > 0) {
				*n = j; /* chunk j does not fit whole */
				goto assign;
			}
		}
assign:
	for (uint32_t s = 0; s < 3; s++) {
		if (!optim_state_kept(o->states, s))
			continue;
		for (uint32_t j = 0; j < *n; j++) {
			uint32_t stripe = stream_stripe(st, optim_sid(s, gen), c0 + j);

			if (room[stripe] > 0) {
				o->dst[s][j] = slot[stripe];
				slot[stripe] += st->hdr.page_size;
				room[stripe]--;
			} else {
				o->dst[s][j] = (unsigned char *)optim_work_page(o, half, s, j);
			}
		}
	}
	return KVF_OK;
}

/* fill_batch - record the batch's new chunks as generation gen, in the
 * order plan_batch gave them slots; copy in those left in work pages */
static kvf_status fill_batch(kvf_opt *o, struct seq *seq, uint64_t c0,
			     uint32_t n, uint32_t gen, uint32_t half)
{
	kvf_store *st = o->st;
	kvf_status rc = KVF_OK;
	uint64_t placed = 0;

	for (uint32_t s = 0; s < 3 && rc == KVF_OK; s++) {
		uint32_t sid = optim_sid(s, gen);
		struct stream *str = &seq->optim[s * 2 + gen];

		if (!optim_state_kept(o->states, s))
			continue;
		for (uint32_t j = 0; j < n && rc == KVF_OK; j++) {
			uint64_t c = c0 + j;
			uint32_t stripe = stream_stripe(st, sid, c);
			uint32_t old = c < str->n_groups ? stream_page(str, c).addr
							 : ADDR_NONE;
			struct page_ref ref;

			if (o->dst[s][j] == (unsigned char *)optim_work_page(o, half, s, j)) {
				unsigned char *slot;

				if ((rc = openseg_slot(st, seq, stripe, &slot)) != KVF_OK)
					break;
				memcpy(slot, o->dst[s][j], st->hdr.page_size);
			}
			rc = openseg_fill_hashed(st, seq, stripe,
						 page_key_make(seq->id, sid, (uint32_t)c),
						 old, o->hash[s][j], &ref);
			if (rc != KVF_OK)
				break;
			stream_set_page(str, c, ref);
			if (c >= str->n_groups)
				str->n_groups = (uint32_t)c + 1;
			placed++;
		}
	}
	/* one shared counter update per batch, not per page */
	atomic_fetch_add(&st->c.optim_bytes, placed * st->hdr.page_size);
	return rc;
}

/* update - chunks [j0, j1) of the batch: each committed chunk updated by
 * the kernels straight into its new place (one pass over the data; a
 * last, partial chunk's unused tail is copied as it was), and hashed */
static void update(const struct step_ctx *x, uint32_t j0, uint32_t j1)
{
	kvf_opt *o = x->o;
	const kvf_grad *g = x->g;
	uint32_t ps = o->st->hdr.page_size;

	for (uint32_t j = j0; j < j1; j++) {
		uint64_t i0 = (x->c0 + j) * o->per_chunk;
		size_t cnt = (size_t)(o->n_params - i0 < o->per_chunk
					      ? o->n_params - i0 : o->per_chunk);
		struct kvc_optim_chunk c = { { NULL, NULL, NULL },
					     { NULL, NULL, NULL } };
		void *po = x->params_out ? (char *)x->params_out +
				i0 * dtype_size(o->cfg.out_dtype) : NULL;

		for (uint32_t s = 0; s < 3; s++) {
			if (!optim_state_kept(o->states, s))
				continue;
			c.in[s] = o->src[x->cur][s][j];
			c.out[s] = (float *)o->dst[s][j];
			if (cnt < o->per_chunk && c.out[s] != c.in[s])
				memcpy(c.out[s] + cnt, c.in[s] + cnt,
				       (o->per_chunk - cnt) * sizeof(float));
		}
		if (g->indices == NULL) {
			kvc_optim_dense_from(o->k, x->step, &c, cnt,
					     (const char *)g->values +
						     i0 * x->gsz,
					     g->dtype, po);
		} else {
			size_t first, count;

			kvc_optim_grad_span(g->indices, g->n, i0, cnt, &first,
					    &count);
			kvc_optim_sparse_from(o->k, x->step, &c, cnt, i0,
					      count ? g->indices + first : NULL,
					      count ? (const char *)g->values +
							      first * x->gsz
						    : NULL,
					      count, g->dtype, po);
		}
		for (uint32_t s = 0; s < 3; s++)
			if (c.out[s])
				o->hash[s][j] = page_hash(c.out[s], ps);
	}
}

/* step_task - split: task i updates its eighth of the batch; else task 0
 * updates the batch and places it (the caller is waiting, holding the
 * sequence's lock for it), while task 1 loads the next one into the
 * other half */
static kvf_status step_task(void *arg, uint32_t i)
{
	struct step_ctx *x = arg;

	if (x->split) {
		update(x, x->n * i / OPTIM_SPLIT, x->n * (i + 1) / OPTIM_SPLIT);
		return KVF_OK;
	}
	if (i == 0) {
		update(x, 0, x->n);
		return fill_batch(x->o, x->seq, x->c0, x->n, 1 - x->gen, x->cur);
	}
	return load_batch(x->o, x->seq, x->c0 + x->o->batch, x->next_n, x->gen,
			  x->cur ^ 1);
}

/* run_split - the state is in memory, so loading is only finding the
 * pages: each batch is as long as the open segments have room for, and
 * every worker updates a share of it */
static kvf_status run_split(struct step_ctx *x)
{
	kvf_opt *o = x->o;
	kvf_status rc = KVF_OK;

	for (uint64_t c0 = 0; rc == KVF_OK && c0 < o->n_chunks; c0 += x->n) {
		x->c0 = c0;
		x->n = optim_batch_len(o, c0);
		rc = plan_batch(o, x->seq, c0, &x->n, 1 - x->gen, 0, 1);
		if (rc == KVF_OK)
			rc = load_batch(o, x->seq, c0, x->n, x->gen, 0);
		if (rc == KVF_OK)
			rc = pool_run(o->st->pool, OPTIM_SPLIT, step_task, x);
		if (rc == KVF_OK)
			rc = fill_batch(o, x->seq, c0, x->n, 1 - x->gen, 0);
	}
	return rc;
}

/* run_pipelined - a worker loads batch b + 1 into one half of the work
 * buffers while batch b, in the other, is updated and placed: the reads
 * go on while placing b seals segments and hands them to the writer */
static kvf_status run_pipelined(struct step_ctx *x)
{
	kvf_opt *o = x->o;
	kvf_status rc = load_batch(o, x->seq, 0, optim_batch_len(o, 0), x->gen, 0);

	for (uint64_t c0 = 0; rc == KVF_OK && c0 < o->n_chunks; c0 += o->batch) {
		x->c0 = c0;
		x->n = optim_batch_len(o, c0);
		x->next_n = c0 + o->batch < o->n_chunks ? optim_batch_len(o, c0 + o->batch)
							 : 0;
		rc = plan_batch(o, x->seq, c0, &x->n, 1 - x->gen, x->cur, 0);
		if (rc == KVF_OK)
			rc = pool_run(o->st->pool, x->next_n ? 2 : 1, step_task, x);
		x->cur ^= 1;
	}
	return rc;
}

/* step_once - kvf_opt_step after its checks.  On failure the committed
 * generation stays (what was placed of the new one is garbage, and
 * params_out may be partly written, unless the failure came first: no
 * room, KVF_ENOSPC, when *want is the free segments a stripe a
 * generation needs) */
static kvf_status step_once(kvf_opt *o, const char *call,
			    const kvf_opt_config *cfg, const kvf_grad *g,
			    void *params_out, float scale, uint32_t *want)
{
	kvf_store *st = o->st;
	struct kvc_optim_step step;
	struct seq *seq;
	uint64_t steps;
	uint32_t gen;
	struct step_ctx x;
	kvf_status rc;

	pthread_mutex_lock(&st->dur.lock); /* dur.lock, then world */
	pthread_rwlock_rdlock(&st->world);
	seq = seq_get_ns(st, SEQ_NS_OPTIM, o->seq_id);
	if (seq == NULL) {
		pthread_rwlock_unlock(&st->world);
		pthread_mutex_unlock(&st->dur.lock);
		return kvf_fail(KVF_ENOENT, "%s: optimizer '%s' was freed", call, o->name);
	}
	pthread_mutex_lock(&seq->lock);
	gen = seq->optim_gen;
	steps = seq->optim_steps;
	kvc_optim_step_prepare(&step, cfg, steps + 1, scale);
	/* its message names call */
	rc = optim_reserve_gen(o, seq, 1 - gen, call, want);
	x = (struct step_ctx){ .o = o, .seq = seq, .g = g, .params_out = params_out,
			       .step = &step, .gsz = dtype_size(g->dtype), .gen = gen,
			       .split = st->hdr.media == KVF_MEDIA_MEMORY };
	if (rc == KVF_OK) {
		rc = x.split ? run_split(&x) : run_pipelined(&x);
		/* on failure the old generation is intact and still
		 * committed; what was placed of the new one is garbage
		 * after the next step */
		if (rc != KVF_OK && rc != KVF_EFATAL)
			kvf_fail_wrap(rc, call);
	}
	seg_unreserve(st, seq);
	if (rc == KVF_OK)
		rc = optim_commit_gen(o, seq, steps + 1, 1 - gen, 0);
	seq_unlock_put(st, seq);
	pthread_rwlock_unlock(&st->world);
	pthread_mutex_unlock(&st->dur.lock);
	return rc;
}

/* opt_step - a step with the hyper-parameters cfg */
static kvf_status opt_step(kvf_opt *o, const char *call,
			   const kvf_opt_config *cfg, const kvf_grad *g,
			   void *params_out)
{
	float scale = 1.0f;
	kvf_status rc;

	if ((rc = check_grad(o, call, cfg, g, &scale)) != KVF_OK)
		return rc;
	for (int attempt = 0;; attempt++) {
		uint32_t want = 1;

		rc = step_once(o, call, cfg, g, params_out, scale, &want);
		if (!optim_make_room(o->st, attempt, want, call, o->name, &rc))
			return rc;
	}
}

kvf_status kvf_opt_step(kvf_opt *o, const kvf_grad *g, void *params_out)
{
	const char *call = "kvf_opt_step";
	kvf_status rc;

	if ((rc = optim_enter(o, call)) != KVF_OK ||
	    (rc = store_writable(o->st, call)) != KVF_OK)
		return rc;
	return opt_step(o, call, &o->cfg, g, params_out);
}

kvf_status kvf_opt_step_config(kvf_opt *o, const kvf_opt_config *cfg,
			       const kvf_grad *g, void *params_out)
{
	const char *call = "kvf_opt_step_config";
	kvf_opt_config c;
	kvf_status rc;

	if ((rc = optim_enter(o, call)) != KVF_OK ||
	    (rc = store_writable(o->st, call)) != KVF_OK ||
	    (rc = optim_config_take(call, cfg, &c)) != KVF_OK)
		return rc;
	/* what shapes the state and the output stays the optimizer's */
	if (c.kind != o->cfg.kind)
		return kvf_fail(KVF_EINVAL,
				"%s: cfg.kind %d is not the kind %d optimizer '%s' was created with",
				call, (int)c.kind, (int)o->cfg.kind, o->name);
	if (c.out_dtype != o->cfg.out_dtype)
		return kvf_fail(KVF_EINVAL,
				"%s: cfg.out_dtype %s is not the %s optimizer '%s' writes",
				call, kvf_dtype_name(c.out_dtype),
				kvf_dtype_name(o->cfg.out_dtype), o->name);
	/* SGD keeps a momentum buffer only when made with momentum */
	if (kvc_optim_states(&c) != o->states)
		return kvf_fail(KVF_EINVAL,
				"%s: cfg.momentum %g, but optimizer '%s' was created with momentum %g: a schedule may change momentum, not turn it on or off (the state holds a momentum buffer only when created with momentum != 0)",
				call, (double)c.momentum, o->name,
				(double)o->cfg.momentum);
	return opt_step(o, call, &c, g, params_out);
}
