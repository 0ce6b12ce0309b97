/*
 * sparf.c - the pieces of SparF sparse attention, scalar: approximate
 * scores from r dims of q against K^T rows, the running mean of V, and the
 * final interpolation with it.
 *
 * The method is SparQ's (L. Ribar et al., "SparQ Attention:
 * Bandwidth-Efficient LLM Inference", ICML 2024, arXiv:2312.04985,
 * Algorithm 1), which InstInfer's Algorithm 1 runs near the data:
 *	i1    = argtopk(|q|, r)                      kvc_topr_dims
 *	tau   = sqrt(d * ||q[i1]||_1 / ||q||_1)
 *	s_hat = softmax(q[i1] . K[:, i1]^T / tau)    sparf_scores, stats
 *	i2    = argtopk(s_hat, k)                    kvc_topk
 *	alpha = sum(s_hat[i2])                       softmax_mass
 *	y     = softmax(q . K[i2]^T / sqrt(d)) V[i2] attn_fold with a mask
 *	out   = alpha * y + (1 - alpha) * v_mean    kvc_sparf_combine
 * Our q arrives already multiplied by the softmax scale: q' = q / sqrt(d)
 * by default.  Then q[i1] . k / tau = q'[i1] . k * sqrt(d) / tau
 * = q'[i1] . k * c with
 *	c = sqrt(||q||_1 / ||q[i1]||_1) = sqrt(||q'||_1 / ||q'[i1]||_1),
 * and with another scale the same c keeps the approximate scores on the
 * exact scores' footing (the ratio of L1 norms does not see the scale).  For GQA, SparQ's appendix ranks dims by |q| summed over the group
 * and tokens by s_hat summed over the group (probs, h2o_accumulate, then
 * kvc_topk), so one mask serves every head of the group; alpha stays per
 * head.
 */
#include <math.h>

#include "compute/kern_impl.h"
#include "compute/kernels.h"

void kvc_sparf_scores_scalar(const float *q, uint32_t n_q, uint32_t head_dim,
			     const uint32_t *dims, uint32_t r,
			     const void *const *kt_rows, uint32_t n,
			     kvf_dtype dtype, const uint8_t *mask, float *out,
			     size_t out_stride)
{
	for (uint32_t h = 0; h < n_q; h++) {
		const float *qh = q + (size_t)h * head_dim;
		float c = kvc_sparf_correction(qh, head_dim, dims, r);
		float *row = out + h * out_stride;

		for (uint32_t t = 0; t < n; t++) {
			float s = 0.0f;

			for (uint32_t i = 0; i < r; i++)
				s += qh[dims[i]] *
				     kvc_elt(kt_rows[i], t, dtype);
			row[t] = mask && !mask[t] ? -INFINITY : s * c;
		}
	}
}

void kvc_vmean_fold_scalar(float *mean, uint64_t count, const void *v,
			   uint32_t n, uint32_t head_dim, kvf_dtype dtype)
{
	float total = (float)(count + n);

	if (n == 0)
		return;
	for (uint32_t d = 0; d < head_dim; d++) {
		float sum = 0.0f, old = count ? mean[d] : 0.0f;

		for (uint32_t t = 0; t < n; t++)
			sum += kvc_elt(v, (size_t)t * head_dim + d, dtype);
		mean[d] = old + (sum - (float)n * old) / total;
	}
}

void kvc_sparf_combine(float *out, const float *alpha, const float *vbar,
		       uint32_t n_q, uint32_t head_dim)
{
	for (uint32_t h = 0; h < n_q; h++) {
		float a = alpha[h], b = 1.0f - alpha[h];
		float *o = out + (size_t)h * head_dim;

		for (uint32_t d = 0; d < head_dim; d++)
			o[d] = a * o[d] + b * vbar[d];
	}
}
