/*
 * kernel_ref.c - helpers and double-precision references of the compute
 * kernel tests (see kernel_ref.h).  No tests live here.
 */
#include "kernel_ref.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/half.h"
#include "testutil.h"

int kr_variants(const struct kvc_kernels *v[2])
{
	static int warned;

	v[0] = kvc_kernels_scalar();
	v[1] = kvc_kernels_avx2();
	if (v[1])
		return 2;
	if (!warned++)
		fprintf(stderr, "compute tests: this CPU (or build) has no "
				"AVX2+FMA+F16C: AVX2 kernels skipped, scalar "
				"only\n");
	return 1;
}

const char *kr_dtype_name(kvf_dtype dt)
{
	return dt == KVF_DTYPE_F16  ? "f16" :
	       dt == KVF_DTYPE_BF16 ? "bf16" :
				      "f32";
}

double kr_uniform(uint64_t *rng, double lo, double hi)
{
	return lo + (hi - lo) * ((double)(rng_next(rng) >> 11) * 0x1p-53);
}

double kr_store(void *buf, size_t i, kvf_dtype dt, double x)
{
	float f = (float)x;

	if (dt == KVF_DTYPE_F32) {
		((float *)buf)[i] = f;
		return f;
	}
	if (dt == KVF_DTYPE_F16) {
		uint16_t h = kvf_f32_to_f16(f);

		((uint16_t *)buf)[i] = h;
		return kvf_f16_to_f32(h);
	}
	uint16_t h = kvf_f32_to_bf16(f);

	((uint16_t *)buf)[i] = h;
	return kvf_bf16_to_f32(h);
}

void kr_fill(uint64_t *rng, kvf_dtype dt, void *buf, double *dec, size_t count,
	     double lo, double hi)
{
	for (size_t i = 0; i < count; i++) {
		double x = kr_store(buf, i, dt, kr_uniform(rng, lo, hi));

		if (dec)
			dec[i] = x;
	}
}

void kr_fill_f32(uint64_t *rng, float *q, size_t count, double lo, double hi)
{
	for (size_t i = 0; i < count; i++)
		q[i] = (float)kr_uniform(rng, lo, hi);
}

double kr_score(const float *qh, const double *kt, uint32_t hd)
{
	double s = 0;

	for (uint32_t d = 0; d < hd; d++)
		s += (double)qh[d] * kt[d];
	return s;
}

void kr_attention(const float *q, uint32_t n_q, uint32_t hd, const double *k,
		  const double *v, uint32_t n, const uint8_t *mask, double *out,
		  double *lse, double *smax)
{
	double *s = kr_xmalloc((n ? n : 1) * sizeof(double));

	for (uint32_t h = 0; h < n_q; h++) {
		const float *qh = q + (size_t)h * hd;
		double m = -INFINITY, l = 0, mag = 0;

		for (uint32_t t = 0; t < n; t++) {
			double a = 0;

			if (mask && !mask[t])
				continue;
			s[t] = kr_score(qh, k + (size_t)t * hd, hd);
			for (uint32_t d = 0; d < hd; d++)
				a += fabs((double)qh[d] *
					  k[(size_t)t * hd + d]);
			if (a > mag)
				mag = a;
			if (s[t] > m)
				m = s[t];
		}
		for (uint32_t d = 0; d < hd; d++)
			out[(size_t)h * hd + d] = 0;
		for (uint32_t t = 0; t < n; t++) {
			double p;

			if (mask && !mask[t])
				continue;
			p = exp(s[t] - m);
			l += p;
			for (uint32_t d = 0; d < hd; d++)
				out[(size_t)h * hd + d] +=
					p * v[(size_t)t * hd + d];
		}
		for (uint32_t d = 0; d < hd && l > 0; d++)
			out[(size_t)h * hd + d] /= l;
		lse[h] = l > 0 ? m + log(l) : -INFINITY;
		if (smax)
			smax[h] = mag;
	}
	free(s);
}

double kr_attn_tol(uint32_t n, uint32_t hd, double smax)
{
	return 8 * KR_U * (sqrt((double)n) + sqrt((double)hd) * smax + 8);
}

size_t kr_elt_bytes(kvf_dtype dt)
{
	return dt == KVF_DTYPE_F32 ? 4 : 2;
}

void kr_prob_make(struct kr_prob *p, uint64_t *rng, kvf_dtype dt, uint32_t n_q,
		  uint32_t hd, uint32_t n, int masked, double qs, double trend)
{
	size_t cnt = (size_t)n * hd, eb = kr_elt_bytes(dt);

	*p = (struct kr_prob){ .dt = dt, .n_q = n_q, .hd = hd, .n = n };
	p->q = kr_xmalloc((size_t)n_q * hd * sizeof(float));
	p->k = kr_xmalloc(cnt * eb);
	p->v = kr_xmalloc(cnt * eb);
	p->kt = kr_xmalloc(cnt * eb);
	p->kd = kr_xmalloc(cnt * sizeof(double));
	p->vd = kr_xmalloc(cnt * sizeof(double));
	kr_fill_f32(rng, p->q, (size_t)n_q * hd, -qs / sqrt(hd), qs / sqrt(hd));
	for (uint32_t t = 0; t < n; t++)
		for (uint32_t d = 0; d < hd; d++) {
			double x = kr_uniform(rng, -1, 1);

			if (trend > 0)
				x += trend * t / n * (p->q[d] < 0 ? -1 : 1);
			x = kr_store(p->k, (size_t)t * hd + d, dt, x);
			p->kd[(size_t)t * hd + d] = x;
			kr_store(p->kt, (size_t)d * n + t, dt, x);
		}
	kr_fill(rng, dt, p->v, p->vd, cnt, -1, 1);
	if (!masked)
		return;
	p->mask = kr_xmalloc(n ? n : 1);
	for (uint32_t t = 0; t < n; t++) {
		p->mask[t] = rng_below(rng, 10) < 7;
		if (!p->mask[t]) {
			memset((char *)p->k + t * hd * eb, 0xff, hd * eb);
			memset((char *)p->v + t * hd * eb, 0xff, hd * eb);
		}
	}
}

void kr_prob_free(struct kr_prob *p)
{
	free(p->q);
	free(p->k);
	free(p->v);
	free(p->kt);
	free(p->kd);
	free(p->vd);
	free(p->mask);
}

double kr_max_abs(const double *x, size_t count)
{
	double m = 0;

	for (size_t i = 0; i < count; i++)
		if (fabs(x[i]) > m)
			m = fabs(x[i]);
	return m;
}

void *kr_xmalloc(size_t bytes)
{
	void *p = calloc(1, bytes ? bytes : 1);

	cr_assert(p, "out of memory (%zu bytes)", bytes);
	return p;
}
