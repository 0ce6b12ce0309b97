/*
 * score.c - importance scores, scalar: softmax probabilities from a
 * head's final (m, l), H2O accumulation, and the softmax statistics and
 * subset mass SparF's alpha needs.  (Raw q . k scores share the fold's
 * code in attn.c.)
 *
 * These are the oracle for the AVX2 versions in score_avx2.c; each is
 * one plain loop in index order.
 */
#include <math.h>

#include "compute/kern_impl.h"
#include "compute/kernels.h"

void kvc_probs_scalar(const float *s, float *p, uint32_t n, float m, float l)
{
	float inv = l > 0.0f ? 1.0f / l : 0.0f;
	float none = isnan(l) ? NAN : 0.0f; /* a NaN score: no softmax */

	for (uint32_t t = 0; t < n; t++)
		p[t] = l > 0.0f ? expf(s[t] - m) * inv : none;
}

void kvc_h2o_accumulate_scalar(float *acc, const float *p, size_t p_stride,
			       uint32_t n_q, uint32_t n)
{
	for (uint32_t t = 0; t < n; t++) {
		float sum = 0.0f;

		for (uint32_t h = 0; h < n_q; h++)
			sum += p[h * p_stride + t];
		acc[t] += sum;
	}
}

void kvc_softmax_stats_scalar(const float *s, uint32_t n, float *m, float *l)
{
	float mx = -INFINITY, sum = 0.0f;

	for (uint32_t t = 0; t < n; t++)
		if (s[t] > mx)
			mx = s[t];
	if (mx != -INFINITY)
		for (uint32_t t = 0; t < n; t++)
			sum += expf(s[t] - mx);
	*m = mx;
	*l = sum;
}

float kvc_softmax_mass_scalar(const float *s, const uint32_t *idx, uint32_t k,
			      float m, float l)
{
	float sum = 0.0f, a;

	if (!(l > 0.0f))
		return 0.0f;
	for (uint32_t i = 0; i < k; i++)
		sum += expf(s[idx[i]] - m);
	a = sum / l;
	return a < 1.0f ? a : 1.0f;
}
