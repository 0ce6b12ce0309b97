/*
 * test_planners.c - the calls behind the planners: K,V recomputed near
 * the data from the stored X (kvf_kv_weights_set, kvf_recompute_kv) equal
 * the K,V a caller computed and stored; the X-cache split (kvf_attend_x
 * over [0, a), the caller's attention over [a, s), merged by LSE) equals
 * dense attention over the whole context; kvf_kvpr_start hands out X of
 * [0, l) and K,V of [l, s) as kvf_read_x and kvf_read give them;
 * kvf_profile_run keeps a profile that survives a reopen and is refused
 * when damaged.  Every refusal is checked for its status and message.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_fixture.h"
#include "testutil.h"

TestSuite(planners, .init = fx_setup_dir, .fini = fx_teardown, .timeout = 120);

#define PQ 4  /* query heads */
#define PKV 2 /* kv heads (GQA 2) */
#define PD 16 /* head_dim */
#define PX (PQ * PD)
#define PC (PKV * PD)
#define PS 300 /* tokens */
#define THETA 10000.0f

static float xs[PS][PX], ks[PS][PC], vs[PS][PC];
static float wk[PX][PC], wv[PX][PC];

static float frand(uint64_t *r)
{
	return (float)((double)(rng_next(r) >> 11) / 9007199254740992.0) * 2 - 1;
}

/* reference - K = RoPE(X W_k), V = X W_v in double, rotate-half RoPE */
static void reference(void)
{
	for (int t = 0; t < PS; t++)
		for (int c = 0; c < PC; c++) {
			double k = 0, v = 0;

			for (int j = 0; j < PX; j++) {
				k += (double)xs[t][j] * wk[j][c];
				v += (double)xs[t][j] * wv[j][c];
			}
			ks[t][c] = (float)k;
			vs[t][c] = (float)v;
		}
	for (int t = 0; t < PS; t++)
		for (int h = 0; h < PKV; h++)
			for (int i = 0; i < PD / 2; i++) {
				double ang = t * pow(THETA, -2.0 * i / PD);
				float *r = &ks[t][h * PD];
				double a = r[i], b = r[i + PD / 2];

				r[i] = (float)(a * cos(ang) - b * sin(ang));
				r[i + PD / 2] = (float)(a * sin(ang) + b * cos(ang));
			}
}

/* open_store - an f32 store at fx.path with PS tokens of K, V and X in
 * sequence 1 layer 0 and the weights registered; x_tokens of X only */
static kvf_store *open_store(uint64_t x_tokens, int weights)
{
	kvf_model m = { 2, PQ, PKV, PD, KVF_DTYPE_F32 };
	kvf_options o;
	kvf_store *st;
	uint64_t r = rng_seed("planners");

	for (int t = 0; t < PS; t++)
		for (int j = 0; j < PX; j++)
			xs[t][j] = frand(&r);
	for (int j = 0; j < PX; j++)
		for (int c = 0; c < PC; c++) {
			wk[j][c] = frand(&r) / 8;
			wv[j][c] = frand(&r) / 8;
		}
	reference();
	kvf_options_init(&o, &m);
	o.capacity_bytes = 64 << 20;
	o.segment_size = 64 << 10;
	o.n_threads = 1;
	OK(kvf_open(fx.path, &o, &st));
	fx.st = st;
	OK(kvf_seq_create(st, 1));
	OK(kvf_append(st, 1, 0, PS, ks, vs));
	if (x_tokens)
		OK(kvf_append_x(st, 1, 0, (uint32_t)x_tokens, xs));
	if (weights)
		OK(kvf_kv_weights_set(st, 0, &wk[0][0], &wv[0][0], THETA));
	return st;
}

static double rel_err(const float *a, const float *b, size_t n)
{
	double num = 0, den = 0;

	for (size_t i = 0; i < n; i++) {
		num = fmax(num, fabs((double)a[i] - b[i]));
		den = fmax(den, fabs((double)b[i]));
	}
	return den > 0 ? num / den : num;
}

static void has(kvf_status rc, kvf_status want, const char *sub)
{
	cr_assert(eq(int, rc, want), "gave %d: %s", rc, kvf_last_error());
	cr_assert(strstr(kvf_last_error(), sub) != NULL, "\"%s\" lacks \"%s\"",
		  kvf_last_error(), sub);
}

Test(planners, recomputed_kv_equals_stored)
{
	kvf_store *st = open_store(PS, 1);
	static float k[PS][PC], v[PS][PC], kr[PS][PD], vr[PS][PD];

	OK(kvf_recompute_kv(st, 1, 0, 0, PS, &k[0][0], &v[0][0]));
	for (int h = 0; h < PKV; h++) {
		static float kh[PS][PD], vh[PS][PD];

		OK(kvf_read(st, 1, 0, h, 0, PS, kr, vr));
		for (int t = 0; t < PS; t++) {
			memcpy(kh[t], &k[t][h * PD], sizeof(kh[t]));
			memcpy(vh[t], &v[t][h * PD], sizeof(vh[t]));
		}
		cr_assert(rel_err(&kh[0][0], &kr[0][0], PS * PD) < 1e-5,
			  "K head %d: %g", h, rel_err(&kh[0][0], &kr[0][0], PS * PD));
		cr_assert(rel_err(&vh[0][0], &vr[0][0], PS * PD) < 1e-5,
			  "V head %d", h);
	}
	/* a sub-range starts at its own positions */
	OK(kvf_recompute_kv(st, 1, 0, 77, 141, &k[0][0], NULL));
	cr_assert(rel_err(&k[0][0], &ks[77][0], 64 * PC) < 1e-5);
}

/* merged - X-cache over [0, a) merged with the caller's [a, s) */
static void merged_vs_dense(kvf_store *st, uint64_t a, int async)
{
	float q[PQ * PD], out_x[PQ * PD], lse_x[PQ], out_c[PQ * PD], lse_c[PQ];
	float out[PQ * PD], lse[PQ], dense[PQ * PD];
	static uint8_t mask[PS];
	kvf_attn_opts ox, oc;
	uint64_t r = 99 + a;

	for (int i = 0; i < PQ * PD; i++)
		q[i] = frand(&r);
	kvf_attn_opts_init(&ox);
	ox.lse = lse_x;
	if (async) {
		kvf_job *job;

		OK(kvf_attend_x_start(st, 1, 0, 0, a, q, out_x, &ox, &job));
		OK(kvf_job_wait(job));
	} else {
		OK(kvf_attend_x(st, 1, 0, 0, a, q, out_x, &ox));
	}
	for (int t = 0; t < PS; t++)
		mask[t] = t >= (int)a;
	kvf_attn_opts_init(&oc);
	oc.lse = lse_c;
	oc.mask = mask;
	oc.mask_len = PS;
	OK(kvf_attend(st, 1, 0, q, out_c, &oc));
	OK(kvf_attn_merge(PQ, PD, out_x, lse_x, out_c, lse_c, out, lse));
	OK(kvf_attend(st, 1, 0, q, dense, NULL));
	cr_assert(rel_err(out, dense, PQ * PD) < 1e-5, "a %llu: %g",
		  (unsigned long long)a, rel_err(out, dense, PQ * PD));
}

Test(planners, xcache_merge_equals_dense)
{
	kvf_store *st = open_store(PS, 1);

	merged_vs_dense(st, 0, 0);    /* everything by the caller */
	merged_vs_dense(st, 1, 0);
	merged_vs_dense(st, 123, 0);
	merged_vs_dense(st, 200, 1);  /* in the background */
	merged_vs_dense(st, PS, 0);   /* everything from X */
}

Test(planners, attend_x_empty_range)
{
	kvf_store *st = open_store(PS, 1);
	float q[PQ * PD] = { 1 }, out[PQ * PD], lse[PQ];
	kvf_attn_opts o;

	kvf_attn_opts_init(&o);
	o.lse = lse;
	memset(out, 0x7f, sizeof(out));
	OK(kvf_attend_x(st, 1, 0, 5, 5, q, out, &o));
	for (int i = 0; i < PQ; i++)
		cr_assert(isinf(lse[i]) && lse[i] < 0);
	for (int i = 0; i < PQ * PD; i++)
		cr_assert(eq(flt, out[i], 0.0f));
}

Test(planners, recompute_refusals)
{
	kvf_store *st = open_store(100, 0);
	float q[PQ * PD] = { 0 }, out[PQ * PD], k[PC];
	static float bad[PX][PC];
	kvf_attn_opts o;
	kvf_job *job = (kvf_job *)&o;

	has(kvf_recompute_kv(st, 1, 0, 0, 1, k, NULL), KVF_ENOENT,
	    "no K,V weights registered for layer 0");
	has(kvf_kv_weights_set(st, 2, &wk[0][0], &wv[0][0], 0), KVF_ERANGE,
	    "layer 2 out of range");
	has(kvf_kv_weights_set(st, 0, NULL, &wv[0][0], 0), KVF_EINVAL, "w_k is NULL");
	has(kvf_kv_weights_set(st, 0, &wk[0][0], &wv[0][0], -1), KVF_EINVAL,
	    "rope_theta -1");
	has(kvf_kv_weights_set(st, 0, &wk[0][0], &wv[0][0], NAN), KVF_EINVAL,
	    "rope_theta nan");
	bad[3][5] = NAN;
	has(kvf_kv_weights_set(st, 0, &wk[0][0], &bad[0][0], 0), KVF_EINVAL,
	    "w_v[101] is not finite");
	/* none of these registered anything */
	has(kvf_recompute_kv(st, 1, 0, 0, 1, k, NULL), KVF_ENOENT, "no K,V weights");
	OK(kvf_kv_weights_set(st, 0, &wk[0][0], &wv[0][0], THETA));
	has(kvf_recompute_kv(st, 1, 0, 0, 101, k, NULL), KVF_ERANGE,
	    "past the end of the X of sequence 1 layer 0 (100 tokens)");
	has(kvf_recompute_kv(st, 1, 0, 5, 4, k, NULL), KVF_EINVAL, "reversed");
	has(kvf_recompute_kv(st, 1, 0, 0, 1, NULL, NULL), KVF_EINVAL, "both NULL");
	has(kvf_recompute_kv(st, 9, 0, 0, 1, k, NULL), KVF_ENOENT, "9");
	has(kvf_recompute_kv(st, 1, 1, 0, 1, k, NULL), KVF_ERANGE,
	    "X of sequence 1 layer 1 (0 tokens)");
	has(kvf_recompute_kv(st, 1, 5, 0, 1, k, NULL), KVF_ERANGE, "layer 5");
	kvf_attn_opts_init(&o);
	o.sparse = 1;
	has(kvf_attend_x(st, 1, 0, 0, 10, q, out, &o), KVF_ENOTSUP, "opts.sparse");
	kvf_attn_opts_init(&o);
	o.window = 4;
	has(kvf_attend_x(st, 1, 0, 0, 10, q, out, &o), KVF_ENOTSUP, "opts.window");
	has(kvf_attend_x(st, 1, 0, 0, 10, NULL, out, NULL), KVF_EINVAL, "q is NULL");
	has(kvf_attend_x_start(st, 1, 0, 0, 101, q, out, NULL, &job), KVF_ERANGE,
	    "past the end of the X");
	cr_assert(job == NULL);
	has(kvf_attend_x_start(st, 1, 0, 0, 10, q, out, NULL, NULL), KVF_EINVAL,
	    "job is NULL");
	/* a weight registered again replaces the old */
	OK(kvf_kv_weights_set(st, 0, &wv[0][0], &wv[0][0], 0));
	OK(kvf_recompute_kv(st, 1, 0, 0, 1, k, NULL));
	cr_assert(rel_err(k, vs[0], PC) < 1e-5);
}

Test(planners, kvpr_hands_out_both_ranges)
{
	kvf_store *st = open_store(200, 0);
	static float x[PS][PX], k[PKV][PS][PD], v[PKV][PS][PD];
	static float kr[PS][PD], vr[PS][PD], xr[PS][PX];
	uint64_t splits[][2] = { { 120, PS }, { 0, PS }, { 200, 200 }, { 0, 0 },
				 { 50, 90 } };

	for (size_t i = 0; i < sizeof(splits) / sizeof(splits[0]); i++) {
		uint64_t l = splits[i][0], s = splits[i][1];
		kvf_job *job;

		memset(k, 0, sizeof(k));
		OK(kvf_kvpr_start(st, 1, 0, l, s, x, k, v, &job));
		/* X is there at once */
		if (l) {
			OK(kvf_read_x(st, 1, 0, 0, l, xr));
			cr_assert(memcmp(x, xr, l * sizeof(xr[0])) == 0);
		}
		OK(kvf_job_wait(job));
		for (int h = 0; h < PKV && s > l; h++) {
			/* head h's rows are [s - l][PD] from k[0][0] + h (s - l) PD */
			const float *kh = &k[0][0][0] + (size_t)h * (s - l) * PD;
			const float *vh = &v[0][0][0] + (size_t)h * (s - l) * PD;

			OK(kvf_read(st, 1, 0, h, l, s, kr, vr));
			cr_assert(memcmp(kh, kr, (s - l) * sizeof(kr[0])) == 0,
				  "split %zu head %d", i, h);
			cr_assert(memcmp(vh, vr, (s - l) * sizeof(vr[0])) == 0);
		}
	}
}

Test(planners, kvpr_refusals)
{
	kvf_store *st = open_store(200, 0);
	static float x[PS][PX], k[PKV][PS][PD], v[PKV][PS][PD];
	kvf_job *job = (kvf_job *)x;

	has(kvf_kvpr_start(st, 1, 0, 10, 5, x, k, v, &job), KVF_EINVAL,
	    "split l 10 is past s 5");
	cr_assert(job == NULL);
	has(kvf_kvpr_start(st, 1, 0, 10, PS + 1, x, k, v, &job), KVF_ERANGE,
	    "s 301 is past the end of sequence 1 layer 0 (300 tokens)");
	has(kvf_kvpr_start(st, 1, 0, 201, PS, x, k, v, &job), KVF_ERANGE,
	    "l 201 is past the X of sequence 1 layer 0 (200 tokens)");
	has(kvf_kvpr_start(st, 1, 0, 10, PS, NULL, k, v, &job), KVF_EINVAL,
	    "x_out is NULL");
	has(kvf_kvpr_start(st, 1, 0, 10, PS, x, k, NULL, &job), KVF_EINVAL,
	    "v_out is NULL");
	has(kvf_kvpr_start(st, 7, 0, 0, 1, x, k, v, &job), KVF_ENOENT, "7");
	has(kvf_kvpr_start(st, 1, 9, 0, 1, x, k, v, &job), KVF_ERANGE, "layer 9");
	has(kvf_kvpr_start(st, 1, 0, 0, 1, x, k, v, NULL), KVF_EINVAL, "job is NULL");
}

Test(planners, profile_kept_with_the_store)
{
	kvf_store *st = open_store(0, 0);
	kvf_profile p, g, bad;
	char path[4096];
	FILE *f;

	kvf_profile_init(&g);
	has(kvf_profile_get(st, &g), KVF_ENOENT, "has no profile");
	kvf_profile_init(&p);
	has(kvf_profile_run(st, 50, 256, &p), KVF_EINVAL, "p.caller_flops 0");
	p.caller_flops = 1e10;
	p.link_bytes_per_s = NAN;
	has(kvf_profile_run(st, 50, 256, &p), KVF_EINVAL, "p.link_bytes_per_s nan");
	p.link_bytes_per_s = 1e10;
	has(kvf_profile_run(st, 1, 256, &p), KVF_EEXIST, "scratch sequence");
	has(kvf_profile_run(st, 50, (1u << 20) + 1, &p), KVF_ERANGE, "n_tokens");
	has(kvf_profile_get(st, &g), KVF_ENOENT, "has no profile");
	cr_assert(eq(dbl, p.read_cold_bytes_per_s, 0.0), "nothing published");
	OK(kvf_profile_run(st, 50, 256, &p));
	cr_assert(p.read_cold_bytes_per_s > 0 && p.read_warm_bytes_per_s > 0);
	cr_assert(p.attend_tokens_per_s > 0 && p.store_flops > 0);
	cr_assert(eq(dbl, p.sparf_cold_bytes_per_s, 0.0), "no kt_pages");
	cr_assert(eq(u64, p.profile_tokens, 256));
	cr_assert(eq(dbl, p.caller_flops, 1e10));
	/* the scratch sequence is gone */
	{
		uint64_t n;

		cr_assert(eq(int, kvf_seq_len(st, 50, 0, &n), KVF_ENOENT));
	}
	OK(kvf_close(st));
	fx.st = NULL;
	OK(kvf_open(fx.path, NULL, &st));
	fx.st = st;
	OK(kvf_profile_get(st, &g));
	cr_assert(memcmp(&g, &p, sizeof(p)) == 0, "the same after a reopen");
	/* a planner reads it as it is */
	{
		kvf_model m = { 2, PQ, PKV, PD, KVF_DTYPE_F32 };
		kvf_xcache_plan xp = { .struct_size = sizeof(xp) };

		OK(kvf_plan_xcache(&g, &m, 1000, 1000, &xp));
	}
	/* one byte changed: refused, by name */
	snprintf(path, sizeof(path), "%s/PROFILE", fx.path);
	f = fopen(path, "r+b");
	cr_assert(f != NULL);
	fseek(f, 20, SEEK_SET);
	fputc(0x55, f);
	fclose(f);
	kvf_profile_init(&bad);
	has(kvf_profile_get(st, &bad), KVF_ECORRUPT, "PROFILE fails its checksum");
	cr_assert(eq(dbl, bad.read_cold_bytes_per_s, 0.0));
	f = fopen(path, "wb");
	fputs("hello", f);
	fclose(f);
	has(kvf_profile_get(st, &bad), KVF_ECORRUPT, "is not a profile");
	/* a run replaces it */
	OK(kvf_profile_run(st, 50, 128, &p));
	OK(kvf_profile_get(st, &g));
	cr_assert(eq(u64, g.profile_tokens, 128));
	/* read-only: refused, and the profile is still there to read */
	OK(kvf_close(st));
	fx.st = NULL;
	{
		kvf_options ro;

		kvf_options_init(&ro, NULL);
		ro.read_only = 1;
		OK(kvf_open(fx.path, &ro, &st));
		fx.st = st;
	}
	has(kvf_profile_run(st, 50, 128, &p), KVF_ENOTSUP, "read-only");
	kvf_profile_init(&bad);
	OK(kvf_profile_get(st, &bad));
	cr_assert(memcmp(&bad, &g, sizeof(g)) == 0);
}
