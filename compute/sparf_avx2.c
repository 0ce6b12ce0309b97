/*
 * sparf_avx2.c - SparF approximate scores and the running mean of V,
 * AVX2+FMA+F16C (compiled with -mavx2 -mfma -mf16c; reached only through
 * dispatch.c).  See sparf.c for the method and its source.
 *
 * Approximate scores run along the tokens, which are the contiguous axis
 * of K^T rows: for 8 tokens (16 when the group has at most 4 heads) and a
 * group of up to 8 query heads, one accumulator per head and 8 tokens;
 * each of the r K^T vectors is converted once and used by every head.  A
 * token tail of fewer than 8 is done in scalar, with the same correction.
 */
#include <math.h>

#include "compute/kern_impl.h"
#include "compute/kernels.h"
#include "compute/vec_avx2.h"

/* finish8 - c * a for 8 tokens from t, -INFINITY where masked, stored. */
KVC_INLINE void finish8(float *out, __m256 a, __m256 c, const uint8_t *mask,
			uint32_t t)
{
	a = _mm256_mul_ps(a, c);
	if (mask) {
		__m256i mb = _mm256_cvtepu8_epi32(
			_mm_loadl_epi64((const __m128i *)(mask + t)));
		__m256 off = _mm256_castsi256_ps(
			_mm256_cmpeq_epi32(mb, _mm256_setzero_si256()));

		a = _mm256_blendv_ps(a, _mm256_set1_ps(-INFINITY), off);
	}
	_mm256_storeu_ps(out + t, a);
}

/* sparf_group - the approximate scores of NH heads (q rows of D floats,
 * corrections c[], outputs rows of stride floats) for tokens [0, n8). */
KVC_INLINE void sparf_group(const float *q, size_t D, const uint32_t *dims,
			    uint32_t r, const void *const *kt, uint32_t n8,
			    kvf_dtype dt, const uint8_t *mask, const float *c,
			    float *out, size_t stride, int NH)
{
	uint32_t t = 0;

	if (NH <= 4) {
		for (; t + 16 <= n8; t += 16) {
			__m256 a0[4], a1[4];

#pragma GCC unroll 4
			for (int h = 0; h < NH; h++)
				a0[h] = a1[h] = _mm256_setzero_ps();
			for (uint32_t i = 0; i < r; i++) {
				__m256 x0 = load8(kt[i], t, dt);
				__m256 x1 = load8(kt[i], t + 8, dt);

#pragma GCC unroll 4
				for (int h = 0; h < NH; h++) {
					__m256 qv = _mm256_broadcast_ss(
						q + h * D + dims[i]);

					a0[h] = _mm256_fmadd_ps(qv, x0, a0[h]);
					a1[h] = _mm256_fmadd_ps(qv, x1, a1[h]);
				}
			}
#pragma GCC unroll 4
			for (int h = 0; h < NH; h++) {
				__m256 cv = _mm256_set1_ps(c[h]);

				finish8(out + h * stride, a0[h], cv, mask, t);
				finish8(out + h * stride, a1[h], cv, mask,
					t + 8);
			}
		}
	}
	for (; t < n8; t += 8) {
		__m256 a[8];

#pragma GCC unroll 8
		for (int h = 0; h < NH; h++)
			a[h] = _mm256_setzero_ps();
		for (uint32_t i = 0; i < r; i++) {
			__m256 x0 = load8(kt[i], t, dt);

#pragma GCC unroll 8
			for (int h = 0; h < NH; h++)
				a[h] = _mm256_fmadd_ps(_mm256_broadcast_ss(
							       q + h * D +
							       dims[i]),
						       x0, a[h]);
		}
#pragma GCC unroll 8
		for (int h = 0; h < NH; h++)
			finish8(out + h * stride, a[h], _mm256_set1_ps(c[h]),
				mask, t);
	}
}

KVC_INLINE void sparf_dt(const float *q, uint32_t n_q, size_t D,
			 const uint32_t *dims, uint32_t r,
			 const void *const *kt, uint32_t n, kvf_dtype dt,
			 const uint8_t *mask, float *out, size_t stride)
{
	uint32_t n8 = n & ~7u;

	for (uint32_t h0 = 0, g; h0 < n_q; h0 += g) {
		const float *qg = q + h0 * D;
		float *o = out + h0 * stride;
		float c[8];

		g = n_q - h0 >= 8 ? 8 :
		    n_q - h0 >= 4 ? 4 :
		    n_q - h0 >= 2 ? 2 :
				    1;
		for (uint32_t h = 0; h < g; h++)
			c[h] = kvc_sparf_correction(qg + h * D, (uint32_t)D,
						    dims, r);
		switch (g) {
		case 8:
			sparf_group(qg, D, dims, r, kt, n8, dt, mask, c, o,
				    stride, 8);
			break;
		case 4:
			sparf_group(qg, D, dims, r, kt, n8, dt, mask, c, o,
				    stride, 4);
			break;
		case 2:
			sparf_group(qg, D, dims, r, kt, n8, dt, mask, c, o,
				    stride, 2);
			break;
		default:
			sparf_group(qg, D, dims, r, kt, n8, dt, mask, c, o,
				    stride, 1);
			break;
		}
		for (uint32_t h = 0; h < g; h++) {
			for (uint32_t t = n8; t < n; t++) {
				float s = 0.0f;

				for (uint32_t i = 0; i < r; i++)
					s += qg[h * D + dims[i]] *
					     kvc_elt(kt[i], t, dt);
				o[h * stride + t] =
					mask && !mask[t] ? -INFINITY : s * c[h];
			}
		}
	}
}

void kvc_sparf_scores_avx2(const float *q, uint32_t n_q, uint32_t head_dim,
			   const uint32_t *dims, uint32_t r,
			   const void *const *kt_rows, uint32_t n,
			   kvf_dtype dtype, const uint8_t *mask, float *out,
			   size_t out_stride)
{
	switch (dtype) {
	case KVF_DTYPE_F16:
		sparf_dt(q, n_q, head_dim, dims, r, kt_rows, n, KVF_DTYPE_F16,
			 mask, out, out_stride);
		break;
	case KVF_DTYPE_BF16:
		sparf_dt(q, n_q, head_dim, dims, r, kt_rows, n, KVF_DTYPE_BF16,
			 mask, out, out_stride);
		break;
	default:
		sparf_dt(q, n_q, head_dim, dims, r, kt_rows, n, KVF_DTYPE_F32,
			 mask, out, out_stride);
		break;
	}
}

/* vmean_dt - vmean_fold for dims [0, D8) in vectors, the rest in scalar. */
KVC_INLINE void vmean_dt(float *mean, uint64_t count, const void *v, uint32_t n,
			 size_t D, kvf_dtype dt)
{
	size_t D8 = D & ~(size_t)7;
	float total = (float)(count + n);
	__m256 nv = _mm256_set1_ps((float)n), tv = _mm256_set1_ps(total);

	for (size_t d = 0; d < D8; d += 8) {
		__m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
		__m256 old = count ? _mm256_loadu_ps(mean + d) :
				     _mm256_setzero_ps();
		uint32_t t = 0;

		for (; t + 2 <= n; t += 2) {
			s0 = _mm256_add_ps(s0, load8(v, t * D + d, dt));
			s1 = _mm256_add_ps(s1, load8(v, (t + 1) * D + d, dt));
		}
		if (t < n)
			s0 = _mm256_add_ps(s0, load8(v, t * D + d, dt));
		s0 = _mm256_add_ps(s0, s1);
		_mm256_storeu_ps(mean + d,
				 _mm256_add_ps(old,
					       _mm256_div_ps(_mm256_fnmadd_ps(nv,
									      old,
									      s0),
							     tv)));
	}
	for (size_t d = D8; d < D; d++) {
		float sum = 0.0f, old = count ? mean[d] : 0.0f;

		for (uint32_t t = 0; t < n; t++)
			sum += kvc_elt(v, t * D + d, dt);
		mean[d] = old + (sum - (float)n * old) / total;
	}
}

void kvc_vmean_fold_avx2(float *mean, uint64_t count, const void *v, uint32_t n,
			 uint32_t head_dim, kvf_dtype dtype)
{
	if (n == 0)
		return;
	switch (dtype) {
	case KVF_DTYPE_F16:
		vmean_dt(mean, count, v, n, head_dim, KVF_DTYPE_F16);
		break;
	case KVF_DTYPE_BF16:
		vmean_dt(mean, count, v, n, head_dim, KVF_DTYPE_BF16);
		break;
	default:
		vmean_dt(mean, count, v, n, head_dim, KVF_DTYPE_F32);
		break;
	}
}
