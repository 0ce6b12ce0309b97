/*
 * bench_codec_eval.c - the accuracy of the codecs on synthetic attention
 * heads (bench_codec_int.h): data, reference, measurement.
 *
 * Everything is drawn from one seeded generator, so a configuration gives
 * the same figures on every run and machine (up to the last bits of the
 * kernels' rounding, which differ between scalar and AVX2).
 */
#include <math.h>
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "bench/bench_codec_int.h"
#include "bench/bench_common.h"
#include "compute/codec.h"
#include "compute/half.h"
#include "compute/kernels.h"

const char *codec_workload_name(enum codec_workload w)
{
	static const char *const names[] = { "flat", "peaky", "mixed",
					     "outliers", "outliers_kv" };

	return (unsigned)w < CODEC_WL_COUNT ? names[w] : "unknown";
}

/* uniform - in (0, 1), never 0 (for the logarithm). */
static double uniform(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ull;
	return ((double)(bench_mix64(*s) >> 11) + 0.5) * 0x1p-53;
}

/* gauss - a standard normal number (Box-Muller). */
static double gauss(uint64_t *s)
{
	double u = uniform(s), v = uniform(s);

	return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* One KV head's data. */
struct head {
	uint16_t *k, *v; /* [n][D] f16: what the uncompressed store holds */
	double *kd;      /* [n][D] k as double, planted */
	float *q;        /* [n_q][D] pre-scaled queries */
};

/* workload_tau - the standard deviation of the scores. */
static double workload_tau(enum codec_workload w)
{
	return w == CODEC_WL_FLAT ? 0.3 : w == CODEC_WL_PEAKY ? 3.0 : 1.5;
}

/* plant - raise token t's score by delta for every query head: add
 * delta * q_h / |q_h|^2 for each h (the q_h are nearly orthogonal). */
static void plant(const struct codec_eval_cfg *c, struct head *hd,
		  uint32_t t, double delta)
{
	uint32_t D = c->head_dim;

	for (uint32_t h = 0; h < c->n_q; h++) {
		const float *q = hd->q + (size_t)h * D;
		double qq = 0;

		for (uint32_t d = 0; d < D; d++)
			qq += (double)q[d] * q[d];
		for (uint32_t d = 0; d < D && qq > 0; d++)
			hd->kd[(size_t)t * D + d] += delta * q[d] / qq;
	}
}

/* make_head - draw one KV head of workload w. */
static void make_head(const struct codec_eval_cfg *c, enum codec_workload w,
		      uint64_t *rng, struct head *hd)
{
	static const double kf[] = { 10, 20, 35, 50 }, vf[] = { 10, 30 };
	uint32_t D = c->head_dim, n = c->n_tokens;
	double tau = workload_tau(w);

	for (size_t i = 0; i < (size_t)n * D; i++) {
		hd->kd[i] = gauss(rng);
		hd->v[i] = kvf_f32_to_f16((float)gauss(rng));
	}
	if (w == CODEC_WL_OUTLIERS || w == CODEC_WL_OUTLIERS_KV)
		for (uint32_t o = 0; o < 4; o++) {
			uint32_t d = (7 + 29 * o) % D;
			int taken = 0;

			/* a small head_dim folds outliers onto one dim: its
			 * factors multiplied past the f16 range */
			for (uint32_t p = 0; p < o; p++)
				taken |= (7 + 29 * p) % D == d;
			if (taken)
				continue;
			for (uint32_t t = 0; t < n; t++)
				hd->kd[(size_t)t * D + d] =
					kf[o] * (hd->kd[(size_t)t * D + d] + 1);
		}
	if (w == CODEC_WL_OUTLIERS_KV) {
		for (uint32_t o = 0; o < 2; o++) {
			uint32_t d = (3 + 41 * o) % D;

			if (o == 1 && d == 3 % D)
				continue; /* one dim: not twice */
			for (uint32_t t = 0; t < n; t++) {
				size_t i = (size_t)t * D + d;

				hd->v[i] = kvf_f32_to_f16(
					(float)(vf[o] * kvf_f16_to_f32(hd->v[i])));
			}
		}
	}
	/* q = tau z / sqrt(sum_d z_d^2 var_d): scores of deviation tau */
	for (uint32_t h = 0; h < c->n_q; h++) {
		float *q = hd->q + (size_t)h * D;
		double norm = 0;

		for (uint32_t d = 0; d < D; d++) {
			double m = 0, m2 = 0, z = gauss(rng);

			for (uint32_t t = 0; t < n; t++) {
				double x = hd->kd[(size_t)t * D + d];

				m += x;
				m2 += x * x;
			}
			m /= n;
			norm += z * z * (m2 / n - m * m);
			q[d] = (float)z;
		}
		/* one token has no spread: then plain z */
		for (uint32_t d = 0; d < D && norm > 0; d++)
			q[d] = (float)(tau * q[d] / sqrt(norm));
	}
	if (w == CODEC_WL_PEAKY)
		for (uint32_t i = 0; i < 4; i++)
			plant(c, hd, (uint32_t)(bench_mix64(*rng + i) % n), 8);
	if (w == CODEC_WL_MIXED || w == CODEC_WL_OUTLIERS ||
	    w == CODEC_WL_OUTLIERS_KV) {
		plant(c, hd, 0, 6);
		for (uint32_t t = 1; t < n; t++)
			if (bench_mix64(*rng ^ (t * 0x2545f4914f6cdd1dull)) % 100 == 0)
				plant(c, hd, t, 3);
	}
	for (size_t i = 0; i < (size_t)n * D; i++) {
		hd->k[i] = kvf_f32_to_f16((float)hd->kd[i]);
		hd->kd[i] = kvf_f16_to_f32(hd->k[i]);
	}
}

/* reference - the attention of query head h over the f16 values, in
 * double, into ref [D]. */
static void reference(const struct codec_eval_cfg *c, const struct head *hd,
		      uint32_t h, double *s, double *ref)
{
	uint32_t D = c->head_dim, n = c->n_tokens;
	const float *q = hd->q + (size_t)h * D;
	double mx = -INFINITY, l = 0;

	for (uint32_t t = 0; t < n; t++) {
		double a = 0;

		for (uint32_t d = 0; d < D; d++)
			a += (double)q[d] * hd->kd[(size_t)t * D + d];
		s[t] = a;
		mx = a > mx ? a : mx;
	}
	memset(ref, 0, D * sizeof(double));
	for (uint32_t t = 0; t < n; t++) {
		double p = exp(s[t] - mx);

		l += p;
		for (uint32_t d = 0; d < D; d++)
			ref[d] += p * kvf_f16_to_f32(hd->v[(size_t)t * D + d]);
	}
	for (uint32_t d = 0; d < D; d++)
		ref[d] /= l;
}

/* compute - the attention of every query head by codec's kernels (NONE:
 * the dense f16 kernel), into out [n_q][D]; grp: scratch for one K and
 * one V group. */
static kvf_status compute(const struct codec_eval_cfg *c, kvf_codec codec,
			  const struct head *hd, float *state, uint8_t *kg,
			  uint8_t *vg, float *out)
{
	uint32_t D = c->head_dim, G = c->group_tokens;
	const struct kvc_codec_kernels *ck = kvc_codec_kernels();
	struct kvc_codec_layout kl, vl;
	struct kvc_attn_state st;
	kvf_status rc;

	kvc_attn_state_init(&st, c->n_q, D, state);
	if (codec == KVF_CODEC_NONE) {
		kvc_kernels()->attn_fold(&st, hd->q, hd->k, hd->v, c->n_tokens,
					 KVF_DTYPE_F16, NULL, NULL, 0);
		kvc_attn_finish(&st, out, NULL);
		return KVF_OK;
	}
	if ((rc = kvc_codec_layout(codec, KVF_KIND_K, G, D, c->layout,
				   &kl)) != KVF_OK ||
	    (rc = kvc_codec_layout(codec, KVF_KIND_V, G, D, c->layout,
				   &vl)) != KVF_OK)
		return rc;
	for (uint32_t t = 0; t < c->n_tokens; t += G) {
		size_t off = (size_t)t * D;

		if ((rc = ck->encode(&kl, hd->k + off, KVF_DTYPE_F16, kg)) !=
			    KVF_OK ||
		    (rc = ck->encode(&vl, hd->v + off, KVF_DTYPE_F16, vg)) !=
			    KVF_OK)
			return rc;
		ck->fold(&st, hd->q, &kl, kg, &vl, vg, 0, G, NULL, NULL, 0);
	}
	kvc_attn_finish(&st, out, NULL);
	return KVF_OK;
}

/* compare - fold one head's (out, ref) into the result sums. */
static void compare(const float *out, const double *ref, uint32_t D,
		    struct codec_eval_result *r)
{
	double dot = 0, oo = 0, rr = 0, ee = 0, cs, rel;

	for (uint32_t d = 0; d < D; d++) {
		double e = out[d] - ref[d];

		dot += out[d] * ref[d];
		oo += (double)out[d] * out[d];
		rr += ref[d] * ref[d];
		ee += e * e;
	}
	cs = oo > 0 && rr > 0 ? dot / sqrt(oo * rr) : (oo == rr ? 1 : 0);
	rel = rr > 0 ? sqrt(ee / rr) : sqrt(ee);
	r->cos_mean += cs;
	r->rel_mean += rel;
	r->cos_min = cs < r->cos_min ? cs : r->cos_min;
	r->rel_max = rel > r->rel_max ? rel : r->rel_max;
	r->n_heads++;
}

kvf_status codec_eval(const struct codec_eval_cfg *c, kvf_codec codec,
		      enum codec_workload w, struct codec_eval_result *out)
{
	uint32_t D = c->head_dim, n = c->n_tokens, G = c->group_tokens;
	struct codec_eval_result r = { .cos_min = 1.0 };
	struct head hd = { 0 };
	size_t kb = 0, vb = 0;
	uint64_t rng = c->seed * 0x9e3779b97f4a7c15ull + (uint64_t)w;
	kvf_status rc = KVF_OK;
	float *state = NULL, *o = NULL;
	double *s = NULL, *ref = NULL;
	uint8_t *kg = NULL, *vg = NULL;

	if (codec != KVF_CODEC_NONE) {
		kb = kvc_codec_group_bytes(codec, KVF_KIND_K, G, D,
					   c->layout);
		vb = kvc_codec_group_bytes(codec, KVF_KIND_V, G, D,
					   c->layout);
		if (!kb || !vb)
			return kvc_codec_layout(codec, KVF_KIND_K, G, D,
						c->layout,
						&(struct kvc_codec_layout){ 0 });
	}
	if (G == 0 || n == 0 || n % G || D == 0 || D > KVC_CODEC_MAX_DIM ||
	    c->n_q == 0 || c->n_q > 64 || (unsigned)w >= CODEC_WL_COUNT)
		return kvf_fail(KVF_EINVAL,
				"codec_eval: %u tokens in groups of %u, head_dim "
				"%u, %u query heads, workload %d",
				n, G, D, c->n_q, (int)w);
	hd.k = kvf_malloc((size_t)n * D * 2);
	hd.v = kvf_malloc((size_t)n * D * 2);
	hd.kd = kvf_malloc((size_t)n * D * sizeof(double));
	hd.q = kvf_malloc((size_t)c->n_q * D * sizeof(float));
	state = kvf_malloc(KVC_ATTN_STATE_FLOATS(c->n_q, D) * sizeof(float));
	o = kvf_malloc((size_t)c->n_q * D * sizeof(float));
	s = kvf_malloc((size_t)n * sizeof(double));
	ref = kvf_malloc(D * sizeof(double));
	kg = kvf_malloc(kb + 1);
	vg = kvf_malloc(vb + 1);
	if (!hd.k || !hd.v || !hd.kd || !hd.q || !state || !o || !s || !ref ||
	    !kg || !vg) {
		rc = kvf_fail(KVF_ENOMEM, "codec_eval: out of memory");
		goto out_free;
	}
	for (uint32_t kh = 0; kh < c->n_kv_heads; kh++) {
		make_head(c, w, &rng, &hd);
		if ((rc = compute(c, codec, &hd, state, kg, vg, o)) != KVF_OK)
			goto out_free;
		for (uint32_t h = 0; h < c->n_q; h++) {
			reference(c, &hd, h, s, ref);
			compare(o + (size_t)h * D, ref, D, &r);
		}
	}
	if (r.n_heads) {
		r.cos_mean /= r.n_heads;
		r.rel_mean /= r.n_heads;
	}
	r.bytes_ratio = codec == KVF_CODEC_NONE ?
				1.0 :
				(double)(kb + vb) / ((double)G * D * 2 * 2);
	*out = r;
out_free:
	kvf_free(hd.k);
	kvf_free(hd.v);
	kvf_free(hd.kd);
	kvf_free(hd.q);
	kvf_free(state);
	kvf_free(o);
	kvf_free(s);
	kvf_free(ref);
	kvf_free(kg);
	kvf_free(vg);
	return rc;
}
