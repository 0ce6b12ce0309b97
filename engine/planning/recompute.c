/*
 * recompute.c - K,V recomputed from the stored X near the data
 * (engine/planning/recompute.h).  X is read a chunk of tokens at a time through
 * kvf_read_x, projected with the layer's weights (compute/proj.h), K
 * rotated by RoPE, and then either copied out (kvf_recompute_kv) or folded
 * into the attention state of each KV head (kvf_attend_x), so memory stays
 * at one chunk whatever the range.  The calls run on the caller's thread
 * (kvf_attend_x_start puts one on a background job).
 *
 * Locking: the registry's lock guards layer[] and the reference counts
 * only; a call takes a reference to its layer's weights and works without
 * the lock.
 */
#include "engine/planning/recompute.h"

#include <math.h>
#include <string.h>

#include "api/alloc.h"
#include "api/options.h"
#include "api/status.h"
#include "compute/kernels.h"
#include "compute/proj.h"
#include "engine/base/jobs.h"
#include "engine/base/fatal.h"
#include "engine/base/store_state.h"
#include "engine/sequences/dropmark.h"
#include "engine/sequences/seq.h"
#include "engine/sequences/seq_state.h"

/* tokens of X read and projected at a time: X is kept per query head, so
 * each read is one request per head; 256 tokens make them large enough
 * that their latency does not rule */
#define CHUNK_TOKENS 256u

void recompute_init(kvf_store *st)
{
	pthread_mutex_init(&st->recomp.lock, NULL);
	st->recomp.layer = NULL;
}

static void weights_put(kvf_store *st, struct layer_weights *w)
{
	uint32_t left;

	if (w == NULL)
		return;
	pthread_mutex_lock(&st->recomp.lock);
	left = --w->refs;
	pthread_mutex_unlock(&st->recomp.lock);
	if (left)
		return;
	kvf_free(w->w_k);
	kvf_free(w->w_v);
	kvf_free(w);
}

void recompute_free(kvf_store *st)
{
	if (st->recomp.layer)
		for (uint32_t i = 0; i < st->hdr.n_layers; i++)
			weights_put(st, st->recomp.layer[i]);
	kvf_free(st->recomp.layer);
	st->recomp.layer = NULL;
	pthread_mutex_destroy(&st->recomp.lock);
}

kvf_status kvf_kv_weights_set(kvf_store *st, uint32_t layer, const float *w_k,
			      const float *w_v, float rope_theta)
{
	const char *call = "kvf_kv_weights_set";
	struct layer_weights *w, *old;
	size_t n;
	kvf_status rc;

	if (st == NULL || w_k == NULL || w_v == NULL)
		return kvf_fail(KVF_EINVAL, "%s: %s is NULL", call,
				st == NULL ? "store" : w_k == NULL ? "w_k" : "w_v");
	if ((rc = store_check(st, call)) != KVF_OK)
		return rc;
	if (layer >= st->hdr.n_layers)
		return kvf_fail(KVF_ERANGE, "%s: layer %u out of range (store has %u layers)",
				call, layer, st->hdr.n_layers);
	if (!isfinite(rope_theta) || rope_theta < 0)
		return kvf_fail(KVF_EINVAL, "%s: rope_theta %g must be finite and >= 0",
				call, (double)rope_theta);
	if (rope_theta > 0 && st->hdr.head_dim % 2)
		return kvf_fail(KVF_EINVAL, "%s: RoPE needs an even head_dim (store has %u)",
				call, st->hdr.head_dim);
	n = (size_t)st->hdr.n_q_heads * st->hdr.head_dim *
	    st->hdr.n_kv_heads * st->hdr.head_dim;
	for (size_t i = 0; i < n; i++)
		if (!isfinite(w_k[i]) || !isfinite(w_v[i]))
			return kvf_fail(KVF_EINVAL, "%s: %s[%zu] is not finite",
					call, isfinite(w_k[i]) ? "w_v" : "w_k", i);
	w = kvf_calloc(1, sizeof(*w));
	if (w == NULL)
		return kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
	w->w_k = kvf_malloc(n * sizeof(float));
	w->w_v = kvf_malloc(n * sizeof(float));
	if (w->w_k == NULL || w->w_v == NULL)
		goto out_nomem;
	memcpy(w->w_k, w_k, n * sizeof(float));
	memcpy(w->w_v, w_v, n * sizeof(float));
	w->rope_theta = rope_theta;
	w->refs = 1;
	pthread_mutex_lock(&st->recomp.lock);
	if (st->recomp.layer == NULL) {
		st->recomp.layer = kvf_calloc(st->hdr.n_layers, sizeof(*st->recomp.layer));
		if (st->recomp.layer == NULL) {
			pthread_mutex_unlock(&st->recomp.lock);
			goto out_nomem;
		}
	}
	old = st->recomp.layer[layer];
	st->recomp.layer[layer] = w;
	pthread_mutex_unlock(&st->recomp.lock);
	weights_put(st, old);
	return KVF_OK;
out_nomem:
	kvf_free(w->w_k);
	kvf_free(w->w_v);
	kvf_free(w);
	return kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
}

/* weights_get - a reference to layer's weights; KVF_ENOENT when none */
static kvf_status weights_get(kvf_store *st, const char *call, uint32_t layer,
			      struct layer_weights **out)
{
	struct layer_weights *w = NULL;

	pthread_mutex_lock(&st->recomp.lock);
	if (st->recomp.layer && (w = st->recomp.layer[layer]) != NULL)
		w->refs++;
	pthread_mutex_unlock(&st->recomp.lock);
	if (w == NULL)
		return kvf_fail(KVF_ENOENT,
				"%s: no K,V weights registered for layer %u (kvf_kv_weights_set)",
				call, layer);
	*out = w;
	return KVF_OK;
}

/* The chunk loop shared by both calls. */
struct recomp {
	kvf_store *st;
	struct layer_weights *w;
	int w_given;           /* w is the caller's (recompute_attend_with) */
	uint32_t d, cols;      /* X elements, K (or V) columns per token */
	unsigned char *x;      /* [CHUNK][d] in dtype */
	float *xrow;           /* [d] */
	float *k, *v;          /* [CHUNK][cols] */
};

static void recomp_end(struct recomp *r)
{
	kvf_free(r->x);
	kvf_free(r->xrow);
	kvf_free(r->k);
	kvf_free(r->v);
	if (!r->w_given)
		weights_put(r->st, r->w);
}

/* no_dropped - K,V recomputed from X would bring back the tokens
 * kvf_h2o_evict dropped (X is never dropped): a range holding one of
 * some KV head of layer is refused, naming the first */
static kvf_status no_dropped(kvf_store *st, const char *call, uint64_t id,
			     uint32_t layer, uint64_t t0, uint64_t t1)
{
	uint64_t first = UINT64_MAX;
	uint32_t head = 0;
	struct seq *seq;
	kvf_status rc;

	pthread_rwlock_rdlock(&st->world);
	if ((rc = seq_find_locked(st, call, id, &seq)) == KVF_OK) {
		for (uint32_t h = 0; h < st->hdr.n_kv_heads; h++) {
			uint64_t t = dropmark_first(st, seq,
						    dropmark_lane(st, layer, h), t0, t1);

			if (t < first) {
				first = t;
				head = h;
			}
		}
		seq_unlock_put(st, seq);
	}
	pthread_rwlock_unlock(&st->world);
	if (rc != KVF_OK || first == UINT64_MAX)
		return rc;
	return kvf_fail(KVF_ENOTSUP,
			"%s: token %llu of sequence %llu layer %u KV head %u was dropped by kvf_h2o_evict (token group %llu); K,V recomputed from X would bring it back: recompute around it",
			call, (unsigned long long)first, (unsigned long long)id,
			layer, head, (unsigned long long)(first / st->group_tokens));
}

/* recomp_begin - arguments checked (range inside the stored X, no dropped
 * token), weights referenced, chunk buffers made */
static kvf_status recomp_begin(struct recomp *r, kvf_store *st,
			       const char *call, uint64_t seq, uint32_t layer,
			       uint64_t t0, uint64_t t1,
			       struct layer_weights *given)
{
	uint64_t x_len;
	kvf_status rc;

	memset(r, 0, sizeof(*r));
	r->st = st;
	if ((rc = store_check(st, call)) != KVF_OK)
		return rc;
	if (layer >= st->hdr.n_layers)
		return kvf_fail(KVF_ERANGE, "%s: layer %u out of range (store has %u layers)",
				call, layer, st->hdr.n_layers);
	if (t0 > t1)
		return kvf_fail(KVF_EINVAL, "%s: token range [%llu, %llu) is reversed",
				call, (unsigned long long)t0, (unsigned long long)t1);
	if ((rc = kvf_seq_x_len(st, seq, layer, &x_len)) != KVF_OK)
		return kvf_fail_wrap(rc, call);
	if (t1 > x_len)
		return kvf_fail(KVF_ERANGE,
				"%s: token range [%llu, %llu) past the end of the X of sequence %llu layer %u (%llu tokens)",
				call, (unsigned long long)t0, (unsigned long long)t1,
				(unsigned long long)seq, layer, (unsigned long long)x_len);
	if ((rc = no_dropped(st, call, seq, layer, t0, t1)) != KVF_OK)
		return rc;
	if (given) {
		r->w = given;
		r->w_given = 1;
	} else if ((rc = weights_get(st, call, layer, &r->w)) != KVF_OK) {
		return rc;
	}
	r->d = st->hdr.n_q_heads * st->hdr.head_dim;
	r->cols = st->hdr.n_kv_heads * st->hdr.head_dim;
	r->x = kvf_malloc((size_t)CHUNK_TOKENS * r->d * st->elt_bytes);
	r->xrow = kvf_malloc((size_t)r->d * sizeof(float));
	r->k = kvf_malloc((size_t)CHUNK_TOKENS * r->cols * sizeof(float));
	r->v = kvf_malloc((size_t)CHUNK_TOKENS * r->cols * sizeof(float));
	if (!r->x || !r->xrow || !r->k || !r->v) {
		recomp_end(r);
		return kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
	}
	return KVF_OK;
}

/* recomp_chunk - K (rotated) and V of tokens [t, t + n) into r->k, r->v */
static kvf_status recomp_chunk(struct recomp *r, const char *call,
			       uint64_t seq, uint32_t layer, uint64_t t,
			       uint32_t n)
{
	kvf_store *st = r->st;
	kvf_status rc;

	if ((rc = kvf_read_x(st, seq, layer, t, t + n, r->x)) != KVF_OK)
		return kvf_fail_wrap(rc, call);
	kvc_project(r->x, st->hdr.dtype, n, r->d, r->w->w_k, r->cols, r->k, r->xrow);
	kvc_project(r->x, st->hdr.dtype, n, r->d, r->w->w_v, r->cols, r->v, r->xrow);
	kvc_rope(r->k, n, st->hdr.n_kv_heads, st->hdr.head_dim, t,
		 r->w->rope_theta);
	return KVF_OK;
}

kvf_status kvf_recompute_kv(kvf_store *st, uint64_t seq, uint32_t layer,
			    uint64_t t0, uint64_t t1, float *k_out, float *v_out)
{
	const char *call = "kvf_recompute_kv";
	struct recomp r;
	kvf_status rc;

	if (st == NULL)
		return kvf_fail(KVF_EINVAL, "%s: store is NULL", call);
	if (k_out == NULL && v_out == NULL && t1 > t0)
		return kvf_fail(KVF_EINVAL, "%s: k_out and v_out are both NULL", call);
	if ((rc = recomp_begin(&r, st, call, seq, layer, t0, t1, NULL)) != KVF_OK)
		return rc;
	for (uint64_t t = t0; t < t1 && rc == KVF_OK; t += CHUNK_TOKENS) {
		uint32_t n = (uint32_t)(t1 - t < CHUNK_TOKENS ? t1 - t : CHUNK_TOKENS);
		size_t off = (size_t)(t - t0) * r.cols;

		if ((rc = recomp_chunk(&r, call, seq, layer, t, n)) != KVF_OK)
			break;
		if (k_out)
			memcpy(k_out + off, r.k, (size_t)n * r.cols * sizeof(float));
		if (v_out)
			memcpy(v_out + off, r.v, (size_t)n * r.cols * sizeof(float));
	}
	recomp_end(&r);
	return rc;
}

static kvf_status attend_x_check(kvf_store *st, const char *call,
				 const float *q, const float *out,
				 const kvf_attn_opts *opts)
{
	kvf_status rc;

	if (st == NULL || q == NULL || out == NULL)
		return kvf_fail(KVF_EINVAL, "%s: %s is NULL", call,
				st == NULL ? "store" : q == NULL ? "q" : "out");
	if (opts == NULL)
		return KVF_OK;
	if ((rc = kvf_struct_check(call, "opts", opts, sizeof(*opts))) != KVF_OK)
		return rc;
	if (!isfinite(opts->scale) || opts->scale < 0)
		return kvf_fail(KVF_EINVAL, "%s: opts.scale %g must be finite and >= 0",
				call, (double)opts->scale);
	if (opts->sparse || opts->mask || opts->window || opts->h2o)
		return kvf_fail(KVF_ENOTSUP,
				"%s: opts.%s is not supported over recomputed K,V (only scale and lse)",
				call, opts->sparse ? "sparse" : opts->mask ? "mask"
				: opts->window ? "window" : "h2o");
	return KVF_OK;
}

/* gather_head - head h's rows of src [n][n_heads][hd] into dst [n][hd] */
static void gather_head(float *dst, const float *src, uint32_t n,
			uint32_t n_heads, uint32_t hd, uint32_t h)
{
	for (uint32_t t = 0; t < n; t++)
		memcpy(dst + (size_t)t * hd, src + ((size_t)t * n_heads + h) * hd,
		       (size_t)hd * sizeof(float));
}

static kvf_status attend_x_run(kvf_store *st, const char *call, uint64_t seq,
			       uint32_t layer, uint64_t t0, uint64_t t1,
			       const float *q, float *out, float scale,
			       float *lse, struct layer_weights *given)
{
	uint32_t n_kv = st->hdr.n_kv_heads, hd = st->hdr.head_dim;
	uint32_t g = st->hdr.n_q_heads / n_kv, nq = st->hdr.n_q_heads;
	const struct kvc_kernels *kern = kvc_kernels();
	struct kvc_attn_state *s = NULL;
	float *sbuf = NULL, *qs = NULL, *kh = NULL, *vh = NULL;
	size_t sfl = KVC_ATTN_STATE_FLOATS(g, hd);
	struct recomp r;
	kvf_status rc;

	if ((rc = recomp_begin(&r, st, call, seq, layer, t0, t1, given)) != KVF_OK)
		return rc;
	s = kvf_calloc(n_kv, sizeof(*s));
	sbuf = kvf_malloc(n_kv * sfl * sizeof(float));
	qs = kvf_malloc((size_t)nq * hd * sizeof(float));
	kh = kvf_malloc((size_t)CHUNK_TOKENS * hd * sizeof(float));
	vh = kvf_malloc((size_t)CHUNK_TOKENS * hd * sizeof(float));
	if (!s || !sbuf || !qs || !kh || !vh) {
		rc = kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
		goto out;
	}
	if (scale == 0)
		scale = 1.0f / sqrtf((float)hd);
	for (size_t i = 0; i < (size_t)nq * hd; i++)
		qs[i] = q[i] * scale;
	for (uint32_t h = 0; h < n_kv; h++)
		kvc_attn_state_init(&s[h], g, hd, sbuf + h * sfl);
	for (uint64_t t = t0; t < t1; t += CHUNK_TOKENS) {
		uint32_t n = (uint32_t)(t1 - t < CHUNK_TOKENS ? t1 - t : CHUNK_TOKENS);

		if ((rc = recomp_chunk(&r, call, seq, layer, t, n)) != KVF_OK)
			goto out;
		for (uint32_t h = 0; h < n_kv; h++) {
			gather_head(kh, r.k, n, n_kv, hd, h);
			gather_head(vh, r.v, n, n_kv, hd, h);
			kern->attn_fold(&s[h], qs + (size_t)h * g * hd, kh, vh, n,
					KVF_DTYPE_F32, NULL, NULL, 0);
		}
	}
	for (uint32_t h = 0; h < n_kv; h++)
		kvc_attn_finish(&s[h], out + (size_t)h * g * hd,
				lse ? lse + (size_t)h * g : NULL);
out:
	kvf_free(s);
	kvf_free(sbuf);
	kvf_free(qs);
	kvf_free(kh);
	kvf_free(vh);
	recomp_end(&r);
	return rc;
}

kvf_status kvf_attend_x(kvf_store *st, uint64_t seq, uint32_t layer,
			uint64_t t0, uint64_t t1, const float *q, float *out,
			const kvf_attn_opts *opts)
{
	const char *call = "kvf_attend_x";
	kvf_status rc;

	if ((rc = attend_x_check(st, call, q, out, opts)) != KVF_OK)
		return rc;
	return attend_x_run(st, call, seq, layer, t0, t1, q, out,
			    opts ? opts->scale : 0, opts ? opts->lse : NULL, NULL);
}

kvf_status recompute_attend_with(kvf_store *st, uint64_t seq, uint32_t layer,
				 uint64_t t0, uint64_t t1, const float *q,
				 float *out, struct layer_weights *w)
{
	return attend_x_run(st, "kvf_profile_run", seq, layer, t0, t1, q, out,
			    0, NULL, w);
}

/* A kvf_attend_x_start job: its arguments, q copied. */
struct attend_x_job {
	kvf_store *st;
	uint64_t seq, t0, t1;
	uint32_t layer;
	float scale;
	float *q;   /* a copy */
	float *out; /* the caller's */
	float *lse; /* the caller's, or NULL */
};

static kvf_status attend_x_job_run(void *arg)
{
	struct attend_x_job *a = arg;

	return attend_x_run(a->st, "kvf_attend_x_start", a->seq, a->layer,
			    a->t0, a->t1, a->q, a->out, a->scale, a->lse, NULL);
}

static void attend_x_job_release(void *arg)
{
	struct attend_x_job *a = arg;

	kvf_free(a->q);
	kvf_free(a);
}

kvf_status kvf_attend_x_start(kvf_store *st, uint64_t seq, uint32_t layer,
			      uint64_t t0, uint64_t t1, const float *q,
			      float *out, const kvf_attn_opts *opts,
			      kvf_job **job)
{
	const char *call = "kvf_attend_x_start";
	struct attend_x_job *a;
	struct recomp r;
	size_t qn;
	kvf_status rc;

	if (job == NULL)
		return kvf_fail(KVF_EINVAL, "%s: job is NULL", call);
	*job = NULL;
	if ((rc = attend_x_check(st, call, q, out, opts)) != KVF_OK)
		return rc;
	/* the checks the job would make, now, so an argument error is the
	 * caller's at once */
	if ((rc = recomp_begin(&r, st, call, seq, layer, t0, t1, NULL)) != KVF_OK)
		return rc;
	recomp_end(&r);
	qn = (size_t)st->hdr.n_q_heads * st->hdr.head_dim;
	a = kvf_calloc(1, sizeof(*a));
	if (a == NULL || (a->q = kvf_malloc(qn * sizeof(float))) == NULL) {
		kvf_free(a);
		return kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
	}
	memcpy(a->q, q, qn * sizeof(float));
	*a = (struct attend_x_job){ .st = st, .seq = seq, .t0 = t0, .t1 = t1,
				    .layer = layer, .q = a->q, .out = out,
				    .scale = opts ? opts->scale : 0,
				    .lse = opts ? opts->lse : NULL };
	if ((rc = async_submit(st, call, attend_x_job_run, attend_x_job_release,
			       a, job)) != KVF_OK)
		attend_x_job_release(a);
	return rc;
}
