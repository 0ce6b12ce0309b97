/*
 * score_avx2.c - softmax probabilities, H2O accumulation, softmax
 * statistics and subset mass, AVX2+FMA (compiled with -mavx2 -mfma
 * -mf16c; reached only through dispatch.c).
 *
 * Eight tokens per vector; exp is exp8 (vec_avx2.h).  A tail of fewer
 * than 8 goes through an 8-float stack buffer padded with -INFINITY (whose
 * exp is 0), so every element sees the same arithmetic.
 */
#include <math.h>
#include <string.h>

#include "compute/kern_impl.h"
#include "compute/kernels.h"
#include "compute/vec_avx2.h"

/* load_tail - s[0..n) (n < 8) as a vector, the other lanes -INFINITY. */
static __m256 load_tail(const float *s, uint32_t n)
{
	float buf[8];

	for (uint32_t i = 0; i < 8; i++)
		buf[i] = i < n ? s[i] : -INFINITY;
	return _mm256_loadu_ps(buf);
}

void kvc_probs_avx2(const float *s, float *p, uint32_t n, float m, float l)
{
	__m256 mv = _mm256_set1_ps(m), inv;
	float buf[8];
	uint32_t t = 0;

	if (!(l > 0.0f)) {
		for (t = 0; t < n; t++) /* a NaN score: no softmax */
			p[t] = isnan(l) ? NAN : 0.0f;
		return;
	}
	inv = _mm256_set1_ps(1.0f / l);
	for (; t + 8 <= n; t += 8)
		_mm256_storeu_ps(p + t,
				 _mm256_mul_ps(exp8(_mm256_sub_ps(_mm256_loadu_ps(
									  s + t),
								  mv)),
					       inv));
	if (t < n) {
		_mm256_storeu_ps(buf,
				 _mm256_mul_ps(exp8(_mm256_sub_ps(load_tail(s + t,
									    n - t),
								  mv)),
					       inv));
		memcpy(p + t, buf, (n - t) * sizeof(float));
	}
}

void kvc_h2o_accumulate_avx2(float *acc, const float *p, size_t p_stride,
			     uint32_t n_q, uint32_t n)
{
	uint32_t t = 0;

	for (; t + 8 <= n; t += 8) {
		__m256 sum = _mm256_setzero_ps();

		for (uint32_t h = 0; h < n_q; h++)
			sum = _mm256_add_ps(sum, _mm256_loadu_ps(
							 p + h * p_stride + t));
		_mm256_storeu_ps(acc + t,
				 _mm256_add_ps(_mm256_loadu_ps(acc + t), sum));
	}
	for (; t < n; t++) {
		float sum = 0.0f;

		for (uint32_t h = 0; h < n_q; h++)
			sum += p[h * p_stride + t];
		acc[t] += sum;
	}
}

void kvc_softmax_stats_avx2(const float *s, uint32_t n, float *m, float *l)
{
	__m256 mx = _mm256_set1_ps(-INFINITY), sum = _mm256_setzero_ps();
	uint32_t t = 0;
	float mn;

	for (; t + 8 <= n; t += 8)
		mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + t));
	if (t < n)
		mx = _mm256_max_ps(mx, load_tail(s + t, n - t));
	mn = hmax8(mx);
	*m = mn;
	if (mn == -INFINITY) {
		*l = 0.0f;
		return;
	}
	mx = _mm256_set1_ps(mn);
	for (t = 0; t + 8 <= n; t += 8)
		sum = _mm256_add_ps(sum,
				    exp8(_mm256_sub_ps(_mm256_loadu_ps(s + t),
						       mx)));
	if (t < n)
		sum = _mm256_add_ps(sum,
				    exp8(_mm256_sub_ps(load_tail(s + t, n - t),
						       mx)));
	*l = hsum8(sum);
}

float kvc_softmax_mass_avx2(const float *s, const uint32_t *idx, uint32_t k,
			    float m, float l)
{
	__m256 mv = _mm256_set1_ps(m), sum = _mm256_setzero_ps();
	uint32_t i = 0;
	float a;

	if (!(l > 0.0f))
		return 0.0f;
	for (; i + 8 <= k; i += 8) {
		__m256i vi = _mm256_loadu_si256((const __m256i *)(idx + i));
		__m256 x = _mm256_i32gather_ps(s, vi, 4);

		sum = _mm256_add_ps(sum, exp8(_mm256_sub_ps(x, mv)));
	}
	if (i < k) {
		float buf[8];

		for (uint32_t j = 0; j < 8; j++)
			buf[j] = i + j < k ? s[idx[i + j]] : -INFINITY;
		sum = _mm256_add_ps(sum,
				    exp8(_mm256_sub_ps(_mm256_loadu_ps(buf),
						       mv)));
	}
	a = hsum8(sum) / l;
	return a < 1.0f ? a : 1.0f;
}
