/*
 * kern_impl.h - what the kernel variants share inside compute/: the
 * declarations of each variant's functions (for dispatch.c's tables) and
 * the scalar element access every variant uses for tails.
 *
 * Only compute/ includes this file; the engine uses kernels.h.
 */
#ifndef KVF_COMPUTE_KERN_IMPL_H
#define KVF_COMPUTE_KERN_IMPL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "compute/half.h"
#include "compute/kernels.h"

/* kvc_list_tokens - the unmasked tokens t0 .. t0 + nb - 1 of a block as
 * block offsets into tl; returns how many (mask NULL: all). */
static __attribute__((unused)) uint32_t
kvc_list_tokens(const uint8_t *mask, uint32_t t0, uint32_t nb, uint8_t *tl)
{
	uint32_t nt = 0;

	for (uint32_t t = 0; t < nb; t++)
		if (!mask || mask[t0 + t])
			tl[nt++] = (uint8_t)t;
	return nt;
}

/* kvc_put_scores - g rows of a block's raw scores (s, rows of
 * KVC_BLOCK_TOKENS, the listed tokens tl[0..nt) only) into out (rows of
 * stride), -INFINITY for the nb - nt masked tokens.
 *
 * Both are plain static, not inline, so that the compiler inlines them (or
 * not) as it did when each file had its own copy: the kernels' machine
 * code stays what was measured. */
static __attribute__((unused)) void
kvc_put_scores(float *out, size_t stride, const float *s, uint32_t g,
	       const uint8_t *tl, uint32_t nt, uint32_t nb)
{
	for (uint32_t h = 0; h < g; h++) {
		float *row = out + h * stride;

		for (uint32_t t = 0; t < nb; t++)
			row[t] = -INFINITY;
		for (uint32_t j = 0; j < nt; j++)
			row[tl[j]] = s[h * KVC_BLOCK_TOKENS + j];
	}
}

/* KVC_DOT_ROW_TYPED - q . row for one dtype: four partial sums, so the
 * adds do not wait on each other (scalar code is latency-bound). */
#define KVC_DOT_ROW_TYPED(q, row, n, dtype)                                 \
	do {                                                                \
		uint32_t d_ = 0;                                            \
		for (; d_ + 4 <= (n); d_ += 4)                              \
			for (int i_ = 0; i_ < 4; i_++)                      \
				s_[i_] += (q)[d_ + i_] *                    \
					  kvc_elt((row), d_ + i_, (dtype)); \
		for (; d_ < (n); d_++)                                      \
			s_[0] += (q)[d_] * kvc_elt((row), d_, (dtype));     \
	} while (0)

/* kvc_dot_row - q . row for a row of n elements of dtype (fp32 sums). */
static inline float kvc_dot_row(const float *q, const void *row, uint32_t n,
				kvf_dtype dtype)
{
	float s_[4] = { 0, 0, 0, 0 };

	switch (dtype) {
	case KVF_DTYPE_F16:
		KVC_DOT_ROW_TYPED(q, row, n, KVF_DTYPE_F16);
		break;
	case KVF_DTYPE_BF16:
		KVC_DOT_ROW_TYPED(q, row, n, KVF_DTYPE_BF16);
		break;
	default:
		KVC_DOT_ROW_TYPED(q, row, n, KVF_DTYPE_F32);
		break;
	}
	return (s_[0] + s_[1]) + (s_[2] + s_[3]);
}

/* kvc_axpy_row - acc[d] += p * row[d] for a row of n elements of dtype. */
static inline void kvc_axpy_row(float *acc, float p, const void *row,
				uint32_t n, kvf_dtype dtype)
{
	switch (dtype) {
	case KVF_DTYPE_F16:
		for (uint32_t d = 0; d < n; d++)
			acc[d] += p * kvc_elt(row, d, KVF_DTYPE_F16);
		break;
	case KVF_DTYPE_BF16:
		for (uint32_t d = 0; d < n; d++)
			acc[d] += p * kvc_elt(row, d, KVF_DTYPE_BF16);
		break;
	default:
		for (uint32_t d = 0; d < n; d++)
			acc[d] += p * kvc_elt(row, d, KVF_DTYPE_F32);
		break;
	}
}

/*
 * kvc_sparf_correction - SparQ's temperature correction c_h of kernels.h
 * (sparf_scores) for one head q of head_dim floats and its r dims: 1 when
 * r covers the head or the selected part of q is all zero.
 */
static inline float kvc_sparf_correction(const float *q, uint32_t head_dim,
					 const uint32_t *dims, uint32_t r)
{
	float all = 0.0f, sel = 0.0f;

	for (uint32_t d = 0; d < head_dim; d++)
		all += fabsf(q[d]);
	for (uint32_t i = 0; i < r; i++)
		sel += fabsf(q[dims[i]]);
	if (r >= head_dim || !(sel > 0.0f))
		return 1.0f;
	return sqrtf(all / sel);
}

/* The scalar variant (attn.c, score.c, sparf.c). */
kvc_attn_fold_fn kvc_attn_fold_scalar;
kvc_scores_fn kvc_scores_scalar;
kvc_probs_fn kvc_probs_scalar;
kvc_h2o_accumulate_fn kvc_h2o_accumulate_scalar;
kvc_softmax_stats_fn kvc_softmax_stats_scalar;
kvc_softmax_mass_fn kvc_softmax_mass_scalar;
kvc_sparf_scores_fn kvc_sparf_scores_scalar;
kvc_vmean_fold_fn kvc_vmean_fold_scalar;

/* The AVX2+FMA+F16C variant (attn_avx2.c, score_avx2.c, sparf_avx2.c);
 * only built, and
 * only referenced by dispatch.c, when KVC_HAVE_AVX2 is 1. */
kvc_attn_fold_fn kvc_attn_fold_avx2;
kvc_scores_fn kvc_scores_avx2;
kvc_probs_fn kvc_probs_avx2;
kvc_h2o_accumulate_fn kvc_h2o_accumulate_avx2;
kvc_softmax_stats_fn kvc_softmax_stats_avx2;
kvc_softmax_mass_fn kvc_softmax_mass_avx2;
kvc_sparf_scores_fn kvc_sparf_scores_avx2;
kvc_vmean_fold_fn kvc_vmean_fold_avx2;

/* softmax_head - for the dense and the encoded kernels: fold head h's
 * scores s[0..nt) into (m, l, acc): rescale once if the block raises the
 * max, then p[j] = exp(s[j] - m) and l. */
static inline void softmax_head(struct kvc_attn_state *st, uint32_t h,
				const float *s, float *p, uint32_t nt)
{
	float *acc = st->acc + (size_t)h * st->head_dim;
	float bm = -INFINITY;

	for (uint32_t j = 0; j < nt; j++)
		bm = s[j] > bm ? s[j] : bm;
	if (bm > st->m[h]) {
		float c = expf(st->m[h] - bm);

		st->l[h] *= c;
		for (uint32_t d = 0; d < st->head_dim; d++)
			acc[d] *= c;
		st->m[h] = bm;
	}
	for (uint32_t j = 0; j < nt; j++) {
		p[j] = expf(s[j] - st->m[h]);
		st->l[h] += p[j];
	}
}

#endif /* KVF_COMPUTE_KERN_IMPL_H */
