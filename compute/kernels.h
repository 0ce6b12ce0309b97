/*
 * kernels.h - the compute plane's kernels as the engine calls them: dense
 * decode attention with a streaming softmax (GQA), raw scores and softmax
 * probabilities, H2O accumulation, top-k selection, and the pieces of
 * SparF sparse attention (InstInfer Algorithm 1, after SparQ).
 *
 * Everything here is a pure function over caller-owned buffers: no I/O, no
 * allocation, no global state beyond the dispatch table chosen once.  The
 * kernels keep no pointer after they return.  Inputs are trusted (the
 * engine validates what callers give it); preconditions are asserted.
 * Scores, probabilities and accumulators are fp32; K and V come in the
 * store's dtype (f16, bf16 or f32), widened exactly (compute/half.h).
 * Results assume finite inputs: an infinite or NaN element of q, K or V
 * gives unspecified (but memory-safe) results.
 *
 * Names: the kvc_ prefix ("kvflash compute") marks these as internal to
 * the library (hidden, never exported), apart from the public kvf_ calls
 * (kvf_attend, kvf_topk, ...) the engine builds on them.
 *
 * Dispatch (STYLE rule 17): the array kernels exist as a portable scalar
 * variant and an AVX2+FMA+F16C variant, gathered in a const struct
 * kvc_kernels.  kvc_kernels() picks one once per process from the CPU
 * features; KVF_SIMD=scalar in the environment forces scalar.  The two
 * variants agree to rounding, not bit for bit: AVX2 sums in another order
 * and uses a polynomial exp (relative error at most 1.2e-7, see
 * vec_avx2.h).  Small O(n_q * head_dim) helpers (state init, finish,
 * merge, SparF combine) and top-k are plain functions.
 *
 * Dense decode attention, one (sequence, KV head) task:
 *	kvc_attn_state_init(&st, n_q, head_dim, buf);
 *	for each page span of the head's tokens, in any order:
 *		k->attn_fold(&st, q, k_rows, v_rows, n, dtype, mask, NULL, 0);
 *	kvc_attn_finish(&st, out, lse);
 * The result is softmax(q . K^T) V over every unmasked token folded, for
 * each of the n_q query heads sharing the KV head; q comes pre-scaled (the
 * caller multiplies by 1/sqrt(head_dim) or its own scale).  Folding in
 * one call or in chunks gives the same result to rounding, and two partial
 * results finished separately combine exactly with kvc_attn_merge.
 *
 * SparF for one query head h (InstInfer Algorithm 1; SparQ Algorithm 1):
 *	kvc_topr_dims(q_h, 1, head_dim, r, dims, key_scratch);
 *	k->sparf_scores(q_h, 1, head_dim, dims, r, kt_rows, n, ...) per K^T
 *		block, into s[n] (approximate scores, temperature-corrected);
 *	k->softmax_stats(s, n, &m, &l);
 *	kvc_topk(s, n, top_k, idx);
 *	alpha = k->softmax_mass(s, idx, top_k, m, l);
 *	fold the selected tokens exactly: attn_fold on the token groups that
 *		hold a selected token, with a mask of the selected ones, into a
 *		one-head view (kvc_attn_state_head) of the state; finish;
 *	kvc_sparf_combine(out_h, &alpha, vbar, 1, head_dim);
 * with vbar the running mean of V of the KV head (vmean_fold at append).
 * Several query heads may share one set of dims (n_q > 1: kvc_topr_dims
 * ranks dims by the sum of |q| over the heads).
 */
#ifndef KVF_COMPUTE_KERNELS_H
#define KVF_COMPUTE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "kvflash.h"

/* ---- dense attention state -------------------------------------------- */

/*
 * The running state of a streaming softmax for the n_q query heads of one
 * KV head.  It describes a partial result over the tokens folded so far:
 *	m[h]   = max over folded tokens t of s_t (s_t = q_h . k_t),
 *	l[h]   = sum_t exp(s_t - m[h]),
 *	acc[h] = sum_t exp(s_t - m[h]) * v_t,
 * so out[h] = acc[h] / l[h] and lse[h] = m[h] + log(l[h]).  Before any
 * token (or when every token was masked) m = -INFINITY, l = 0, acc = 0.
 * The arrays live in one caller buffer (kvc_attn_state_init); the struct
 * holds pointers into it and may be copied.
 */
struct kvc_attn_state {
	uint32_t n_q;      /* query heads folded together (>= 1) */
	uint32_t head_dim; /* elements per head vector (>= 1) */
	float *acc;        /* [n_q][head_dim] sum of exp(s - m) * v */
	float *m;          /* [n_q] running max score; -INFINITY at start */
	float *l;          /* [n_q] running sum of exp(s - m) */
};

/* Floats of the buffer kvc_attn_state_init needs. */
#define KVC_ATTN_STATE_FLOATS(n_q, head_dim) \
	((size_t)(n_q) * ((size_t)(head_dim) + 2))

/*
 * kvc_attn_state_init - point *st at buf and make it empty.
 * @buf: KVC_ATTN_STATE_FLOATS(n_q, head_dim) floats, caller-owned, alive
 *       as long as *st is used; acc takes the first n_q * head_dim floats
 *       (so it is as aligned as buf), then m, then l.
 * @n_q, @head_dim: both >= 1.
 */
void kvc_attn_state_init(struct kvc_attn_state *st, uint32_t n_q,
			 uint32_t head_dim, float *buf);

/* kvc_attn_state_reset - make *st empty again (m = -INF, l = 0, acc = 0). */
void kvc_attn_state_reset(struct kvc_attn_state *st);

/*
 * kvc_attn_state_head - a one-head view of head h (< st->n_q) of *st: it
 * shares st's memory, so folding into the view updates that head of *st
 * (used when one query head of a group needs its own token mask, as in
 * SparF).
 */
struct kvc_attn_state kvc_attn_state_head(const struct kvc_attn_state *st,
					  uint32_t h);

/*
 * kvc_attn_finish - write the attention output of every head of *st.
 * @out: [n_q][head_dim] fp32, out[h] = acc[h] / l[h].
 * @lse: NULL, or [n_q] fp32: m[h] + log(l[h]), the natural-log
 *       log-sum-exp of head h's scores (for kvc_attn_merge).
 * A head that folded no token (empty sequence, everything masked) gets
 * out = 0 and lse = -INFINITY: it has no attention mass, so merging it
 * with any other partial result leaves that result unchanged.
 * *st is not changed; folding may continue afterwards.
 */
void kvc_attn_finish(const struct kvc_attn_state *st, float *out, float *lse);

/*
 * kvc_attn_merge - combine two partial results over disjoint token sets
 * into the result over their union (the log-sum-exp merge):
 *	lse = log(exp(lse_a) + exp(lse_b)),
 *	out = exp(lse_a - lse) * out_a + exp(lse_b - lse) * out_b,
 * computed from max(lse_a, lse_b) so nothing overflows.  A side with lse
 * -INFINITY (empty) contributes nothing; both empty give out = 0, lse =
 * -INFINITY.
 * @out, @out_a, @out_b: [n_q][head_dim] fp32; out may be out_a or out_b.
 * @lse, @lse_a, @lse_b: [n_q] fp32; lse may be lse_a or lse_b.
 */
void kvc_attn_merge(float *out, float *lse, const float *out_a,
		    const float *lse_a, const float *out_b, const float *lse_b,
		    uint32_t n_q, uint32_t head_dim);

/* ---- top-k ------------------------------------------------------------- */

/*
 * kvc_topk - the indices of the k largest of x[0..n), no allocation:
 * O(n log k) by a heap for n <= 2048, O(n) by radix select above (0.18 ms
 * for k = 4096 of 32768 on one core).
 * @idx: [min(k, n)] out, sorted by ascending index (not by score).
 * Order: larger value first; equal values rank the lower index first; a
 * NaN ranks below every number (-INFINITY included).  k >= n selects all
 * n indices (0, 1, ..., n - 1); k = 0 or n = 0 selects none.
 * Return: the number of indices written, min(k, n).
 */
uint32_t kvc_topk(const float *x, uint32_t n, uint32_t k, uint32_t *idx);

/*
 * kvc_topr_dims - the r head dims with the largest |q| (SparF step 1),
 * ranked by key[d] = sum over the n_q heads of |q[h][d]| (n_q = 1: plain
 * |q_d|; n_q > 1: one shared set of dims for a group of heads).
 * @q: [n_q][head_dim] fp32.
 * @dims: [min(r, head_dim)] out, ascending (kvc_topk's order and ties).
 * @key_scratch: [head_dim] floats of caller scratch.
 * Return: min(r, head_dim).
 */
uint32_t kvc_topr_dims(const float *q, uint32_t n_q, uint32_t head_dim,
		       uint32_t r, uint32_t *dims, float *key_scratch);

/* ---- SparF helpers ------------------------------------------------------ */

/*
 * kvc_sparf_combine - SparF's output from the exact attention over the
 * selected tokens: out[h] = alpha[h] * out[h] + (1 - alpha[h]) * vbar.
 * @out: [n_q][head_dim] fp32, in: softmax over the selected tokens times
 *       their V (kvc_attn_finish), out: the SparF result.
 * @alpha: [n_q] approximate attention mass of the selected tokens, in
 *         [0, 1] (softmax_mass).
 * @vbar: [head_dim] fp32 mean of V over all tokens of the KV head.
 */
void kvc_sparf_combine(float *out, const float *alpha, const float *vbar,
		       uint32_t n_q, uint32_t head_dim);

/* ---- the dispatched kernels --------------------------------------------- */

/*
 * attn_fold - fold n tokens of one KV head into the state of the n_q query
 * heads sharing it: one pass over K and V, each row loaded once for all
 * heads.  Works in blocks of KVC_BLOCK_TOKENS tokens: scores, one rescale
 * of acc per head when the block raises the max, then exp and V.
 * @st: state, updated (st->n_q heads of st->head_dim elements).
 * @q: [n_q][head_dim] fp32 queries, already multiplied by the scale.
 * @k, @v: [n][head_dim] rows in dtype, contiguous (one token's row after
 *         another); may be NULL when n = 0.
 * @mask: NULL (every token counts) or [n] bytes: 0 skips the token (its
 *        K and V are never read as numbers, so they may hold anything).
 * @scores: NULL, or [n_q] rows of scores_stride floats: row h gets the raw
 *          scores q_h . k_t in [0, n) (-INFINITY where masked), for
 *          softmax probabilities after the last fold (probs).
 * Cost: 2 * head_dim multiply-adds per (token, query head); the AVX2
 * variant needs head_dim % 8 == 0 (else it runs the scalar code).  Any
 * chunking works (a page of tokens per call is fine: the per-call cost is
 * small); the result does not depend on it beyond rounding.
 */
typedef void kvc_attn_fold_fn(struct kvc_attn_state *st, const float *q,
			      const void *k, const void *v, uint32_t n,
			      kvf_dtype dtype, const uint8_t *mask,
			      float *scores, size_t scores_stride);

/*
 * scores - raw scores out[h * out_stride + t] = q_h . k_t for n tokens
 * (-INFINITY where mask[t] == 0).
 * @q: [n_q][head_dim] fp32 (pre-scaled as for attn_fold).
 * @k: [n][head_dim] rows in dtype.  @mask: NULL or [n] as attn_fold.
 * @out: n_q rows of out_stride (>= n) floats.
 */
typedef void kvc_scores_fn(const float *q, uint32_t n_q, uint32_t head_dim,
			   const void *k, uint32_t n, kvf_dtype dtype,
			   const uint8_t *mask, float *out, size_t out_stride);

/*
 * probs - softmax probabilities from raw scores and the final (m, l) of
 * the same head: p[t] = exp(s[t] - m) / l; all 0 when l == 0 (nothing
 * folded).  Masked scores (-INFINITY) give 0.  p may be s (in place).
 */
typedef void kvc_probs_fn(const float *s, float *p, uint32_t n, float m,
			  float l);

/*
 * h2o_accumulate - H2O heavy-hitter scores: acc[t] += sum over the n_q
 * heads of p[h * p_stride + t], t in [0, n).  @acc: [n] fp32, updated.
 */
typedef void kvc_h2o_accumulate_fn(float *acc, const float *p, size_t p_stride,
				   uint32_t n_q, uint32_t n);

/*
 * softmax_stats - *m = max of s[0..n) (-INFINITY if n = 0 or all are
 * -INFINITY) and *l = sum of exp(s[t] - *m) (0 in that case).
 */
typedef void kvc_softmax_stats_fn(const float *s, uint32_t n, float *m,
				  float *l);

/*
 * softmax_mass - the softmax probability mass of the tokens idx[0..k):
 * sum exp(s[idx[i]] - m) / l, clamped to [0, 1]; 0 when l == 0.  (m, l)
 * are softmax_stats of the whole row s.  SparF's alpha.
 */
typedef float kvc_softmax_mass_fn(const float *s, const uint32_t *idx,
				  uint32_t k, float m, float l);

/*
 * sparf_scores - SparF/SparQ approximate scores from r of the head_dim
 * dims, read from K^T (transposed) rows:
 *	out[h * out_stride + t] = c_h * sum_i q[h][dims[i]] * K^T[i][t],
 *	c_h = sqrt(||q_h||_1 / sum_i |q[h][dims[i]]|),
 * which is SparQ's softmax temperature sqrt(d * ||q_r||_1 / ||q||_1) put
 * onto a q that already carries the 1/sqrt(d) scale (see sparf.c).  c_h is
 * 1 when r = head_dim (the scores are then exact) or when the selected
 * part of q_h is all zero.  -INFINITY where mask[t] == 0.
 * @q: [n_q][head_dim] fp32, pre-scaled.  @dims: [r] dims (< head_dim).
 * @kt_rows: [r] pointers; kt_rows[i] holds n consecutive values (in dtype)
 *           of dim dims[i] for tokens 0..n-1: a row of a K^T page.  A
 *           contiguous [r][n] array is kt_rows[i] = base + i * n.
 * @out: n_q rows of out_stride (>= n) floats.
 */
typedef void kvc_sparf_scores_fn(const float *q, uint32_t n_q,
				 uint32_t head_dim, const uint32_t *dims,
				 uint32_t r, const void *const *kt_rows,
				 uint32_t n, kvf_dtype dtype,
				 const uint8_t *mask, float *out,
				 size_t out_stride);

/*
 * vmean_fold - the running mean of V over every token of a head: fold n
 * new rows into mean, which held the mean of count earlier rows (any
 * values when count = 0):
 *	mean = mean + (sum_t v_t - n * mean) / (count + n).
 * The caller then adds n to its count.  @mean: [head_dim] fp32, updated.
 * @v: [n][head_dim] rows in dtype.
 */
typedef void kvc_vmean_fold_fn(float *mean, uint64_t count, const void *v,
			       uint32_t n, uint32_t head_dim, kvf_dtype dtype);

/* One variant of the dispatched kernels; tables are static and const. */
struct kvc_kernels {
	const char *name;                      /* "scalar" or "avx2" */
	kvc_attn_fold_fn *attn_fold;           /* dense GQA fold */
	kvc_scores_fn *scores;                 /* raw q . k */
	kvc_probs_fn *probs;                   /* scores -> probabilities */
	kvc_h2o_accumulate_fn *h2o_accumulate; /* sum of probs per token */
	kvc_softmax_stats_fn *softmax_stats;   /* (max, sum exp) of a row */
	kvc_softmax_mass_fn *softmax_mass;     /* mass of a token subset */
	kvc_sparf_scores_fn *sparf_scores;     /* approximate scores */
	kvc_vmean_fold_fn *vmean_fold;         /* running mean of V */
};

/*
 * Tokens per online-softmax block of attn_fold (and of its stack
 * scratch).  Small on purpose: on the Zen 4 we measured, K and V
 * streamed from DRAM at GQA 4 and 8 ran 10-40% faster with blocks of 8
 * tokens than of 16 or 32 (the gap closes when K and V sit in cache);
 * the per-block softmax bookkeeping costs about a tenth of the FMAs.
 */
#define KVC_BLOCK_TOKENS 8

/*
 * kvc_kernels - the table for this process: AVX2 when the CPU has AVX2,
 * FMA and F16C (and the build has the AVX2 variant), else scalar; scalar
 * whenever the environment has KVF_SIMD=scalar.  Chosen on the first
 * call and kept (later changes of KVF_SIMD are not seen).
 * Concurrency: any thread, any time.
 */
const struct kvc_kernels *kvc_kernels(void);

/* kvc_kernels_scalar - the portable scalar table (the test oracle). */
const struct kvc_kernels *kvc_kernels_scalar(void);

/*
 * kvc_kernels_avx2 - the AVX2+FMA+F16C table, or NULL when this CPU or
 * this build lacks it.  Ignores KVF_SIMD.
 */
const struct kvc_kernels *kvc_kernels_avx2(void);

#endif /* KVF_COMPUTE_KERNELS_H */
