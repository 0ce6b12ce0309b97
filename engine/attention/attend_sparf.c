/*
 * attend_sparf.c - SparF sparse attention (InstInfer Algorithm 1) for one
 * (sequence, KV head): approximate scores from the K^T pages of the
 * query's largest dimensions pick the tokens (sparse = 1) or the token
 * groups (sparse = 2), whose K and V are then read exactly; the running
 * mean of V stands in for the tokens left out.  A file of its own: it
 * reads other pages than the dense path (K^T blocks, chosen groups) and
 * keeps its own state.
 *
 * Two departures from SparQ's Algorithm 1, both for what real heads do
 * (docs/attention.md, "SparF's quality"):
 *  - the exact set: the first tokens attended (attention sinks) and the
 *    last ones (the recent window) are always among those attended
 *    exactly, counted in top_k (kvf_attn_opts.sink_tokens, recent_tokens);
 *  - alpha, the weight of the exact part against the mean of V, is the
 *    exact mass of the chosen tokens (their log-sum-exp from the exact
 *    pass) against the approximate mass of the rest, not the approximate
 *    mass of both: r of head_dim dims see only part of a dominant token's
 *    q . k, so its approximate score runs low and SparQ's alpha gave the
 *    tokens that matter too little weight.
 *
 * Locking: see engine/attention/attend_int.h; the head's mean of V belongs to this
 * task alone.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/alloc.h"
#include "api/options.h"
#include "api/status.h"
#include "compute/kernels.h"
#include "engine/attention/attend_int.h"
#include "engine/reads/kt_read.h"
#include "engine/base/pool.h"
#include "engine/reads/readpath.h"
#include "engine/sequences/dropmark.h"
#include "engine/sequences/seq_stream.h"
#include "engine/base/store_state.h"

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
	uint64_t t_start;         /* first token attended */
	uint64_t sinks, recent;   /* the exact set: first and last tokens */
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

/* exact_coded - exact_span over tokens [at, at + n) of a codec store's
 * encoded K and V group, decoded in registers */
static kvf_status exact_coded(void *arg, uint64_t first, uint32_t n,
			      const unsigned char *k_grp,
			      const unsigned char *v_grp, uint32_t at)
{
	struct sparf_ctx *x = arg;
	kvf_store *st = x->c->st;

	for (uint32_t h = 0; h < x->d; h++) {
		struct kvc_attn_state v = kvc_attn_state_head(&x->state, h);

		st->ck->fold(&v, x->q + (size_t)h * st->hdr.head_dim,
			     &st->codec_lay[0], k_grp, &st->codec_lay[1], v_grp,
			     at, n, x->selected + (size_t)h * x->n + first, NULL, 0);
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
	if (dropmark_any(st, seq, (uint32_t)lh)) {
		/* the mean counts the kept tokens only (kvf_h2o_evict set it
		 * back to none): it goes on past the first vbar_n of them */
		if (seq->vbar_n[lh] >= dropmark_kept(st, seq, (uint32_t)lh, len))
			return KVF_OK;
		return stream_read_spans_kept(st, seq, (uint32_t)lh,
					      seq_kv_stream(st, seq, c->layer, KIND_V, head),
					      len,
					      dropmark_at_kept(st, seq, (uint32_t)lh,
							       seq->vbar_n[lh], len),
					      len, vmean_span, NULL, &v);
	}
	if (seq->vbar_n[lh] >= len)
		return KVF_OK;
	return stream_read_spans(st, seq, seq_kv_stream(st, seq, c->layer, KIND_V, head),
				 len, seq->vbar_n[lh], len, vmean_span, &v);
}

/* mask_dropped - the approximate scores of the tokens of dropped groups
 * (whose columns K^T pages still hold) are masked: never chosen, no mass */
static void mask_dropped(struct sparf_ctx *x, struct seq *seq, uint32_t head)
{
	uint32_t lane = dropmark_lane(x->c->st, x->c->layer, head);
	uint64_t a, b, at = 0, len = x->n;

	if (!dropmark_any(x->c->st, seq, lane))
		return;
	while (at < len) {
		uint64_t stop = len;

		if (dropmark_run(x->c->st, seq, lane, at, len, &a, &b))
			stop = a;
		for (uint32_t h = 0; h < x->d; h++)
			for (uint64_t t = at; t < stop; t++)
				x->s[(size_t)h * len + t] = -INFINITY;
		at = stop == len ? len : b;
	}
}

/* in_exact - token t is in the exact set: one of the first sinks tokens
 * attended or of the last recent ones */
static int in_exact(const struct sparf_ctx *x, uint64_t t)
{
	return (t >= x->t_start && t - x->t_start < x->sinks) ||
	       x->n - t <= x->recent;
}

/* exact_groups - mark the groups that hold a token of the exact set in
 * chosen[]; returns how many */
static uint64_t exact_groups(const struct sparf_ctx *x, uint32_t G,
			     uint8_t *chosen)
{
	uint64_t n = 0;

	for (uint64_t g = x->t_start / G;
	     x->sinks && g <= (x->t_start + x->sinks - 1) / G; g++)
		if (!chosen[g]) {
			chosen[g] = 1;
			n++;
		}
	for (uint64_t g = (x->n - x->recent) / G; x->recent && g <= (x->n - 1) / G;
	     g++)
		if (!chosen[g]) {
			chosen[g] = 1;
			n++;
		}
	return n;
}

/*
 * rest_scale - for the approximate mass of the tokens left out: the
 * factor that takes query head h's approximate scores from SparQ's
 * footing, c = sqrt(||q||_1 / ||q_r||_1), to sqrt(||q||_2^2 /
 * ||q_r||_2^2), under which the scores of ordinary tokens spread as the
 * exact ones do when K's dims have alike variance.  SparQ's c spreads
 * them wider (by about a quarter at r = head_dim / 8), which made the
 * many ordinary tokens look heavier than they are.
 */
static float rest_scale(const struct sparf_ctx *x, uint32_t h)
{
	uint32_t D = x->c->st->hdr.head_dim, r = x->rg * x->c->st->kt_dims;
	const float *q = x->q + (size_t)h * D;
	float l1 = 0, l1r = 0, l2 = 0, l2r = 0;

	for (uint32_t d = 0; d < D; d++) {
		l1 += fabsf(q[d]);
		l2 += q[d] * q[d];
	}
	for (uint32_t i = 0; i < r; i++) {
		l1r += fabsf(q[x->dims[i]]);
		l2r += q[x->dims[i]] * q[x->dims[i]];
	}
	if (r >= D || !(l1r > 0) || !(l2r > 0))
		return 1.0f;
	return sqrtf((l2 / l2r) / (l1 / l1r));
}

/* select_tokens - sparse = 1: per query head the exact set and the top
 * k - |exact set| other tokens by approximate score (idx: [k] scratch);
 * rest[h] the log of the approximate mass of the tokens left out; the
 * groups any chosen token is in */
static void select_tokens(struct sparf_ctx *x, uint64_t k, uint32_t *idx,
			  float *rest, uint64_t *groups, uint64_t *n_groups)
{
	const struct attn_call *c = x->c;
	uint32_t G = c->st->group_tokens;
	uint64_t len = x->n, by_score = k - x->sinks - x->recent;

	for (uint32_t h = 0; h < x->d; h++) {
		float *s = x->s + (size_t)h * len, m, l;
		uint8_t *sel = x->selected + (size_t)h * len;
		uint32_t got;

		for (uint64_t t = 0; t < x->t_start; t++)
			s[t] = -INFINITY;
		/* a chosen token leaves the row: what remains is the rest */
		for (uint64_t t = x->t_start; t < len; t++)
			if (in_exact(x, t) && s[t] > -INFINITY) {
				sel[t] = 1;
				s[t] = -INFINITY;
			}
		got = kvc_topk(s, (uint32_t)len, (uint32_t)by_score, idx);
		for (uint32_t j = 0; j < got; j++)
			if (s[idx[j]] > -INFINITY) {
				sel[idx[j]] = 1;
				s[idx[j]] = -INFINITY;
			}
		m = rest_scale(x, h);
		for (uint64_t t = x->t_start; t < len; t++)
			s[t] *= m; /* -INFINITY stays */
		c->k->softmax_stats(s, (uint32_t)len, &m, &l);
		rest[h] = l > 0 ? m + logf(l) : -INFINITY;
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
 * select_groups - sparse = 2: whole token groups instead of single tokens:
 * the groups of the exact set, and up to ceil(k / G) in all with those of
 * most weight (below; summed over the KV head's query heads); every token
 * of theirs is attended exactly, so each page read is used whole however
 * scattered the heavy tokens are.  rest[h] is the log of the approximate
 * mass of the tokens left out.
 */
static kvf_status select_groups(struct sparf_ctx *x, uint64_t k, float *rest,
				uint64_t *groups, uint64_t *n_groups)
{
	const struct attn_call *c = x->c;
	uint32_t G = c->st->group_tokens;
	uint64_t len = x->n, ng = (len + G - 1) / G, forced;
	/* every group when k is every token (a window may start mid-group) */
	uint64_t kg = k >= len - x->t_start ? ng : (k + G - 1) / G;
	float *mass = kvf_calloc(ng + 1 + (size_t)x->d, sizeof(float));
	float *hm = mass + ng + 1; /* per head: rho * max score */
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
		float *s = x->s + (size_t)h * len, l, rho = rest_scale(x, h);

		for (uint64_t t = 0; t < x->t_start; t++)
			s[t] = -INFINITY;
		c->k->softmax_stats(s, (uint32_t)len, &hm[h], &l);
		/* a group's key is the sum of its tokens' squared approximate
		 * probabilities: what leaving it out adds to the expected
		 * squared error of the output (V of independent tokens), so
		 * one heavy token outweighs many ordinary ones.  s becomes
		 * exp(rho * (score - max)) for the rest's mass; masked
		 * tokens, which no group attends, -1 */
		for (uint64_t t = 0; t < len; t++) {
			float p = s[t] > -INFINITY ? expf(s[t] - hm[h]) / l : -1.0f;

			if (p >= 0.0f)
				mass[t / G] += p * p;
			s[t] = p >= 0.0f ? expf(rho * (s[t] - hm[h])) : -1.0f;
		}
		hm[h] *= rho;
	}
	forced = exact_groups(x, G, chosen);
	for (uint64_t g = 0; g < ng; g++)
		if (chosen[g])
			mass[g] = -1.0f; /* in already: ranks below any other */
	got = kvc_topk(mass, (uint32_t)ng, (uint32_t)(kg > forced ? kg - forced : 0),
		       gidx);
	for (uint32_t j = 0; j < got; j++)
		chosen[gidx[j]] = 1;
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
				}
		}
		if (any) /* a group all masked needs no read */
			groups[(*n_groups)++] = g;
	}
	for (uint32_t h = 0; h < x->d; h++) {
		const float *s = x->s + (size_t)h * len;
		const uint8_t *sel = x->selected + (size_t)h * len;
		double left = 0;

		for (uint64_t t = 0; t < len; t++)
			if (s[t] > 0.0f && !sel[t])
				left += s[t];
		rest[h] = left > 0 ? hm[h] + (float)log(left) : -INFINITY;
	}
	kvf_free(mass);
	kvf_free(gidx);
	kvf_free(chosen);
	return KVF_OK;
}

/*
 * exact_set - the tokens every query head attends exactly whatever the
 * approximate scores say (kvf_attn_opts.sink_tokens, recent_tokens): the
 * first sinks of the span [t_start, len) and its last recent, counted in
 * *k (raised to hold them when the caller asked for more than k).
 *
 * By groups (sparse = 2) the exact set takes whole groups out of the
 * budget of ceil(k / G), so the defaults keep to the share they have by
 * tokens (sinks at most a quarter of the budget, the recent window an
 * eighth): the sinks' group only from 4 groups on, the recent window's
 * only from 8.  Below, at a short context, the default set would take
 * every group (the sinks' one and the newest, part-filled one) and none
 * would ever be chosen by score: on the tinypy model at 128 tokens that
 * was +44% perplexity at an eighth against +15% by score alone
 * (kvbench attend --model).  Sizes the caller gives are kept.
 */
static void exact_set(const kvf_attn_opts *o, struct sparf_ctx *x, uint64_t *k)
{
	uint64_t span = x->n - x->t_start, sinks, recent;
	uint32_t G = x->c->st->group_tokens;
	uint64_t kg = (*k + G - 1) / G;

	if (o->sink_tokens == KVF_TOKENS_NONE)
		sinks = 0;
	else if (o->sink_tokens)
		sinks = o->sink_tokens;
	else
		sinks = *k / 4 < KVF_SINK_TOKENS_DEFAULT ? *k / 4
							 : KVF_SINK_TOKENS_DEFAULT;
	if (o->recent_tokens == KVF_TOKENS_NONE)
		recent = 0;
	else if (o->recent_tokens)
		recent = o->recent_tokens;
	else
		recent = *k / KVF_RECENT_SHARE_DEFAULT;
	if (o->sparse == 2 && o->sink_tokens == 0 && kg < 4)
		sinks = 0;
	if (o->sparse == 2 && o->recent_tokens == 0 && kg < KVF_RECENT_SHARE_DEFAULT)
		recent = 0;
	x->sinks = sinks < span ? sinks : span;
	x->recent = recent < span - x->sinks ? recent : span - x->sinks;
	if (*k < x->sinks + x->recent)
		*k = x->sinks + x->recent;
}

/*
 * alpha_of - the weight of the exact part per query head: the exact mass
 * of the chosen tokens (their log-sum-exp, lse_sel) against the
 * approximate mass of the rest.  The approximate scores of the few
 * dominant tokens run well below their exact ones (r of head_dim dims see
 * only part of q . k), so taking the chosen tokens' mass from the
 * approximate scores too, as SparQ does, gave them far too little weight
 * against the mean of V on peaky attention.
 */
static void alpha_of(const float *lse_sel, const float *rest, uint32_t d,
		     float *alpha)
{
	for (uint32_t h = 0; h < d; h++) {
		if (rest[h] == -INFINITY)
			alpha[h] = 1.0f;
		else if (lse_sel[h] == -INFINITY)
			alpha[h] = 0.0f;
		else
			alpha[h] = 1.0f / (1.0f + expf(rest[h] - lse_sel[h]));
	}
}

kvf_status attend_sparf_task(const struct attn_call *c, uint32_t si,
			     uint32_t head, const float *qs, float *out,
			     float *lse)
{
	kvf_store *st = c->st;
	struct seq *seq = c->seqs[si];
	uint32_t D = st->hdr.head_dim, E = st->kt_dims, T = st->kt_tokens;
	uint32_t ng = st->kt_groups, d = st->hdr.n_q_heads / st->hdr.n_kv_heads;
	uint32_t G = st->group_tokens;
	uint64_t len = seq->len[c->layer], nb = len / T;
	uint64_t t_start = attend_from(c->o, len);
	struct sparf_ctx x = { .c = c, .d = d, .q = qs, .n = len,
			       .t_start = t_start };
	uint32_t r = c->o->top_r ? c->o->top_r : D / 4;
	uint32_t sel[64], dims[512], *idx = NULL;
	uint64_t *entries = NULL, *groups = NULL, n_groups = 0;
	float key[64], *alpha = NULL, *rest, *lse_sel, *vbar, *sbuf = NULL;
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
	exact_set(c->o, &x, &k);
	sbuf = kvf_malloc((KVC_ATTN_STATE_FLOATS(d, D) + (size_t)d * (len + 1)) *
			  sizeof(float));
	x.block = kvf_aligned_alloc(KVF_MEDIA_ALIGN, (size_t)x.rg * st->hdr.page_size);
	x.selected = kvf_calloc((size_t)d * (len + 1), 1);
	entries = kvf_malloc((nb * x.rg + 1) * sizeof(uint64_t));
	groups = kvf_malloc(((len + G - 1) / G + 1) * sizeof(uint64_t));
	idx = kvf_malloc((k + 1) * sizeof(uint32_t));
	alpha = kvf_malloc(3 * (size_t)d * sizeof(float));
	if (!sbuf || !x.block || !x.selected || !entries || !groups || !idx ||
	    !alpha || len > UINT32_MAX) {
		rc = kvf_fail(KVF_ENOMEM, "sparse attention: out of memory for a task");
		goto out;
	}
	rest = alpha + d;
	lse_sel = rest + d;
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
	mask_dropped(&x, seq, head);
	atomic_fetch_add(&st->c.sparf_pages_read, nb * x.rg);

	/* 3-4: the tokens to attend exactly, the mass of the rest, the
	 * groups they need */
	if (c->o->sparse == 2)
		rc = select_groups(&x, k, rest, groups, &n_groups);
	else
		select_tokens(&x, k, idx, rest, groups, &n_groups);
	if (rc != KVF_OK)
		goto out;
	/* 5: exact attention over the selected tokens only */
	rc = stream_read_pair_groups(st, seq, seq_kv_stream(st, seq, c->layer, KIND_K, head),
				     seq_kv_stream(st, seq, c->layer, KIND_V, head),
				     len, groups, n_groups, exact_span, exact_coded,
				     &x);
	if (rc != KVF_OK)
		goto out;
	atomic_fetch_add(&st->c.sparf_pages_read, 2 * n_groups * st->group_pages);
	{
		uint64_t dense = 2 * ((len - t_start + G - 1) / G + 1) *
				 st->group_pages;
		uint64_t used = nb * x.rg + 2 * n_groups * st->group_pages;

		if (dense > used)
			atomic_fetch_add(&st->c.sparf_pages_skipped, dense - used);
	}
	/* 6: alpha * exact + (1 - alpha) * mean of V */
	kvc_attn_finish(&x.state, out, lse_sel);
	if (lse)
		memcpy(lse, lse_sel, d * sizeof(float));
	alpha_of(lse_sel, rest, d, alpha);
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
