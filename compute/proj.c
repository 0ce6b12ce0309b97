/*
 * proj.c - the K,V projection and RoPE (compute/proj.h).  Written so the
 * compiler vectorizes the inner loop over output columns: each widened
 * element of x scales one row of W into the output row.
 */
#include "compute/proj.h"

#include <math.h>
#include <string.h>

#include "compute/half.h"

static void widen(const void *x, kvf_dtype dtype, uint32_t d, float *dst)
{
	const uint16_t *h = x;

	switch (dtype) {
	case KVF_DTYPE_F32:
		memcpy(dst, x, (size_t)d * sizeof(float));
		break;
	case KVF_DTYPE_BF16:
		for (uint32_t j = 0; j < d; j++)
			dst[j] = kvf_bf16_to_f32(h[j]);
		break;
	default:
		for (uint32_t j = 0; j < d; j++)
			dst[j] = kvf_f16_to_f32(h[j]);
		break;
	}
}

/* axpy - o += a * w; restrict lets the compiler vectorize it at -O2
 * (without it, GCC's cheap vectorizer will not version the loop for
 * aliasing, and the projection runs 10x slower) */
static void axpy(float *restrict o, float a, const float *restrict w,
		 uint32_t n)
{
	for (uint32_t c = 0; c < n; c++)
		o[c] += a * w[c];
}

void kvc_project(const void *x, kvf_dtype dtype, uint32_t n, uint32_t d,
		 const float *w, uint32_t cols, float *out, float *xrow)
{
	size_t elt = dtype == KVF_DTYPE_F32 ? 4 : 2;

	for (uint32_t t = 0; t < n; t++) {
		float *restrict o = out + (size_t)t * cols;

		widen((const unsigned char *)x + (size_t)t * d * elt, dtype, d, xrow);
		memset(o, 0, (size_t)cols * sizeof(float));
		for (uint32_t j = 0; j < d; j++)
			axpy(o, xrow[j], w + (size_t)j * cols, cols);
	}
}

void kvc_rope(float *rows, uint32_t n, uint32_t n_heads, uint32_t head_dim,
	      uint64_t pos0, float theta)
{
	uint32_t half = head_dim / 2;

	if (theta == 0.0f)
		return;
	for (uint32_t i = 0; i < half; i++) {
		double freq = pow((double)theta, -2.0 * i / head_dim);

		for (uint32_t t = 0; t < n; t++) {
			double ang = (double)(pos0 + t) * freq;
			float c = (float)cos(ang), s = (float)sin(ang);

			for (uint32_t h = 0; h < n_heads; h++) {
				float *r = rows + ((size_t)t * n_heads + h) * head_dim;
				float a = r[i], b = r[i + half];

				r[i] = a * c - b * s;
				r[i + half] = a * s + b * c;
			}
		}
	}
}
