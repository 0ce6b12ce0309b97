/*
 * test_codec_attn.c - attention over encoded groups (codec.h's fold and
 * scores) against a double-precision reference over the decoded values
 * (codec_ref.c's decoder, from the format's definition), for the scalar
 * and AVX2 kernels alike, which cross-checks them.
 *
 * Shapes: every codec; GQA groups of 1, 2, 3, 4, 6, 8 and 12 query heads
 * (3, 6 and 12 exercise the AVX2 kernel's 2 + 1, 4 + 2 and 8 + 4 head
 * groups); head_dim 8, 12 and 13 (AVX2 hands those two to scalar), 64 and
 * 128; groups of 16 and 64 tokens, 3 groups per problem with scores
 * rising from group to group (the running max moves); with and without a
 * token mask; token sub-ranges of a group; encoded and dense groups
 * folded into one state.  K has per-channel offsets and a few channels 20
 * times larger, so INT4's zero points and per-channel scales matter.
 * Every case runs in both layout versions (KVC_LAYOUT_KBYTE: K's INT8 and
 * INT4 scales one byte each), the reference reading the scales from the
 * format's definition (codec_ref.c).
 *
 * Tolerances are kernel_ref.h's kr_attn_tol, with the score magnitude
 * and max |v| taken over |zero| + |code * scale| per element (the kernels
 * add the two parts apart, so their rounding scales with the sum).
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec_ref.h"
#include "compute/codec.h"
#include "compute/half.h"
#include "compute/kernels.h"
#include "kernel_ref.h"
#include "testutil.h"

#define NELEM(x) (sizeof(x) / sizeof((x)[0]))

static const kvf_codec codecs[] = { KVF_CODEC_FP8, KVF_CODEC_INT8,
				    KVF_CODEC_INT4 };
static const uint32_t versions[] = { KVC_LAYOUT_F16, KVC_LAYOUT_KBYTE };

/* One problem: n_groups encoded K and V groups and their exact values. */
struct cprob {
	kvf_codec codec;
	uint32_t n_q, hd, g, n_groups, n; /* n = g * n_groups tokens */
	struct kvc_codec_layout kl, vl;
	float *q;           /* [n_q][hd], pre-scaled */
	uint8_t *kg, *vg;   /* n_groups groups of kl/vl.group_bytes */
	uint16_t *kf, *vf;  /* [n][hd] the f16 source values */
	double *kd, *vd;    /* [n][hd] decoded values */
	double *kmag, *vmag; /* [n][hd] |zero| + |code * scale| */
	uint8_t *mask;      /* NULL or [n] */
};

static void cprob_make(struct cprob *p, uint64_t *rng, kvf_codec codec,
		       uint32_t n_q, uint32_t hd, uint32_t g, uint32_t ver,
		       int masked)
{
	const struct kvc_codec_kernels *sc = kvc_codec_kernels_scalar();

	memset(p, 0, sizeof(*p));
	p->codec = codec;
	p->n_q = n_q;
	p->hd = hd;
	p->g = g;
	p->n_groups = 3;
	p->n = g * p->n_groups;
	cr_assert(eq(int,
		     kvc_codec_layout(codec, KVF_KIND_K, g, hd, ver, &p->kl),
		     KVF_OK));
	cr_assert(eq(int,
		     kvc_codec_layout(codec, KVF_KIND_V, g, hd, ver, &p->vl),
		     KVF_OK));
	p->q = kr_xmalloc((size_t)n_q * hd * sizeof(float));
	p->kg = kr_xmalloc((size_t)p->n_groups * p->kl.group_bytes);
	p->vg = kr_xmalloc((size_t)p->n_groups * p->vl.group_bytes);
	p->kf = kr_xmalloc((size_t)p->n * hd * 2);
	p->vf = kr_xmalloc((size_t)p->n * hd * 2);
	p->kd = kr_xmalloc((size_t)p->n * hd * sizeof(double));
	p->vd = kr_xmalloc((size_t)p->n * hd * sizeof(double));
	p->kmag = kr_xmalloc((size_t)p->n * hd * sizeof(double));
	p->vmag = kr_xmalloc((size_t)p->n * hd * sizeof(double));
	kr_fill_f32(rng, p->q, (size_t)n_q * hd, -2.0 / sqrt(hd),
		    2.0 / sqrt(hd));
	for (uint32_t t = 0; t < p->n; t++)
		for (uint32_t d = 0; d < hd; d++) {
			size_t i = (size_t)t * hd + d;
			double k = kr_uniform(rng, -1, 1) + 0.25 * (d % 4);
			double v = kr_uniform(rng, -1, 1);

			if (d % 11 == 5)
				k *= 20;
			/* scores rise from group to group along q_0 */
			k += (p->q[d] > 0 ? 1 : -1) * 0.5 * (t / g);
			kr_store(p->kf, i, KVF_DTYPE_F16, k);
			kr_store(p->vf, i, KVF_DTYPE_F16, v);
		}
	if (masked) {
		p->mask = kr_xmalloc(p->n);
		for (uint32_t t = 0; t < p->n; t++)
			p->mask[t] = rng_below(rng, 10) >= 3;
	}
	for (uint32_t gi = 0; gi < p->n_groups; gi++) {
		uint8_t *kg = p->kg + (size_t)gi * p->kl.group_bytes;
		uint8_t *vg = p->vg + (size_t)gi * p->vl.group_bytes;
		size_t base = (size_t)gi * g * hd;

		cr_assert(eq(int, sc->encode(&p->kl, p->kf + base, KVF_DTYPE_F16,
					     kg),
			     KVF_OK));
		cr_assert(eq(int, sc->encode(&p->vl, p->vf + base, KVF_DTYPE_F16,
					     vg),
			     KVF_OK));
		for (uint32_t t = 0; t < g; t++)
			for (uint32_t d = 0; d < hd; d++) {
				size_t i = base + (size_t)t * hd + d;

				p->kd[i] = cr_decode(&p->kl, kg, t, d,
						     &p->kmag[i]);
				p->vd[i] = cr_decode(&p->vl, vg, t, d,
						     &p->vmag[i]);
			}
	}
}

static void cprob_free(struct cprob *p)
{
	free(p->q);
	free(p->kg);
	free(p->vg);
	free(p->kf);
	free(p->vf);
	free(p->kd);
	free(p->vd);
	free(p->kmag);
	free(p->vmag);
	free(p->mask);
}

/* smag - per head, max over counted tokens [t0, t1) of sum_d |q_d| *
 * kmag_td: the score magnitude for the tolerance. */
static double smag(const struct cprob *p, uint32_t h, uint32_t t0,
		   uint32_t t1)
{
	double best = 0;

	for (uint32_t t = t0; t < t1; t++) {
		double s = 0;

		if (p->mask && !p->mask[t])
			continue;
		for (uint32_t d = 0; d < p->hd; d++)
			s += fabs(p->q[(size_t)h * p->hd + d]) *
			     p->kmag[(size_t)t * p->hd + d];
		best = s > best ? s : best;
	}
	return best;
}

/* check_out - out/lse of heads over tokens [t0, t1) of p against the
 * double reference; what names the case. */
static void check_out(const struct cprob *p, uint32_t t0, uint32_t t1,
		      const float *out, const float *lse, const char *what)
{
	size_t hd = p->hd;
	double *ro = kr_xmalloc((size_t)p->n_q * hd * sizeof(double));
	double *rl = kr_xmalloc(p->n_q * sizeof(double));
	double *rs = kr_xmalloc(p->n_q * sizeof(double));
	double vmax = kr_max_abs(p->vmag + t0 * hd, (t1 - t0) * hd);

	vmax = vmax > 0 ? vmax : 1;
	kr_attention(p->q, p->n_q, p->hd, p->kd + t0 * hd, p->vd + t0 * hd,
		     t1 - t0, p->mask ? p->mask + t0 : NULL, ro, rl, rs);
	for (uint32_t h = 0; h < p->n_q; h++) {
		double tol = kr_attn_tol(t1 - t0, p->hd, smag(p, h, t0, t1));

		for (uint32_t d = 0; d < hd; d++) {
			size_t i = (size_t)h * hd + d;

			cr_assert(fabs(out[i] - ro[i]) <= tol * vmax,
				  "%s: head %u dim %u: out %.9g, reference "
				  "%.9g (tol %.3g)",
				  what, h, d, out[i], ro[i], tol * vmax);
		}
		if (rl[h] == -INFINITY)
			cr_assert(lse[h] == -INFINITY, "%s: head %u lse %g",
				  what, h, lse[h]);
		else
			cr_assert(fabs(lse[h] - rl[h]) <=
					  tol + 8 * KR_U * fabs(rl[h]),
				  "%s: head %u: lse %.9g, reference %.9g",
				  what, h, lse[h], rl[h]);
	}
	free(ro);
	free(rl);
	free(rs);
}

/* check_scores - raw scores sc (n_q rows of stride) of tokens [t0, t1)
 * against q . k in double; -INFINITY where masked. */
static void check_scores(const struct cprob *p, uint32_t t0, uint32_t t1,
			 const float *sc, size_t stride, const char *what)
{
	for (uint32_t h = 0; h < p->n_q; h++) {
		double tol = 8 * KR_U * sqrt(p->hd) * smag(p, h, t0, t1) + 1e-30;

		for (uint32_t t = t0; t < t1; t++) {
			float a = sc[h * stride + (t - t0)];
			double ref;

			if (p->mask && !p->mask[t]) {
				cr_assert(a == -INFINITY,
					  "%s: masked token %u score %g", what,
					  t, a);
				continue;
			}
			ref = kr_score(p->q + (size_t)h * p->hd,
				       p->kd + (size_t)t * p->hd, p->hd);
			cr_assert(fabs(a - ref) <= tol,
				  "%s: head %u token %u: score %.9g, reference "
				  "%.9g (tol %.3g)",
				  what, h, t, a, ref, tol);
		}
	}
}

/* fold_groups - every group of p into a fresh state, one call a group,
 * the fold's scores into sc (rows of p->n); finish into out/lse. */
static void fold_groups(const struct kvc_codec_kernels *kk,
			const struct cprob *p, float *out, float *lse,
			float *sc)
{
	float *buf = kr_xmalloc(KVC_ATTN_STATE_FLOATS(p->n_q, p->hd) *
				sizeof(float));
	struct kvc_attn_state st;

	kvc_attn_state_init(&st, p->n_q, p->hd, buf);
	for (uint32_t gi = 0; gi < p->n_groups; gi++)
		kk->fold(&st, p->q, &p->kl, p->kg + (size_t)gi * p->kl.group_bytes,
			 &p->vl, p->vg + (size_t)gi * p->vl.group_bytes, 0, p->g,
			 p->mask ? p->mask + gi * p->g : NULL,
			 sc + gi * p->g, p->n);
	kvc_attn_finish(&st, out, lse);
	free(buf);
}

/* fold_case - one shape in both layout versions, every variant: the fold
 * and the scores against the reference. */
static void fold_case(uint64_t *rng, kvf_codec c, uint32_t n_q, uint32_t hd,
		      uint32_t g, int masked)
{
	const struct kvc_codec_kernels *v[2];
	int nv = cr_codec_variants(v);
	char what[128];

	for (size_t vv = 0; vv < NELEM(versions); vv++) {
		uint32_t ver = versions[vv];
		struct cprob p;
		float *out, *lse, *sc, *sc2;

		cprob_make(&p, rng, c, n_q, hd, g, ver, masked);
		out = kr_xmalloc((size_t)n_q * hd * sizeof(float));
		lse = kr_xmalloc(n_q * sizeof(float));
		sc = kr_xmalloc((size_t)n_q * p.n * sizeof(float));
		sc2 = kr_xmalloc((size_t)n_q * p.n * sizeof(float));
		for (int vi = 0; vi < nv; vi++) {
			snprintf(what, sizeof(what),
				 "%s v%u %s n_q %u hd %u g %u%s", v[vi]->name,
				 ver, kvf_codec_name(c), n_q, hd, g,
				 masked ? " masked" : "");
			fold_groups(v[vi], &p, out, lse, sc);
			check_out(&p, 0, p.n, out, lse, what);
			check_scores(&p, 0, p.n, sc, p.n, what);
			for (uint32_t gi = 0; gi < p.n_groups; gi++)
				v[vi]->scores(&p.kl, p.q, n_q,
					      p.kg + (size_t)gi *
							      p.kl.group_bytes,
					      0, g,
					      p.mask ? p.mask + gi * g : NULL,
					      sc2 + gi * g, p.n);
			check_scores(&p, 0, p.n, sc2, p.n, what);
		}
		free(out);
		free(lse);
		free(sc);
		free(sc2);
		cprob_free(&p);
	}
}

Test(codec_attn, fold_and_scores_every_shape)
{
	uint64_t rng = rng_seed("codec_attn.fold_and_scores_every_shape");
	static const uint32_t nqs[] = { 1, 2, 3, 4, 6, 8, 12 };
	static const uint32_t hds[] = { 8, 12, 13, 64, 128 };
	static const uint32_t gs[] = { 16, 64 };

	for (size_t c = 0; c < NELEM(codecs); c++)
		for (size_t a = 0; a < NELEM(nqs); a++)
			for (size_t b = 0; b < NELEM(hds); b++)
				for (size_t gi = 0; gi < NELEM(gs); gi++)
					for (int m = 0; m < 2; m++)
						fold_case(&rng, codecs[c], nqs[a],
							  hds[b], gs[gi], m);
}

/* sub_range_case - tokens [t0, t0 + n) of an encoded group (kk, c, layout
 * version ver), then the next group's 16 tokens as dense f16 rows, into
 * one state, against the reference over exactly those tokens. */
static void sub_range_case(uint64_t *rng, const struct kvc_codec_kernels *kk,
			   kvf_codec c, uint32_t ver, uint32_t t0, uint32_t n)
{
	struct cprob p;
	struct kvc_attn_state st;
	float out[4 * 64], lse[4];
	float *buf = kr_xmalloc(KVC_ATTN_STATE_FLOATS(4, 64) * sizeof(float));
	double *kd, *vd;
	char what[96];

	cprob_make(&p, rng, c, 4, 64, 16, ver, 0);
	kvc_attn_state_init(&st, 4, 64, buf);
	kk->fold(&st, p.q, &p.kl, p.kg, &p.vl, p.vg, t0, n, NULL, NULL, 0);
	/* group 1 as dense f16 rows (its source) */
	kvc_kernels()->attn_fold(&st, p.q, p.kf + 16 * 64, p.vf + 16 * 64, 16,
				 KVF_DTYPE_F16, NULL, NULL, 0);
	kvc_attn_finish(&st, out, lse);
	/* the reference's rows: [t0, t0 + n) decoded, then group 1's source
	 * values */
	kd = p.kd;
	vd = p.vd;
	for (uint32_t i = 0; i < 16 * 64; i++) {
		kd[(t0 + n) * 64 + i] = kvf_f16_to_f32(p.kf[16 * 64 + i]);
		vd[(t0 + n) * 64 + i] = kvf_f16_to_f32(p.vf[16 * 64 + i]);
		p.kmag[(t0 + n) * 64 + i] = fabs(kd[(t0 + n) * 64 + i]);
		p.vmag[(t0 + n) * 64 + i] = fabs(vd[(t0 + n) * 64 + i]);
	}
	snprintf(what, sizeof(what), "%s v%u %s tokens [%u, %u) + 16 dense",
		 kk->name, ver, kvf_codec_name(c), t0, t0 + n);
	check_out(&p, t0, t0 + n + 16, out, lse, what);
	free(buf);
	cprob_free(&p);
}

/*
 * A token sub-range of one group (t0 > 0, a short n, a block tail), then
 * the next group's tokens as dense f16 rows, folded into one state: the
 * result is the attention over exactly those tokens (what the engine does
 * with a window start inside a group and an exact tail group).
 */
Test(codec_attn, sub_ranges_and_dense_mix)
{
	uint64_t rng = rng_seed("codec_attn.sub_ranges_and_dense_mix");
	const struct kvc_codec_kernels *v[2];
	int nv = cr_codec_variants(v);
	static const uint32_t ranges[][2] = { { 0, 1 }, { 3, 9 },  { 5, 11 },
					      { 15, 1 }, { 7, 8 } };

	for (size_t c = 0; c < NELEM(codecs); c++)
		for (size_t r = 0; r < NELEM(ranges); r++)
			for (int vi = 0; vi < nv; vi++)
				for (size_t ver = 0; ver < NELEM(versions);
				     ver++)
					sub_range_case(&rng, v[vi], codecs[c],
						       versions[ver],
						       ranges[r][0],
						       ranges[r][1]);
}

/* Everything masked: the state stays empty (lse -inf, out 0), and the
 * scores are all -inf. */
Test(codec_attn, all_masked)
{
	uint64_t rng = rng_seed("codec_attn.all_masked");
	const struct kvc_codec_kernels *v[2];
	int nv = cr_codec_variants(v);
	uint8_t mask[16] = { 0 };

	for (size_t c = 0; c < NELEM(codecs); c++)
		for (int vi = 0; vi < nv; vi++)
			for (size_t ver = 0; ver < NELEM(versions); ver++) {
				struct cprob p;
				struct kvc_attn_state st;
				float buf[KVC_ATTN_STATE_FLOATS(2, 64)],
					out[2 * 64], lse[2], sc[2 * 16];

				cprob_make(&p, &rng, codecs[c], 2, 64, 16,
					   versions[ver], 0);
				kvc_attn_state_init(&st, 2, 64, buf);
				v[vi]->fold(&st, p.q, &p.kl, p.kg, &p.vl, p.vg,
					    0, 16, mask, sc, 16);
				kvc_attn_finish(&st, out, lse);
				for (int h = 0; h < 2; h++)
					cr_assert(lse[h] == -INFINITY);
				for (int i = 0; i < 2 * 64; i++)
					cr_assert(out[i] == 0.0f);
				for (int i = 0; i < 2 * 16; i++)
					cr_assert(sc[i] == -INFINITY);
				cprob_free(&p);
			}
}
