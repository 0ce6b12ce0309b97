/*
 * test_sparf_quality.c - how close SparF at an eighth (top_r = head_dim /
 * 8, top_k = tokens / 8) comes to dense attention, on a synthetic
 * generator of its own (not the benchmark's data, not test_attend.c's):
 * Gaussian queries and keys in a realistic shape (head_dim 128, GQA 4),
 * the dominant tokens made by a key component along a direction the
 * query heads of a group share, not along chosen dims.  Three kinds of
 * attention, one layer each:
 *
 *   peaky  a few dominant tokens carry most of the mass, as in real
 *          heads: an attention sink (token 0), a handful of heavy hitters
 *          scattered over the sequence, a mild recency bias over the last
 *          tokens, noise logits of standard deviation 1;
 *   flat   noise logits of standard deviation 0.5, nothing dominant;
 *   mixed  noise logits of standard deviation 1.5 (a long tail of
 *          moderately heavy tokens), a weak sink, more and weaker heavy
 *          hitters, a recency bias.
 *
 * Each shape comes with channels of lognormal scales (as the few large
 * channels of real queries and keys) and, for peaky and mixed, with every
 * channel alike too (harder for SparF: its r dims then see less of
 * q . k).  V is Gaussian around a small common mean (real values have
 * one).  With the default exact set (sinks and recent window) the peaky
 * cosine (lognormal channels) must reach 0.95: by tokens (sparse = 1) its
 * mean over the query heads and nine heads in ten; by groups (sparse = 2)
 * three heads in four.  The rest is printed.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/half.h"
#include "kvflash.h"
#include "testutil.h"

#define QH 8u        /* query heads */
#define KVH 2u       /* KV heads */
#define DIM 128u     /* head_dim */
#define TOKENS 4096u /* tokens of the sequence */
#define TRIALS 6u    /* sequences, each with fresh data */

enum shape { PEAKY, FLAT, MIXED, PEAKY_ISO, MIXED_ISO, N_SHAPES };

static const char *const shape_name[N_SHAPES] = {
	"peaky", "flat", "mixed", "peaky, isotropic", "mixed, isotropic"
};

/* One kind of attention, in logits (scale * q . k). */
static const struct shape_par {
	double noise;          /* standard deviation of a plain token's logit */
	double sink;           /* logit added to token 0 */
	uint32_t n_heavy;      /* heavy hitters, scattered */
	double heavy_lo, heavy_hi; /* their logit, uniform in [lo, hi] */
	uint32_t recent;       /* last tokens with a recency bias */
	double recent_bias;    /* logit added to the newest, fading to 0 */
	double aniso;          /* spread of the channels' scales (the log of
				* a channel's scale is Gaussian with this
				* deviation); 0 = every channel alike */
} par[N_SHAPES] = {
	[PEAKY] = { 1.0, 8.0, 8, 6.5, 8.5, 32, 2.0, 0.8 },
	[FLAT] = { 0.5, 0.0, 0, 0.0, 0.0, 0, 0.0, 0.8 },
	[MIXED] = { 1.5, 5.0, 16, 4.0, 6.0, 64, 1.5, 0.8 },
	[PEAKY_ISO] = { 1.0, 8.0, 8, 6.5, 8.5, 32, 2.0, 0.0 },
	[MIXED_ISO] = { 1.5, 5.0, 16, 4.0, 6.0, 64, 1.5, 0.0 },
};

static char *dir;

static void setup(void)
{
	dir = tmpdir_make("sparf_quality");
	cr_assert_not_null(dir);
}

static void teardown(void)
{
	tmpdir_remove(dir);
}

TestSuite(sparf_quality, .init = setup, .fini = teardown, .timeout = 300);

static double uniform(uint64_t *rng)
{
	return ((double)(rng_next(rng) >> 11) + 0.5) / 9007199254740992.0;
}

static double gauss(uint64_t *rng)
{
	return sqrt(-2.0 * log(uniform(rng))) * cos(6.283185307179586 * uniform(rng));
}

/* unit - a random unit vector of DIM, channel e drawn with scale a[e] */
static void unit(uint64_t *rng, const double *a, double *u)
{
	double n = 0;

	for (uint32_t e = 0; e < DIM; e++) {
		u[e] = a[e] * gauss(rng);
		n += u[e] * u[e];
	}
	for (uint32_t e = 0; e < DIM; e++)
		u[e] /= sqrt(n);
}

/*
 * make_layer - the K, V and q of one layer of one shape.  Channels have
 * scales a[e] (lognormal, the same for q and K, as the few large
 * channels of real queries and keys; all 1 when isotropic).  Per KV head a
 * unit direction u; each query head of the group is
 * sqrt(DIM) * (0.8 u + 0.6 w_h), w_h a unit vector of its own.  A plain
 * key is Gaussian (channel e scaled by a[e]), its logit deviation brought
 * to `noise`; a token given logit L gets a component along u that adds L
 * to the mean logit of the group's heads, so every head of the group sees
 * it, each with its own noise.
 */
static void make_layer(uint64_t *rng, enum shape sh, uint16_t *k, uint16_t *v,
		       float *q)
{
	const struct shape_par *p = &par[sh];
	double u[KVH][DIM], w[DIM], a[DIM], vmean[DIM], ms = 0;
	double knoise[KVH], along[KVH], *boost = calloc(TOKENS, sizeof(double));

	cr_assert_not_null(boost);
	for (uint32_t e = 0; e < DIM; e++) {
		a[e] = exp(p->aniso * gauss(rng));
		ms += a[e] * a[e] / DIM;
		vmean[e] = 0.1 * gauss(rng);
	}
	for (uint32_t e = 0; e < DIM; e++)
		a[e] /= sqrt(ms);
	for (uint32_t kh = 0; kh < KVH; kh++) {
		double qa = 0, qu = 0;

		unit(rng, a, u[kh]);
		for (uint32_t hh = 0; hh < QH / KVH; hh++) {
			float *qh = q + (kh * (QH / KVH) + hh) * DIM;

			unit(rng, a, w);
			for (uint32_t e = 0; e < DIM; e++) {
				qh[e] = (float)(sqrt(DIM) * (0.8 * u[kh][e] + 0.6 * w[e]));
				qa += (double)qh[e] * qh[e] * a[e] * a[e];
				qu += (double)qh[e] * u[kh][e];
			}
		}
		/* scaled logit of a key a[e] * z[e]: deviation sqrt(qa / n) /
		 * sqrt(DIM) over the group's heads; of u: qu / n / sqrt(DIM) */
		knoise[kh] = p->noise / (sqrt(qa / (QH / KVH)) / sqrt(DIM));
		along[kh] = 1.0 / (qu / (QH / KVH) / sqrt(DIM));
	}
	boost[0] += p->sink;
	for (uint32_t j = 0; j < p->n_heavy; j++)
		boost[4 + rng_below(rng, TOKENS - 4 - 2 * p->recent - 4)] +=
			p->heavy_lo + (p->heavy_hi - p->heavy_lo) * uniform(rng);
	for (uint32_t j = 0; j < p->recent; j++)
		boost[TOKENS - 1 - j] += p->recent_bias * (1.0 - (double)j / p->recent);
	for (uint32_t t = 0; t < TOKENS; t++)
		for (uint32_t kh = 0; kh < KVH; kh++) {
			size_t at = ((size_t)t * KVH + kh) * DIM;

			for (uint32_t e = 0; e < DIM; e++) {
				double x = knoise[kh] * a[e] * gauss(rng) +
					   boost[t] * along[kh] * u[kh][e];

				k[at + e] = kvf_f32_to_f16((float)x);
				v[at + e] = kvf_f32_to_f16((float)(vmean[e] + gauss(rng)));
			}
		}
	free(boost);
}

static double cosine(const float *a, const float *b, size_t n)
{
	double ab = 0, aa = 0, bb = 0;

	for (size_t i = 0; i < n; i++) {
		ab += (double)a[i] * b[i];
		aa += (double)a[i] * a[i];
		bb += (double)b[i] * b[i];
	}
	return ab / sqrt(aa * bb + 1e-300);
}

/* The figures of one way of running SparF on one shape. */
struct fig {
	double min, sum; /* cosine to dense: least, and sum over heads */
	uint32_t n;      /* heads summed */
	uint32_t n_ok;   /* of them, heads at 0.95 or more */
};

static void fig_add(struct fig *f, const float *got, const float *dense)
{
	for (uint32_t h = 0; h < QH; h++) {
		double c = cosine(got + h * DIM, dense + h * DIM, DIM);

		if (f->n == 0 || c < f->min)
			f->min = c;
		f->sum += c;
		f->n++;
		f->n_ok += c >= 0.95;
	}
}

/* The ways SparF is run: mode, and whether the default exact set is on. */
#define N_WAYS 4u
static const struct way {
	uint32_t sparse;
	int exact_set; /* 1 = sinks and recent window by default */
	const char *name;
} ways[N_WAYS] = {
	{ 1, 1, "sparse=1" },
	{ 2, 1, "sparse=2" },
	{ 1, 0, "sparse=1, no exact set" },
	{ 2, 0, "sparse=2, no exact set" },
};

static kvf_attn_opts way_opts(const struct way *w)
{
	kvf_attn_opts o;

	kvf_attn_opts_init(&o);
	o.sparse = w->sparse;
	o.top_r = DIM / 8;
	o.top_k = TOKENS / 8;
	if (!w->exact_set) {
		o.sink_tokens = KVF_TOKENS_NONE;
		o.recent_tokens = KVF_TOKENS_NONE;
	}
	return o;
}

Test(sparf_quality, eighth_on_peaky_flat_mixed)
{
	kvf_model m = { N_SHAPES, QH, KVH, DIM, KVF_DTYPE_F16 };
	size_t cnt = (size_t)TOKENS * KVH * DIM;
	uint16_t *k = malloc(cnt * 2), *v = malloc(cnt * 2);
	float q[N_SHAPES][QH * DIM], dense[QH * DIM], sparse[QH * DIM];
	struct fig fig[N_SHAPES][N_WAYS];
	uint64_t rng = rng_seed("sparf_quality");
	kvf_options so;
	kvf_store *st;

	cr_assert(k && v);
	memset(fig, 0, sizeof(fig));
	kvf_options_init(&so, &m);
	so.media = KVF_MEDIA_MEMORY;
	so.kt_pages = 1;
	so.capacity_bytes = 256ull << 20;
	so.n_threads = 2;
	cr_assert(eq(int, kvf_open(tmp_path(dir, "s"), &so, &st), KVF_OK), "%s",
		  kvf_last_error());
	for (uint64_t seq = 1; seq <= TRIALS; seq++) {
		cr_assert(eq(int, kvf_seq_create(st, seq), KVF_OK));
		for (uint32_t sh = 0; sh < N_SHAPES; sh++) {
			make_layer(&rng, (enum shape)sh, k, v, q[sh]);
			cr_assert(eq(int, kvf_append(st, seq, sh, TOKENS, k, v), KVF_OK),
				  "%s", kvf_last_error());
		}
		for (uint32_t sh = 0; sh < N_SHAPES; sh++) {
			cr_assert(eq(int, kvf_attend(st, seq, sh, q[sh], dense, NULL),
				     KVF_OK));
			for (uint32_t w = 0; w < N_WAYS; w++) {
				kvf_attn_opts o = way_opts(&ways[w]);

				cr_assert(eq(int, kvf_attend(st, seq, sh, q[sh], sparse, &o),
					     KVF_OK), "%s", kvf_last_error());
				fig_add(&fig[sh][w], sparse, dense);
			}
		}
	}
	for (uint32_t sh = 0; sh < N_SHAPES; sh++)
		for (uint32_t w = 0; w < N_WAYS; w++)
			fprintf(stderr,
				"sparf_quality: %-16s %-24s cosine to dense: mean %.4f, least %.4f, %u of %u heads >= 0.95\n",
				shape_name[sh], ways[w].name, fig[sh][w].sum / fig[sh][w].n,
				fig[sh][w].min, fig[sh][w].n_ok, fig[sh][w].n);
	/* a heavy hitter whose approximate score runs low is now and then
	 * left out, which costs a head much.  By tokens the mean over the
	 * heads is held to 0.95, and so are nine heads in ten.  By groups a
	 * group left out costs every query head of its KV head: three heads
	 * in four are held to 0.95 (so the median is); the mean, printed,
	 * fell to 0.948 in one seed of some 120 tried (0.965 the worst of
	 * 40 others).  With every channel alike (printed only) misses are
	 * more frequent. */
	for (uint32_t w = 0; w < N_WAYS; w++) {
		const struct fig *f = &fig[PEAKY][w];
		int by_tokens = ways[w].sparse == 1;
		uint32_t need = by_tokens ? (9 * f->n + 9) / 10 : (3 * f->n + 3) / 4;

		if (!ways[w].exact_set)
			continue;
		if (by_tokens)
			cr_expect(ge(dbl, f->sum / f->n, 0.95), "peaky, %s: mean cosine %g",
				  ways[w].name, f->sum / f->n);
		cr_expect(ge(u32, f->n_ok, need), "peaky, %s: %u of %u heads at 0.95",
			  ways[w].name, f->n_ok, f->n);
	}
	kvf_close(st);
	free(k);
	free(v);
}

/*
 * The exact set is what is attended: with top_k just its size, SparF's
 * log-sum-exp (that of the tokens it attended) is dense attention's over
 * a mask of exactly those tokens (sparse = 1) or of their whole groups
 * (sparse = 2), with and without a window (whose first tokens are then
 * the sinks).
 */
Test(sparf_quality, exact_set_is_attended)
{
	static const struct {
		uint32_t sparse, sinks, recent;
		uint64_t window;
	} cases[] = {
		{ 1, 4, 60, 0 }, { 1, 5, 30, 1000 },
		/* sizes whose groups fill top_k / G: nothing left by score */
		{ 2, 4, 60, 0 }, { 2, 5, 30, 1000 },
	};
	kvf_model m = { 1, QH, KVH, DIM, KVF_DTYPE_F16 };
	size_t cnt = (size_t)TOKENS * KVH * DIM;
	uint16_t *k = malloc(cnt * 2), *v = malloc(cnt * 2);
	uint8_t *mask = malloc(TOKENS);
	float q[QH * DIM], out[QH * DIM], lse_s[QH], lse_d[QH];
	uint64_t rng = rng_seed("sparf_quality exact set");
	const uint32_t G = 4096 / (DIM * 2);
	kvf_options so;
	kvf_store *st;

	cr_assert(k && v && mask);
	kvf_options_init(&so, &m);
	so.media = KVF_MEDIA_MEMORY;
	so.kt_pages = 1;
	so.capacity_bytes = 64ull << 20;
	so.n_threads = 2;
	cr_assert(eq(int, kvf_open(tmp_path(dir, "e"), &so, &st), KVF_OK), "%s",
		  kvf_last_error());
	cr_assert(eq(int, kvf_seq_create(st, 1), KVF_OK));
	make_layer(&rng, PEAKY, k, v, q);
	cr_assert(eq(int, kvf_append(st, 1, 0, TOKENS, k, v), KVF_OK));
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		uint64_t t0 = cases[c].window ? TOKENS - cases[c].window : 0;
		kvf_attn_opts o, d;

		for (uint64_t t = 0; t < TOKENS; t++) {
			uint64_t a = t, lo = t0 + cases[c].sinks, hi = TOKENS - cases[c].recent;

			if (cases[c].sparse == 2) /* the group's first and last */
				a = t / G * G;
			mask[t] = (a < lo && a + (cases[c].sparse == 2 ? G : 1) > t0) ||
				  a + (cases[c].sparse == 2 ? G - 1 : 0) >= hi;
		}
		kvf_attn_opts_init(&o);
		o.sparse = cases[c].sparse;
		o.top_r = DIM / 8;
		o.top_k = cases[c].sinks + cases[c].recent;
		o.sink_tokens = cases[c].sinks;
		o.recent_tokens = cases[c].recent;
		o.window = cases[c].window;
		o.lse = lse_s;
		cr_assert(eq(int, kvf_attend(st, 1, 0, q, out, &o), KVF_OK), "%s",
			  kvf_last_error());
		kvf_attn_opts_init(&d);
		d.mask = mask;
		d.mask_len = TOKENS;
		d.window = cases[c].window;
		d.lse = lse_d;
		cr_assert(eq(int, kvf_attend(st, 1, 0, q, out, &d), KVF_OK));
		for (uint32_t h = 0; h < QH; h++)
			cr_assert(le(flt, fabsf(lse_s[h] - lse_d[h]), 1e-4f * (1 + fabsf(lse_d[h]))),
				  "case %zu head %u: lse %g, dense over the exact set %g",
				  c, h, (double)lse_s[h], (double)lse_d[h]);
	}
	kvf_close(st);
	free(mask);
	free(k);
	free(v);
}
