/*
 * test_codec_accuracy.c - the codecs held to their documented accuracy
 * (docs/compression.md, "Accuracy"): kvbench codec's measurement
 * (bench_codec_eval.c) on its five synthetic workloads, at a fixed
 * configuration (head_dim 128, groups of 64, 4 KV heads x 2048 tokens, 4
 * query heads each, seed 1), must give a mean and a worst cosine no lower
 * and a mean relative error no higher than the floors below, in each
 * layout version against its own.  The floors are the figures measured,
 * with 20% of their distance from exact given as margin (the data are the
 * same on every run; scalar and AVX2 kernels agree to 6 digits).  Where
 * docs/compression.md says a codec meets issue #25's target (cosine int8
 * >= 0.999, fp8 >= 0.998, int4 >= 0.98), the mean cosine is held to the
 * target too.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stdio.h>

#include "bench/bench_codec_int.h"
#include "compute/codec.h"
#include "kvflash.h"

static const struct codec_eval_cfg cfg = {
	.head_dim = 128, .group_tokens = 64, .n_tokens = 2048,
	.n_kv_heads = 4, .n_q = 4, .seed = 1, .layout = KVC_LAYOUT_KBYTE,
};

struct floor {
	kvf_codec codec;
	enum codec_workload w;
	double cos_mean, cos_min; /* no lower */
	double rel_mean;          /* no higher */
	double target;            /* issue #25's cosine, where met; else 0 */
};

/* measured, layout version 1 (FP8 the same in both):
 *           fp8  0.999636 0.999564 2.71e-2, 0.997591 0.990367 6.75e-2,
 *                0.999121 0.997937 4.64e-2, 0.998783 0.996457 5.74e-2,
 *                0.992298 0.959004 1.25e-1
 *           int8 0.999978 0.999974 6.79e-3, 0.999936 0.999720 1.24e-2,
 *                0.999955 0.999896 1.02e-2, 0.999959 0.999923 9.46e-3,
 *                0.999170 0.996890 3.81e-2
 *           int4 0.995104 0.994158 9.97e-2, 0.984434 0.926198 1.89e-1,
 *                0.989461 0.978855 1.54e-1, 0.991697 0.985556 1.37e-1,
 *                0.927610 0.741022 3.74e-1 */
static const struct floor floors_v1[] = {
	{ KVF_CODEC_FP8, CODEC_WL_FLAT, 0.99956, 0.99947, 0.033, 0.998 },
	{ KVF_CODEC_FP8, CODEC_WL_PEAKY, 0.9971, 0.988, 0.081, 0 },
	{ KVF_CODEC_FP8, CODEC_WL_MIXED, 0.9989, 0.9975, 0.056, 0.998 },
	{ KVF_CODEC_FP8, CODEC_WL_OUTLIERS, 0.9985, 0.9957, 0.069, 0.998 },
	{ KVF_CODEC_FP8, CODEC_WL_OUTLIERS_KV, 0.9907, 0.95, 0.15, 0 },
	{ KVF_CODEC_INT8, CODEC_WL_FLAT, 0.999973, 0.999968, 0.0082, 0.999 },
	{ KVF_CODEC_INT8, CODEC_WL_PEAKY, 0.999923, 0.99966, 0.015, 0.999 },
	{ KVF_CODEC_INT8, CODEC_WL_MIXED, 0.999946, 0.99987, 0.013, 0.999 },
	{ KVF_CODEC_INT8, CODEC_WL_OUTLIERS, 0.99995, 0.999907, 0.012, 0.999 },
	{ KVF_CODEC_INT8, CODEC_WL_OUTLIERS_KV, 0.999, 0.9962, 0.046, 0.999 },
	{ KVF_CODEC_INT4, CODEC_WL_FLAT, 0.9941, 0.9929, 0.12, 0.98 },
	{ KVF_CODEC_INT4, CODEC_WL_PEAKY, 0.981, 0.911, 0.23, 0.98 },
	{ KVF_CODEC_INT4, CODEC_WL_MIXED, 0.987, 0.974, 0.19, 0.98 },
	{ KVF_CODEC_INT4, CODEC_WL_OUTLIERS, 0.99, 0.982, 0.17, 0.98 },
	{ KVF_CODEC_INT4, CODEC_WL_OUTLIERS_KV, 0.913, 0.68, 0.45, 0 },
};

/* measured, layout version 2 (K's INT8 and INT4 scales of a byte):
 *           int8 0.999977 0.999974 6.86e-3, 0.999930 0.999753 1.27e-2,
 *                0.999963 0.999941 9.24e-3, 0.999953 0.999891 1.10e-2,
 *                0.999107 0.996761 3.86e-2
 *           int4 0.994900 0.994039 1.02e-1, 0.980994 0.914033 1.91e-1,
 *                0.990305 0.978070 1.47e-1, 0.990978 0.984802 1.45e-1,
 *                0.913370 0.617396 4.27e-1 */
static const struct floor floors_v2[] = { /* FP8: as in version 1 */
	{ KVF_CODEC_INT8, CODEC_WL_FLAT, 0.999972, 0.999968, 0.009, 0.999 },
	{ KVF_CODEC_INT8, CODEC_WL_PEAKY, 0.999916, 0.9997, 0.016, 0.999 },
	{ KVF_CODEC_INT8, CODEC_WL_MIXED, 0.999955, 0.999929, 0.012, 0.999 },
	{ KVF_CODEC_INT8, CODEC_WL_OUTLIERS, 0.999943, 0.999869, 0.014, 0.999 },
	{ KVF_CODEC_INT8, CODEC_WL_OUTLIERS_KV, 0.998928, 0.996113, 0.047, 0.999 },
	{ KVF_CODEC_INT4, CODEC_WL_FLAT, 0.99388, 0.992846, 0.123, 0.98 },
	{ KVF_CODEC_INT4, CODEC_WL_PEAKY, 0.977192, 0.896839, 0.23, 0.98 },
	{ KVF_CODEC_INT4, CODEC_WL_MIXED, 0.988366, 0.973684, 0.177, 0.98 },
	{ KVF_CODEC_INT4, CODEC_WL_OUTLIERS, 0.989173, 0.981762, 0.175, 0.98 },
	{ KVF_CODEC_INT4, CODEC_WL_OUTLIERS_KV, 0.896044, 0.540875, 0.513, 0 },
};

/* check_layout - every workload of codec in layout version `layout`
 * against that version's floors (n of them) */
static void check_layout(kvf_codec codec, uint32_t layout,
			 const struct floor *floors, size_t n)
{
	struct codec_eval_cfg c = cfg;
	int seen = 0;

	c.layout = layout;
	for (size_t i = 0; i < n; i++) {
		const struct floor *f = &floors[i];
		struct codec_eval_result r;
		const char *wn = codec_workload_name(f->w);

		if (f->codec != codec)
			continue;
		seen++;
		cr_assert(eq(int, codec_eval(&c, codec, f->w, &r), KVF_OK),
			  "%s", kvf_last_error());
		printf("%s layout %u %-11s cos mean %.6f min %.6f rel err mean %.3e\n",
		       kvf_codec_name(codec), layout, wn, r.cos_mean, r.cos_min,
		       r.rel_mean);
		cr_assert(eq(u32, r.n_heads, cfg.n_kv_heads * cfg.n_q));
		cr_assert(r.cos_mean >= f->cos_mean,
			  "%s %s: mean cosine %.6f < documented %.6f",
			  kvf_codec_name(codec), wn, r.cos_mean, f->cos_mean);
		cr_assert(r.cos_min >= f->cos_min,
			  "%s %s: worst cosine %.6f < documented %.6f",
			  kvf_codec_name(codec), wn, r.cos_min, f->cos_min);
		cr_assert(r.rel_mean <= f->rel_mean,
			  "%s %s: mean relative error %.3e > documented %.3e",
			  kvf_codec_name(codec), wn, r.rel_mean, f->rel_mean);
		cr_assert(r.cos_mean >= f->target,
			  "%s %s: mean cosine %.6f < issue #25's %.3f",
			  kvf_codec_name(codec), wn, r.cos_mean, f->target);
	}
	cr_assert(eq(int, seen, CODEC_WL_COUNT));
}

/* check_codec - both layout versions: stores of format 5 keep the f16
 * scales, new ones at head_dim 128 take K's scales of a byte */
static void check_codec(kvf_codec codec)
{
	int same = codec == KVF_CODEC_FP8; /* no K scales of a byte */

	check_layout(codec, KVC_LAYOUT_F16, floors_v1,
		     sizeof(floors_v1) / sizeof(floors_v1[0]));
	check_layout(codec, KVC_LAYOUT_KBYTE, same ? floors_v1 : floors_v2,
		     same ? sizeof(floors_v1) / sizeof(floors_v1[0])
			  : sizeof(floors_v2) / sizeof(floors_v2[0]));
}

Test(codec_accuracy, fp8)
{
	check_codec(KVF_CODEC_FP8);
}

Test(codec_accuracy, int8)
{
	check_codec(KVF_CODEC_INT8);
}

Test(codec_accuracy, int4)
{
	check_codec(KVF_CODEC_INT4);
}

/* The uncompressed computation (the dense f16 kernel) is exact to f32
 * rounding on every workload: the measurement itself is sound. */
Test(codec_accuracy, none_is_exact)
{
	for (int w = 0; w < CODEC_WL_COUNT; w++) {
		struct codec_eval_result r;

		cr_assert(eq(int,
			     codec_eval(&cfg, KVF_CODEC_NONE,
					(enum codec_workload)w, &r),
			     KVF_OK));
		cr_assert(r.cos_min >= 1 - 1e-9 && r.rel_mean <= 1e-5,
			  "%s: cos min %.9f rel %.3e",
			  codec_workload_name((enum codec_workload)w),
			  r.cos_min, r.rel_mean);
		cr_assert(r.bytes_ratio == 1.0);
	}
}

/* Bad configurations are refused with a message, nothing measured. */
Test(codec_accuracy, bad_config)
{
	struct codec_eval_cfg c = cfg;
	struct codec_eval_result r = { .n_heads = 77 };

	c.n_tokens = 100; /* not a multiple of 64 */
	cr_assert(eq(int, codec_eval(&c, KVF_CODEC_INT8, CODEC_WL_FLAT, &r),
		     KVF_EINVAL));
	cr_assert(eq(u32, r.n_heads, 77));
	c = cfg;
	c.head_dim = 2000;
	cr_assert(eq(int, codec_eval(&c, KVF_CODEC_INT4, CODEC_WL_FLAT, &r),
		     KVF_EINVAL));
	cr_assert(eq(int, codec_eval(&cfg, (kvf_codec)9, CODEC_WL_FLAT, &r),
		     KVF_EINVAL));
	cr_assert(eq(int, codec_eval(&cfg, KVF_CODEC_FP8, CODEC_WL_COUNT, &r),
		     KVF_EINVAL));
	cr_assert(eq(u32, r.n_heads, 77));
}
