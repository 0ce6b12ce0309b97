/*
 * test_optim_norm.c - the gradient norm helpers of compute/optim.h:
 * sums of squares (dense, sparse, every variant; relative 1e-12, as the
 * order of double additions differs), overflow, NaN/Inf detection at every
 * position, and the clip coefficient of torch.nn.utils.clip_grad_norm_.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/half.h"
#include "compute/optim.h"
#include "optim_fixture.h"
#include "testutil.h"

/* ---- gradient norm and NaN/Inf ------------------------------------------- */

/* ref_sumsq - the sum of squares in long double (each square exact). */
static long double ref_sumsq(const void *g, size_t n, kvf_dtype dt)
{
	long double s = 0;

	for (size_t i = 0; i < n; i++) {
		long double x = ofx_get(g, i, dt);

		s += x * x;
	}
	return s;
}

/*
 * sumsq_case - the sum of squares of n random values of dt (30% nonzero),
 * dense and as a Top-K value list, on every variant, against ref_sumsq.
 */
static void sumsq_case(const struct kvc_optim *const *vs, int nv, size_t n,
		       kvf_dtype dt, uint64_t *rng)
{
	struct rstate r;
	long double want;

	ofx_rstate_make(&r, rng, n, dt, KVF_DTYPE_F32, 30);
	want = ref_sumsq(r.g, n, dt);
	for (int vi = 0; vi < nv; vi++) {
		double dense = kvc_optim_grad_sumsq(vs[vi], r.g, n, dt);
		double sparse = kvc_optim_grad_sumsq(vs[vi], r.val, r.nnz, dt);

		cr_assert(fabsl(dense - want) <= 1e-12L * want,
			  "%s %s n=%zu: %.17g want %.17Lg",
			  kvc_optim_name(vs[vi]), kr_dtype_name(dt), n, dense,
			  want);
		cr_assert(fabsl(sparse - want) <= 1e-12L * want,
			  "%s %s n=%zu sparse: %.17g want %.17Lg",
			  kvc_optim_name(vs[vi]), kr_dtype_name(dt), n, sparse,
			  want);
	}
	ofx_rstate_free(&r);
}

Test(optim, sumsq_dense_sparse_and_variants)
{
	const struct kvc_optim *vs[2];
	int nv = ofx_variants(vs);
	uint64_t rng = rng_seed("optim sumsq");

	for (int gd = 0; gd < 3; gd++) {
		for (size_t li = 0; li < N_LENGTHS; li++)
			sumsq_case(vs, nv, lengths[li], dtypes[gd], &rng);
	}
}

Test(optim, sumsq_cannot_overflow_and_flags_nonfinite)
{
	const struct kvc_optim *vs[2];
	int nv = ofx_variants(vs);
	float g[100];

	for (int i = 0; i < 100; i++)
		g[i] = i % 2 ? FLT_MAX : -FLT_MAX;
	for (int vi = 0; vi < nv; vi++) {
		double s = kvc_optim_grad_sumsq(vs[vi], g, 100, KVF_DTYPE_F32);

		cr_assert(isfinite(s) && s > 1e78, "%s: %g",
			  kvc_optim_name(vs[vi]), s);
		g[37] = INFINITY;
		cr_assert(isinf(
			kvc_optim_grad_sumsq(vs[vi], g, 100, KVF_DTYPE_F32)));
		g[37] = NAN;
		cr_assert(isnan(
			kvc_optim_grad_sumsq(vs[vi], g, 100, KVF_DTYPE_F32)));
		g[37] = 1.0f;
		cr_assert(eq(dbl,
			     kvc_optim_grad_sumsq(vs[vi], g, 0, KVF_DTYPE_F32),
			     0.0));
	}
}

/*
 * nonfinite_case - the NaN/Inf check of variant k over n elements of dt at
 * g: none in a mix of the largest finite value, a subnormal and zeros;
 * then +Inf, -Inf and NaN at every step-th position, one at a time.
 */
static void nonfinite_case(const struct kvc_optim *k, void *g, size_t n,
			   kvf_dtype dt, size_t step)
{
	static const float bad[3] = { INFINITY, -INFINITY, NAN };
	float big = dt == KVF_DTYPE_F16  ? 65504.0f :
		    dt == KVF_DTYPE_BF16 ? kvf_bf16_to_f32(0x7f7f) :
					   FLT_MAX;
	float tiny = dt == KVF_DTYPE_F16  ? 0x1p-24f :
		     dt == KVF_DTYPE_BF16 ? 0x1p-133f :
					    0x1p-149f;
	const char *name = kvc_optim_name(k);

	for (size_t i = 0; i < n; i++)
		ofx_put(g, i, dt, i % 3 == 0 ? -big : i % 3 == 1 ? tiny : 0.0f);
	cr_assert(false == kvc_optim_grad_nonfinite(k, g, n, dt),
		  "%s %s n=%zu: finite values flagged", name, kr_dtype_name(dt),
		  n);
	for (size_t pos = 0; pos < n; pos += step) {
		float keep = ofx_get(g, pos, dt);

		for (int b = 0; b < 3; b++) {
			ofx_put(g, pos, dt, bad[b]);
			cr_assert(kvc_optim_grad_nonfinite(k, g, n, dt),
				  "%s %s n=%zu: %g at %zu missed", name,
				  kr_dtype_name(dt), n, (double)bad[b], pos);
		}
		ofx_put(g, pos, dt, keep);
	}
	ofx_put(g, n - 1, dt, NAN); /* the very last element */
	cr_assert(kvc_optim_grad_nonfinite(k, g, n, dt));
}

Test(optim, nonfinite_at_every_position_of_every_dtype)
{
	static const size_t ns[] = { 1, 7, 8, 9, 15, 16, 17, 33, 1000, 2100 };
	const struct kvc_optim *vs[2];
	int nv = ofx_variants(vs);
	unsigned char *buf = ofx_xmalloc(2101 * 4);

	for (int vi = 0; vi < nv; vi++) {
		for (size_t x = 0; x < 3 * sizeof(ns) / sizeof(ns[0]); x++) {
			kvf_dtype dt = dtypes[x % 3];
			size_t n = ns[x / 3];

			/* unaligned; every position up to 100, then a sample */
			nonfinite_case(vs[vi], buf + ofx_elt_bytes(dt), n, dt,
				       n > 100 ? 13 : 1);
		}
		cr_assert(false == kvc_optim_grad_nonfinite(vs[vi], NULL, 0,
							    KVF_DTYPE_F32));
	}
	free(buf);
}

Test(optim, clip_coef_is_torch_clip_grad_norm)
{
	/* clip_coef = max_norm / (total_norm + 1e-6), clamped to <= 1, fp32 */
	cr_assert(eq(flt, kvc_optim_clip_coef(0.5, 1.0), 1.0f));
	cr_assert(eq(flt, kvc_optim_clip_coef(0.0, 1.0), 1.0f));
	cr_assert(
		eq(flt, kvc_optim_clip_coef(4.0, 1.0), 1.0f / (4.0f + 1e-6f)));
	cr_assert(
		eq(flt, kvc_optim_clip_coef(2.5, 0.5), 0.5f / (2.5f + 1e-6f)));
	/* at max_norm it already scales a hair, as PyTorch does */
	cr_assert(kvc_optim_clip_coef(1.0, 1.0) < 1.0f);
	cr_assert(kvc_optim_clip_coef(1.0, 1.0) > 0.999998f);
}
