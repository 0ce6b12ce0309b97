/*
 * attn_avx2.c - dense decode attention and raw scores, AVX2+FMA+F16C.
 * Compiled with -mavx2 -mfma -mf16c; reached only through dispatch.c's
 * table on a CPU that has all three.
 *
 * Same plan as attn.c, per block of KVC_BLOCK_TOKENS tokens (the block's
 * K and V rows stay in L1 while the heads take their turns):
 *  1. the list of unmasked tokens of the block;
 *  2. for each group of NH = 8, 4, 2 or 1 query heads (n_q = 6 is 4 + 2):
 *     scores of 8 / NH tokens at a time, 8 dims per FMA, so 8 FMA chains
 *     run (FMA latency 4, two pipes); each K vector is converted once
 *     (vcvtph2ps for f16) and used by every head; the 8 sums reduce in
 *     one transposed horizontal add (hsum8x8);
 *  3. per head, the block max; if it raises m, acc and l are scaled once
 *     by expf(m_old - m_new); p = exp8(s - m) eight tokens at a time;
 *  4. acc += p_t * v_t over 8 / NH vectors of 8 dims at a time, again 8
 *     accumulators in registers across the block; each V vector is
 *     converted once and used by every head.
 * Each (dtype, NH) is an inlined instance (#pragma GCC unroll makes the
 * head loops straight-line code).  At GQA 4 and more the kernel is bound
 * by its FMAs: 2 * head_dim multiply-adds per token and query head, about
 * 18 cycles per (token, head) at head_dim 128 measured in cache, against
 * 16 for the FMA pipes alone.  A head_dim that is not a multiple of 8
 * goes to the scalar kernels.
 */
#include <assert.h>
#include <math.h>

#include "compute/kern_impl.h"
#include "compute/kernels.h"
#include "compute/vec_avx2.h"

#define B KVC_BLOCK_TOKENS

/*
 * dots_tile - scores of T tokens (rows k0[0..T)) for NH heads, T * NH <= 8
 * accumulators, so up to 8 FMA chains run side by side; each K vector is
 * converted once and used by every head.  s[h * ss + j + t] gets the
 * score of token t for head h.
 */
KVC_INLINE void dots_tile(const float *q, size_t D,
			  const unsigned char *const *k0, kvf_dtype dt,
			  float *s, size_t ss, uint32_t j, int T, int NH)
{
	__m256 a[8];
	float r[8];

#pragma GCC unroll 8
	for (int x = 0; x < T * NH; x++)
		a[x] = _mm256_setzero_ps();
	for (size_t d = 0; d < D; d += 8) {
		__m256 qv[8];

#pragma GCC unroll 8
		for (int h = 0; h < NH; h++)
			qv[h] = _mm256_loadu_ps(q + h * D + d);
#pragma GCC unroll 8
		for (int t = 0; t < T; t++) {
			__m256 x = load8(k0[t], d, dt);

#pragma GCC unroll 8
			for (int h = 0; h < NH; h++)
				a[t * NH + h] = _mm256_fmadd_ps(qv[h], x,
								a[t * NH + h]);
		}
	}
	if (T * NH == 8) {
		_mm256_storeu_ps(r, hsum8x8(a));
	} else {
#pragma GCC unroll 8
		for (int x = 0; x < T * NH; x++)
			r[x] = hsum8(a[x]);
	}
#pragma GCC unroll 8
	for (int t = 0; t < T; t++)
#pragma GCC unroll 8
		for (int h = 0; h < NH; h++)
			s[h * ss + j + t] = r[t * NH + h];
}

/*
 * dots - s[h * ss + j] = q_h . k_{tl[j]} for the NH heads at q (rows of D
 * floats) and the nt listed rows of the block k (rows of rb bytes), in
 * tiles of 8 / NH tokens.
 */
KVC_INLINE void dots(const float *q, size_t D, const unsigned char *k,
		     size_t rb, kvf_dtype dt, const uint8_t *tl, uint32_t nt,
		     float *s, size_t ss, int NH)
{
	const int T = 8 / NH;
	const unsigned char *k0[8];
	uint32_t j = 0;

	for (; j + T <= nt; j += T) {
#pragma GCC unroll 8
		for (int t = 0; t < T; t++)
			k0[t] = k + tl[j + t] * rb;
		dots_tile(q, D, k0, dt, s, ss, j, T, NH);
	}
	for (; j < nt; j++) {
		k0[0] = k + tl[j] * rb;
		dots_tile(q, D, k0, dt, s, ss, j, 1, NH);
	}
}

/*
 * accumulate_v - acc[h] += sum_j p[h][j] * v_{tl[j]} for NH heads.  U =
 * 8 / NH dim vectors at a time, so 8 accumulators (FMA chains) stay in
 * registers across the block's tokens; each V vector is converted once
 * and used by every head.  Dims past the last whole U vectors go one
 * vector at a time.
 */
KVC_INLINE void accumulate_v(float *acc, size_t D, const unsigned char *v,
			     size_t rb, kvf_dtype dt, const uint8_t *tl,
			     uint32_t nt, const float *p, int NH)
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
			const unsigned char *row = v + tl[j] * rb;
			__m256 pv[8];

#pragma GCC unroll 8
			for (int h = 0; h < NH; h++)
				pv[h] = _mm256_broadcast_ss(p + h * B + j);
#pragma GCC unroll 8
			for (int u = 0; u < U; u++) {
				__m256 x = load8(row, d + 8 * u, dt);

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
			__m256 x = load8(v + tl[j] * rb, d, dt);

#pragma GCC unroll 8
			for (int h = 0; h < NH; h++)
				a[h] = _mm256_fmadd_ps(_mm256_broadcast_ss(
							       p + h * B + j),
						       x, a[h]);
		}
#pragma GCC unroll 8
		for (int h = 0; h < NH; h++)
			_mm256_storeu_ps(acc + h * D + d, a[h]);
	}
}

/* fold_group_avx2 - fold the listed tokens of one block into heads h0 ..
 * h0 + NH - 1; s and p are [NH][B] scratch, s keeps the raw scores. */
KVC_INLINE void fold_group_avx2(struct kvc_attn_state *st, uint32_t h0,
				const float *q, const unsigned char *kb,
				const unsigned char *vb, size_t rb,
				kvf_dtype dt, const uint8_t *tl, uint32_t nt,
				float *s, float *p, int NH)
{
	size_t D = st->head_dim;

	/* the V rows, wanted after the scores: fetch them meanwhile */
	for (uint32_t j = 0; j < nt; j++)
		for (size_t o = 0; o < rb; o += 64)
			_mm_prefetch((const char *)vb + tl[j] * rb + o, _MM_HINT_T0);
	dots(q + h0 * D, D, kb, rb, dt, tl, nt, s, B, NH);
	for (int h = 0; h < NH; h++)
		softmax_block(s + h * B, p + h * B, nt, st->m + h0 + h,
			      st->l + h0 + h, st->acc + (h0 + h) * D, D);
	accumulate_v(st->acc + h0 * D, D, vb, rb, dt, tl, nt, p, NH);
}

/* group_heads - heads in the next group, of the n_left still to do. */
static uint32_t group_heads(uint32_t n_left)
{
	return n_left >= 8 ? 8 : n_left >= 4 ? 4 : n_left >= 2 ? 2 : 1;
}

KVC_INLINE void fold_dt(struct kvc_attn_state *st, const float *q,
			const void *k, const void *v, uint32_t n, kvf_dtype dt,
			const uint8_t *mask, float *scores,
			size_t scores_stride)
{
	size_t D = st->head_dim, rb = D * kvc_elt_bytes(dt);
	uint8_t tl[B];
	float s[8 * B], p[8 * B];

	for (uint32_t t0 = 0; t0 < n; t0 += B) {
		uint32_t nb = n - t0 < B ? n - t0 : B;
		const unsigned char *kb = (const unsigned char *)k + t0 * rb;
		const unsigned char *vb = (const unsigned char *)v + t0 * rb;
		uint32_t nt = kvc_list_tokens(mask, t0, nb, tl);

		for (uint32_t h0 = 0, g; h0 < st->n_q; h0 += g) {
			g = group_heads(st->n_q - h0);
			if (nt) {
				switch (g) {
				case 8:
					fold_group_avx2(st, h0, q, kb, vb, rb, dt,
							tl, nt, s, p, 8);
					break;
				case 4:
					fold_group_avx2(st, h0, q, kb, vb, rb, dt,
							tl, nt, s, p, 4);
					break;
				case 2:
					fold_group_avx2(st, h0, q, kb, vb, rb, dt,
							tl, nt, s, p, 2);
					break;
				default:
					fold_group_avx2(st, h0, q, kb, vb, rb, dt,
							tl, nt, s, p, 1);
					break;
				}
			}
			if (scores)
				kvc_put_scores(scores + h0 * scores_stride + t0,
					       scores_stride, s, g, tl, nt, nb);
		}
	}
}

void kvc_attn_fold_avx2(struct kvc_attn_state *st, const float *q,
			const void *k, const void *v, uint32_t n,
			kvf_dtype dtype, const uint8_t *mask, float *scores,
			size_t scores_stride)
{
	assert(n == 0 || (k && v && q));
	if (st->head_dim % 8) {
		kvc_attn_fold_scalar(st, q, k, v, n, dtype, mask, scores,
				     scores_stride);
		return;
	}
	switch (dtype) {
	case KVF_DTYPE_F16:
		fold_dt(st, q, k, v, n, KVF_DTYPE_F16, mask, scores,
			scores_stride);
		break;
	case KVF_DTYPE_BF16:
		fold_dt(st, q, k, v, n, KVF_DTYPE_BF16, mask, scores,
			scores_stride);
		break;
	default:
		fold_dt(st, q, k, v, n, KVF_DTYPE_F32, mask, scores,
			scores_stride);
		break;
	}
}

/* scores_group - raw scores of the NH heads at q for one block. */
KVC_INLINE void scores_group(const float *q, size_t D, const unsigned char *kb,
			     size_t rb, kvf_dtype dt, const uint8_t *tl,
			     uint32_t nt, uint32_t nb, int masked, float *out,
			     size_t stride, float *s, int NH)
{
	if (!masked) { /* tl[j] == j: straight into out */
		dots(q, D, kb, rb, dt, tl, nt, out, stride, NH);
		return;
	}
	dots(q, D, kb, rb, dt, tl, nt, s, B, NH);
	kvc_put_scores(out, stride, s, (uint32_t)NH, tl, nt, nb);
}

KVC_INLINE void scores_dt(const float *q, uint32_t n_q, size_t D, const void *k,
			  uint32_t n, kvf_dtype dt, const uint8_t *mask,
			  float *out, size_t stride)
{
	size_t rb = D * kvc_elt_bytes(dt);
	uint8_t tl[B];
	float s[8 * B];

	for (uint32_t t0 = 0; t0 < n; t0 += B) {
		uint32_t nb = n - t0 < B ? n - t0 : B;
		const unsigned char *kb = (const unsigned char *)k + t0 * rb;
		uint32_t nt = kvc_list_tokens(mask, t0, nb, tl);
		int masked = nt != nb;

		for (uint32_t h0 = 0, g; h0 < n_q; h0 += g) {
			const float *qg = q + h0 * D;
			float *o = out + h0 * stride + t0;

			g = group_heads(n_q - h0);
			switch (g) {
			case 8:
				scores_group(qg, D, kb, rb, dt, tl, nt, nb,
					     masked, o, stride, s, 8);
				break;
			case 4:
				scores_group(qg, D, kb, rb, dt, tl, nt, nb,
					     masked, o, stride, s, 4);
				break;
			case 2:
				scores_group(qg, D, kb, rb, dt, tl, nt, nb,
					     masked, o, stride, s, 2);
				break;
			default:
				scores_group(qg, D, kb, rb, dt, tl, nt, nb,
					     masked, o, stride, s, 1);
				break;
			}
		}
	}
}

void kvc_scores_avx2(const float *q, uint32_t n_q, uint32_t head_dim,
		     const void *k, uint32_t n, kvf_dtype dtype,
		     const uint8_t *mask, float *out, size_t out_stride)
{
	if (head_dim % 8) {
		kvc_scores_scalar(q, n_q, head_dim, k, n, dtype, mask, out,
				  out_stride);
		return;
	}
	switch (dtype) {
	case KVF_DTYPE_F16:
		scores_dt(q, n_q, head_dim, k, n, KVF_DTYPE_F16, mask, out,
			  out_stride);
		break;
	case KVF_DTYPE_BF16:
		scores_dt(q, n_q, head_dim, k, n, KVF_DTYPE_BF16, mask, out,
			  out_stride);
		break;
	default:
		scores_dt(q, n_q, head_dim, k, n, KVF_DTYPE_F32, mask, out,
			  out_stride);
		break;
	}
}
