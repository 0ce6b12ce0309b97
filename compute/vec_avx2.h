/*
 * vec_avx2.h - AVX2+FMA+F16C building blocks of the AVX2 kernels: loading
 * 8 elements of any dtype as f32, horizontal sums, and a vector exp.
 *
 * Include only from files compiled with -mavx2 -mfma -mf16c (the *_avx2.c
 * files); their functions run only when dispatch.c has seen those CPU
 * features.  Everything here is static inline and always inlined, so a
 * constant dtype argument folds the dtype switch away.
 */
#ifndef KVF_COMPUTE_VEC_AVX2_H
#define KVF_COMPUTE_VEC_AVX2_H

#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "kvflash.h"

#define KVC_INLINE static inline __attribute__((always_inline))

/* load8 - elements i..i+7 of the dtype array p, widened exactly to f32
 * (vcvtph2ps for f16, a 16-bit shift for bf16; unaligned loads). */
KVC_INLINE __m256 load8(const void *p, size_t i, kvf_dtype dtype)
{
	const unsigned char *b = (const unsigned char *)p;

	switch (dtype) {
	case KVF_DTYPE_F16:
		return _mm256_cvtph_ps(
			_mm_loadu_si128((const __m128i *)(b + i * 2)));
	case KVF_DTYPE_BF16:
		return _mm256_castsi256_ps(
			_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(
						  (const __m128i *)(b + i * 2))),
					  16));
	default:
		return _mm256_loadu_ps((const float *)(b + i * 4));
	}
}

/* hsum8 - the sum of the 8 lanes of x. */
KVC_INLINE float hsum8(__m256 x)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(x),
			      _mm256_extractf128_ps(x, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* hsum8x8 - the lane sums of a[0..8) as one vector: lane i = sum of
 * a[i] (three rounds of pairwise adds, then the two halves). */
KVC_INLINE __m256 hsum8x8(const __m256 *a)
{
	__m256 t0 = _mm256_hadd_ps(a[0], a[1]);
	__m256 t1 = _mm256_hadd_ps(a[2], a[3]);
	__m256 t2 = _mm256_hadd_ps(a[4], a[5]);
	__m256 t3 = _mm256_hadd_ps(a[6], a[7]);
	__m256 u0 = _mm256_hadd_ps(t0, t1); /* sums 0-3: low | high half */
	__m256 u1 = _mm256_hadd_ps(t2, t3); /* sums 4-7: low | high half */

	return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
			     _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* hmax8 - the largest of the 8 lanes of x (no NaN expected). */
KVC_INLINE float hmax8(__m256 x)
{
	__m128 s = _mm_max_ps(_mm256_castps256_ps128(x),
			      _mm256_extractf128_ps(x, 1));

	s = _mm_max_ps(s, _mm_movehl_ps(s, s));
	s = _mm_max_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/*
 * exp8 - e^x per lane, for the x <= 0 of a softmax (any x works up to
 * 88.3, where e^x nears FLT_MAX).  Cephes expf: x = n ln2 + r with n =
 * round(x / ln2) and |r| <= ln2/2 (ln2 split in two so r is exact), e^r =
 * 1 + r + r^2 P(r) with P of degree 5, times 2^n built in the exponent
 * field.  Relative error at most 1.19e-7 (one ulp of 1.0), measured
 * against double exp on every float of [-87.33, 0] (where results are
 * normal); tests/unit/compute/test_attn.c checks a dense grid.  Below
 * -87.33 (2^-126) the result is 0, so exp8(-INFINITY) = 0 exactly.  NaN
 * in, NaN out.
 */
KVC_INLINE __m256 exp8(__m256 x)
{
	const __m256 lo = _mm256_set1_ps(-87.33654475f);
	const __m256 hi = _mm256_set1_ps(88.3762626647949f);
	__m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
	__m256 n, r, r2, p;
	__m256i e;

	x = _mm256_min_ps(hi, _mm256_max_ps(lo, x)); /* NaN stays NaN */
	n = _mm256_round_ps(_mm256_mul_ps(x,
					  _mm256_set1_ps(1.44269504088896341f)),
			    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
	r2 = _mm256_mul_ps(r, r);
	p = _mm256_set1_ps(1.9875691500e-4f);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
	p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
	e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n),
					       _mm256_set1_epi32(127)),
			      23);
	p = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
	return _mm256_andnot_ps(under, p);
}

/* softmax_block - for one head of the dense or the encoded kernels: fold
 * the nt scores s[] (padded here with -INFINITY to a multiple of 8) into
 * (m, l, acc), leaving p[] = exp(s - m_new). */
KVC_INLINE void softmax_block(float *s, float *p, uint32_t nt, float *m,
			      float *l, float *acc, size_t D)
{
	uint32_t nt8 = (nt + 7) & ~7u;
	__m256 mx = _mm256_set1_ps(-INFINITY), sum = _mm256_setzero_ps();
	float mn;

	for (uint32_t j = nt; j < nt8; j++)
		s[j] = -INFINITY;
	for (uint32_t j = 0; j < nt8; j += 8)
		mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + j));
	mn = hmax8(mx);
	if (mn > *m) {
		float c = expf(*m - mn);
		__m256 cv = _mm256_set1_ps(c);

		*l *= c;
		for (size_t d = 0; d < D; d += 8)
			_mm256_storeu_ps(acc + d,
					 _mm256_mul_ps(cv, _mm256_loadu_ps(acc +
									   d)));
		*m = mn;
	} else {
		mn = *m;
	}
	mx = _mm256_set1_ps(mn);
	for (uint32_t j = 0; j < nt8; j += 8) {
		__m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), mx));

		_mm256_storeu_ps(p + j, e);
		sum = _mm256_add_ps(sum, e);
	}
	*l += hsum8(sum);
}

#endif /* KVF_COMPUTE_VEC_AVX2_H */
