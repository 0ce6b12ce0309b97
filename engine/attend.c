/*
 * attend.c - attention and token scores computed next to the data:
 * kvf_attend, kvf_attend_batch, kvf_scores, kvf_topk, kvf_scores_iter,
 * kvf_h2o_read, kvf_attn_merge.
 *
 * Only q goes in and the result comes out: the K and V pages of a head are
 * streamed from group buffers, open segments or media (read in batches,
 * verified) straight into the compute kernels (compute/kernels.h), one
 * task per (sequence, KV head) on the store's worker pool.  The query
 * heads that share a KV head (GQA) are folded in one pass over its pages.
 *
 * Locking: the caller's thread holds world shared and the lock of every
 * sequence involved (taken in id order, so two batch calls cannot
 * deadlock) for the whole call; tasks only read their sequence, except
 * for per-(layer, head) state that belongs to exactly one task (a tail
 * group buffer loaded from media, the head's H2O scores).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/alloc.h"
#include "api/options.h"
#include "api/status.h"
#include "compute/kernels.h"
#include "engine/pool.h"
#include "engine/kt.h"
#include "engine/readpath.h"
#include "engine/seq.h"
#include "engine/store.h"

/* What every task of one call shares. */
struct attn_call {
	kvf_store *st;
	const struct kvc_kernels *k;
	struct seq **seqs;     /* [n_seqs], locked by the caller */
	uint32_t n_seqs;
	uint32_t layer;
	const float *q;        /* [n_seqs][n_q_heads][head_dim] */
	float *out;            /* [n_seqs][n_q_heads][head_dim] or NULL */
	float *lse;            /* [n_seqs][n_q_heads] or NULL */
	float scale;           /* softmax scale */
	const kvf_attn_opts *o; /* &opts, or NULL when the caller gave none */
	kvf_attn_opts opts;    /* the caller's, defaults past its size */
	float *probs;          /* kvf_scores: [n_q_heads][probs_cap] */
	uint64_t probs_cap;
	uint32_t topk;         /* kvf_topk: tokens per KV head */
	uint64_t *top_tokens;  /* [n_kv_heads][topk] */
	float *top_mass;       /* [n_kv_heads][topk] or NULL */
	uint32_t *top_n;       /* tokens selected per head */
};

/* One task's fold. */
struct fold_ctx {
	const struct attn_call *c;
	struct kvc_attn_state state;
	const float *q;        /* [d][head_dim], scaled */
	uint64_t t_start;      /* first token attended */
	float *scores;         /* NULL, or [d][n_tok] raw scores */
	uint64_t n_tok;        /* tokens attended */
};

static kvf_status fold_span(void *arg, uint64_t first, uint32_t n,
			    const unsigned char *k_rows,
			    const unsigned char *v_rows)
{
	struct fold_ctx *f = arg;
	const kvf_attn_opts *o = f->c->o;
	const uint8_t *mask = o && o->mask ? o->mask + first : NULL;

	f->c->k->attn_fold(&f->state, f->q, k_rows, v_rows, n,
			   (kvf_dtype)f->c->st->hdr.dtype, mask,
			   f->scores ? f->scores + (first - f->t_start) : NULL,
			   (size_t)f->n_tok);
	return KVF_OK;
}

/* attended_range - the tokens [t_start, len) one call looks at */
static uint64_t attended_from(const kvf_attn_opts *o, uint64_t len)
{
	if (o && o->window && o->window < len)
		return len - o->window;
	return 0;
}

/* h2o_add - add probabilities p ([d][n], summed over d) of tokens
 * [t_start, t_start + n) to the head's H2O scores */
static kvf_status h2o_add(kvf_store *st, struct seq *seq, uint32_t layer,
			  uint32_t head, const float *p, uint32_t d,
			  uint64_t t_start, uint64_t n,
			  const struct kvc_kernels *k)
{
	struct h2o *h;
	uint64_t need = t_start + n;

	if (seq->h2o == NULL)
		return kvf_fail(KVF_ENOMEM, "H2O scores are not allocated");
	h = &seq->h2o[(size_t)layer * st->hdr.n_kv_heads + head];
	if (need > h->cap) {
		uint64_t cap = h->cap ? h->cap : 256;
		float *a;

		while (cap < need)
			cap *= 2;
		a = kvf_realloc(h->score, cap * sizeof(float));
		if (a == NULL)
			return kvf_fail(KVF_ENOMEM, "out of memory for H2O scores");
		memset(a + h->cap, 0, (cap - h->cap) * sizeof(float));
		h->score = a;
		h->cap = cap;
	}
	if (need > h->len)
		h->len = need;
	for (uint64_t done = 0; done < n;) {
		uint32_t m = n - done > (1u << 30) ? 1u << 30 : (uint32_t)(n - done);

		k->h2o_accumulate(h->score + t_start + done, p + done, (size_t)n,
				  d, m);
		done += m;
	}
	return KVF_OK;
}

static kvf_status sparf_task(const struct attn_call *c, uint32_t si,
			     uint32_t head, const float *qs, float *out,
			     float *lse);

/* head_task - attention of one (sequence, KV head) */
static kvf_status head_task(void *arg, uint32_t i)
{
	const struct attn_call *c = arg;
	kvf_store *st = c->st;
	uint32_t H = st->hdr.n_kv_heads, Q = st->hdr.n_q_heads;
	uint32_t D = st->hdr.head_dim, d = Q / H;
	uint32_t si = i / H, head = i % H;
	struct seq *seq = c->seqs[si];
	uint64_t len = seq->len[c->layer];
	const float *q = c->q + ((size_t)si * Q + (size_t)head * d) * D;
	struct fold_ctx f = { .c = c };
	int want_probs = c->probs || c->top_tokens || (c->o && c->o->h2o);
	float *buf, *qs;
	kvf_status rc;

	f.t_start = attended_from(c->o, len);
	f.n_tok = len - f.t_start;
	buf = kvf_malloc((KVC_ATTN_STATE_FLOATS(d, D) + (size_t)d * D) *
			 sizeof(float));
	if (want_probs && f.n_tok)
		f.scores = kvf_malloc((size_t)d * f.n_tok * sizeof(float));
	if (buf == NULL || (want_probs && f.n_tok && f.scores == NULL)) {
		kvf_free(buf);
		kvf_free(f.scores);
		return kvf_fail(KVF_ENOMEM, "attention: out of memory for a task");
	}
	qs = buf + KVC_ATTN_STATE_FLOATS(d, D);
	for (size_t j = 0; j < (size_t)d * D; j++)
		qs[j] = q[j] * c->scale;
	f.q = qs;
	if (c->o && c->o->sparse && c->out) {
		rc = len ? sparf_task(c, si, head, qs,
				      c->out + ((size_t)si * Q + (size_t)head * d) * D,
				      c->lse ? c->lse + (size_t)si * Q + (size_t)head * d
					     : NULL)
			 : KVF_OK;
		if (len == 0) {
			kvc_attn_state_init(&f.state, d, D, buf);
			kvc_attn_finish(&f.state,
					c->out + ((size_t)si * Q + (size_t)head * d) * D,
					c->lse ? c->lse + (size_t)si * Q + (size_t)head * d
					       : NULL);
		}
		kvf_free(buf);
		kvf_free(f.scores);
		return rc;
	}
	kvc_attn_state_init(&f.state, d, D, buf);
	rc = stream_read_pair(st, seq, seq_kv_stream(st, seq, c->layer, KIND_K, head),
			      seq_kv_stream(st, seq, c->layer, KIND_V, head),
			      len, f.t_start, len, fold_span, &f);
	if (rc == KVF_OK && c->out)
		kvc_attn_finish(&f.state,
				c->out + ((size_t)si * Q + (size_t)head * d) * D,
				c->lse ? c->lse + (size_t)si * Q + (size_t)head * d
				       : NULL);
	if (rc == KVF_OK && want_probs && f.n_tok) {
		for (uint32_t h = 0; h < d; h++)
			c->k->probs(f.scores + (size_t)h * f.n_tok,
				    f.scores + (size_t)h * f.n_tok,
				    (uint32_t)f.n_tok, f.state.m[h], f.state.l[h]);
		if (c->probs)
			for (uint32_t h = 0; h < d; h++)
				memcpy(c->probs + ((size_t)head * d + h) * c->probs_cap,
				       f.scores + (size_t)h * f.n_tok,
				       f.n_tok * sizeof(float));
		if (c->o && c->o->h2o)
			rc = h2o_add(st, seq, c->layer, head, f.scores, d,
				     f.t_start, f.n_tok, c->k);
		if (rc == KVF_OK && c->top_tokens) {
			/* rank by the mass the group's heads give each token */
			float *sum = f.scores; /* reuse row 0 as the sum */
			uint32_t *idx = kvf_malloc((size_t)c->topk * sizeof(uint32_t));
			uint32_t n;

			if (idx == NULL) {
				rc = kvf_fail(KVF_ENOMEM, "kvf_topk: out of memory");
			} else {
				for (uint32_t h = 1; h < d; h++)
					for (uint64_t t = 0; t < f.n_tok; t++)
						sum[t] += f.scores[(size_t)h * f.n_tok + t];
				n = kvc_topk(sum, (uint32_t)f.n_tok, c->topk, idx);
				for (uint32_t j = 0; j < n; j++) {
					c->top_tokens[(size_t)head * c->topk + j] =
						f.t_start + idx[j];
					if (c->top_mass)
						c->top_mass[(size_t)head * c->topk + j] =
							sum[idx[j]] / (float)d;
				}
				c->top_n[head] = n;
				kvf_free(idx);
			}
		}
	} else if (rc == KVF_OK && c->top_tokens) {
		c->top_n[head] = 0;
	}
	kvf_free(buf);
	kvf_free(f.scores);
	return rc;
}

/* ---- SparF (InstInfer Algorithm 1) ---------------------------------------- */

/* What one SparF task builds while it reads. */
struct sparf_ctx {
	const struct attn_call *c;
	uint32_t d, rg;           /* query heads; dim groups selected */
	const uint32_t *sel;      /* [rg] dim groups, ascending */
	const uint32_t *dims;     /* [rg * E] dims, ascending */
	const float *q;           /* [d][head_dim], scaled */
	unsigned char *block;     /* [rg] pages of the block being gathered */
	float *s;                 /* [d][n] approximate scores */
	uint64_t n;               /* tokens scored */
	struct kvc_attn_state state;
	uint8_t *selected;        /* [d][n]: token chosen for head h */
};

/* score_block - approximate scores of tokens [first, first + cnt) from
 * the selected dim groups' pages at pages[0..rg) */
static void score_block(struct sparf_ctx *x, const unsigned char *const *pages,
			uint64_t first, uint32_t cnt)
{
	kvf_store *st = x->c->st;
	uint32_t E = st->kt_dims, T = st->kt_tokens, r = x->rg * E;
	const void *rows[512];
	const kvf_attn_opts *o = x->c->o;

	for (uint32_t i = 0; i < r; i++)
		rows[i] = pages[i / E] + (size_t)(x->dims[i] % E) * T * st->elt_bytes;
	x->c->k->sparf_scores(x->q, x->d, st->hdr.head_dim, x->dims, r, rows, cnt,
			      (kvf_dtype)st->hdr.dtype,
			      o && o->mask ? o->mask + first : NULL,
			      x->s + first, (size_t)x->n);
}

/* kt_page - gather a block's selected K^T pages; score when complete */
static kvf_status kt_page(void *arg, uint64_t i, const unsigned char *page,
			  int in_place)
{
	(void)in_place;
	struct sparf_ctx *x = arg;
	kvf_store *st = x->c->st;
	uint32_t j = (uint32_t)(i % x->rg);
	const unsigned char *pages[64];

	memcpy(x->block + (size_t)j * st->hdr.page_size, page, st->hdr.page_size);
	if (j + 1 < x->rg)
		return KVF_OK;
	for (uint32_t g = 0; g < x->rg; g++)
		pages[g] = x->block + (size_t)g * st->hdr.page_size;
	score_block(x, pages, (i / x->rg) * st->kt_tokens, st->kt_tokens);
	return KVF_OK;
}

/* exact_span - fold the selected tokens of a group, head by head */
static kvf_status exact_span(void *arg, uint64_t first, uint32_t n,
			     const unsigned char *k_rows,
			     const unsigned char *v_rows)
{
	struct sparf_ctx *x = arg;

	for (uint32_t h = 0; h < x->d; h++) {
		struct kvc_attn_state v = kvc_attn_state_head(&x->state, h);

		x->c->k->attn_fold(&v, x->q + (size_t)h * x->c->st->hdr.head_dim,
				   k_rows, v_rows, n,
				   (kvf_dtype)x->c->st->hdr.dtype,
				   x->selected + (size_t)h * x->n + first, NULL, 0);
	}
	return KVF_OK;
}

struct vmean_ctx {
	const struct kvc_kernels *k;
	float *mean;
	uint64_t *count;
	uint32_t head_dim;
	kvf_dtype dtype;
};

static kvf_status vmean_span(void *arg, uint64_t first, uint32_t n,
			     const unsigned char *rows)
{
	struct vmean_ctx *v = arg;

	(void)first;
	v->k->vmean_fold(v->mean, *v->count, rows, n, v->head_dim, v->dtype);
	*v->count += n;
	return KVF_OK;
}

/* vbar_catch_up - fold the V tokens the head's running mean has not seen */
static kvf_status vbar_catch_up(const struct attn_call *c, struct seq *seq,
				uint32_t head, float **mean)
{
	kvf_store *st = c->st;
	uint32_t D = st->hdr.head_dim;
	size_t lh = (size_t)c->layer * st->hdr.n_kv_heads + head;
	struct vmean_ctx v = { c->k, seq->vbar + lh * D, &seq->vbar_n[lh], D,
			       (kvf_dtype)st->hdr.dtype };
	uint64_t len = seq->len[c->layer];

	*mean = v.mean;
	if (seq->vbar_n[lh] >= len)
		return KVF_OK;
	return stream_read_spans(st, seq, seq_kv_stream(st, seq, c->layer, KIND_V, head),
				 len, seq->vbar_n[lh], len, vmean_span, &v);
}

/* select_tokens - sparse = 1: per query head the top-k tokens by
 * approximate score (idx: [k] scratch); the groups any of them is in */
static void select_tokens(struct sparf_ctx *x, uint64_t t_start, uint64_t k,
			  uint32_t *idx, float *alpha, uint64_t *groups,
			  uint64_t *n_groups)
{
	const struct attn_call *c = x->c;
	uint32_t G = c->st->group_tokens;
	uint64_t len = x->n;

	for (uint32_t h = 0; h < x->d; h++) {
		float *s = x->s + (size_t)h * len, m, l;
		uint32_t got;

		for (uint64_t t = 0; t < t_start; t++)
			s[t] = -INFINITY;
		c->k->softmax_stats(s, (uint32_t)len, &m, &l);
		got = kvc_topk(s, (uint32_t)len, (uint32_t)k, idx);
		alpha[h] = c->k->softmax_mass(s, idx, got, m, l);
		for (uint32_t j = 0; j < got; j++)
			if (s[idx[j]] > -INFINITY)
				x->selected[(size_t)h * len + idx[j]] = 1;
	}
	for (uint64_t g = 0; g * G < len; g++) {
		int any = 0;

		for (uint32_t h = 0; h < x->d && !any; h++)
			for (uint64_t t = g * G; t < len && t < (g + 1) * G && !any; t++)
				any = x->selected[(size_t)h * len + t];
		if (any)
			groups[(*n_groups)++] = g;
	}
}

/*
 * select_groups - sparse = 2: whole token groups instead of single tokens,
 * the ceil(k / G) groups of most approximate attention mass (summed over
 * the KV head's query heads); every token of theirs is attended exactly,
 * so each page read is used whole however scattered the heavy tokens are.
 * alpha[h] is the approximate mass of the chosen groups' tokens.
 */
static kvf_status select_groups(struct sparf_ctx *x, uint64_t t_start,
				uint64_t k, float *alpha, uint64_t *groups,
				uint64_t *n_groups)
{
	const struct attn_call *c = x->c;
	uint32_t G = c->st->group_tokens;
	uint64_t len = x->n, ng = (len + G - 1) / G;
	/* every group when k is every token (a window may start mid-group) */
	uint64_t kg = k >= len - t_start ? ng : (k + G - 1) / G;
	float *mass = kvf_calloc(ng + 1, sizeof(float));
	uint32_t *gidx = kvf_malloc((ng + 1) * sizeof(uint32_t));
	uint8_t *chosen = kvf_calloc(ng + 1, 1);
	uint32_t got;

	if (mass == NULL || gidx == NULL || chosen == NULL) {
		kvf_free(mass);
		kvf_free(gidx);
		kvf_free(chosen);
		return kvf_fail(KVF_ENOMEM, "sparse attention: out of memory for a task");
	}
	for (uint32_t h = 0; h < x->d; h++) {
		float *s = x->s + (size_t)h * len, m, l;

		for (uint64_t t = 0; t < t_start; t++)
			s[t] = -INFINITY;
		c->k->softmax_stats(s, (uint32_t)len, &m, &l);
		/* s becomes the approximate probabilities; masked tokens,
		 * which no group attends, -1 */
		for (uint64_t t = 0; t < len; t++) {
			s[t] = s[t] > -INFINITY ? expf(s[t] - m) / l : -1.0f;
			if (s[t] >= 0.0f)
				mass[t / G] += s[t];
		}
	}
	got = kvc_topk(mass, (uint32_t)ng, (uint32_t)(kg < ng ? kg : ng), gidx);
	for (uint32_t j = 0; j < got; j++)
		chosen[gidx[j]] = 1;
	memset(alpha, 0, x->d * sizeof(float));
	for (uint64_t g = 0; g < ng; g++) {
		int any = 0;

		if (!chosen[g])
			continue;
		for (uint32_t h = 0; h < x->d; h++) {
			const float *s = x->s + (size_t)h * len;

			for (uint64_t t = g * G; t < len && t < (g + 1) * G; t++)
				if (s[t] >= 0.0f) {
					x->selected[(size_t)h * len + t] = 1;
					any = 1;
					alpha[h] += s[t];
				}
		}
		if (any) /* a group all masked needs no read */
			groups[(*n_groups)++] = g;
	}
	kvf_free(mass);
	kvf_free(gidx);
	kvf_free(chosen);
	return KVF_OK;
}

static kvf_status sparf_task(const struct attn_call *c, uint32_t si,
			     uint32_t head, const float *qs, float *out,
			     float *lse)
{
	kvf_store *st = c->st;
	struct seq *seq = c->seqs[si];
	uint32_t D = st->hdr.head_dim, E = st->kt_dims, T = st->kt_tokens;
	uint32_t ng = st->kt_groups, d = st->hdr.n_q_heads / st->hdr.n_kv_heads;
	uint32_t G = st->group_tokens;
	uint64_t len = seq->len[c->layer], nb = len / T;
	uint64_t t_start = attended_from(c->o, len);
	struct sparf_ctx x = { .c = c, .d = d, .q = qs, .n = len };
	uint32_t r = c->o->top_r ? c->o->top_r : D / 4;
	uint32_t sel[64], dims[512], *idx = NULL;
	uint64_t *entries = NULL, *groups = NULL, n_groups = 0;
	float key[64], *alpha = NULL, *vbar, *sbuf = NULL;
	kvf_status rc = KVF_OK;
	uint64_t k;

	x.rg = (r + E - 1) / E;
	if (x.rg > ng)
		x.rg = ng;
	for (uint32_t g = 0; g < ng; g++) {
		key[g] = 0;
		for (uint32_t h = 0; h < d; h++)
			for (uint32_t e = 0; e < E; e++)
				key[g] += fabsf(qs[(size_t)h * D + g * E + e]);
	}
	x.rg = kvc_topk(key, ng, x.rg, sel);
	for (uint32_t i = 0; i < x.rg * E; i++)
		dims[i] = sel[i / E] * E + i % E;
	x.sel = sel;
	x.dims = dims;
	k = c->o->top_k ? c->o->top_k : (len + 7) / 8;
	if (k > len - t_start)
		k = len - t_start;
	sbuf = kvf_malloc((KVC_ATTN_STATE_FLOATS(d, D) + (size_t)d * (len + 1)) *
			  sizeof(float));
	x.block = kvf_aligned_alloc(KVF_MEDIA_ALIGN, (size_t)x.rg * st->hdr.page_size);
	x.selected = kvf_calloc((size_t)d * (len + 1), 1);
	entries = kvf_malloc((nb * x.rg + 1) * sizeof(uint64_t));
	groups = kvf_malloc(((len + G - 1) / G + 1) * sizeof(uint64_t));
	idx = kvf_malloc((k + 1) * sizeof(uint32_t));
	alpha = kvf_malloc(d * sizeof(float));
	if (!sbuf || !x.block || !x.selected || !entries || !groups || !idx ||
	    !alpha || len > UINT32_MAX) {
		rc = kvf_fail(KVF_ENOMEM, "sparse attention: out of memory for a task");
		goto out;
	}
	kvc_attn_state_init(&x.state, d, D, sbuf);
	x.s = sbuf + KVC_ATTN_STATE_FLOATS(d, D);

	/* 1-2: approximate scores from the selected dims' K^T pages */
	for (uint64_t b = 0; b < nb; b++)
		for (uint32_t j = 0; j < x.rg; j++)
			entries[b * x.rg + j] = b * ng + sel[j];
	rc = stream_read_entries(st, seq, &seq->kt[(size_t)c->layer * st->hdr.n_kv_heads + head],
				 entries, nb * x.rg, kt_page, &x);
	if (rc == KVF_OK && len > nb * T) {
		const unsigned char *blk, *pages[64];

		rc = kt_open_block(st, seq, c->layer, head, &blk);
		for (uint32_t j = 0; rc == KVF_OK && j < x.rg; j++)
			pages[j] = blk + (size_t)sel[j] * st->hdr.page_size;
		if (rc == KVF_OK)
			score_block(&x, pages, nb * T, (uint32_t)(len - nb * T));
	}
	if (rc != KVF_OK)
		goto out;
	atomic_fetch_add(&st->c.sparf_pages_read, nb * x.rg);

	/* 3-4: the tokens to attend exactly, their mass, the groups they need */
	if (c->o->sparse == 2)
		rc = select_groups(&x, t_start, k, alpha, groups, &n_groups);
	else
		select_tokens(&x, t_start, k, idx, alpha, groups, &n_groups);
	if (rc != KVF_OK)
		goto out;
	/* 5: exact attention over the selected tokens only */
	rc = stream_read_pair_groups(st, seq, seq_kv_stream(st, seq, c->layer, KIND_K, head),
				     seq_kv_stream(st, seq, c->layer, KIND_V, head),
				     len, groups, n_groups, exact_span, &x);
	if (rc != KVF_OK)
		goto out;
	atomic_fetch_add(&st->c.sparf_pages_read, 2 * n_groups);
	{
		uint64_t dense = 2 * ((len - t_start + G - 1) / G + 1);
		uint64_t used = nb * x.rg + 2 * n_groups;

		if (dense > used)
			atomic_fetch_add(&st->c.sparf_pages_skipped, dense - used);
	}
	/* 6: alpha * exact + (1 - alpha) * mean of V */
	kvc_attn_finish(&x.state, out, lse);
	if ((rc = vbar_catch_up(c, seq, head, &vbar)) != KVF_OK)
		goto out;
	kvc_sparf_combine(out, alpha, vbar, d, D);
out:
	kvf_free(sbuf);
	kvf_free(x.block);
	kvf_free(x.selected);
	kvf_free(entries);
	kvf_free(groups);
	kvf_free(idx);
	kvf_free(alpha);
	return rc;
}

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
		if (out[got] == NULL) {
			rc = kvf_fail(KVF_ENOENT, "%s: sequence %llu does not exist",
				      call, (unsigned long long)ids[got]);
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

static kvf_status run(struct attn_call *c, const char *call,
		      const uint64_t *ids, uint32_t n)
{
	kvf_store *st = c->st;
	struct seq **seqs = kvf_calloc(n ? n : 1, sizeof(*seqs));
	kvf_status rc;

	if (seqs == NULL)
		return kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
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
	    seqs[0]->len[c->layer] - attended_from(c->o, seqs[0]->len[c->layer]) >
		    c->probs_cap)
		rc = kvf_fail(KVF_ERANGE,
			      "%s: probs_cap %llu is smaller than the %llu tokens attended",
			      call, (unsigned long long)c->probs_cap,
			      (unsigned long long)(seqs[0]->len[c->layer] -
						   attended_from(c->o, seqs[0]->len[c->layer])));
	if (rc == KVF_OK) {
		c->seqs = seqs;
		c->n_seqs = n;
		c->k = kvc_kernels();
		for (uint32_t i = 0; i < n; i++)
			seqs[i]->vbar_seen = vbar_tokens(st, seqs[i], c->layer);
		rc = pool_run(st->pool, n * st->hdr.n_kv_heads, head_task, c);
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
			rc = stream_read_spans(st, seq,
					       seq_kv_stream(st, seq, layer, KIND_K, head),
					       len, attended_from(c.o, len), len,
					       iter_span, &x);
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
