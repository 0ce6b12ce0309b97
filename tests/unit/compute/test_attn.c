/*
 * test_attn.c - dense decode attention (attn_fold, kvc_attn_finish,
 * kvc_attn_merge, the state helpers) against a double-precision
 * reference, and the scalar and AVX2 kernels against each other.
 *
 * Shapes: every dtype; GQA groups of 1, 2, 3, 4, 6 and 8 query heads (3
 * and 6 exercise the 2 + 1 and 4 + 2 head groups of the AVX2 kernel);
 * head_dim 8, 12 (not a multiple of 8: AVX2 hands it to scalar), 64 and
 * 128; lengths 0, 1, 7, 8, 15, 16, 17, 31, 32, 33 (SIMD and block tails),
 * 100 and 5000; with and without a token mask, masked rows holding NaN
 * bytes (they must never be read as numbers).  Tolerances are
 * kr_attn_tol's (kernel_ref.h): outputs within tol * max|v|, LSE within
 * tol plus the rounding of |lse| itself.  Each test prints its seed.
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

static const kvf_dtype dtypes[] = { KVF_DTYPE_F16, KVF_DTYPE_BF16,
				    KVF_DTYPE_F32 };

/* The reference answer of a problem, or of its tokens [t0, t1). */
struct ref {
	double *out;  /* [n_q][hd] */
	double *lse;  /* [n_q] */
	double *smax; /* [n_q] */
	double vmax;  /* max |v| (1 when there is no v) */
};

static void ref_make(struct ref *r, const struct kr_prob *p, uint32_t t0,
		     uint32_t t1)
{
	r->out = kr_xmalloc((size_t)p->n_q * p->hd * sizeof(double));
	r->lse = kr_xmalloc(p->n_q * sizeof(double));
	r->smax = kr_xmalloc(p->n_q * sizeof(double));
	kr_attention(p->q, p->n_q, p->hd, p->kd + (size_t)t0 * p->hd,
		     p->vd + (size_t)t0 * p->hd, t1 - t0,
		     p->mask ? p->mask + t0 : NULL, r->out, r->lse, r->smax);
	r->vmax = 1;
}

static void ref_free(struct ref *r)
{
	free(r->out);
	free(r->lse);
	free(r->smax);
}

/*
 * check_result - out/lse against the reference; returns the worst
 * error / tolerance seen (for the log).  what names the case.
 */
static double check_result(const struct kr_prob *p, const struct ref *r,
			   const float *out, const float *lse, uint32_t n,
			   const char *what)
{
	double worst = 0;

	for (uint32_t h = 0; h < p->n_q; h++) {
		double tol = kr_attn_tol(n, p->hd, r->smax[h]);
		double ltol = tol + 8 * KR_U * fabs(r->lse[h]);

		for (uint32_t d = 0; d < p->hd; d++) {
			size_t i = (size_t)h * p->hd + d;
			double e = fabs(out[i] - r->out[i]) / r->vmax;

			cr_assert(e <= tol,
				  "%s: head %u dim %u: out %.9g, reference "
				  "%.9g (error %.3g > tol %.3g)",
				  what, h, d, out[i], r->out[i], e, tol);
			if (e / tol > worst)
				worst = e / tol;
		}
		if (!lse)
			continue;
		if (r->lse[h] == -INFINITY) {
			cr_assert(lse[h] == -INFINITY,
				  "%s: head %u: lse %.9g, expected -inf", what,
				  h, lse[h]);
			continue;
		}
		cr_assert(fabs(lse[h] - r->lse[h]) <= ltol,
			  "%s: head %u: lse %.9g, reference %.9g (tol %.3g)",
			  what, h, lse[h], r->lse[h], ltol);
	}
	return worst;
}

/* fold_all - fold tokens [t0, t1) of p in one call; finish into out/lse. */
static void fold_all(const struct kvc_kernels *kk, const struct kr_prob *p,
		     uint32_t t0, uint32_t t1, float *out, float *lse,
		     float *scores)
{
	float *buf = kr_xmalloc(KVC_ATTN_STATE_FLOATS(p->n_q, p->hd) *
				sizeof(float));
	size_t eb = p->dt == KVF_DTYPE_F32 ? 4 : 2;
	struct kvc_attn_state st;

	kvc_attn_state_init(&st, p->n_q, p->hd, buf);
	kk->attn_fold(&st, p->q, (char *)p->k + (size_t)t0 * p->hd * eb,
		      (char *)p->v + (size_t)t0 * p->hd * eb, t1 - t0, p->dt,
		      p->mask ? p->mask + t0 : NULL, scores, t1 - t0);
	kvc_attn_finish(&st, out, lse);
	free(buf);
}

static char *case_name(char *buf, size_t cap, const struct kvc_kernels *kk,
		       const struct kr_prob *p)
{
	snprintf(buf, cap, "%s %s n_q %u hd %u n %u%s", kk->name,
		 kr_dtype_name(p->dt), p->n_q, p->hd, p->n,
		 p->mask ? " masked" : "");
	return buf;
}

#define NELEM(x) (sizeof(x) / sizeof((x)[0]))

/* check_scores - the raw scores of a fold (sc) and of the scores kernel
 * (sc2), rows of n, against the reference scores. */
static void check_scores(const struct kr_prob *p, const struct ref *r,
			 const float *sc, const float *sc2, const char *name)
{
	uint32_t n = p->n, hd = p->hd;

	for (uint32_t h = 0; h < p->n_q; h++) {
		double tol = 8 * KR_U * sqrt(hd) * r->smax[h] + 1e-30;

		for (uint32_t t = 0; t < n; t++) {
			float a = sc[(size_t)h * n + t];
			float b = sc2[(size_t)h * n + t];
			double ref;

			if (p->mask && !p->mask[t]) {
				cr_assert(a == -INFINITY && b == -INFINITY,
					  "%s: masked token %u: scores %g %g",
					  name, t, a, b);
				continue;
			}
			ref = kr_score(p->q + (size_t)h * hd,
				       p->kd + (size_t)t * hd, hd);
			cr_assert(fabs(a - ref) <= tol && fabs(b - ref) <= tol,
				  "%s: head %u token %u: fold score %.9g, "
				  "scores %.9g, reference %.9g",
				  name, h, t, a, b, ref);
		}
	}
}

/*
 * run_case - one problem through every variant: single-shot fold against
 * the reference, its scores output against the scores kernel and the
 * reference scores, and the variants against each other.  Returns the
 * worst error / tolerance.
 */
static double run_case(uint64_t *rng, kvf_dtype dt, uint32_t n_q, uint32_t hd,
		       uint32_t n, int masked, double qs, double trend)
{
	const struct kvc_kernels *kv[2];
	int nv = kr_variants(kv);
	size_t no = (size_t)n_q * hd, ns = (size_t)n_q * (n ? n : 1);
	float *out[2], *lse[2], *sc, *sc2;
	double worst = 0, w;
	struct kr_prob p;
	struct ref r;
	char name[128];

	kr_prob_make(&p, rng, dt, n_q, hd, n, masked, qs, trend);
	ref_make(&r, &p, 0, n);
	sc = kr_xmalloc(ns * sizeof(float));
	sc2 = kr_xmalloc(ns * sizeof(float));
	for (int i = 0; i < nv; i++) {
		out[i] = kr_xmalloc(no * sizeof(float));
		lse[i] = kr_xmalloc(n_q * sizeof(float));
		case_name(name, sizeof(name), kv[i], &p);
		fold_all(kv[i], &p, 0, n, out[i], lse[i], sc);
		w = check_result(&p, &r, out[i], lse[i], n, name);
		worst = w > worst ? w : worst;
		kv[i]->scores(p.q, n_q, hd, p.k, n, dt, p.mask, sc2, n);
		check_scores(&p, &r, sc, sc2, name);
	}
	for (size_t x = 0; nv == 2 && x < no; x++)
		cr_assert(fabs(out[0][x] - out[1][x]) <=
				  2 * kr_attn_tol(n, hd, r.smax[x / hd]),
			  "%s: scalar %.9g vs avx2 %.9g at %zu", name,
			  out[0][x], out[1][x], x);
	for (int i = 0; i < nv; i++) {
		free(out[i]);
		free(lse[i]);
	}
	free(sc);
	free(sc2);
	ref_free(&r);
	kr_prob_free(&p);
	return worst;
}

Test(attn, short_lengths_all_shapes)
{
	static const uint32_t lens[] = {
		0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 100
	};
	static const uint32_t nqs[] = { 1, 2, 3, 4, 6, 8 };
	static const uint32_t hds[] = { 8, 12, 64, 128 };
	uint64_t rng = rng_seed("attn.short_lengths_all_shapes");
	double worst = 0, w;

	for (size_t a = 0; a < NELEM(dtypes); a++)
		for (size_t b = 0; b < NELEM(nqs); b++)
			for (size_t c = 0; c < NELEM(hds); c++)
				for (size_t d = 0; d < NELEM(lens) * 2; d++) {
					w = run_case(&rng, dtypes[a], nqs[b],
						     hds[c], lens[d / 2], d % 2,
						     1, 0);
					worst = w > worst ? w : worst;
				}
	fprintf(stderr, "attn.short_lengths: worst error %.3f of tolerance\n",
		worst);
}

Test(attn, long_sequences)
{
	static const uint32_t nqs[] = { 1, 4, 8 };
	uint64_t rng = rng_seed("attn.long_sequences");
	double worst = 0, w;

	for (size_t a = 0; a < NELEM(dtypes); a++)
		for (size_t b = 0; b < NELEM(nqs); b++)
			for (int m = 0; m < 2; m++) {
				w = run_case(&rng, dtypes[a], nqs[b], 128, 5000,
					     m, 1, 0);
				worst = w > worst ? w : worst;
			}
	fprintf(stderr, "attn.long_sequences: worst error %.3f of tolerance\n",
		worst);
}

/* Peaky attention with a rising max: large scores (|s| up to ~20) and
 * the running max moving in almost every block. */
Test(attn, peaky_rising_scores)
{
	uint64_t rng = rng_seed("attn.peaky_rising_scores");
	double worst = 0, w;

	for (size_t a = 0; a < NELEM(dtypes); a++)
		for (uint32_t nq = 1; nq <= 8; nq *= 2) {
			w = run_case(&rng, dtypes[a], nq, 64, 2000, 0, 8, 3);
			worst = w > worst ? w : worst;
			w = run_case(&rng, dtypes[a], nq, 128, 333, 1, 16, 6);
			worst = w > worst ? w : worst;
		}
	fprintf(stderr, "attn.peaky_rising: worst error %.3f of tolerance\n",
		worst);
}

/* chunked_case - fold 1000 tokens in chunks of varied sizes, in order or
 * reversed, and compare with the reference and the single-shot fold. */
static void chunked_case(const struct kvc_kernels *kk, uint64_t *rng,
			 kvf_dtype dt, uint32_t nq, int masked, int reversed)
{
	static const uint32_t chunks[] = { 1, 5, 31, 32, 33, 64, 100, 7 };
	uint32_t n = 1000, hd = 64, bounds[64], nb = 0;
	size_t eb = kr_elt_bytes(dt), no = (size_t)nq * hd;
	float *buf = kr_xmalloc(KVC_ATTN_STATE_FLOATS(nq, hd) * 4);
	float *out = kr_xmalloc(no * 4), *out1 = kr_xmalloc(no * 4);
	float *lse = kr_xmalloc(nq * 4), *lse1 = kr_xmalloc(nq * 4);
	struct kvc_attn_state st;
	struct kr_prob p;
	struct ref r;
	char name[160];

	kr_prob_make(&p, rng, dt, nq, hd, n, masked, 4, 2);
	ref_make(&r, &p, 0, n);
	bounds[nb++] = 0;
	for (uint32_t t = 0, c = 0; t < n; c++) {
		t += chunks[c % NELEM(chunks)];
		bounds[nb++] = t < n ? t : n;
	}
	kvc_attn_state_init(&st, nq, hd, buf);
	for (uint32_t c = 0; c + 1 < nb; c++) {
		uint32_t j = reversed ? nb - 2 - c : c;
		uint32_t t0 = bounds[j], t1 = bounds[j + 1];

		kk->attn_fold(&st, p.q, (char *)p.k + t0 * hd * eb,
			      (char *)p.v + t0 * hd * eb, t1 - t0, p.dt,
			      p.mask ? p.mask + t0 : NULL, NULL, 0);
	}
	kvc_attn_finish(&st, out, lse);
	fold_all(kk, &p, 0, n, out1, lse1, NULL);
	snprintf(name, sizeof(name), "%s %s n_q %u chunked%s%s", kk->name,
		 kr_dtype_name(dt), nq, masked ? " masked" : "",
		 reversed ? " reversed" : "");
	check_result(&p, &r, out, lse, n, name);
	for (size_t x = 0; x < no; x++)
		cr_assert(fabs(out[x] - out1[x]) <=
				  2 * kr_attn_tol(n, hd, r.smax[x / hd]),
			  "%s: chunked %.9g, single %.9g", name, out[x],
			  out1[x]);
	free(buf);
	free(out);
	free(out1);
	free(lse);
	free(lse1);
	ref_free(&r);
	kr_prob_free(&p);
}

/* Folding chunk by chunk, in order or not, equals the single-shot fold. */
Test(attn, chunked_equals_single_shot)
{
	uint64_t rng = rng_seed("attn.chunked_equals_single_shot");
	const struct kvc_kernels *kv[2];
	int nv = kr_variants(kv);

	for (int i = 0; i < nv; i++)
		for (size_t a = 0; a < NELEM(dtypes); a++)
			for (uint32_t nq = 1; nq <= 8; nq *= 2)
				for (int x = 0; x < 4; x++)
					chunked_case(kv[i], &rng, dtypes[a], nq,
						     x & 1, x >> 1);
}

/* merge_case - tokens [0, sp) and [sp, n) finished apart, then merged:
 * equal to the whole; an empty side changes nothing, bit for bit; the
 * output may alias the inputs. */
static void merge_case(const struct kvc_kernels *kk, uint64_t *rng,
		       kvf_dtype dt, uint32_t sp, int masked)
{
	uint32_t nq = 4, hd = 64, n = 1000;
	size_t no = (size_t)nq * hd;
	float *oa = kr_xmalloc(no * 4), *ob = kr_xmalloc(no * 4);
	float *o = kr_xmalloc(no * 4);
	float la[4], lb[4], l[4];
	struct kr_prob p;
	struct ref r;
	char name[128];

	kr_prob_make(&p, rng, dt, nq, hd, n, masked, 4, 0);
	ref_make(&r, &p, 0, n);
	fold_all(kk, &p, 0, sp, oa, la, NULL);
	fold_all(kk, &p, sp, n, ob, lb, NULL);
	snprintf(name, sizeof(name), "%s %s merge at %u%s", kk->name,
		 kr_dtype_name(dt), sp, masked ? " masked" : "");
	kvc_attn_merge(o, l, oa, la, ob, lb, nq, hd);
	check_result(&p, &r, o, l, n, name);
	if (sp == 0)
		cr_assert(memcmp(o, ob, no * 4) == 0 &&
				  memcmp(l, lb, sizeof(l)) == 0,
			  "%s: merging an empty side changed the result", name);
	if (sp == n)
		cr_assert(memcmp(o, oa, no * 4) == 0 &&
				  memcmp(l, la, sizeof(l)) == 0,
			  "%s: merging an empty side changed the result", name);
	/* in place: out = out_a, lse = lse_b */
	kvc_attn_merge(oa, lb, oa, la, ob, lb, nq, hd);
	cr_assert(memcmp(oa, o, no * 4) == 0 && memcmp(lb, l, sizeof(l)) == 0,
		  "%s: in-place merge differs", name);
	free(oa);
	free(ob);
	free(o);
	ref_free(&r);
	kr_prob_free(&p);
}

Test(attn, merge_halves)
{
	static const uint32_t splits[] = { 0, 1, 7, 500, 999, 1000 };
	uint64_t rng = rng_seed("attn.merge_halves");
	const struct kvc_kernels *kv[2];
	int nv = kr_variants(kv);

	for (int i = 0; i < nv; i++)
		for (size_t a = 0; a < NELEM(dtypes); a++)
			for (size_t s = 0; s < NELEM(splits); s++) {
				merge_case(kv[i], &rng, dtypes[a], splits[s],
					   0);
				merge_case(kv[i], &rng, dtypes[a], splits[s],
					   1);
			}
}

Test(attn, merge_lse_by_hand)
{
	/* head 0: equal halves; head 1: b dominates by e^50; head 2: both
	 * empty; head 3: a empty */
	float oa[4 * 2] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	float ob[4 * 2] = { 3, 4, -3, -4, 9, 9, -1, 1 };
	float la[4] = { 2.0f, -10.0f, -INFINITY, -INFINITY };
	float lb[4] = { 2.0f, 40.0f, -INFINITY, 7.5f };
	float o[8], l[4];

	kvc_attn_merge(o, l, oa, la, ob, lb, 4, 2);
	cr_assert(o[0] == 2.0f && o[1] == 3.0f, "equal halves: %g %g", o[0],
		  o[1]);
	cr_assert(fabsf(l[0] - (2.0f + logf(2.0f))) <= 1e-6f, "lse %g", l[0]);
	cr_assert(fabsf(o[2] + 3.0f) <= 1e-6f && fabsf(o[3] + 4.0f) <= 1e-6f,
		  "dominant b: %g %g", o[2], o[3]);
	cr_assert(l[1] == 40.0f, "lse %g", l[1]);
	cr_assert(o[4] == 0.0f && o[5] == 0.0f && l[2] == -INFINITY,
		  "both empty: %g %g %g", o[4], o[5], l[2]);
	cr_assert(o[6] == -1.0f && o[7] == 1.0f && l[3] == 7.5f,
		  "a empty: %g %g %g", o[6], o[7], l[3]);
}

/* empty_case - n tokens, every one masked (or none at all): out is +0,
 * lse -INFINITY, every score -INFINITY. */
static void empty_case(const struct kvc_kernels *kk, uint64_t *rng,
		       kvf_dtype dt, uint32_t n)
{
	uint32_t nq = 8, hd = 16;
	float out[8 * 16], lse[8], sc[8 * 40];
	struct kr_prob p;

	kr_prob_make(&p, rng, dt, nq, hd, n, 1, 1, 0);
	memset(p.mask, 0, n ? n : 1);
	memset(out, 0x55, sizeof(out));
	fold_all(kk, &p, 0, n, out, lse, sc);
	for (uint32_t x = 0; x < nq * hd; x++)
		cr_assert(out[x] == 0.0f && !signbit(out[x]),
			  "%s n %u: out[%u] = %g", kk->name, n, x, out[x]);
	for (uint32_t h = 0; h < nq; h++)
		cr_assert(lse[h] == -INFINITY, "%s: lse %g", kk->name, lse[h]);
	for (uint32_t x = 0; x < nq * n; x++)
		cr_assert(sc[x] == -INFINITY, "%s: score %g", kk->name, sc[x]);
	kr_prob_free(&p);
}

/* An empty sequence, or one whose every token is masked: out 0, lse -inf
 * (so that it merges as nothing, see merge_halves). */
Test(attn, empty_and_all_masked)
{
	const struct kvc_kernels *kv[2];
	int nv = kr_variants(kv);
	uint64_t rng = rng_seed("attn.empty_and_all_masked");

	for (int i = 0; i < nv; i++)
		for (size_t a = 0; a < NELEM(dtypes); a++)
			for (uint32_t n = 0; n <= 40; n += 20)
				empty_case(kv[i], &rng, dtypes[a], n);
}

/* A state is reusable after reset, and finish does not disturb it. */
Test(attn, reset_and_finish_twice)
{
	uint64_t rng = rng_seed("attn.reset_and_finish_twice");
	const struct kvc_kernels *k = kvc_kernels();
	float buf[KVC_ATTN_STATE_FLOATS(2, 32)], out[64], lse[2], out2[64];
	struct kvc_attn_state st;
	struct kr_prob p;
	struct ref r;

	kr_prob_make(&p, &rng, KVF_DTYPE_F16, 2, 32, 50, 0, 2, 0);
	ref_make(&r, &p, 0, 50);
	kvc_attn_state_init(&st, 2, 32, buf);
	k->attn_fold(&st, p.q, p.k, p.v, 50, p.dt, NULL, NULL, 0);
	kvc_attn_state_reset(&st);
	cr_assert(st.m[0] == -INFINITY && st.l[1] == 0.0f &&
		  st.acc[63] == 0.0f);
	k->attn_fold(&st, p.q, p.k, p.v, 50, p.dt, NULL, NULL, 0);
	kvc_attn_finish(&st, out, lse);
	kvc_attn_finish(&st, out2, NULL);
	check_result(&p, &r, out, lse, 50, "reset");
	cr_assert(memcmp(out, out2, sizeof(out)) == 0);
	ref_free(&r);
	kr_prob_free(&p);
}

/* views_case - each query head of a group folds with its own mask
 * through a one-head view of the shared state. */
static void views_case(const struct kvc_kernels *kk, uint64_t *rng,
		       kvf_dtype dt)
{
	uint32_t nq = 4, hd = 64, n = 300;
	uint8_t *masks = kr_xmalloc((size_t)nq * n);
	float *buf = kr_xmalloc(KVC_ATTN_STATE_FLOATS(nq, hd) * 4);
	float out[4 * 64], lse[4];
	struct kvc_attn_state st, one;
	struct kr_prob p, ph;
	struct ref r;
	char name[64];

	kr_prob_make(&p, rng, dt, nq, hd, n, 0, 4, 0);
	for (size_t x = 0; x < (size_t)nq * n; x++)
		masks[x] = rng_below(rng, 4) == 0;
	kvc_attn_state_init(&st, nq, hd, buf);
	for (uint32_t h = 0; h < nq; h++) {
		one = kvc_attn_state_head(&st, h);
		kk->attn_fold(&one, p.q + h * hd, p.k, p.v, n, p.dt,
			      masks + (size_t)h * n, NULL, 0);
	}
	kvc_attn_finish(&st, out, lse);
	for (uint32_t h = 0; h < nq; h++) {
		ph = p;
		ph.n_q = 1;
		ph.q = p.q + h * hd;
		ph.mask = masks + (size_t)h * n;
		ref_make(&r, &ph, 0, n);
		snprintf(name, sizeof(name), "%s %s head %u", kk->name,
			 kr_dtype_name(dt), h);
		check_result(&ph, &r, out + h * hd, lse + h, n, name);
		ref_free(&r);
	}
	free(masks);
	free(buf);
	kr_prob_free(&p);
}

/* One-head views: each query head of a group folds with its own mask
 * (SparF's per-head selection) into the shared state. */
Test(attn, per_head_views)
{
	uint64_t rng = rng_seed("attn.per_head_views");
	const struct kvc_kernels *kv[2];
	int nv = kr_variants(kv);

	for (int i = 0; i < nv; i++)
		for (size_t a = 0; a < NELEM(dtypes); a++)
			views_case(kv[i], &rng, dtypes[a]);
}

/*
 * The exp behind the softmax: probs with m = 0 and l = 1 returns exp(s)
 * itself.  On a dense grid of [-87.3, 0] both variants stay within 2e-7
 * relative (exp8's error, measured on every float there, is at most
 * 1.19e-7; libm's expf is tighter); -INFINITY gives exactly 0, and below
 * 2^-126 the result is 0 or a subnormal, never more.
 */
Test(attn, exp_accuracy)
{
	const struct kvc_kernels *kv[2];
	int nv = kr_variants(kv);
	uint32_t grid = 87300, n = grid + 5;
	float *s = kr_xmalloc(n * 4), *p = kr_xmalloc(n * 4);

	for (uint32_t i = 0; i < grid; i++)
		s[i] = -(float)i * 1e-3f - 1e-4f * (float)(i % 7);
	s[grid] = -INFINITY;
	s[grid + 1] = -87.4f;
	s[grid + 2] = -100.0f;
	s[grid + 3] = 0.0f;
	s[grid + 4] = -1e-30f;
	for (int i = 0; i < nv; i++) {
		double worst = 0;

		kv[i]->probs(s, p, n, 0.0f, 1.0f);
		for (uint32_t t = 0; t < grid; t++) {
			double ref = exp((double)s[t]), e;

			if (ref < 0x1p-126)
				continue;
			e = fabs(p[t] - ref) / ref;
			cr_assert(e <= 2e-7,
				  "%s: exp(%.9g) = %.9g, reference %.9g (rel "
				  "%.3g)",
				  kv[i]->name, s[t], p[t], ref, e);
			worst = e > worst ? e : worst;
		}
		cr_assert(p[grid] == 0.0f, "%s: exp(-inf) = %g", kv[i]->name,
			  p[grid]);
		cr_assert(p[grid + 1] < 0x1p-126f && p[grid + 2] < 0x1p-126f,
			  "%s: underflow %g %g", kv[i]->name, p[grid + 1],
			  p[grid + 2]);
		cr_assert(p[grid + 3] == 1.0f && p[grid + 4] == 1.0f,
			  "%s: exp(0) %g %g", kv[i]->name, p[grid + 3],
			  p[grid + 4]);
		fprintf(stderr,
			"attn.exp_accuracy: %s max relative error %.3g\n",
			kv[i]->name, worst);
	}
	free(s);
	free(p);
}

/* The dispatch: KVF_SIMD is honored (scalar forced), tables are stable. */
Test(attn, dispatch)
{
	const struct kvc_kernels *k = kvc_kernels();
	const char *env = getenv("KVF_SIMD");

	cr_assert(k == kvc_kernels(), "the table changed between calls");
	cr_assert(strcmp(kvc_kernels_scalar()->name, "scalar") == 0);
	if (env && strcmp(env, "scalar") == 0)
		cr_assert(k == kvc_kernels_scalar(), "KVF_SIMD=scalar ignored");
	else if (kvc_kernels_avx2())
		cr_assert(k == kvc_kernels_avx2(), "AVX2 CPU got %s", k->name);
	else
		cr_assert(k == kvc_kernels_scalar());
	fprintf(stderr, "attn.dispatch: using %s kernels\n", k->name);
}

/* KVF_SIMD=scalar set before the first kvc_kernels() call of the process
 * (each Criterion test is its own process) forces the scalar table. */
Test(attn, simd_env_forces_scalar)
{
	cr_assert(setenv("KVF_SIMD", "scalar", 1) == 0);
	cr_assert(kvc_kernels() == kvc_kernels_scalar(), "got %s",
		  kvc_kernels()->name);
}

/* The tolerance is tight enough to see a bug: dropping one token of 5000
 * (here the one with the most weight) moves the output by more than it. */
Test(attn, tolerance_sees_a_dropped_token)
{
	uint64_t rng = rng_seed("attn.tolerance_sees_a_dropped_token");
	uint32_t n = 5000, hd = 128, best = 0;
	double diff = 0, tol;
	struct kr_prob p;
	struct ref all, most;

	kr_prob_make(&p, &rng, KVF_DTYPE_F16, 1, hd, n, 0, 1, 0);
	ref_make(&all, &p, 0, n);
	p.mask = kr_xmalloc(n);
	memset(p.mask, 1, n);
	for (uint32_t t = 1; t < n; t++)
		if (kr_score(p.q, p.kd + t * hd, hd) >
		    kr_score(p.q, p.kd + best * hd, hd))
			best = t;
	p.mask[best] = 0;
	ref_make(&most, &p, 0, n);
	for (uint32_t d = 0; d < hd; d++)
		if (fabs(all.out[d] - most.out[d]) > diff)
			diff = fabs(all.out[d] - most.out[d]);
	tol = kr_attn_tol(n, hd, all.smax[0]);
	fprintf(stderr,
		"attn.tolerance: a dropped token moves out by %.3g, tol %.3g\n",
		diff, tol);
	cr_assert(diff > tol, "a dropped token (%.3g) hides under tol %.3g",
		  diff, tol);
	ref_free(&all);
	ref_free(&most);
	kr_prob_free(&p);
}
