/*
 * codec_attn_avx2.c - attention over encoded groups, AVX2+FMA+F16C.
 * Compiled with -mavx2 -mfma -mf16c; reached only through dispatch.c's codec table
 * on a CPU that has all three.  Same plan as codec_attn.c (the scales in
 * the query and in the softmax weights), with attn_avx2.c's register
 * blocking:
 *  - scores of 8 / NH tokens for NH = 8, 4, 2 or 1 query heads at a
 *    time, 8 FMA chains; each 8 codes are converted once (dec8) and used
 *    by every head;
 *  - per head the block max, one rescale when it rises, exp8;
 *  - acc += (p_t * scale_t) * codes_t over 8 / NH vectors of 8 dims, 8
 *    accumulators in registers across the block's tokens, each code
 *    vector converted once for every head.
 * Each (codec, NH) is an inlined instance.  A head_dim that is not a
 * multiple of 8 (of 16 for INT4) goes to the scalar kernels.
 */
#include <assert.h>
#include <math.h>

#include "compute/codec.h"
#include "compute/codec_impl.h"
#include "compute/codec_vec_avx2.h"
#include "compute/kern_impl.h"
#include "compute/vec_avx2.h"

#define B KVC_BLOCK_TOKENS
_Static_assert(B == 8, "block_meta converts a block's scales as one vector");

/* The query side of one pass over heads h0 .. h0 + NH - 1 (codec_attn.c). */
struct kq {
	float qk[8 * KVC_CODEC_MAX_DIM]; /* [NH][D] q with K's scales */
	float c0[8];                     /* INT4: q . zero; else 0 */
	float kmul;                      /* FP8: group scale * 256; 1 */
};

/* kq_make - fold K group kg's scales (and zero points) into g query rows. */
KVC_INLINE void kq_make(struct kq *kq, const struct kvc_codec_layout *kl,
			const uint8_t *kg, const float *q, uint32_t g,
			kvf_codec c)
{
	size_t D = kl->head_dim;

	kq->kmul = c == KVF_CODEC_FP8 ? kvc_fp8_group_mul(kg, kl) : 1.0f;
	for (uint32_t h = 0; h < g; h++) {
		__m256 c0 = _mm256_setzero_ps();

		for (size_t d = 0; d < D; d += 8) {
			__m256 x = _mm256_loadu_ps(q + h * D + d);

			if (c != KVF_CODEC_FP8)
				x = _mm256_mul_ps(x, kvc_scales8(kl, kg, d));
			if (c == KVF_CODEC_INT4)
				c0 = _mm256_fmadd_ps(
					_mm256_loadu_ps(q + h * D + d),
					kvc_meta8(kg, kl->mins_off, d), c0);
			_mm256_storeu_ps(kq->qk + h * D + d, x);
		}
		kq->c0[h] = hsum8(c0);
	}
}

/* dots_tile - scores of T tokens (rows r[0..T)) for NH heads, T * NH <= 8
 * accumulators: s[h * ss + j + t] = c0_h + kmul * qk_h . codes_t. */
KVC_INLINE void dots_tile(const struct kq *kq, size_t D,
			  const uint8_t *const *r, kvf_codec c, float *s,
			  size_t ss, uint32_t j, int T, int NH)
{
	__m256 a[8];
	float x8[8];
	size_t d = 0;

#pragma GCC unroll 8
	for (int x = 0; x < T * NH; x++)
		a[x] = _mm256_setzero_ps();
	if (c == KVF_CODEC_FP8) /* 16 codes a step; same sums, same order */
		for (; d + 16 <= D; d += 16)
#pragma GCC unroll 8
			for (int t = 0; t < T; t++) {
				__m256 lo, hi;

				dec16_fp8(r[t], d, &lo, &hi);
#pragma GCC unroll 8
				for (int h = 0; h < NH; h++) {
					a[t * NH + h] = _mm256_fmadd_ps(
						_mm256_loadu_ps(kq->qk + h * D + d),
						lo, a[t * NH + h]);
					a[t * NH + h] = _mm256_fmadd_ps(
						_mm256_loadu_ps(kq->qk + h * D + d + 8),
						hi, a[t * NH + h]);
				}
			}
	for (; d < D; d += 8) {
		__m256 qv[8];

#pragma GCC unroll 8
		for (int h = 0; h < NH; h++)
			qv[h] = _mm256_loadu_ps(kq->qk + h * D + d);
#pragma GCC unroll 8
		for (int t = 0; t < T; t++) {
			__m256 x = dec8(r[t], d, c);

#pragma GCC unroll 8
			for (int h = 0; h < NH; h++)
				a[t * NH + h] = _mm256_fmadd_ps(qv[h], x,
								a[t * NH + h]);
		}
	}
	if (T * NH == 8) {
		_mm256_storeu_ps(x8, hsum8x8(a));
	} else {
#pragma GCC unroll 8
		for (int x = 0; x < T * NH; x++)
			x8[x] = hsum8(a[x]);
	}
#pragma GCC unroll 8
	for (int t = 0; t < T; t++)
#pragma GCC unroll 8
		for (int h = 0; h < NH; h++)
			s[h * ss + j + t] = kq->c0[h] + kq->kmul * x8[t * NH + h];
}

/* dots - scores of the nt listed tokens tb + tl[j] of the K group. */
KVC_INLINE void dots(const struct kq *kq, const struct kvc_codec_layout *kl,
		     const uint8_t *kg, uint32_t tb, const uint8_t *tl,
		     uint32_t nt, kvf_codec c, float *s, size_t ss, int NH)
{
	const int T = 8 / NH;
	const uint8_t *r[8];
	uint32_t j = 0;

	for (; j + T <= nt; j += T) {
#pragma GCC unroll 8
		for (int t = 0; t < T; t++)
			r[t] = kvc_codes_row(kl, kg, tb + tl[j + t]);
		dots_tile(kq, kl->head_dim, r, c, s, ss, j, T, NH);
	}
	for (; j < nt; j++) {
		r[0] = kvc_codes_row(kl, kg, tb + tl[j]);
		dots_tile(kq, kl->head_dim, r, c, s, ss, j, 1, NH);
	}
}

/*
 * accumulate_v - acc[h] += sum_j w[h][j] * codes_{tb + tl[j]} for NH
 * heads, w the softmax weights times V's scale; U = 8 / NH dim vectors
 * at a time, so 8 accumulators stay in registers across the block.
 */
KVC_INLINE void accumulate_v(float *acc, size_t D,
			     const struct kvc_codec_layout *vl,
			     const uint8_t *vg, uint32_t tb, const uint8_t *tl,
			     uint32_t nt, const float *w, kvf_codec c, int NH)
{
	const int U = 8 / NH;
	size_t d = 0;

	for (; d + 8 * U <= D; d += 8 * U) {
		__m256 a[8];

#pragma GCC unroll 8
		for (int u = 0; u < U; u++)
#pragma GCC unroll 8
			for (int h = 0; h < NH; h++)
				a[u * NH + h] = _mm256_loadu_ps(acc + h * D +
								d + 8 * u);
		for (uint32_t j = 0; j < nt; j++) {
			const uint8_t *row = kvc_codes_row(vl, vg, tb + tl[j]);
			__m256 pv[8], xn = _mm256_setzero_ps();

#pragma GCC unroll 8
			for (int h = 0; h < NH; h++)
				pv[h] = _mm256_broadcast_ss(w + h * B + j);
#pragma GCC unroll 8
			for (int u = 0; u < U; u++) {
				__m256 x;

				/* FP8: two vectors from one 16-code step */
				if (c == KVF_CODEC_FP8 && U % 2 == 0) {
					if (u % 2)
						x = xn;
					else
						dec16_fp8(row, d + 8 * u, &x,
							  &xn);
				} else {
					x = dec8(row, d + 8 * u, c);
				}
#pragma GCC unroll 8
				for (int h = 0; h < NH; h++)
					a[u * NH + h] =
						_mm256_fmadd_ps(pv[h], x,
								a[u * NH + h]);
			}
		}
#pragma GCC unroll 8
		for (int u = 0; u < U; u++)
#pragma GCC unroll 8
			for (int h = 0; h < NH; h++)
				_mm256_storeu_ps(acc + h * D + d + 8 * u,
						 a[u * NH + h]);
	}
	for (; d < D; d += 8) {
		__m256 a[8];

#pragma GCC unroll 8
		for (int h = 0; h < NH; h++)
			a[h] = _mm256_loadu_ps(acc + h * D + d);
		for (uint32_t j = 0; j < nt; j++) {
			__m256 x = dec8(kvc_codes_row(vl, vg, tb + tl[j]), d, c);

#pragma GCC unroll 8
			for (int h = 0; h < NH; h++)
				a[h] = _mm256_fmadd_ps(
					_mm256_broadcast_ss(w + h * B + j), x,
					a[h]);
		}
#pragma GCC unroll 8
		for (int h = 0; h < NH; h++)
			_mm256_storeu_ps(acc + h * D + d, a[h]);
	}
}

/* block_meta - V's scales (vs) and INT4 zero points (vz) of the block's
 * tokens tb .. tb + B - 1 (those before the group's end) as f32: 8 f16
 * at once where the block is whole, else one at a time. */
KVC_INLINE void block_meta(const struct kvc_codec_layout *vl,
			   const uint8_t *vg, uint32_t tb, kvf_codec c,
			   float *vs, float *vz)
{
	uint32_t nb = vl->group_tokens - tb < B ? vl->group_tokens - tb : B;

	if (c == KVF_CODEC_FP8) {
		for (uint32_t j = 0; j < B; j++)
			vs[j] = kvc_fp8_group_mul(vg, vl);
		return;
	}
	if (nb == 8) {
		_mm256_storeu_ps(vs, kvc_scales8(vl, vg, tb));
		if (c == KVF_CODEC_INT4)
			_mm256_storeu_ps(vz, kvc_meta8(vg, vl->mins_off, tb));
		return;
	}
	for (uint32_t j = 0; j < nb; j++) {
		vs[j] = kvc_scale_at(vl, vg, tb + j);
		if (c == KVF_CODEC_INT4)
			vz[j] = kvc_f16_at(vg, vl->mins_off, tb + j);
	}
}

/* fold_block - one block's listed tokens into heads h0 .. h0 + NH - 1. */
KVC_INLINE void fold_block(struct kvc_attn_state *st, uint32_t h0,
			   const struct kq *kq,
			   const struct kvc_codec_layout *kl, const uint8_t *kg,
			   const struct kvc_codec_layout *vl, const uint8_t *vg,
			   uint32_t tb, const uint8_t *tl, uint32_t nt,
			   kvf_codec c, float *s, int NH)
{
	size_t D = st->head_dim;
	float p[8 * B], w[8 * B], vs[B], vz[B] = { 0 }, bias[8];

	/* the V rows, wanted after the scores: fetch them meanwhile */
	for (uint32_t j = 0; j < nt; j++)
		for (size_t o = 0; o < vl->row_bytes; o += 64)
			_mm_prefetch((const char *)kvc_codes_row(vl, vg,
								 tb + tl[j]) +
					     o,
				     _MM_HINT_T0);
	dots(kq, kl, kg, tb, tl, nt, c, s, B, NH);
	for (int h = 0; h < NH; h++)
		softmax_block(s + h * B, p + h * B, nt, st->m + h0 + h,
			      st->l + h0 + h, st->acc + (h0 + h) * D, D);
	block_meta(vl, vg, tb, c, vs, vz);
	if (nt == B) { /* a whole block, nothing masked: tl[j] == j */
		__m256 sv = _mm256_loadu_ps(vs), zv = _mm256_loadu_ps(vz);

		for (int h = 0; h < NH; h++) {
			__m256 pv = _mm256_loadu_ps(p + h * B);

			_mm256_storeu_ps(w + h * B, _mm256_mul_ps(pv, sv));
			if (c == KVF_CODEC_INT4)
				bias[h] = hsum8(_mm256_mul_ps(pv, zv));
		}
	} else {
		for (int h = 0; h < NH; h++) {
			bias[h] = 0.0f;
			for (uint32_t j = 0; j < nt; j++) {
				w[h * B + j] = p[h * B + j] * vs[tl[j]];
				if (c == KVF_CODEC_INT4)
					bias[h] += p[h * B + j] * vz[tl[j]];
			}
		}
	}
	accumulate_v(st->acc + h0 * D, D, vl, vg, tb, tl, nt, w, c, NH);
	if (c != KVF_CODEC_INT4)
		return;
	for (int h = 0; h < NH; h++) {
		__m256 bv = _mm256_set1_ps(bias[h]);
		float *a = st->acc + (h0 + h) * D;

		for (size_t d = 0; d < D; d += 8)
			_mm256_storeu_ps(a + d,
					 _mm256_add_ps(_mm256_loadu_ps(a + d), bv));
	}
}

/* prefetch_rows - bring bytes at p into L1 ahead of their use. */
KVC_INLINE void prefetch_rows(const uint8_t *p, size_t bytes)
{
	for (size_t o = 0; o < bytes; o += 64)
		_mm_prefetch((const char *)p + o, _MM_HINT_T0);
}

/* group_heads - heads in the next group, of the n_left still to do. */
static uint32_t group_heads(uint32_t n_left)
{
	return n_left >= 8 ? 8 : n_left >= 4 ? 4 : n_left >= 2 ? 2 : 1;
}

/* fold_heads - every block of [t0, t0 + n) into the NH heads from h0. */
KVC_INLINE void fold_heads(struct kvc_attn_state *st, uint32_t h0,
			   const float *q, const struct kvc_codec_layout *kl,
			   const uint8_t *kg, const struct kvc_codec_layout *vl,
			   const uint8_t *vg, uint32_t t0, uint32_t n,
			   const uint8_t *mask, float *scores, size_t stride,
			   kvf_codec c, int NH)
{
	struct kq kq;
	uint8_t tl[B];
	float s[8 * B];

	/* V's scales (and zero points) sit past its codes: fetch them
	 * while the query takes K's in */
	prefetch_rows(vg + vl->scales_off, vl->group_bytes - vl->scales_off);
	kq_make(&kq, kl, kg, q + h0 * st->head_dim, (uint32_t)NH, c);
	for (uint32_t b0 = 0; b0 < n; b0 += B) {
		uint32_t nb = n - b0 < B ? n - b0 : B;
		uint32_t nt = kvc_list_tokens(mask, b0, nb, tl);
		uint32_t nx = n - b0 - nb < B ? n - b0 - nb : B;

		/* the next block's K rows, wanted after this block */
		prefetch_rows(kvc_codes_row(kl, kg, t0 + b0 + nb),
			      (size_t)nx * kl->row_bytes);
		if (nt)
			fold_block(st, h0, &kq, kl, kg, vl, vg, t0 + b0, tl, nt,
				   c, s, NH);
		if (scores)
			kvc_put_scores(scores + h0 * stride + b0, stride, s,
				       (uint32_t)NH, tl, nt, nb);
	}
}

KVC_INLINE void fold_c(struct kvc_attn_state *st, const float *q,
		       const struct kvc_codec_layout *kl, const uint8_t *kg,
		       const struct kvc_codec_layout *vl, const uint8_t *vg,
		       uint32_t t0, uint32_t n, const uint8_t *mask,
		       float *scores, size_t stride, kvf_codec c)
{
	for (uint32_t h0 = 0, g; h0 < st->n_q; h0 += g) {
		g = group_heads(st->n_q - h0);
		switch (g) {
		case 8:
			fold_heads(st, h0, q, kl, kg, vl, vg, t0, n, mask,
				   scores, stride, c, 8);
			break;
		case 4:
			fold_heads(st, h0, q, kl, kg, vl, vg, t0, n, mask,
				   scores, stride, c, 4);
			break;
		case 2:
			fold_heads(st, h0, q, kl, kg, vl, vg, t0, n, mask,
				   scores, stride, c, 2);
			break;
		default:
			fold_heads(st, h0, q, kl, kg, vl, vg, t0, n, mask,
				   scores, stride, c, 1);
			break;
		}
	}
}

void kvc_codec_fold_avx2(struct kvc_attn_state *st, const float *q,
			 const struct kvc_codec_layout *kl, const void *kg,
			 const struct kvc_codec_layout *vl, const void *vg,
			 uint32_t t0, uint32_t n, const uint8_t *mask,
			 float *scores, size_t scores_stride)
{
	assert(kl->head_dim == st->head_dim && vl->head_dim == st->head_dim);
	assert(t0 + n <= kl->group_tokens && t0 + n <= vl->group_tokens);
	if (!codec_simd_ok(kl->codec, st->head_dim)) {
		kvc_codec_fold_scalar(st, q, kl, kg, vl, vg, t0, n, mask,
				      scores, scores_stride);
		return;
	}
	switch (kl->codec) {
	case KVF_CODEC_FP8:
		fold_c(st, q, kl, kg, vl, vg, t0, n, mask, scores,
		       scores_stride, KVF_CODEC_FP8);
		break;
	case KVF_CODEC_INT8:
		fold_c(st, q, kl, kg, vl, vg, t0, n, mask, scores,
		       scores_stride, KVF_CODEC_INT8);
		break;
	default:
		fold_c(st, q, kl, kg, vl, vg, t0, n, mask, scores,
		       scores_stride, KVF_CODEC_INT4);
		break;
	}
}

/* scores_heads - raw scores of the NH heads from h0 over [t0, t0 + n). */
KVC_INLINE void scores_heads(const struct kvc_codec_layout *kl,
			     const float *q, uint32_t h0, const uint8_t *kg,
			     uint32_t t0, uint32_t n, const uint8_t *mask,
			     float *out, size_t stride, kvf_codec c, int NH)
{
	struct kq kq;
	uint8_t tl[B];
	float s[8 * B];

	kq_make(&kq, kl, kg, q + h0 * kl->head_dim, (uint32_t)NH, c);
	for (uint32_t b0 = 0; b0 < n; b0 += B) {
		uint32_t nb = n - b0 < B ? n - b0 : B;
		uint32_t nt = kvc_list_tokens(mask, b0, nb, tl);

		dots(&kq, kl, kg, t0 + b0, tl, nt, c, s, B, NH);
		kvc_put_scores(out + h0 * stride + b0, stride, s, (uint32_t)NH,
			       tl, nt, nb);
	}
}

KVC_INLINE void scores_c(const struct kvc_codec_layout *kl, const float *q,
			 uint32_t n_q, const uint8_t *kg, uint32_t t0,
			 uint32_t n, const uint8_t *mask, float *out,
			 size_t stride, kvf_codec c)
{
	for (uint32_t h0 = 0, g; h0 < n_q; h0 += g) {
		g = group_heads(n_q - h0);
		switch (g) {
		case 8:
			scores_heads(kl, q, h0, kg, t0, n, mask, out, stride,
				     c, 8);
			break;
		case 4:
			scores_heads(kl, q, h0, kg, t0, n, mask, out, stride,
				     c, 4);
			break;
		case 2:
			scores_heads(kl, q, h0, kg, t0, n, mask, out, stride,
				     c, 2);
			break;
		default:
			scores_heads(kl, q, h0, kg, t0, n, mask, out, stride,
				     c, 1);
			break;
		}
	}
}

void kvc_codec_scores_avx2(const struct kvc_codec_layout *kl, const float *q,
			   uint32_t n_q, const void *kg, uint32_t t0,
			   uint32_t n, const uint8_t *mask, float *out,
			   size_t out_stride)
{
	assert(t0 + n <= kl->group_tokens);
	if (!codec_simd_ok(kl->codec, kl->head_dim)) {
		kvc_codec_scores_scalar(kl, q, n_q, kg, t0, n, mask, out,
					out_stride);
		return;
	}
	switch (kl->codec) {
	case KVF_CODEC_FP8:
		scores_c(kl, q, n_q, kg, t0, n, mask, out, out_stride,
			 KVF_CODEC_FP8);
		break;
	case KVF_CODEC_INT8:
		scores_c(kl, q, n_q, kg, t0, n, mask, out, out_stride,
			 KVF_CODEC_INT8);
		break;
	default:
		scores_c(kl, q, n_q, kg, t0, n, mask, out, out_stride,
			 KVF_CODEC_INT4);
		break;
	}
}
