/*
 * attend_multi.c - kvf_attend_multi: attention of many query positions of
 * one sequence in one pass over its pages, with a causal mask relative to
 * the positions (chunked prefill, speculative-decoding verification).
 *
 * One task per KV head on the store's worker pool.  A task keeps one
 * online-softmax state for every (query, query head of its group) and
 * streams the head's K and V pages once, in token order, over the union
 * of the queries' ranges.  A span that every query of a run of queries
 * covers whole is folded for the run at once (each row loaded once for
 * all of them); a span a query covers in part is folded for that query
 * alone over the part it covers.  Query i attends tokens
 * [lo_i, hi_i) = [max(0, p_i + 1 - window), p_i + 1).
 *
 * Locking: world shared and the sequence's lock for the whole call, as the
 * other attention calls (engine/attention/attend.c); tasks only read the sequence.
 */
#include <math.h>
#include <string.h>

#include "api/alloc.h"
#include "api/options.h"
#include "api/status.h"
#include "compute/kernels.h"
#include "engine/base/fatal.h"
#include "engine/base/pool.h"
#include "engine/reads/readpath.h"
#include "engine/sequences/dropmark.h"
#include "engine/sequences/seq.h"
#include "engine/sequences/seq_stream.h"
#include "engine/base/store_state.h"

/* What the tasks of one call share. */
struct multi_call {
	kvf_store *st;
	struct seq *seq;
	uint32_t layer;
	uint32_t n_q;          /* query positions */
	const float *q;        /* [n_q][n_q_heads][head_dim] */
	float *out;            /* [n_q][n_q_heads][head_dim] */
	float *lse;            /* [n_q][n_q_heads] or NULL */
	const uint8_t *mask;   /* [>= len] or NULL */
	float scale;
	uint64_t *lo, *hi;     /* [n_q] token range of each query */
	uint64_t t0, t1;       /* union of the ranges */
	const struct kvc_kernels *k;
};

/* One task's state. */
struct multi_task {
	const struct multi_call *c;
	struct kvc_attn_state state; /* n_q * d heads, query-major */
	const float *qs;             /* [n_q][d][head_dim], scaled */
	uint32_t d;                  /* query heads per KV head */
	uint32_t row_bytes;
};

/* sub - the view of queries [i0, i1) of the state */
static struct kvc_attn_state sub(const struct multi_task *t, uint32_t i0,
				 uint32_t i1)
{
	const struct kvc_attn_state *s = &t->state;
	size_t h0 = (size_t)i0 * t->d;
	struct kvc_attn_state v = {
		.n_q = (i1 - i0) * t->d, .head_dim = s->head_dim,
		.acc = s->acc + h0 * s->head_dim, .m = s->m + h0, .l = s->l + h0,
	};

	return v;
}

/* fold_part - fold tokens [a, a + n) into view v: plain rows at k, v
 * (the first of them token a), or with coded the encoded groups k, v of
 * which token a is token at */
static void fold_part(struct multi_task *t, struct kvc_attn_state *v,
		      uint32_t i0, uint64_t a, uint32_t n,
		      const unsigned char *k, const unsigned char *vv,
		      int coded, uint32_t at)
{
	const struct multi_call *c = t->c;
	kvf_store *st = c->st;
	const float *q = t->qs + (size_t)i0 * t->d * t->state.head_dim;
	const uint8_t *mask = c->mask ? c->mask + a : NULL;

	if (coded)
		st->ck->fold(v, q, &st->codec_lay[0], k, &st->codec_lay[1], vv,
			     at, n, mask, NULL, 0);
	else
		c->k->attn_fold(v, q, k, vv, n, (kvf_dtype)st->hdr.dtype, mask,
				NULL, 0);
}

/* multi_fold - tokens [first, first + n) to the queries whose ranges
 * take them: runs of queries that take all at once, the others each its
 * part */
static kvf_status multi_fold(struct multi_task *t, uint64_t first, uint32_t n,
			     const unsigned char *k, const unsigned char *vv,
			     int coded, uint32_t at)
{
	const struct multi_call *c = t->c;
	uint64_t end = first + n;
	uint32_t run = UINT32_MAX; /* first query of a run that covers all */

	for (uint32_t i = 0; i <= c->n_q; i++) {
		int whole = i < c->n_q && c->lo[i] <= first && c->hi[i] >= end;
		struct kvc_attn_state v;

		if (whole) {
			if (run == UINT32_MAX)
				run = i;
			continue;
		}
		if (run != UINT32_MAX) {
			v = sub(t, run, i);
			fold_part(t, &v, run, first, n, k, vv, coded, at);
			run = UINT32_MAX;
		}
		if (i < c->n_q) {
			uint64_t a = c->lo[i] > first ? c->lo[i] : first;
			uint64_t b = c->hi[i] < end ? c->hi[i] : end;
			size_t off = coded ? 0 : (size_t)(a - first) * t->row_bytes;

			if (a >= b)
				continue;
			v = sub(t, i, i + 1);
			fold_part(t, &v, i, a, (uint32_t)(b - a), k + off,
				  vv + off, coded, at + (uint32_t)(a - first));
		}
	}
	return KVF_OK;
}

static kvf_status multi_span(void *arg, uint64_t first, uint32_t n,
			     const unsigned char *k_rows,
			     const unsigned char *v_rows)
{
	return multi_fold(arg, first, n, k_rows, v_rows, 0, 0);
}

static kvf_status multi_coded(void *arg, uint64_t first, uint32_t n,
			      const unsigned char *k_grp,
			      const unsigned char *v_grp, uint32_t at)
{
	return multi_fold(arg, first, n, k_grp, v_grp, 1, at);
}

static kvf_status multi_task_run(void *arg, uint32_t head)
{
	const struct multi_call *c = arg;
	kvf_store *st = c->st;
	uint32_t Q = st->hdr.n_q_heads, D = st->hdr.head_dim;
	uint32_t d = Q / st->hdr.n_kv_heads;
	size_t heads = (size_t)c->n_q * d;
	struct multi_task t = { .c = c, .d = d, .row_bytes = st->row_bytes };
	float *buf, *qs;
	kvf_status rc = KVF_OK;

	buf = kvf_malloc((KVC_ATTN_STATE_FLOATS(heads, D) + heads * D) *
			 sizeof(float));
	if (buf == NULL)
		return kvf_fail(KVF_ENOMEM,
				"kvf_attend_multi: out of memory for %u queries",
				c->n_q);
	qs = buf + KVC_ATTN_STATE_FLOATS(heads, D);
	for (uint32_t i = 0; i < c->n_q; i++)
		for (size_t j = 0; j < (size_t)d * D; j++)
			qs[((size_t)i * d) * D + j] =
				c->q[((size_t)i * Q + (size_t)head * d) * D + j] *
				c->scale;
	t.qs = qs;
	kvc_attn_state_init(&t.state, (uint32_t)heads, D, buf);
	if (c->t1 > c->t0)
		rc = stream_read_pair_kept(st, c->seq, dropmark_lane(st, c->layer, head),
					   seq_kv_stream(st, c->seq, c->layer, KIND_K, head),
					   seq_kv_stream(st, c->seq, c->layer, KIND_V, head),
					   c->seq->len[c->layer], c->t0, c->t1,
					   multi_span, multi_coded, &t);
	if (rc == KVF_OK)
		for (uint32_t i = 0; i < c->n_q; i++) {
			struct kvc_attn_state v = sub(&t, i, i + 1);
			size_t at = (size_t)i * Q + (size_t)head * d;

			kvc_attn_finish(&v, c->out + at * D,
					c->lse ? c->lse + at : NULL);
		}
	kvf_free(buf);
	return rc;
}

/* multi_check - what the call checks before taking any lock; fills c */
static kvf_status multi_check(struct multi_call *c, const char *call,
			      kvf_store *st, uint32_t layer, uint32_t n_q,
			      const float *q, float *out, const kvf_attn_opts *in,
			      kvf_attn_opts *o)
{
	kvf_status rc;

	if (st == NULL || q == NULL || out == NULL)
		return kvf_fail(KVF_EINVAL, "%s: %s is NULL", call,
				st == NULL ? "store" : q == NULL ? "q" : "out");
	if ((rc = store_check(st, call)) != KVF_OK)
		return rc;
	if (layer >= st->hdr.n_layers)
		return kvf_fail(KVF_ERANGE, "%s: layer %u out of range (store has %u layers)",
				call, layer, st->hdr.n_layers);
	if (n_q == 0)
		return kvf_fail(KVF_EINVAL, "%s: n_q is 0 (at least one query)", call);
	kvf_attn_opts_init(o);
	if (in != NULL) {
		if ((rc = kvf_struct_check(call, "opts", in, sizeof(*in))) != KVF_OK)
			return rc;
		memcpy(o, in, in->struct_size < sizeof(*in) ? in->struct_size
							     : sizeof(*in));
	}
	if (!isfinite(o->scale) || o->scale < 0)
		return kvf_fail(KVF_EINVAL, "%s: opts.scale %g must be finite and >= 0",
				call, (double)o->scale);
	if (o->sparse || o->h2o)
		return kvf_fail(KVF_ENOTSUP,
				"%s: opts.%s is not supported for several query positions (dense only)",
				call, o->sparse ? "sparse" : "h2o");
	if (o->mask == NULL && o->mask_len != 0)
		return kvf_fail(KVF_EINVAL, "%s: opts.mask is NULL but mask_len is %llu",
				call, (unsigned long long)o->mask_len);
	c->st = st;
	c->layer = layer;
	c->n_q = n_q;
	c->q = q;
	c->out = out;
	c->lse = o->lse;
	c->mask = o->mask;
	c->scale = o->scale > 0 ? o->scale : 1.0f / sqrtf((float)st->hdr.head_dim);
	return KVF_OK;
}

/* multi_ranges - each query's token range, checked against len */
static kvf_status multi_ranges(struct multi_call *c, const char *call,
			       const uint64_t *positions, uint64_t window,
			       uint64_t len)
{
	c->t0 = UINT64_MAX;
	c->t1 = 0;
	for (uint32_t i = 0; i < c->n_q; i++) {
		uint64_t hi = len;

		if (positions != NULL) {
			if (positions[i] >= len)
				return kvf_fail(KVF_ERANGE,
						"%s: query %u is at position %llu, past the %llu tokens of sequence %llu layer %u",
						call, i,
						(unsigned long long)positions[i],
						(unsigned long long)len,
						(unsigned long long)c->seq->id,
						c->layer);
			hi = positions[i] + 1;
		}
		c->hi[i] = hi;
		c->lo[i] = window && window < hi ? hi - window : 0;
		if (c->lo[i] < c->t0)
			c->t0 = c->lo[i];
		if (hi > c->t1)
			c->t1 = hi;
	}
	if (c->t0 > c->t1)
		c->t0 = c->t1;
	return KVF_OK;
}

kvf_status kvf_attend_multi(kvf_store *st, uint64_t seq_id, uint32_t layer,
			    uint32_t n_q, const uint64_t *positions,
			    const float *q, float *out,
			    const kvf_attn_opts *opts)
{
	const char *call = "kvf_attend_multi";
	struct multi_call c = { 0 };
	kvf_attn_opts o;
	uint64_t len;
	kvf_status rc;

	if ((rc = multi_check(&c, call, st, layer, n_q, q, out, opts, &o)) != KVF_OK)
		return rc;
	c.lo = kvf_malloc(2 * (size_t)n_q * sizeof(uint64_t));
	if (c.lo == NULL)
		return kvf_fail(KVF_ENOMEM, "%s: out of memory for %u queries",
				call, n_q);
	c.hi = c.lo + n_q;
	pthread_rwlock_rdlock(&st->world);
	if ((rc = seq_get_locked(st, call, seq_id, &c.seq)) != KVF_OK)
		goto out;
	len = c.seq->len[layer];
	if (o.mask != NULL && o.mask_len < len)
		rc = kvf_fail(KVF_ERANGE,
			      "%s: opts.mask_len %llu is shorter than sequence %llu layer %u (%llu tokens)",
			      call, (unsigned long long)o.mask_len,
			      (unsigned long long)seq_id, layer,
			      (unsigned long long)len);
	if (rc == KVF_OK)
		rc = multi_ranges(&c, call, positions, o.window, len);
	if (rc == KVF_OK) {
		c.k = kvc_kernels();
		rc = pool_run(st->pool, st->hdr.n_kv_heads, multi_task_run, &c);
		if (rc != KVF_OK)
			kvf_fail_wrap(rc, call);
	}
	seq_unlock_put(st, c.seq);
out:
	pthread_rwlock_unlock(&st->world);
	kvf_free(c.lo);
	return rc;
}
