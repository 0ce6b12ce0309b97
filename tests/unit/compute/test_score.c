/*
 * test_score.c - importance scores: raw scores with output strides,
 * softmax probabilities from a fold's final (m, l), H2O accumulation,
 * softmax statistics and subset mass, each against double references and
 * scalar against AVX2, at lengths around the 8-lane tails.
 *
 * Tolerances: a probability exp(s - m) / l carries the exp's relative
 * error (1.2e-7 for exp8, less for expf) and the error of l, a sum of n
 * terms in [0, 1] whose rounding behaves like a random walk (sqrt(n) u);
 * we allow 8 u (sqrt(n) + 8) relative.  Sums of n probabilities over
 * n_q heads: 8 u (sqrt(n_q * n) + 8) relative to the sum of the
 * magnitudes.  Scores: 8 u sqrt(hd) sum_d |q_d k_d|, as in test_attn.c.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/kernels.h"
#include "kernel_ref.h"
#include "testutil.h"

static const uint32_t lens[] = { 0,  1,  7,  8,  9,   15,  16,
				 17, 31, 32, 33, 100, 5000 };
static const kvf_dtype dtypes[] = { KVF_DTYPE_F16, KVF_DTYPE_BF16,
				    KVF_DTYPE_F32 };

#define NELEM(x) (sizeof(x) / sizeof((x)[0]))

/* scores_case - n tokens of nq heads into rows of n + 5 floats, with and
 * without a mask: reference within tolerance, nothing past n written. */
static void scores_case(const struct kvc_kernels *kk, uint64_t *rng,
			kvf_dtype dt, uint32_t nq, uint32_t n)
{
	uint32_t hd = 64, stride = n + 5;
	float *q = kr_xmalloc((size_t)nq * hd * 4);
	void *k = kr_xmalloc((size_t)n * hd * kr_elt_bytes(dt));
	double *kd = kr_xmalloc((size_t)n * hd * 8);
	float *out = kr_xmalloc((size_t)nq * stride * 4);
	uint8_t *mask = kr_xmalloc(n + 1);

	kr_fill_f32(rng, q, (size_t)nq * hd, -0.5, 0.5);
	kr_fill(rng, dt, k, kd, (size_t)n * hd, -1, 1);
	for (uint32_t t = 0; t < n; t++)
		mask[t] = rng_below(rng, 3) != 0;
	for (int m = 0; m < 2; m++) {
		const uint8_t *mk = m ? mask : NULL;

		for (size_t x = 0; x < (size_t)nq * stride; x++)
			out[x] = 42.0f;
		kk->scores(q, nq, hd, k, n, dt, mk, out, stride);
		for (uint32_t h = 0; h < nq; h++) {
			const float *qh = q + h * hd;

			for (uint32_t t = 0; t < n; t++) {
				const double *kt = kd + (size_t)t * hd;
				float s = out[h * stride + t];
				double ref = kr_score(qh, kt, hd), mag = 0;

				if (mk && !mk[t]) {
					cr_assert(s == -INFINITY);
					continue;
				}
				for (uint32_t d = 0; d < hd; d++)
					mag += fabs(qh[d] * kt[d]);
				cr_assert(fabs(s - ref) <=
						  8 * KR_U * sqrt(hd) * mag +
							  1e-30,
					  "%s %s n %u head %u token %u: %.9g vs "
					  "%.9g",
					  kk->name, kr_dtype_name(dt), n, h, t,
					  s, ref);
			}
			for (uint32_t t = n; t < stride; t++)
				cr_assert(out[h * stride + t] == 42.0f,
					  "%s: wrote past n", kk->name);
		}
	}
	free(q);
	free(k);
	free(kd);
	free(out);
	free(mask);
}

/* Scores into rows longer than n (a stride), every dtype and mask. */
Test(score, raw_scores_with_stride)
{
	uint64_t rng = rng_seed("score.raw_scores_with_stride");
	const struct kvc_kernels *kv[2];
	int nv = kr_variants(kv);

	for (int i = 0; i < nv; i++)
		for (size_t a = 0; a < NELEM(dtypes); a++)
			for (size_t b = 0; b < NELEM(lens); b++)
				for (uint32_t nq = 1; nq <= 8; nq *= 2)
					scores_case(kv[i], &rng, dtypes[a], nq,
						    lens[b]);
}

/* check_probs - probs of one head's row against exp(s - m) / l in
 * double; they sum to 1; in place gives the same. */
static void check_probs(const struct kvc_kernels *kk, float *s, float *p,
			uint32_t n, float m, float l, const uint8_t *mask)
{
	double sum = 0, tol = 8 * KR_U * (sqrt(n) + 8);

	kk->probs(s, p, n, m, l);
	for (uint32_t t = 0; t < n; t++) {
		double ref = mask[t] ? exp((double)s[t] - m) / l : 0;

		cr_assert(fabs(p[t] - ref) <= tol * ref,
			  "%s n %u token %u: p %.9g, reference %.9g", kk->name,
			  n, t, p[t], ref);
		sum += p[t];
	}
	if (l > 0)
		cr_assert(fabs(sum - 1) <= tol, "%s n %u: sum of p %.9g",
			  kk->name, n, sum);
	kk->probs(s, s, n, m, l);
	cr_assert(memcmp(s, p, n * 4) == 0, "%s: in-place probs differ",
		  kk->name);
}

/* probs_case - fold n f16 tokens for 2 heads with a mask, keeping the
 * raw scores; then probabilities from the state's (m, l). */
static void probs_case(const struct kvc_kernels *kk, uint64_t *rng, uint32_t n)
{
	uint32_t hd = 32, nq = 2;
	uint16_t *k = kr_xmalloc((size_t)n * hd * 2);
	uint16_t *v = kr_xmalloc((size_t)n * hd * 2);
	float q[2 * 32], buf[KVC_ATTN_STATE_FLOATS(2, 32)];
	float *sc = kr_xmalloc((size_t)nq * n * 4 + 4);
	float *p = kr_xmalloc((size_t)n * 4 + 4);
	uint8_t *mask = kr_xmalloc(n + 1);
	struct kvc_attn_state st;

	kr_fill_f32(rng, q, nq * hd, -1, 1);
	kr_fill(rng, KVF_DTYPE_F16, k, NULL, (size_t)n * hd, -1, 1);
	kr_fill(rng, KVF_DTYPE_F16, v, NULL, (size_t)n * hd, -1, 1);
	for (uint32_t t = 0; t < n; t++)
		mask[t] = rng_below(rng, 4) != 0;
	kvc_attn_state_init(&st, nq, hd, buf);
	kk->attn_fold(&st, q, k, v, n, KVF_DTYPE_F16, mask, sc, n);
	for (uint32_t h = 0; h < nq; h++)
		check_probs(kk, sc + h * n, p, n, st.m[h], st.l[h], mask);
	kk->probs(sc, p, n, -INFINITY, 0.0f); /* nothing folded: zeros */
	for (uint32_t t = 0; t < n; t++)
		cr_assert(p[t] == 0.0f);
	free(k);
	free(v);
	free(sc);
	free(p);
	free(mask);
}

/*
 * Probabilities from the (m, l) of a fold over the same scores: they
 * match exp(s - m) / l in double, sum to 1, are 0 where masked, and may
 * be computed in place; l = 0 (nothing folded) gives zeros.
 */
Test(score, probs_from_fold_state)
{
	uint64_t rng = rng_seed("score.probs_from_fold_state");
	const struct kvc_kernels *kv[2];
	int nv = kr_variants(kv);

	for (int i = 0; i < nv; i++)
		for (size_t b = 0; b < NELEM(lens); b++)
			probs_case(kv[i], &rng, lens[b]);
}

static void h2o_case(const struct kvc_kernels *kk, uint64_t *rng, uint32_t nq,
		     uint32_t n)
{
	uint32_t stride = n + 3;
	float *p = kr_xmalloc((size_t)nq * stride * 4);
	float *acc = kr_xmalloc((size_t)n * 4 + 4);
	double *ref = kr_xmalloc((size_t)n * 8 + 8);

	kr_fill_f32(rng, p, (size_t)nq * stride, 0, 1);
	kr_fill_f32(rng, acc, n, 0, 100);
	for (uint32_t t = 0; t < n; t++) {
		ref[t] = acc[t];
		for (uint32_t h = 0; h < nq; h++)
			ref[t] += p[h * stride + t];
	}
	kk->h2o_accumulate(acc, p, stride, nq, n);
	for (uint32_t t = 0; t < n; t++)
		cr_assert(fabs(acc[t] - ref[t]) <=
				  8 * KR_U * (sqrt(nq) + 8) * ref[t],
			  "%s n %u n_q %u token %u: %.9g vs %.9g", kk->name, n,
			  nq, t, acc[t], ref[t]);
	free(p);
	free(acc);
	free(ref);
}

Test(score, h2o_accumulate)
{
	uint64_t rng = rng_seed("score.h2o_accumulate");
	const struct kvc_kernels *kv[2];
	int nv = kr_variants(kv);

	for (int i = 0; i < nv; i++)
		for (size_t b = 0; b < NELEM(lens); b++)
			for (uint32_t nq = 1; nq <= 8; nq++)
				h2o_case(kv[i], &rng, nq, lens[b]);
}

static void stats_case(const struct kvc_kernels *kk, uint64_t *rng, uint32_t n)
{
	float *s = kr_xmalloc((size_t)n * 4 + 4), m, l;
	double rm = -INFINITY, rl = 0;

	kr_fill_f32(rng, s, n, -30, 10);
	for (uint32_t t = 0; t < n; t++) {
		if (rng_below(rng, 5) == 0)
			s[t] = -INFINITY;
		rm = s[t] > rm ? s[t] : rm;
	}
	for (uint32_t t = 0; t < n && rm > -INFINITY; t++)
		rl += exp((double)s[t] - rm);
	kk->softmax_stats(s, n, &m, &l);
	cr_assert(m == (float)rm, "%s n %u: m %.9g vs %.9g", kk->name, n, m,
		  rm);
	if (rm == -INFINITY)
		cr_assert(l == 0.0f);
	else
		cr_assert(fabs(l - rl) <= 8 * KR_U * (sqrt(n) + 8) * rl,
			  "%s n %u: l %.9g vs %.9g", kk->name, n, l, rl);
	for (uint32_t t = 0; t < n; t++)
		s[t] = -INFINITY;
	kk->softmax_stats(s, n, &m, &l);
	cr_assert(m == -INFINITY && l == 0.0f, "%s n %u all -inf: %g %g",
		  kk->name, n, m, l);
	free(s);
}

/* softmax_stats: m exact, l to rounding; empty and all -inf rows. */
Test(score, softmax_stats)
{
	uint64_t rng = rng_seed("score.softmax_stats");
	const struct kvc_kernels *kv[2];
	int nv = kr_variants(kv);

	for (int i = 0; i < nv; i++)
		for (size_t b = 0; b < NELEM(lens); b++)
			stats_case(kv[i], &rng, lens[b]);
}

/* mass_case - the mass of k random distinct tokens of s[0..n). */
static void mass_case(const struct kvc_kernels *kk, uint64_t *rng,
		      const float *s, uint32_t n, uint32_t *idx, uint32_t k)
{
	double ref = 0, all = 0;
	float m, l, a;

	kk->softmax_stats(s, n, &m, &l);
	for (uint32_t j = 0; j < k; j++) { /* a random subset */
		uint32_t r = j + (uint32_t)rng_below(rng, n - j), t = idx[j];

		idx[j] = idx[r];
		idx[r] = t;
	}
	for (uint32_t t = 0; t < n; t++)
		all += exp((double)s[t] - m);
	for (uint32_t j = 0; j < k; j++)
		ref += exp((double)s[idx[j]] - m);
	ref /= all;
	a = kk->softmax_mass(s, idx, k, m, l);
	cr_assert(fabs(a - ref) <= 8 * KR_U * (sqrt(n) + 8),
		  "%s k %u: mass %.9g vs %.9g", kk->name, k, a, ref);
}

/* softmax_mass of subsets of every size near the 8-lane tails, of
 * everything (1 up to rounding, never above), and with l = 0. */
Test(score, softmax_mass)
{
	static const uint32_t ks[] = { 0, 1, 7, 8, 9, 16, 17, 100 };
	uint64_t rng = rng_seed("score.softmax_mass");
	const struct kvc_kernels *kv[2];
	int nv = kr_variants(kv);
	uint32_t n = 1000;
	float *s = kr_xmalloc(n * 4), m, l, a;
	uint32_t *idx = kr_xmalloc(n * 4);

	kr_fill_f32(&rng, s, n, -20, 5);
	for (int i = 0; i < nv; i++) {
		for (uint32_t t = 0; t < n; t++)
			idx[t] = t;
		for (size_t c = 0; c < NELEM(ks); c++)
			mass_case(kv[i], &rng, s, n, idx, ks[c]);
		for (uint32_t t = 0; t < n; t++)
			idx[t] = t;
		kv[i]->softmax_stats(s, n, &m, &l);
		a = kv[i]->softmax_mass(s, idx, n, m, l);
		cr_assert(a <= 1.0f && a >= 1.0f - 8 * KR_U * (sqrt(n) + 8),
			  "%s: mass of everything %.9g", kv[i]->name, a);
		cr_assert(kv[i]->softmax_mass(s, idx, n, -INFINITY, 0.0f) ==
			  0.0f);
	}
	free(s);
	free(idx);
}
