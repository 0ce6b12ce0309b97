/*
 * test_topk.c - kvc_topk and kvc_topr_dims against a brute-force
 * selection: a full sort of (value descending, index ascending), NaN
 * last.  Exact comparisons: selection involves no arithmetic.  Lengths
 * up to 2048 take the heap, longer ones radix select; both see random
 * values, heavy ties, sorted runs, and NaN, infinities and signed zeros.
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

static const float *cmp_x; /* qsort has no context argument */

/* by_rank - (value desc, index asc), NaN below everything */
static int by_rank(const void *pa, const void *pb)
{
	uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
	float xa = cmp_x[a], xb = cmp_x[b];

	if (isnan(xa) != isnan(xb))
		return isnan(xa) ? 1 : -1;
	if (!isnan(xa) && xa != xb)
		return xa > xb ? -1 : 1;
	return a < b ? -1 : a > b;
}

static int by_index(const void *pa, const void *pb)
{
	uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;

	return a < b ? -1 : a > b;
}

/* brute - the k best indices of x[0..n), ascending; returns min(k, n). */
static uint32_t brute(const float *x, uint32_t n, uint32_t k, uint32_t *out)
{
	uint32_t *all = kr_xmalloc((size_t)n * 4 + 4), m = k < n ? k : n;

	for (uint32_t i = 0; i < n; i++)
		all[i] = i;
	cmp_x = x;
	qsort(all, n, 4, by_rank);
	memcpy(out, all, (size_t)m * 4);
	qsort(out, m, 4, by_index);
	free(all);
	return m;
}

static void check(const float *x, uint32_t n, uint32_t k, const char *what)
{
	uint32_t *got = kr_xmalloc((size_t)n * 4 + 4);
	uint32_t *want = kr_xmalloc((size_t)n * 4 + 4);
	uint32_t g = kvc_topk(x, n, k, got), w = brute(x, n, k, want);

	cr_assert(g == w, "%s n %u k %u: returned %u, expected %u", what, n, k,
		  g, w);
	for (uint32_t i = 0; i < w; i++)
		cr_assert(got[i] == want[i],
			  "%s n %u k %u: idx[%u] = %u, expected %u", what, n, k,
			  i, got[i], want[i]);
	free(got);
	free(want);
}

Test(topk, random_against_sort)
{
	static const uint32_t ns[] = { 0,  1,   2,    7,    8,    15,   16,
				       17, 100, 1000, 2048, 2049, 5000, 32768 };
	uint64_t rng = rng_seed("topk.random_against_sort");

	for (size_t a = 0; a < sizeof(ns) / sizeof(ns[0]); a++) {
		uint32_t n = ns[a];
		float *x = kr_xmalloc((size_t)n * 4 + 4);
		uint32_t ks[] = { 0, 1,    2, 7, 8, n / 8, n / 2, n ? n - 1 : 0,
				  n, n + 5 };

		kr_fill_f32(&rng, x, n, -100, 100);
		for (size_t b = 0; b < sizeof(ks) / sizeof(ks[0]); b++)
			check(x, n, ks[b], "random");
		/* few distinct values: ties everywhere */
		for (uint32_t i = 0; i < n; i++)
			x[i] = (float)rng_below(&rng, 4);
		for (size_t b = 0; b < sizeof(ks) / sizeof(ks[0]); b++)
			check(x, n, ks[b], "ties");
		/* sorted up and down: the heap's best and worst cases */
		for (uint32_t i = 0; i < n; i++)
			x[i] = (float)i;
		for (size_t b = 0; b < sizeof(ks) / sizeof(ks[0]); b++)
			check(x, n, ks[b], "ascending");
		for (uint32_t i = 0; i < n; i++)
			x[i] = -(float)i;
		for (size_t b = 0; b < sizeof(ks) / sizeof(ks[0]); b++)
			check(x, n, ks[b], "descending");
		free(x);
	}
}

Test(topk, ties_take_lower_index)
{
	float x[10] = { 1, 5, 5, 2, 5, 5, 0, 5, 3, 5 };
	uint32_t idx[10];

	cr_assert(eq(u32, kvc_topk(x, 10, 3, idx), 3));
	cr_assert(idx[0] == 1 && idx[1] == 2 && idx[2] == 4, "got %u %u %u",
		  idx[0], idx[1], idx[2]);
	for (int i = 0; i < 10; i++)
		x[i] = 7;
	cr_assert(eq(u32, kvc_topk(x, 10, 4, idx), 4));
	for (uint32_t i = 0; i < 4; i++)
		cr_assert(idx[i] == i);
}

Test(topk, k_at_least_n_selects_all)
{
	float x[5] = { 3, -1, NAN, 2, -INFINITY };
	uint32_t idx[5];

	for (uint32_t k = 5; k < 8; k++) {
		cr_assert(eq(u32, kvc_topk(x, 5, k, idx), 5));
		for (uint32_t i = 0; i < 5; i++)
			cr_assert(idx[i] == i);
	}
	cr_assert(eq(u32, kvc_topk(x, 5, 0, idx), 0));
	cr_assert(eq(u32, kvc_topk(x, 0, 3, idx), 0));
}

Test(topk, nan_and_infinities)
{
	float x[8] = { NAN, -INFINITY, INFINITY, 0, NAN, -1, -INFINITY, 1 };
	uint32_t idx[8];

	for (uint32_t k = 0; k <= 8; k++)
		check(x, 8, k, "nan/inf");
	cr_assert(eq(u32, kvc_topk(x, 8, 6, idx), 6));
	/* inf, 1, 0, -1, -inf (1), -inf (6): the NaNs come last */
	cr_assert(idx[0] == 1 && idx[1] == 2 && idx[2] == 3 && idx[3] == 5 &&
		  idx[4] == 6 && idx[5] == 7);
}

Test(topk, topr_dims)
{
	uint64_t rng = rng_seed("topk.topr_dims");
	float q[4 * 128], key[128], want_key[128];
	uint32_t dims[128], want[128];

	kr_fill_f32(&rng, q, 4 * 128, -1, 1);
	/* one head: |q| */
	for (uint32_t d = 0; d < 128; d++)
		want_key[d] = fabsf(q[d]);
	for (uint32_t r = 0; r <= 130; r += 13) {
		uint32_t g = kvc_topr_dims(q, 1, 128, r, dims, key);
		uint32_t w = brute(want_key, 128, r, want);

		cr_assert(g == w && memcmp(dims, want, w * 4) == 0,
			  "one head r %u", r);
	}
	/* a group of 4 heads: sum of |q| */
	for (uint32_t d = 0; d < 128; d++) {
		want_key[d] = 0;
		for (uint32_t h = 0; h < 4; h++)
			want_key[d] += fabsf(q[h * 128 + d]);
	}
	for (uint32_t r = 1; r <= 128; r *= 2) {
		uint32_t g = kvc_topr_dims(q, 4, 128, r, dims, key);
		uint32_t w = brute(want_key, 128, r, want);

		cr_assert(g == w && memcmp(dims, want, w * 4) == 0,
			  "group r %u", r);
	}
	/* the sign does not matter, the magnitude does */
	float q2[8] = { 0.1f, -9, 0.2f, 8, -0.3f, 0, 7, -0.05f };

	cr_assert(eq(u32, kvc_topr_dims(q2, 1, 8, 3, dims, key), 3));
	cr_assert(dims[0] == 1 && dims[1] == 3 && dims[2] == 6);
}

/* Special values in long rows (radix select) and short ones (heap): NaN
 * last, infinities in place, -0 equal to +0 (ties by index). */
Test(topk, special_values_both_paths)
{
	static const float special[] = { NAN,   -NAN,  INFINITY, -INFINITY,
					 0.0f,  -0.0f, 1e-45f,   -1e-45f,
					 3e38f, -3e38f };
	static const uint32_t ns[] = { 50, 2048, 2049, 7000 };
	uint64_t rng = rng_seed("topk.special_values_both_paths");

	for (size_t a = 0; a < sizeof(ns) / sizeof(ns[0]); a++) {
		uint32_t n = ns[a];
		float *x = kr_xmalloc((size_t)n * 4);
		uint32_t ks[] = { 1, 3, n / 10, n / 2, n - 3, n - 1 };

		for (uint32_t i = 0; i < n; i++)
			x[i] = rng_below(&rng, 3) == 0 ?
				       special[rng_below(&rng, 10)] :
				       (float)kr_uniform(&rng, -2, 2);
		for (size_t b = 0; b < sizeof(ks) / sizeof(ks[0]); b++)
			check(x, n, ks[b], "special");
		free(x);
	}
}
