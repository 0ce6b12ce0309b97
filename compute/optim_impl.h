/*
 * optim_impl.h - what the optimizer variants share inside compute/: the
 * layout of a variant's table, and the per-element update of each rule
 * that both variants use (the scalar variant for every element, the AVX2
 * variant for the tails its vectors do not cover), so that the two cannot
 * drift apart.
 *
 * A variant provides the array pieces of a step; optim.c runs them block
 * by block (KVC_OPTIM_BLOCK elements: widen the gradient into an fp32 block,
 * update, narrow the params out), and optim_dispatch.c hands out the tables.
 *
 * Only optim.c, optim_avx2.c and optim_dispatch.c include this file;
 * everyone else uses optim.h.  Every fp32 operation here is written out one at a time, in
 * the order of optim.h's formulas, and the files that include it are
 * compiled with -ffp-contract=off: changing the order changes the bits
 * (the tests compare the variants bit for bit).
 */
#ifndef KVF_COMPUTE_OPTIM_IMPL_H
#define KVF_COMPUTE_OPTIM_IMPL_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "compute/half.h"
#include "compute/optim.h"

/* Elements per block of a step: the fp32 gradient block is 1 KiB. */
#define KVC_OPTIM_BLOCK 256

/* The pieces of one variant (ISA) of the optimizer kernels. */
struct kvc_optim {
	const char *name; /* "scalar" or "avx2" */
	/* dst[i] = f32(src[i]) * scale, i < n (n <= KVC_OPTIM_BLOCK) */
	void (*widen)(float *dst, const void *src, size_t n, kvf_dtype dtype,
		      float scale);
	/* one step of s->kind over n elements of c, g already widened and
	 * scaled */
	void (*update)(const struct kvc_optim_step *s,
		       const struct kvc_optim_chunk *c, const float *g,
		       size_t n);
	/* dst[i] = src[i] rounded to dtype (nearest even), i < n */
	void (*narrow)(void *dst, const float *src, size_t n, kvf_dtype dtype);
	/* sum of squares in double (kvc_optim_grad_sumsq) */
	double (*sumsq)(const void *g, size_t n, kvf_dtype dtype);
	/* any NaN or Inf (kvc_optim_grad_nonfinite) */
	bool (*nonfinite)(const void *g, size_t n, kvf_dtype dtype);
};

/* The scalar variant (optim.c), always built. */
extern const struct kvc_optim kvc_optim_scalar_table;

/* The AVX2+FMA+F16C variant (optim_avx2.c); only built, and only
 * referenced by optim_dispatch.c, when KVC_OPTIM_HAVE_AVX2 is 1. */
extern const struct kvc_optim kvc_optim_avx2_table;

/* optim_elt_store - element i of the dtype array p = f, rounded to nearest even. */
static inline void optim_elt_store(void *p, size_t i, kvf_dtype dtype, float f)
{
	unsigned char *b = (unsigned char *)p;
	uint16_t h;

	if (dtype == KVF_DTYPE_F32) {
		memcpy(b + i * 4, &f, sizeof(f));
		return;
	}
	h = dtype == KVF_DTYPE_F16 ? kvf_f32_to_f16(f) : kvf_f32_to_bf16(f);
	memcpy(b + i * 2, &h, sizeof(h));
}

/*
 * adam_elt - Adam/AdamW on one element (torch/optim/adam.py,
 * _single_tensor_adam): L2 or decoupled decay, m by torch.lerp, v by
 * mul_ + addcmul_, then addcdiv_ in its vectorized order p + (-step_size)
 * * (m / denom).
 */
static inline void adam_elt(const struct kvc_optim_step *s, float *p, float *m,
			    float *v, float g)
{
	float pi = *p, mi = *m, vi = *v, den;

	if (s->l2 != 0.0f)
		g = g + s->l2 * pi;
	if (s->decay != 1.0f)
		pi = pi * s->decay;
	if (s->lerp_small)
		mi = mi + s->lerp_w * (g - mi);
	else
		mi = g - (g - mi) * s->lerp_w_c;
	vi = vi * s->beta2;
	vi = vi + s->one_minus_beta2 * g * g;
	den = sqrtf(vi) / s->bc2_sqrt + s->eps;
	pi = pi - s->step_size * (mi / den);
	*p = pi;
	*m = mi;
	*v = vi;
}

/*
 * sgd_elt - SGD on one element (torch/optim/sgd.py, _single_tensor_sgd);
 * m is the momentum buffer, untouched (may be NULL) when momentum == 0.
 */
static inline void sgd_elt(const struct kvc_optim_step *s, float *p, float *m,
			   float g)
{
	float pi = *p, buf;

	if (s->l2 != 0.0f)
		g = g + s->l2 * pi;
	if (s->momentum != 0.0f) {
		if (s->first) {
			buf = g;
		} else {
			buf = *m * s->momentum;
			buf = buf + s->one_minus_damp * g;
		}
		*m = buf;
		g = s->nesterov ? g + s->momentum * buf : buf;
	}
	*p = pi - s->lr * g;
}

/* adagrad_elt - AdaGrad on one element (torch/optim/adagrad.py,
 * _single_tensor_adagrad); v is the sum of squares. */
static inline void adagrad_elt(const struct kvc_optim_step *s, float *p,
			       float *v, float g)
{
	float pi = *p, sum, std;

	if (s->l2 != 0.0f)
		g = g + s->l2 * pi;
	sum = *v + g * g;
	std = sqrtf(sum) + s->eps;
	*v = sum;
	*p = pi - s->clr * (g / std);
}

/*
 * optim_update_elts - elements [i, n) of one step of c, one at a time: the
 * scalar variant's whole update and the AVX2 variant's tail.  Each
 * element is read from c->in before it is written to c->out, so in and
 * out may be the same arrays.
 */
static inline void optim_update_elts(const struct kvc_optim_step *s,
				     const struct kvc_optim_chunk *c,
				     const float *g, size_t i, size_t n)
{
	const float *const *in = c->in;
	float *const *out = c->out;
	float p, m = 0.0f, v = 0.0f;

	switch (s->kind) {
	case KVF_OPT_ADAM:
	case KVF_OPT_ADAMW:
		for (; i < n; i++) {
			p = in[KVC_CHUNK_P][i];
			m = in[KVC_CHUNK_M][i];
			v = in[KVC_CHUNK_V][i];
			adam_elt(s, &p, &m, &v, g[i]);
			out[KVC_CHUNK_P][i] = p;
			out[KVC_CHUNK_M][i] = m;
			out[KVC_CHUNK_V][i] = v;
		}
		break;
	case KVF_OPT_SGD:
		for (; i < n; i++) {
			/* the buffer exists only with momentum */
			const float *mi = s->momentum != 0.0f ? &in[KVC_CHUNK_M][i]
							       : NULL;

			p = in[KVC_CHUNK_P][i];
			if (mi)
				m = *mi;
			sgd_elt(s, &p, mi ? &m : NULL, g[i]);
			out[KVC_CHUNK_P][i] = p;
			if (mi)
				out[KVC_CHUNK_M][i] = m;
		}
		break;
	case KVF_OPT_ADAGRAD:
		for (; i < n; i++) {
			p = in[KVC_CHUNK_P][i];
			v = in[KVC_CHUNK_V][i];
			adagrad_elt(s, &p, &v, g[i]);
			out[KVC_CHUNK_P][i] = p;
			out[KVC_CHUNK_V][i] = v;
		}
		break;
	}
}

#endif /* KVF_COMPUTE_OPTIM_IMPL_H */
