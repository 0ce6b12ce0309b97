/*
 * test_plan.c - the planners (compute/plan.h and the kvf_plan_* calls):
 * the KVPR split against a brute-force search over every l, its ends
 * (s = 0, no X stored, recomputation that never pays, recomputation so
 * cheap that l = s), the X-cache share against a brute-force grid and
 * HILOS's closed form, beta, and every refused argument (rates zero,
 * negative, NaN or infinite; a bad model; NULLs) with the output left
 * untouched.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "api/status.h"
#include "compute/plan.h"
#include "kvflash.h"

static const kvf_model mha = { 32, 32, 32, 128, KVF_DTYPE_F16 };
static const kvf_model gqa = { 32, 32, 4, 128, KVF_DTYPE_F16 };

/* A GPU behind PCIe 3.0 x8, a store with near-storage accelerators
 * reading faster inside than the link carries (HILOS's setting). */
static kvf_profile gpu_like(void)
{
	kvf_profile p;

	kvf_profile_init(&p);
	p.caller_flops = 50e12;
	p.link_bytes_per_s = 8e9;
	p.read_cold_bytes_per_s = 20e9;
	p.read_warm_bytes_per_s = 40e9;
	p.attend_tokens_per_s = 2e6;
	p.store_flops = 10e12;
	p.read_x_bytes_per_s = 20e9;
	p.x_latency_s = 100e-6;
	return p;
}

Test(plan_kvpr, split_matches_brute_force)
{
	struct kvc_kvpr_costs c[] = {
		{ 1.0, 2.0, 3.0 }, { 0.5, 2.0, 0.1 }, { 0.0, 1.0, 1.0 },
		{ 1e-6, 4e-6, 5e-5 }, { 0.2, 0.3, 7.0 },
	};
	uint64_t ss[] = { 1, 2, 7, 100, 1000, 4097 };

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++)
		for (size_t j = 0; j < sizeof(ss) / sizeof(ss[0]); j++)
			for (uint64_t lmax = 0; lmax <= ss[j]; lmax += ss[j] / 3 + 1) {
				uint64_t s = ss[j], l = kvc_kvpr_split(&c[i], s, lmax);
				double best = INFINITY;

				for (uint64_t k = 0; k <= lmax && k <= s; k++)
					best = fmin(best, kvc_kvpr_time(&c[i], s, k));
				cr_assert(l <= lmax && l <= s);
				cr_assert(kvc_kvpr_time(&c[i], s, l) <= best * (1 + 1e-12),
					  "costs %zu s %llu lmax %llu: l %llu t %g best %g",
					  i, (unsigned long long)s, (unsigned long long)lmax,
					  (unsigned long long)l,
					  kvc_kvpr_time(&c[i], s, l), best);
			}
}

Test(plan_kvpr, ends)
{
	struct kvc_kvpr_costs slow_x = { 3.0, 2.0, 0.1 };
	struct kvc_kvpr_costs free_rc = { 0.0, 2.0, 0.0 };

	/* s = 0: nothing to split */
	cr_assert(eq(u64, kvc_kvpr_split(&free_rc, 0, 100), 0));
	/* X dearer than K,V: recomputing never pays, l = 0 */
	cr_assert(eq(u64, kvc_kvpr_split(&slow_x, 1000, 1000), 0));
	/* recomputation and X free: everything is recomputed, l = s */
	cr_assert(eq(u64, kvc_kvpr_split(&free_rc, 1000, 1000), 1000));
	/* ... but never past the X stored */
	cr_assert(eq(u64, kvc_kvpr_split(&free_rc, 1000, 10), 10));
}

Test(plan_kvpr, public_call)
{
	kvf_profile p = gpu_like();
	kvf_kvpr_plan a = { .struct_size = sizeof(a) }, b = a;

	cr_assert(eq(int, kvf_plan_kvpr(&p, &mha, 8192, 8192, &a), KVF_OK));
	/* GPU rates: recomputing is much faster than reading, so a large
	 * share is recomputed, bounded by the transfer of X */
	cr_assert(a.l > 0 && a.l < 8192, "l %llu", (unsigned long long)a.l);
	cr_assert(a.t_step_s > 0);
	cr_assert(fabs(a.t_recompute_s - a.t_transfer_s) <
		  0.01 * a.t_transfer_s + 1e-9, "balanced: %g vs %g",
		  a.t_recompute_s, a.t_transfer_s);
	/* no X stored: nothing to recompute */
	cr_assert(eq(int, kvf_plan_kvpr(&p, &mha, 8192, 0, &b), KVF_OK));
	cr_assert(eq(u64, b.l, 0));
	cr_assert(b.t_step_s > a.t_step_s);
	/* s = 0 */
	cr_assert(eq(int, kvf_plan_kvpr(&p, &mha, 0, 0, &b), KVF_OK));
	cr_assert(eq(u64, b.l, 0));
	cr_assert(eq(dbl, b.t_step_s, 0.0));
	/* a CPU caller (50 GFLOP/s) with a fast read path: never recompute */
	p.caller_flops = 50e9;
	p.link_bytes_per_s = p.read_cold_bytes_per_s = 20e9;
	cr_assert(eq(int, kvf_plan_kvpr(&p, &mha, 8192, 8192, &b), KVF_OK));
	cr_assert(b.l < 8192 / 100, "l %llu", (unsigned long long)b.l);
}

Test(plan_xcache, alpha_matches_grid)
{
	double cs[] = { 1.0, 0.5, 3.0, 1e-6 }, cc[] = { 1.0, 2.0, 0.1, 4e-6 };

	for (int i = 0; i < 4; i++) {
		double a = kvc_xcache_alpha(cs[i], cc[i], 1.0);
		double ta = kvc_xcache_time(cs[i], cc[i], 1000, a);

		for (int k = 0; k <= 1000; k++)
			cr_assert(ta <= kvc_xcache_time(cs[i], cc[i], 1000, k / 1000.0) * (1 + 1e-12));
	}
	cr_assert(eq(dbl, kvc_xcache_alpha(1.0, 1.0, 0.25), 0.25));
	cr_assert(eq(dbl, kvc_xcache_alpha(0.0, 0.0, 1.0), 0.0));
}

/* The trends the planners must follow: a slower link moves work to the
 * store (alpha up), a slower store moves it back; a faster caller
 * recomputes more (l up), a faster link less. */
Test(plan_xcache, trends)
{
	kvf_profile p = gpu_like();
	kvf_xcache_plan a = { .struct_size = sizeof(a) }, b = a;
	kvf_kvpr_plan k = { .struct_size = sizeof(k) }, j = k;

	cr_assert(eq(int, kvf_plan_xcache(&p, &mha, 4096, 4096, &a), KVF_OK));
	p.link_bytes_per_s /= 10; /* now below the read rate */
	cr_assert(eq(int, kvf_plan_xcache(&p, &mha, 4096, 4096, &b), KVF_OK));
	cr_assert(b.alpha > a.alpha, "%g then %g", a.alpha, b.alpha);
	p.store_flops /= 10;
	cr_assert(eq(int, kvf_plan_xcache(&p, &mha, 4096, 4096, &a), KVF_OK));
	cr_assert(a.alpha < b.alpha, "%g then %g", b.alpha, a.alpha);

	p = gpu_like();
	p.caller_flops = 20e12;
	cr_assert(eq(int, kvf_plan_kvpr(&p, &mha, 4096, 4096, &k), KVF_OK));
	p.caller_flops = 80e12;
	cr_assert(eq(int, kvf_plan_kvpr(&p, &mha, 4096, 4096, &j), KVF_OK));
	cr_assert(j.l > k.l, "%llu then %llu", (unsigned long long)k.l,
		  (unsigned long long)j.l);
	p.link_bytes_per_s *= 4;
	cr_assert(eq(int, kvf_plan_kvpr(&p, &mha, 4096, 4096, &k), KVF_OK));
	cr_assert(k.l < j.l && k.l > 0);
}

Test(plan_xcache, public_call)
{
	kvf_profile p = gpu_like();
	kvf_xcache_plan a = { .struct_size = sizeof(a) }, b = a;

	cr_assert(eq(int, kvf_plan_xcache(&p, &mha, 4096, 4096, &a), KVF_OK));
	cr_assert(a.alpha > 0 && a.alpha < 1, "alpha %g", a.alpha);
	cr_assert(eq(u32, a.x_smaller, 1));
	cr_assert(eq(u64, a.x_tokens, (uint64_t)llround(a.alpha * 4096)));
	cr_assert(fabs(a.t_store_s - a.t_caller_s) < 0.01 * a.t_step_s);
	cr_assert(eq(int, kvf_plan_xcache(&p, &gqa, 4096, 4096, &b), KVF_OK));
	cr_assert(eq(u32, b.x_smaller, 0), "GQA 32/4: X is 4x K+V's... bigger");
	/* no X stored */
	cr_assert(eq(int, kvf_plan_xcache(&p, &mha, 4096, 0, &b), KVF_OK));
	cr_assert(eq(dbl, b.alpha, 0.0));
	cr_assert(eq(u64, b.x_tokens, 0));
	cr_assert(b.t_step_s > a.t_step_s);
	/* s = 0 */
	cr_assert(eq(int, kvf_plan_xcache(&p, &mha, 0, 0, &b), KVF_OK));
	cr_assert(eq(dbl, b.t_step_s, 0.0));
}

Test(plan_beta, ratio_and_share)
{
	kvf_profile p = gpu_like();
	double beta, share, fs = p.attend_tokens_per_s * 4.0 * 32 * 128;

	cr_assert(eq(int, kvf_plan_beta(&p, &mha, &beta, &share), KVF_OK));
	cr_assert(ieee_ulp_eq(dbl, beta, p.caller_flops / fs, 4));
	cr_assert(ieee_ulp_eq(dbl, share, fs / (fs + p.caller_flops), 4));
	cr_assert(eq(int, kvf_plan_beta(&p, &mha, &beta, NULL), KVF_OK));
}

/* refused - the call gave EINVAL, the message holds sub, out untouched */
static void refused(kvf_status rc, const char *sub, const void *out,
		    const void *before, size_t n)
{
	cr_assert(eq(int, rc, KVF_EINVAL), "gave %d: %s", rc, kvf_last_error());
	cr_assert(strstr(kvf_last_error(), sub) != NULL, "\"%s\" lacks \"%s\"",
		  kvf_last_error(), sub);
	cr_assert(memcmp(out, before, n) == 0, "output changed");
}

Test(plan_refusals, rates_refused)
{
	double bad[] = { 0.0, -1.0, NAN, INFINITY };
	const char *field[] = { "caller_flops", "link_bytes_per_s",
				"read_cold_bytes_per_s", "read_x_bytes_per_s",
				"store_flops", "attend_tokens_per_s" };

	for (int f = 0; f < 6; f++)
		for (int i = 0; i < 4; i++) {
			kvf_profile p = gpu_like();
			kvf_kvpr_plan k = { .struct_size = sizeof(k), .l = 77 }, k0 = k;
			kvf_xcache_plan x = { .struct_size = sizeof(x), .alpha = 0.5 }, x0 = x;
			double beta = 9, b0 = 9;
			double *slot[] = { &p.caller_flops, &p.link_bytes_per_s,
					   &p.read_cold_bytes_per_s,
					   &p.read_x_bytes_per_s, &p.store_flops,
					   &p.attend_tokens_per_s };

			*slot[f] = bad[i];
			if (f != 3 && f != 5)
				refused(kvf_plan_xcache(&p, &mha, 100, 100, &x),
					field[f], &x, &x0, sizeof(x));
			if (f < 4)
				refused(kvf_plan_kvpr(&p, &mha, 100, 100, &k), field[f],
					&k, &k0, sizeof(k));
			else
				cr_assert(eq(int, kvf_plan_kvpr(&p, &mha, 100, 100, &k), KVF_OK));
			if (f == 0 || f == 5)
				refused(kvf_plan_beta(&p, &mha, &beta, NULL), field[f],
					&beta, &b0, sizeof(beta));
		}
}

/* The fixed cost of reading X: a split that cannot win it back is not
 * taken; a latency that is negative or NaN is refused. */
Test(plan_refusals, latency)
{
	kvf_profile p = gpu_like();
	kvf_kvpr_plan k = { .struct_size = sizeof(k) }, k0;
	kvf_xcache_plan x = { .struct_size = sizeof(x) }, x0;

	cr_assert(eq(int, kvf_plan_kvpr(&p, &mha, 4096, 4096, &k), KVF_OK));
	cr_assert(k.l > 0);
	cr_assert(eq(int, kvf_plan_xcache(&p, &mha, 4096, 4096, &x), KVF_OK));
	cr_assert(x.x_tokens > 0);
	p.x_latency_s = 1.0; /* a second to reach X: never worth it */
	cr_assert(eq(int, kvf_plan_kvpr(&p, &mha, 4096, 4096, &k), KVF_OK));
	cr_assert(eq(u64, k.l, 0));
	cr_assert(eq(int, kvf_plan_xcache(&p, &mha, 4096, 4096, &x), KVF_OK));
	cr_assert(eq(u64, x.x_tokens, 0));
	cr_assert(eq(dbl, x.alpha, 0.0));
	k0 = k;
	x0 = x;
	p.x_latency_s = -1;
	refused(kvf_plan_kvpr(&p, &mha, 4096, 4096, &k), "x_latency_s -1", &k, &k0, sizeof(k));
	p.x_latency_s = NAN;
	refused(kvf_plan_xcache(&p, &mha, 4096, 4096, &x), "x_latency_s nan", &x, &x0, sizeof(x));
}

Test(plan_refusals, arguments_refused)
{
	kvf_profile p = gpu_like();
	kvf_model m = mha;
	kvf_kvpr_plan k = { .struct_size = sizeof(k) }, k0 = k;
	double beta = 1, b0 = 1;

	refused(kvf_plan_kvpr(NULL, &mha, 1, 1, &k), "profile is NULL", &k, &k0, sizeof(k));
	refused(kvf_plan_kvpr(&p, NULL, 1, 1, &k), "model is NULL", &k, &k0, sizeof(k));
	cr_assert(eq(int, kvf_plan_kvpr(&p, &mha, 1, 1, NULL), KVF_EINVAL));
	refused(kvf_plan_beta(&p, &mha, NULL, NULL), "beta is NULL", &beta, &b0, sizeof(beta));
	m.n_kv_heads = 3;
	refused(kvf_plan_kvpr(&p, &m, 1, 1, &k), "not a multiple", &k, &k0, sizeof(k));
	m = mha;
	m.head_dim = 0;
	refused(kvf_plan_kvpr(&p, &m, 1, 1, &k), "head_dim 0", &k, &k0, sizeof(k));
	m = mha;
	m.dtype = (kvf_dtype)9;
	refused(kvf_plan_kvpr(&p, &m, 1, 1, &k), "dtype 9", &k, &k0, sizeof(k));
	m = mha;
	m.head_dim = 2000;
	{
		kvf_xcache_plan x = { .struct_size = sizeof(x), .alpha = 0.5 }, x0 = x;

		refused(kvf_plan_xcache(&p, &m, 1, 1, &x),
			"model.head_dim 2000 out of range (1..1024)", &x, &x0, sizeof(x));
	}
	/* an older caller's profile, which ends before read_cold: its rates
	 * past the end are 0 to the planners, never read */
	p.struct_size = offsetof(kvf_profile, read_cold_bytes_per_s);
	refused(kvf_plan_kvpr(&p, &mha, 1, 1, &k), "read_cold_bytes_per_s 0", &k, &k0, sizeof(k));
	p.struct_size = offsetof(kvf_profile, link_bytes_per_s);
	refused(kvf_plan_beta(&p, &mha, &beta, NULL), "attend_tokens_per_s 0", &beta, &b0, sizeof(beta));
	p.struct_size = sizeof(p);
	k.struct_size = 8;
	k0 = k;
	refused(kvf_plan_kvpr(&p, &mha, 1, 1, &k), "struct_size 8", &k, &k0, sizeof(k));
	p.struct_size = 3;
	k.struct_size = sizeof(k);
	k0 = k;
	refused(kvf_plan_kvpr(&p, &mha, 1, 1, &k), "profile.struct_size 3", &k, &k0, sizeof(k));
}

/* On few tokens the whole-token X-cache share matters: over profiles whose
 * latency and store rate move the balance, whenever some whole count of
 * tokens is predicted KVF_PLAN_MIN_GAIN faster than none (by the
 * documented model), a split is taken (rounding alpha s to the nearest
 * once lost such a split) */
Test(plan, xcache_takes_the_better_whole_token_count)
{
	const double d = 32.0 * 128, c = 32.0 * 128;

	for (int i = 0; i < 400; i++) {
		kvf_profile p = gpu_like();
		kvf_xcache_plan x = { .struct_size = sizeof(x) };
		uint64_t s = 8 + (uint64_t)(i % 40);
		double cs, cc, best = INFINITY;

		p.store_flops = 2e12 + 1e11 * (i % 37);
		p.x_latency_s = 1e-7 * (i % 23);
		cr_assert(eq(int, kvf_plan_xcache(&p, &mha, s, s, &x), KVF_OK));
		cs = 4 * d * c / p.store_flops;
		cc = 2 * c * 2 / fmin(p.read_cold_bytes_per_s, p.link_bytes_per_s) +
		     4 * d / p.caller_flops;
		for (uint64_t t = 1; t <= s; t++)
			best = fmin(best, fmax(p.x_latency_s + (double)t * cs,
					       (double)(s - t) * cc));
		if (best < (1 - KVF_PLAN_MIN_GAIN) * (double)s * cc * (1 - 1e-9))
			cr_assert(x.x_tokens > 0,
				  "case %d: a split %.4g s against %.4g s alone, none taken",
				  i, best, (double)s * cc);
	}
}
