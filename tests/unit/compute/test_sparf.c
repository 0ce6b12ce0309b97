/*
 * test_sparf.c - the SparF pieces (sparf_scores with SparQ's correction,
 * vmean_fold, kvc_sparf_combine) against double references, and the
 * whole SparF recipe of kernels.h: with r = head_dim and k = n it equals
 * dense attention; in general it equals a double SparQ reference run on
 * the same token selection; at 1/8 of dims and tokens on peaky attention
 * it stays close to dense (cosine >= 0.95).
 *
 * Tolerances: approximate scores as raw scores (8 u sqrt(r) sum_i |q k|)
 * times c, plus a few u for c itself; attention outputs kr_attn_tol (see
 * kernel_ref.h); means of N rows in [-1, 1]: 8 u (sqrt(N) + 8), the
 * random-walk rounding of the sums and the updates.
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

/* kt_rows - row pointers of p's K^T for dims[0..r). */
static void kt_rows(const struct kr_prob *p, const uint32_t *dims, uint32_t r,
		    const void **rows)
{
	size_t eb = kr_elt_bytes(p->dt);

	for (uint32_t i = 0; i < r; i++)
		rows[i] = (const char *)p->kt + (size_t)dims[i] * p->n * eb;
}

/* ref_approx - SparQ's approximate score of head h, token t, in double. */
static double ref_approx(const struct kr_prob *p, uint32_t h,
			 const uint32_t *dims, uint32_t r, uint32_t t,
			 double *mag)
{
	const float *q = p->q + (size_t)h * p->hd;
	double all = 0, sel = 0, s = 0, c;

	*mag = 0;
	for (uint32_t d = 0; d < p->hd; d++)
		all += fabs(q[d]);
	for (uint32_t i = 0; i < r; i++) {
		double x =
			(double)q[dims[i]] * p->kd[(size_t)t * p->hd + dims[i]];

		sel += fabs(q[dims[i]]);
		s += x;
		*mag += fabs(x);
	}
	c = r >= p->hd || sel == 0 ? 1 : sqrt(all / sel);
	*mag *= c;
	return s * c;
}

#define NELEM(x) (sizeof(x) / sizeof((x)[0]))

/* approx_case - approximate scores of every variant for several r, each
 * score against ref_approx. */
static void approx_case(uint64_t *rng, kvf_dtype dt, uint32_t nq, uint32_t n,
			int masked)
{
	static const uint32_t rs[] = { 1, 5, 16, 64 };
	const struct kvc_kernels *kv[2];
	int nv = kr_variants(kv);
	uint32_t hd = 64, stride = n + 3, dims[64], r;
	float *out = kr_xmalloc((size_t)nq * stride * 4), key[64];
	const void *rows[64];
	struct kr_prob p;

	kr_prob_make(&p, rng, dt, nq, hd, n, masked, 2, 0);
	for (size_t e = 0; e < NELEM(rs); e++) {
		r = kvc_topr_dims(p.q, nq, hd, rs[e], dims, key);
		kt_rows(&p, dims, r, rows);
		for (int i = 0; i < nv; i++) {
			kv[i]->sparf_scores(p.q, nq, hd, dims, r, rows, n, dt,
					    p.mask, out, stride);
			for (uint32_t x = 0; x < nq * n; x++) {
				uint32_t h = x / n, t = x % n;
				float s = out[h * stride + t];
				double mag, ref;

				if (p.mask && !p.mask[t]) {
					cr_assert(s == -INFINITY);
					continue;
				}
				ref = ref_approx(&p, h, dims, r, t, &mag);
				cr_assert(fabs(s - ref) <=
						  8 * KR_U * (sqrt(r) + 4) *
								  mag +
							  1e-30,
					  "%s %s n %u n_q %u r %u head %u token "
					  "%u: %.9g vs %.9g",
					  kv[i]->name, kr_dtype_name(dt), n, nq,
					  r, h, t, s, ref);
			}
		}
	}
	free(out);
	kr_prob_free(&p);
}

Test(sparf, approximate_scores)
{
	static const uint32_t lens[] = { 0,  1,  7,  8,  15,  16,
					 17, 31, 32, 33, 100, 1000 };
	static const uint32_t nqs[] = { 1, 2, 3, 4, 8 };
	uint64_t rng = rng_seed("sparf.approximate_scores");

	for (size_t a = 0; a < NELEM(dtypes); a++)
		for (size_t b = 0; b < NELEM(lens); b++)
			for (size_t c = 0; c < NELEM(nqs); c++) {
				approx_case(&rng, dtypes[a], nqs[c], lens[b],
					    0);
				approx_case(&rng, dtypes[a], nqs[c], lens[b],
					    1);
			}
}

/* With every dim, the correction is 1 and the scores are the raw ones;
 * with the selected part of q all zero, the correction is 1 too (no
 * 0 * inf). */
Test(sparf, correction_edges)
{
	uint64_t rng = rng_seed("sparf.correction_edges");
	const struct kvc_kernels *kv[2];
	int nv = kr_variants(kv);
	struct kr_prob p;
	uint32_t n = 77, hd = 32, dims[32];
	float a[2 * 77], b[2 * 77];
	const void *rows[32];

	kr_prob_make(&p, &rng, KVF_DTYPE_BF16, 2, hd, n, 0, 1, 0);
	for (uint32_t d = 0; d < hd; d++)
		dims[d] = (d * 7) % hd; /* every dim, shuffled */
	kt_rows(&p, dims, hd, rows);
	for (int i = 0; i < nv; i++) {
		kv[i]->sparf_scores(p.q, 2, hd, dims, hd, rows, n, p.dt, NULL,
				    a, n);
		kv[i]->scores(p.q, 2, hd, p.k, n, p.dt, NULL, b, n);
		for (uint32_t t = 0; t < 2 * n; t++)
			cr_assert(fabs(a[t] - b[t]) <= 1e-5, "%s: %g vs %g",
				  kv[i]->name, a[t], b[t]);
	}
	p.q[3] = p.q[5] = 0; /* head 0, dims 3 and 5 */
	dims[0] = 3;
	dims[1] = 5;
	kt_rows(&p, dims, 2, rows);
	for (int i = 0; i < nv; i++) {
		kv[i]->sparf_scores(p.q, 1, hd, dims, 2, rows, n, p.dt, NULL, a,
				    n);
		for (uint32_t t = 0; t < n; t++)
			cr_assert(a[t] == 0.0f, "%s: score %g", kv[i]->name,
				  a[t]);
	}
	kr_prob_free(&p);
}

/* A SparF result and what it needs to be checked. */
struct sparf_out {
	float *out;   /* [n_q][hd] */
	float *alpha; /* [n_q] */
	uint8_t *sel; /* [n_q][n]: tokens selected for each head */
};

/*
 * sparf_run - the SparF recipe of kernels.h for the n_q heads of p over
 * all n tokens with r dims and top_k tokens.  shared: SparQ's GQA form
 * (dims by summed |q|, tokens by summed s_hat, one mask, one fold of all
 * heads); else each head alone through a one-head view.
 */
static void sparf_run(const struct kvc_kernels *kk, const struct kr_prob *p,
		      uint32_t r, uint32_t top_k, int shared, const float *vbar,
		      struct sparf_out *o)
{
	uint32_t nq = p->n_q, hd = p->hd, n = p->n, nd, ns;
	float *s = kr_xmalloc((size_t)nq * n * 4 + 4);
	float *pr = kr_xmalloc((size_t)nq * n * 4 + 4);
	float *h2o = kr_xmalloc((size_t)n * 4 + 4), key[256];
	float *buf = kr_xmalloc(KVC_ATTN_STATE_FLOATS(nq, hd) * 4);
	float *m = kr_xmalloc(nq * 4), *l = kr_xmalloc(nq * 4);
	uint32_t *idx = kr_xmalloc((size_t)n * 4 + 4), dims[256];
	const void *rows[256];
	struct kvc_attn_state st;

	o->out = kr_xmalloc((size_t)nq * hd * 4);
	o->alpha = kr_xmalloc(nq * 4);
	o->sel = kr_xmalloc((size_t)nq * n + 1);
	kvc_attn_state_init(&st, nq, hd, buf);
	if (shared) {
		nd = kvc_topr_dims(p->q, nq, hd, r, dims, key);
		kt_rows(p, dims, nd, rows);
		kk->sparf_scores(p->q, nq, hd, dims, nd, rows, n, p->dt, NULL,
				 s, n);
		for (uint32_t h = 0; h < nq; h++) {
			kk->softmax_stats(s + h * n, n, m + h, l + h);
			kk->probs(s + h * n, pr + h * n, n, m[h], l[h]);
		}
		kk->h2o_accumulate(h2o, pr, n, nq, n);
		ns = kvc_topk(h2o, n, top_k, idx);
		for (uint32_t h = 0; h < nq; h++) {
			o->alpha[h] = kk->softmax_mass(s + h * n, idx, ns, m[h],
						       l[h]);
			for (uint32_t j = 0; j < ns; j++)
				o->sel[h * n + idx[j]] = 1;
		}
		kk->attn_fold(&st, p->q, p->k, p->v, n, p->dt, o->sel, NULL, 0);
	} else {
		for (uint32_t h = 0; h < nq; h++) {
			const float *qh = p->q + (size_t)h * hd;
			struct kvc_attn_state one = kvc_attn_state_head(&st, h);

			nd = kvc_topr_dims(qh, 1, hd, r, dims, key);
			kt_rows(p, dims, nd, rows);
			kk->sparf_scores(qh, 1, hd, dims, nd, rows, n, p->dt,
					 NULL, s, n);
			kk->softmax_stats(s, n, m + h, l + h);
			ns = kvc_topk(s, n, top_k, idx);
			o->alpha[h] = kk->softmax_mass(s, idx, ns, m[h], l[h]);
			for (uint32_t j = 0; j < ns; j++)
				o->sel[h * n + idx[j]] = 1;
			kk->attn_fold(&one, qh, p->k, p->v, n, p->dt,
				      o->sel + h * n, NULL, 0);
		}
	}
	kvc_attn_finish(&st, o->out, NULL);
	kvc_sparf_combine(o->out, o->alpha, vbar, nq, hd);
	free(s);
	free(pr);
	free(h2o);
	free(buf);
	free(m);
	free(l);
	free(idx);
}

static void sparf_out_free(struct sparf_out *o)
{
	free(o->out);
	free(o->alpha);
	free(o->sel);
}

/* vbar_of - the mean of p's V rows, by vmean_fold in two chunks. */
static void vbar_of(const struct kvc_kernels *kk, const struct kr_prob *p,
		    float *vbar)
{
	uint32_t half = p->n / 2;

	kk->vmean_fold(vbar, 0, p->v, half, p->hd, p->dt);
	kk->vmean_fold(vbar, half,
		       (const char *)p->v +
			       (size_t)half * p->hd * kr_elt_bytes(p->dt),
		       p->n - half, p->hd, p->dt);
}

/* full_case - SparF with every dim and every token against dense. */
static void full_case(const struct kvc_kernels *kk, uint64_t *rng, kvf_dtype dt,
		      uint32_t nq, uint32_t n, int shared)
{
	uint32_t hd = 64;
	double *ref = kr_xmalloc((size_t)nq * hd * 8), lse[8], smax[8], tol;
	float vbar[64];
	struct kr_prob p;
	struct sparf_out o;

	kr_prob_make(&p, rng, dt, nq, hd, n, 0, 4, 0);
	kr_attention(p.q, nq, hd, p.kd, p.vd, n, NULL, ref, lse, smax);
	vbar_of(kk, &p, vbar);
	sparf_run(kk, &p, hd, n, shared, vbar, &o);
	for (uint32_t h = 0; h < nq; h++)
		cr_assert(fabs(o.alpha[h] - 1) <= 8 * KR_U * (sqrt(n) + 8),
			  "%s: alpha %.9g", kk->name, o.alpha[h]);
	for (uint32_t x = 0; x < nq * hd; x++) {
		tol = kr_attn_tol(n, hd, smax[x / hd]);
		cr_assert(fabs(o.out[x] - ref[x]) <= tol,
			  "%s %s n %u n_q %u%s at %u: %.9g vs dense %.9g",
			  kk->name, kr_dtype_name(dt), n, nq,
			  shared ? " shared" : "", x, o.out[x], ref[x]);
	}
	free(ref);
	sparf_out_free(&o);
	kr_prob_free(&p);
}

/* r = head_dim and k = n: SparF is dense attention (alpha = 1). */
Test(sparf, full_selection_equals_dense)
{
	static const uint32_t lens[] = { 1, 7, 8, 17, 100, 2000 };
	uint64_t rng = rng_seed("sparf.full_selection_equals_dense");
	const struct kvc_kernels *kv[2];
	int nv = kr_variants(kv);

	for (int i = 0; i < nv; i++)
		for (size_t a = 0; a < NELEM(dtypes); a++)
			for (size_t b = 0; b < NELEM(lens); b++)
				for (uint32_t nq = 1; nq <= 8; nq *= 2) {
					full_case(kv[i], &rng, dtypes[a], nq,
						  lens[b], 0);
					full_case(kv[i], &rng, dtypes[a], nq,
						  lens[b], 1);
				}
}

/*
 * ref_alpha - SparQ's alpha of head h in double: the softmax mass, under
 * the double approximate scores (dims from kvc_topr_dims as sparf_run
 * chose them), of the tokens sparf_run selected.
 */
static double ref_alpha(const struct kr_prob *p, uint32_t h, uint32_t r,
			int shared, const uint8_t *sel)
{
	uint32_t hd = p->hd, n = p->n, dims[256], nd;
	double m = -INFINITY, all = 0, in = 0, mag;
	double *s = kr_xmalloc((size_t)n * 8 + 8);
	struct kr_prob ph = *p;
	float key[256];

	ph.q = p->q + (size_t)h * hd;
	ph.n_q = 1;
	nd = kvc_topr_dims(shared ? p->q : ph.q, shared ? p->n_q : 1, hd, r,
			   dims, key);
	for (uint32_t t = 0; t < n; t++) {
		s[t] = ref_approx(&ph, 0, dims, nd, t, &mag);
		m = s[t] > m ? s[t] : m;
	}
	for (uint32_t t = 0; t < n; t++) {
		all += exp(s[t] - m);
		in += sel[t] ? exp(s[t] - m) : 0;
	}
	free(s);
	return in / all;
}

/* sparq_case - one SparF run against SparQ in double on its selection. */
static void sparq_case(const struct kvc_kernels *kk, uint64_t *rng,
		       kvf_dtype dt, uint32_t nq, int shared)
{
	uint32_t n = 1500, hd = 128, r = 16, top_k = 190, cnt;
	double y[128], vref[128], lse, smax, al, want, tol;
	float vbar[128];
	struct kr_prob p;
	struct sparf_out o;

	kr_prob_make(&p, rng, dt, nq, hd, n, 0, 6, 0);
	vbar_of(kk, &p, vbar);
	for (uint32_t d = 0; d < hd; d++) {
		vref[d] = 0;
		for (uint32_t t = 0; t < n; t++)
			vref[d] += p.vd[(size_t)t * hd + d] / n;
	}
	sparf_run(kk, &p, r, top_k, shared, vbar, &o);
	for (uint32_t h = 0; h < nq; h++) {
		const uint8_t *sel = o.sel + (size_t)h * n;

		cnt = 0;
		for (uint32_t t = 0; t < n; t++)
			cnt += sel[t];
		cr_assert(cnt == top_k, "selected %u tokens", cnt);
		al = ref_alpha(&p, h, r, shared, sel);
		cr_assert(fabs(o.alpha[h] - al) <= 8 * KR_U * (sqrt(n) + 8),
			  "%s head %u: alpha %.9g vs %.9g", kk->name, h,
			  o.alpha[h], al);
		kr_attention(p.q + (size_t)h * hd, 1, hd, p.kd, p.vd, n, sel, y,
			     &lse, &smax);
		tol = kr_attn_tol(top_k, hd, smax) + 16 * KR_U * (sqrt(n) + 8);
		for (uint32_t d = 0; d < hd; d++) {
			want = al * y[d] + (1 - al) * vref[d];
			cr_assert(fabs(o.out[h * hd + d] - want) <= tol,
				  "%s %s n_q %u%s head %u dim %u: %.9g vs %.9g",
				  kk->name, kr_dtype_name(dt), nq,
				  shared ? " shared" : "", h, d,
				  o.out[h * hd + d], want);
		}
	}
	sparf_out_free(&o);
	kr_prob_free(&p);
}

/*
 * r < head_dim, k < n: the result equals SparQ computed in double on the
 * same selection: alpha from the double approximate scores, y the
 * attention over the selected tokens, vbar the double mean of V.
 */
Test(sparf, matches_double_sparq)
{
	uint64_t rng = rng_seed("sparf.matches_double_sparq");
	const struct kvc_kernels *kv[2];
	int nv = kr_variants(kv);

	for (int i = 0; i < nv; i++)
		for (size_t a = 0; a < NELEM(dtypes); a++)
			for (uint32_t nq = 1; nq <= 8; nq *= 2) {
				sparq_case(kv[i], &rng, dtypes[a], nq, 0);
				sparq_case(kv[i], &rng, dtypes[a], nq, 1);
			}
}

/* peaky_make - make p's attention peaky: 8 large dims of q (the same for
 * every head) and 16 tokens whose K is large on them, with signs to
 * match. */
static void peaky_make(struct kr_prob *p, uint64_t *rng)
{
	uint32_t hd = p->hd, n = p->n, big[8];

	for (uint32_t j = 0; j < 8; j++)
		big[j] = (uint32_t)rng_below(rng, hd);
	for (uint32_t h = 0; h < p->n_q; h++)
		for (uint32_t j = 0; j < 8; j++)
			p->q[h * hd + big[j]] =
				(float)((j & 1 ? -1 : 1) *
					kr_uniform(rng, 0.5, 1.0));
	for (uint32_t x = 0; x < 16; x++) {
		uint32_t t = (uint32_t)rng_below(rng, n);

		for (uint32_t j = 0; j < 8; j++) {
			size_t e = (size_t)t * hd + big[j];
			double v =
				(j & 1 ? -1 : 1) * kr_uniform(rng, 0.75, 1.25);

			p->kd[e] = kr_store(p->k, e, p->dt, v);
			kr_store(p->kt, (size_t)big[j] * n + t, p->dt, v);
		}
	}
}

/* peaky_case - SparF at 1/8 on peaky data: lowest cosine to dense. */
static double peaky_case(const struct kvc_kernels *kk, uint64_t *rng,
			 kvf_dtype dt, int shared, double *alpha_min)
{
	uint32_t nq = 4, hd = 128, n = 4000;
	double *ref = kr_xmalloc((size_t)nq * hd * 8), lse[4], smax[4];
	double worst = 1, dot, na, nb, cos;
	float vbar[128];
	struct kr_prob p;
	struct sparf_out o;

	kr_prob_make(&p, rng, dt, nq, hd, n, 0, 1, 0);
	peaky_make(&p, rng);
	kr_attention(p.q, nq, hd, p.kd, p.vd, n, NULL, ref, lse, smax);
	vbar_of(kk, &p, vbar);
	sparf_run(kk, &p, hd / 8, n / 8, shared, vbar, &o);
	for (uint32_t h = 0; h < nq; h++) {
		const float *a = o.out + h * hd;
		const double *b = ref + h * hd;

		dot = na = nb = 0;
		for (uint32_t d = 0; d < hd; d++) {
			dot += a[d] * b[d];
			na += (double)a[d] * a[d];
			nb += b[d] * b[d];
		}
		cos = dot / sqrt(na * nb);
		cr_assert(cos >= 0.95,
			  "%s %s%s head %u: cosine %.4f to dense (alpha %.3f)",
			  kk->name, kr_dtype_name(dt), shared ? " shared" : "",
			  h, cos, o.alpha[h]);
		worst = cos < worst ? cos : worst;
		if (o.alpha[h] < *alpha_min)
			*alpha_min = o.alpha[h];
	}
	free(ref);
	sparf_out_free(&o);
	kr_prob_free(&p);
	return worst;
}

/*
 * Peaky attention, as SparQ relies on: q heavy-tailed (8 of 128 dims
 * large) and 16 of 4000 tokens aligned with those dims, so that the top
 * 500 tokens hold about 80% of the attention (alpha; the rest is spread
 * thin).  At r = 16 (1/8 of the dims) and k = 500 (1/8 of the tokens) the
 * SparF output stays within cosine 0.95 of dense attention (seen: 0.98 to
 * 0.995), per head and in both the per-head and the shared (GQA) form.
 */
Test(sparf, peaky_one_eighth_close_to_dense)
{
	uint64_t rng = rng_seed("sparf.peaky_one_eighth_close_to_dense");
	const struct kvc_kernels *kv[2];
	int nv = kr_variants(kv);
	double worst = 1, alpha_min = 1, c;

	for (int i = 0; i < nv; i++)
		for (size_t a = 0; a < NELEM(dtypes); a++)
			for (int sh = 0; sh < 2; sh++) {
				c = peaky_case(kv[i], &rng, dtypes[a], sh,
					       &alpha_min);
				worst = c < worst ? c : worst;
			}
	fprintf(stderr,
		"sparf.peaky: lowest cosine to dense %.4f, lowest alpha %.3f\n",
		worst, alpha_min);
}

/* vmean_case - fold chunks of 0, 1, 7, ... rows into a running mean that
 * starts as NaN (count 0: ignored); compare with the double mean. */
static void vmean_case(const struct kvc_kernels *kk, uint64_t *rng,
		       kvf_dtype dt, uint32_t hd)
{
	static const uint32_t chunks[] = { 0, 1, 7, 8, 9, 33, 500 };
	uint32_t n = 0;
	uint64_t count = 0;
	size_t eb = kr_elt_bytes(dt);
	float mean[132];
	double ref;

	for (size_t c = 0; c < NELEM(chunks); c++)
		n += chunks[c];
	void *v = kr_xmalloc((size_t)n * hd * eb);
	double *vd = kr_xmalloc((size_t)n * hd * 8);

	kr_fill(rng, dt, v, vd, (size_t)n * hd, -1, 1);
	for (uint32_t d = 0; d < hd; d++)
		mean[d] = NAN;
	for (size_t c = 0; c < NELEM(chunks); c++) {
		kk->vmean_fold(mean, count, (const char *)v + count * hd * eb,
			       chunks[c], hd, dt);
		count += chunks[c];
		if (count == 0) /* still no token: the mean untouched */
			cr_assert(isnan(mean[0]));
	}
	for (uint32_t d = 0; d < hd; d++) {
		ref = 0;
		for (uint32_t t = 0; t < n; t++)
			ref += vd[(size_t)t * hd + d];
		ref /= n;
		cr_assert(fabs(mean[d] - ref) <= 8 * KR_U * (sqrt(n) + 8),
			  "%s %s hd %u dim %u: mean %.9g vs %.9g", kk->name,
			  kr_dtype_name(dt), hd, d, mean[d], ref);
	}
	free(v);
	free(vd);
}

/* head_dim 4 (all scalar tail), 68 (8 vectors + a tail of 4), 132. */
Test(sparf, vmean_fold_chunks)
{
	uint64_t rng = rng_seed("sparf.vmean_fold_chunks");
	const struct kvc_kernels *kv[2];
	int nv = kr_variants(kv);

	for (int i = 0; i < nv; i++)
		for (size_t a = 0; a < NELEM(dtypes); a++)
			for (uint32_t hd = 4; hd <= 132; hd += 64)
				vmean_case(kv[i], &rng, dtypes[a], hd);
}

Test(sparf, combine)
{
	float out[2 * 3] = { 1, 2, 3, 4, 5, 6 };
	float alpha[2] = { 1.0f, 0.0f };
	float vbar[3] = { -7, 8, 0.5f };

	kvc_sparf_combine(out, alpha, vbar, 2, 3);
	cr_assert(out[0] == 1 && out[1] == 2 && out[2] == 3, "alpha 1");
	cr_assert(out[3] == -7 && out[4] == 8 && out[5] == 0.5f, "alpha 0");
	alpha[0] = 0.25f;
	kvc_sparf_combine(out, alpha, vbar, 1, 3);
	cr_assert(out[0] == 0.25f * 1 + 0.75f * -7 &&
			  out[1] == 0.25f * 2 + 0.75f * 8,
		  "alpha 0.25: %g %g", out[0], out[1]);
}
