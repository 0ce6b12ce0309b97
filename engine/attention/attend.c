/*
 * attend.c - attention and token scores computed next to the data:
 * kvf_attend, kvf_attend_batch, kvf_scores, kvf_topk, kvf_scores_iter,
 * kvf_h2o_read, kvf_attn_merge, with their argument checks and locking.
 *
 * Only q goes in and the result comes out: the K and V pages of a head are
 * streamed from group buffers, open segments or media (read in batches,
 * verified) straight into the compute kernels (compute/kernels.h), one
 * task per (sequence, KV head) on the store's worker pool.  The query
 * heads that share a KV head (GQA) are folded in one pass over its pages.
 * The task is in attend_dense.c, its SparF variant in attend_sparf.c.
 *
 * Locking: the caller's thread holds world shared and the lock of every
 * sequence involved (taken in id order, so two batch calls cannot
 * deadlock) for the whole call; tasks only read their sequence, except
 * for per-(layer, head) state that belongs to exactly one task (a tail
 * group buffer loaded from media, the head's H2O scores).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/alloc.h"
#include "api/options.h"
#include "api/status.h"
#include "compute/kernels.h"
#include "engine/attention/attend_int.h"
#include "engine/base/fatal.h"
#include "engine/base/pool.h"
#include "engine/calls/read_calls.h"
#include "engine/reads/prefetch.h"
#include "engine/reads/readpath.h"
#include "engine/sequences/dropmark.h"
#include "engine/sequences/seq.h"
#include "engine/sequences/seq_stream.h"
#include "engine/base/store_state.h"

/* ---- argument checks and locking ----------------------------------------- */

static int cmp_seq(const void *a, const void *b)
{
	const struct seq *x = *(struct seq *const *)a, *y = *(struct seq *const *)b;

	return x->id < y->id ? -1 : x->id > y->id;
}

/* lock_seqs - look up and lock ids[0..n) in id order; on failure nothing
 * is held.  out[i] is the sequence of ids[i]. */
static kvf_status lock_seqs(kvf_store *st, const char *call,
			    const uint64_t *ids, uint32_t n, struct seq **out)
{
	struct seq **sorted = kvf_malloc((size_t)n * sizeof(*sorted));
	kvf_status rc = KVF_OK;
	uint32_t got = 0, locked = 0;

	if (sorted == NULL)
		return kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
	for (got = 0; got < n; got++) {
		out[got] = seq_get(st, ids[got]);
		if (out[got] == NULL || out[got]->cached) {
			rc = kvf_fail(KVF_ENOENT, "%s: sequence %llu does not exist%s",
				      call, (unsigned long long)ids[got],
				      out[got] ? ": the id names one of the store's cached prefixes" : "");
			got += out[got] != NULL; /* its reference goes too */
			break;
		}
		for (uint32_t j = 0; j < got; j++)
			if (out[j] == out[got]) {
				rc = kvf_fail(KVF_EINVAL,
					      "%s: sequence %llu is given twice",
					      call, (unsigned long long)ids[got]);
				break;
			}
		if (rc != KVF_OK) {
			got++;
			break;
		}
		sorted[got] = out[got];
	}
	if (rc == KVF_OK) {
		qsort(sorted, n, sizeof(*sorted), cmp_seq);
		for (locked = 0; locked < n; locked++) {
			pthread_mutex_lock(&sorted[locked]->lock);
			if (sorted[locked]->dead) {
				rc = kvf_fail(KVF_ENOENT, "%s: sequence %llu does not exist",
					      call,
					      (unsigned long long)sorted[locked]->id);
				pthread_mutex_unlock(&sorted[locked]->lock);
				break;
			}
		}
		while (rc != KVF_OK && locked > 0)
			pthread_mutex_unlock(&sorted[--locked]->lock);
	}
	if (rc != KVF_OK)
		for (uint32_t j = 0; j < got; j++)
			seq_put(st, out[j]);
	else
		for (uint32_t j = 0; j < n; j++)
			seq_note_use(st, out[j]); /* one use of each per call */
	kvf_free(sorted);
	return rc;
}

static void unlock_seqs(kvf_store *st, struct seq **seqs, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		seq_unlock_put(st, seqs[i]);
}

/* check_call - what every attention call checks before touching
 * anything; takes a copy of the caller's options into c */
static kvf_status check_call(struct attn_call *c, const char *call,
			     kvf_store *st, uint32_t layer, const float *q,
			     const kvf_attn_opts *in)
{
	const kvf_attn_opts *o = &c->opts;
	kvf_status rc;

	if (st == NULL || q == NULL)
		return kvf_fail(KVF_EINVAL, "%s: %s is NULL", call,
				st ? "q" : "store");
	if ((rc = store_check(st, call)) != KVF_OK)
		return rc;
	if (layer >= st->hdr.n_layers)
		return kvf_fail(KVF_ERANGE, "%s: layer %u out of range (store has %u layers)",
				call, layer, st->hdr.n_layers);
	c->st = st;
	c->layer = layer;
	c->q = q;
	c->scale = 1.0f / sqrtf((float)st->hdr.head_dim);
	if (in == NULL)
		return KVF_OK;
	if ((rc = kvf_struct_check(call, "opts", in, sizeof(*in))) != KVF_OK)
		return rc;
	/* an older caller's struct is shorter: the rest keeps defaults */
	kvf_attn_opts_init(&c->opts);
	memcpy(&c->opts, in, in->struct_size < sizeof(*in) ? in->struct_size
							   : sizeof(*in));
	c->o = &c->opts;
	if (!isfinite(o->scale) || o->scale < 0)
		return kvf_fail(KVF_EINVAL, "%s: opts.scale %g must be finite and >= 0",
				call, (double)o->scale);
	if (o->scale > 0)
		c->scale = o->scale;
	if (o->sparse > 2)
		return kvf_fail(KVF_EINVAL, "%s: opts.sparse %u must be 0, 1 or 2",
				call, o->sparse);
	if (o->h2o > 1)
		return kvf_fail(KVF_EINVAL, "%s: opts.h2o %u must be 0 or 1",
				call, o->h2o);
	if (o->sparse && st->kt_dims == 0)
		return kvf_fail(KVF_ENOTSUP,
				"%s: sparse (SparF) attention needs K^T pages; create the store with kt_pages = 1",
				call);
	if (o->sparse && (o->h2o || c->out == NULL))
		return kvf_fail(KVF_ENOTSUP,
				"%s: sparse (SparF) attention gives outputs only: no H2O scores, probabilities or top-k",
				call);
	if (o->sparse && o->top_r > st->hdr.head_dim)
		return kvf_fail(KVF_ERANGE, "%s: opts.top_r %u is past head_dim %u",
				call, o->top_r, st->hdr.head_dim);
	if (o->mask == NULL && o->mask_len != 0)
		return kvf_fail(KVF_EINVAL, "%s: opts.mask is NULL but mask_len is %llu",
				call, (unsigned long long)o->mask_len);
	return KVF_OK;
}

/* check_mask - the mask must cover every token of every sequence */
static kvf_status check_mask(const char *call, const kvf_attn_opts *o,
			     struct seq **seqs, uint32_t n, uint32_t layer)
{
	if (o == NULL || o->mask == NULL)
		return KVF_OK;
	for (uint32_t i = 0; i < n; i++)
		if (o->mask_len < seqs[i]->len[layer])
			return kvf_fail(KVF_ERANGE,
					"%s: opts.mask_len %llu is shorter than sequence %llu layer %u (%llu tokens)",
					call, (unsigned long long)o->mask_len,
					(unsigned long long)seqs[i]->id, layer,
					(unsigned long long)seqs[i]->len[layer]);
	return KVF_OK;
}

/* run - lock, check what needs the sequences, run one task per
 * (sequence, KV head), unlock */
/* vbar_tokens - tokens in the means of V of a layer's heads (0 when the
 * sequence keeps none) */
static uint64_t vbar_tokens(kvf_store *st, const struct seq *seq,
			    uint32_t layer)
{
	uint64_t sum = 0;

	for (uint32_t h = 0; seq->vbar_n && h < st->hdr.n_kv_heads; h++)
		sum += seq->vbar_n[(size_t)layer * st->hdr.n_kv_heads + h];
	return sum;
}

/* layer_ahead - the layer after c's of seq into the tier in the
 * background, the tokens a call like c's would attend there (a hint: its
 * failure fails nothing, and leaves no message) */
static void layer_ahead(struct attn_call *c, struct seq *seq)
{
	kvf_store *st = c->st;
	uint32_t next = c->layer + 1;
	int queued = 0;

	if (next < st->hdr.n_layers) {
		char keep[KVF_ERRMSG_CAP];

		snprintf(keep, sizeof(keep), "%s", kvf_last_error());
		if (prefetch_locked(st, seq, next,
				    attend_from(c->o, seq->len[next]),
				    &queued) != KVF_OK)
			kvf_fail(KVF_OK, "%s", keep);
	}
	/* a layer with nothing left to read ends the chain */
	seq->ahead = queued ? c->layer + 2 : 0;
}

static kvf_status run(struct attn_call *c, const char *call,
		      const uint64_t *ids, uint32_t n)
{
	kvf_store *st = c->st;
	struct seq **seqs = kvf_calloc(n ? n : 1, sizeof(*seqs));
	uint64_t *mark = kvf_calloc(n ? n : 1, sizeof(*mark));
	kvf_status rc;

	if (seqs == NULL || mark == NULL) {
		kvf_free(seqs);
		kvf_free(mark);
		return kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
	}
	pthread_rwlock_rdlock(&st->world);
	if ((rc = lock_seqs(st, call, ids, n, seqs)) != KVF_OK)
		goto out;
	rc = check_mask(call, c->o, seqs, n, c->layer);
	if (rc == KVF_OK && c->o && c->o->h2o)
		for (uint32_t i = 0; i < n && rc == KVF_OK; i++)
			rc = seq_h2o_alloc(st, seqs[i]);
	if (rc == KVF_OK && c->o && c->o->sparse)
		for (uint32_t i = 0; i < n && rc == KVF_OK; i++)
			if ((rc = seq_vbar_alloc(st, seqs[i])) == KVF_OK)
				rc = seq_kt_alloc(st, seqs[i]);
	if (rc == KVF_OK && c->probs &&
	    seqs[0]->len[c->layer] - attend_from(c->o, seqs[0]->len[c->layer]) >
		    c->probs_cap)
		rc = kvf_fail(KVF_ERANGE,
			      "%s: probs_cap %llu is smaller than the %llu tokens attended",
			      call, (unsigned long long)c->probs_cap,
			      (unsigned long long)(seqs[0]->len[c->layer] -
						   attend_from(c->o, seqs[0]->len[c->layer])));
	if (rc == KVF_OK) {
		uint64_t read0 = 0, read1 = 0;

		c->seqs = seqs;
		c->n_seqs = n;
		c->k = kvc_kernels();
		/* the sequences are locked: what they read now is this call's */
		for (uint32_t i = 0; i < n; i++) {
			seqs[i]->vbar_seen = vbar_tokens(st, seqs[i], c->layer);
			mark[i] = atomic_load(&seqs[i]->bytes_read);
			read0 += mark[i];
			/* a layer being read ahead: its pages, not a
			 * second read of them beside it */
			prefetch_wait(st, seqs[i]->id, c->layer);
			/* a sequence that missed last time, or whose layer
			 * was read ahead, reads the next one ahead now */
			if (c->ahead && (seqs[i]->attend_missed ||
					 seqs[i]->ahead == c->layer + 1))
				layer_ahead(c, seqs[i]);
		}
		rc = pool_run(st->pool, n * st->hdr.n_kv_heads, attend_head_task, c);
		for (uint32_t i = 0; i < n; i++) {
			uint64_t r = atomic_load(&seqs[i]->bytes_read);
			int missed = r != mark[i];

			/* a sequence that has just started missing reads the
			 * next layer ahead now, while the caller computes */
			if (c->ahead && rc == KVF_OK && missed &&
			    !seqs[i]->attend_missed &&
			    seqs[i]->ahead != c->layer + 2)
				layer_ahead(c, seqs[i]);
			if (c->ahead)
				seqs[i]->attend_missed = missed;
			read1 += r;
		}
		atomic_fetch_add(&st->c.attend_calls, 1);
		atomic_fetch_add(&st->c.attend_bytes_read, read1 - read0);
		if (rc != KVF_OK)
			kvf_fail_wrap(rc, call);
		/* a mean the tasks caught up goes into the next sync's "V" */
		for (uint32_t i = 0; i < n; i++)
			if (vbar_tokens(st, seqs[i], c->layer) != seqs[i]->vbar_seen)
				seqs[i]->vbar_changes++;
	}
	unlock_seqs(st, seqs, n);
out:
	pthread_rwlock_unlock(&st->world);
	kvf_free(seqs);
	kvf_free(mark);
	return rc;
}

/* ---- public calls ------------------------------------------------------- */

kvf_status kvf_attend(kvf_store *st, uint64_t seq, uint32_t layer,
		      const float *q, float *out, const kvf_attn_opts *opts)
{
	struct attn_call c = { .out = out };
	kvf_status rc;

	if ((rc = check_call(&c, "kvf_attend", st, layer, q, opts)) != KVF_OK)
		return rc;
	if (out == NULL)
		return kvf_fail(KVF_EINVAL, "kvf_attend: out is NULL");
	c.lse = c.o ? c.o->lse : NULL;
	return run(&c, "kvf_attend", &seq, 1);
}

kvf_status kvf_attend_batch(kvf_store *st, uint32_t n_seqs,
			    const uint64_t *seqs, uint32_t layer,
			    const float *q, float *out,
			    const kvf_attn_opts *opts)
{
	struct attn_call c = { .out = out };
	kvf_status rc;

	if ((rc = check_call(&c, "kvf_attend_batch", st, layer, q, opts)) != KVF_OK)
		return rc;
	if (out == NULL || (seqs == NULL && n_seqs > 0))
		return kvf_fail(KVF_EINVAL, "kvf_attend_batch: %s is NULL",
				out ? "seqs" : "out");
	if (n_seqs == 0)
		return KVF_OK;
	c.lse = c.o ? c.o->lse : NULL;
	/* dense attention reads every page from attend_from on: that is
	 * what is read ahead; SparF picks its pages as it goes */
	c.ahead = c.o == NULL || c.o->sparse == 0;
	return run(&c, "kvf_attend_batch", seqs, n_seqs);
}

kvf_status kvf_scores(kvf_store *st, uint64_t seq, uint32_t layer,
		      const float *q, const kvf_attn_opts *opts, float *probs,
		      uint64_t probs_cap)
{
	struct attn_call c = { .probs = probs, .probs_cap = probs_cap };
	kvf_status rc;

	if ((rc = check_call(&c, "kvf_scores", st, layer, q, opts)) != KVF_OK)
		return rc;
	if (probs == NULL)
		return kvf_fail(KVF_EINVAL, "kvf_scores: probs is NULL");
	return run(&c, "kvf_scores", &seq, 1);
}

kvf_status kvf_topk(kvf_store *st, uint64_t seq, uint32_t layer,
		    const float *q, const kvf_attn_opts *opts, uint32_t k,
		    uint64_t *tokens, float *mass, uint32_t *n_out)
{
	struct attn_call c = { .topk = k, .top_tokens = tokens,
			       .top_mass = mass, .top_n = n_out };
	kvf_status rc;

	if ((rc = check_call(&c, "kvf_topk", st, layer, q, opts)) != KVF_OK)
		return rc;
	if (tokens == NULL || n_out == NULL)
		return kvf_fail(KVF_EINVAL, "kvf_topk: %s is NULL",
				tokens ? "n_out" : "tokens");
	if (k == 0)
		return kvf_fail(KVF_EINVAL, "kvf_topk: k is 0");
	return run(&c, "kvf_topk", &seq, 1);
}

struct iter_ctx {
	kvf_store *st;
	const struct kvc_kernels *k;
	const float *q;      /* [d][head_dim], scaled */
	uint32_t d, head_dim, q0; /* query heads, their first index */
	kvf_dtype dtype;
	const uint8_t *mask;
	float *buf;          /* [d][group tokens] */
	kvf_score_fn fn;
	void *arg;
	int stopped;
};

static kvf_status iter_span(void *arg, uint64_t first, uint32_t n,
			    const unsigned char *rows)
{
	struct iter_ctx *x = arg;

	if (x->stopped)
		return KVF_OK;
	x->k->scores(x->q, x->d, x->head_dim, rows, n, x->dtype,
		     x->mask ? x->mask + first : NULL, x->buf, n);
	for (uint32_t h = 0; h < x->d && !x->stopped; h++)
		x->stopped = x->fn(x->arg, x->q0 + h, first, n, x->buf + (size_t)h * n);
	return KVF_OK;
}

/* iter_coded - iter_span over tokens [at, at + n) of an encoded K group
 * (a codec store's sealed group), decoded in registers */
static kvf_status iter_coded(void *arg, uint64_t first, uint32_t n,
			     const unsigned char *grp, uint32_t at)
{
	struct iter_ctx *x = arg;

	if (x->stopped)
		return KVF_OK;
	x->st->ck->scores(&x->st->codec_lay[0], x->q, x->d, grp, at, n,
			  x->mask ? x->mask + first : NULL, x->buf, n);
	for (uint32_t h = 0; h < x->d && !x->stopped; h++)
		x->stopped = x->fn(x->arg, x->q0 + h, first, n, x->buf + (size_t)h * n);
	return KVF_OK;
}

kvf_status kvf_scores_iter(kvf_store *st, uint64_t seq_id, uint32_t layer,
			   const float *q, const kvf_attn_opts *opts,
			   kvf_score_fn fn, void *arg)
{
	const char *call = "kvf_scores_iter";
	struct attn_call c = { 0 };
	struct iter_ctx x = { .fn = fn, .arg = arg };
	uint32_t H, D, d;
	struct seq *seq;
	float *qs;
	kvf_status rc;

	if ((rc = check_call(&c, call, st, layer, q, opts)) != KVF_OK)
		return rc;
	if (fn == NULL)
		return kvf_fail(KVF_EINVAL, "%s: fn is NULL", call);
	if (c.o && (c.o->sparse || c.o->h2o))
		return kvf_fail(KVF_ENOTSUP, "%s: sparse and h2o do not apply to raw scores",
				call);
	H = st->hdr.n_kv_heads;
	D = st->hdr.head_dim;
	d = st->hdr.n_q_heads / H;
	qs = kvf_malloc(((size_t)d * D + (size_t)d * st->group_tokens) * sizeof(float));
	if (qs == NULL)
		return kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
	pthread_rwlock_rdlock(&st->world);
	if ((rc = seq_get_locked(st, call, seq_id, &seq)) != KVF_OK)
		goto out;
	if ((rc = check_mask(call, c.o, &seq, 1, layer)) == KVF_OK) {
		uint64_t len = seq->len[layer];

		x.k = kvc_kernels();
		x.st = st;
		x.q = qs;
		x.d = d;
		x.head_dim = D;
		x.dtype = (kvf_dtype)st->hdr.dtype;
		x.mask = c.o ? c.o->mask : NULL;
		x.buf = qs + (size_t)d * D;
		for (uint32_t head = 0; head < H && rc == KVF_OK && !x.stopped; head++) {
			for (size_t j = 0; j < (size_t)d * D; j++)
				qs[j] = q[(size_t)head * d * D + j] * c.scale;
			x.q0 = head * d;
			rc = stream_read_spans_kept(st, seq,
						    dropmark_lane(st, layer, head),
						    seq_kv_stream(st, seq, layer, KIND_K, head),
						    len, attend_from(c.o, len), len,
						    iter_span, iter_coded, &x);
		}
	}
	seq_unlock_put(st, seq);
out:
	pthread_rwlock_unlock(&st->world);
	kvf_free(qs);
	return rc;
}

kvf_status kvf_h2o_read(kvf_store *st, uint64_t seq_id, uint32_t layer,
			uint32_t kv_head, uint64_t t0, uint64_t t1, float *out)
{
	const char *call = "kvf_h2o_read";
	struct seq *seq;
	kvf_status rc;

	if (st == NULL || (out == NULL && t1 > t0))
		return kvf_fail(KVF_EINVAL, "%s: %s is NULL", call,
				st ? "out" : "store");
	if ((rc = read_args_check(st, call, layer, &kv_head, t0, t1)) != KVF_OK)
		return rc;
	pthread_rwlock_rdlock(&st->world);
	if ((rc = seq_get_locked(st, call, seq_id, &seq)) != KVF_OK)
		goto out;
	if (t1 > seq->len[layer]) {
		rc = read_past_end(call, t0, t1, seq_id, "", layer, seq->len[layer]);
	} else {
		const struct h2o *h = seq->h2o
			? &seq->h2o[(size_t)layer * st->hdr.n_kv_heads + kv_head]
			: NULL;

		for (uint64_t t = t0; t < t1; t++)
			out[t - t0] = h && t < h->len ? h->score[t] : 0.0f;
	}
	seq_unlock_put(st, seq);
out:
	pthread_rwlock_unlock(&st->world);
	return rc;
}

kvf_status kvf_attn_merge(uint32_t n_heads, uint32_t head_dim,
			  const float *out_a, const float *lse_a,
			  const float *out_b, const float *lse_b, float *out,
			  float *lse)
{
	if (!out_a || !lse_a || !out_b || !lse_b || !out || !lse)
		return kvf_fail(KVF_EINVAL, "kvf_attn_merge: a buffer is NULL");
	if (n_heads == 0 || head_dim == 0)
		return kvf_fail(KVF_EINVAL, "kvf_attn_merge: n_heads %u and head_dim %u must be > 0",
				n_heads, head_dim);
	kvc_attn_merge(out, lse, out_a, lse_a, out_b, lse_b, n_heads, head_dim);
	return KVF_OK;
}
