/*
 * test_attend.c - attention near the data against a double-precision
 * reference computed from the same K and V read back with kvf_read
 * (store_fixture.h, "attention"): every dtype, GQA groupings, lengths
 * around the token group, LSE, masks, windows, batches, merges,
 * probabilities, top-k and H2O, raw scores block by block; and each bad
 * argument with its status and message.  SparF is test_sparf.c.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/half.h"
#include "kvflash.h"
#include "store_fixture.h"
#include "testutil.h"

TestSuite(attend, .init = fx_setup_dir, .fini = fx_teardown, .timeout = 120);

static void attend_matches(kvf_dtype dt, uint32_t qh, uint32_t kvh)
{
	static const uint32_t lens[] = { 0, 1, 31, 32, 33, 700 };
	struct attn_fx f = fx_attn_open("s", dt, qh, kvh);
	float *q = malloc(qh * DIM * sizeof(float)),
	      *out = malloc(qh * DIM * sizeof(float));
	float *lse = malloc(qh * sizeof(float));
	double *rout = malloc(qh * DIM * sizeof(double)),
	       *rlse = malloc(qh * sizeof(double));
	kvf_attn_opts o;
	uint64_t seq = 1;

	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++, seq++) {
		cr_assert(eq(int, kvf_seq_create(f.st, seq), KVF_OK));
		if (lens[i])
			fx_attn_append(&f, seq, lens[i]);
		for (uint32_t j = 0; j < qh * DIM; j++)
			q[j] = fx_urand(&f.rng) * 3;
		kvf_attn_opts_init(&o);
		o.lse = lse;
		cr_assert(eq(int, kvf_attend(f.st, seq, 1, q, out, &o), KVF_OK),
			  "%s", kvf_last_error());
		fx_attn_reference(&f, seq, 1, q, 1.0f / sqrtf(DIM), NULL, 0,
				  rout, rlse, NULL);
		fx_check_close(out, rout, qh * DIM, 2e-5, "out");
		for (uint32_t h = 0; h < qh; h++) {
			if (lens[i] == 0)
				cr_assert(eq(flt, lse[h], -INFINITY));
			else
				cr_assert(le(dbl, fabs(lse[h] - rlse[h]), 1e-4),
					  "lse[%u] %g, reference %g", h,
					  (double)lse[h], rlse[h]);
		}
	}
	kvf_close(f.st);
	free(q);
	free(out);
	free(lse);
	free(rout);
	free(rlse);
}

Test(attend, f16_gqa4)
{
	attend_matches(KVF_DTYPE_F16, 8, 2);
}
Test(attend, bf16_gqa2)
{
	attend_matches(KVF_DTYPE_BF16, 4, 2);
}
Test(attend, f32_mha)
{
	attend_matches(KVF_DTYPE_F32, 2, 2);
}

/* mask and window; a window merged with the rest (masked) is the whole */
Test(attend, mask_window_merge_batch)
{
	struct attn_fx f = fx_attn_open("s", KVF_DTYPE_F16, 4, 2);
	float q[4 * DIM], out[4 * DIM], a[4 * DIM], b[4 * DIM], whole[4 * DIM];
	float la[4], lb[4], lw[4];
	double rout[4 * DIM], rlse[4];
	uint8_t *mask = malloc(500);
	kvf_attn_opts o;

	cr_assert(eq(int, kvf_seq_create(f.st, 9), KVF_OK));
	cr_assert(eq(int, kvf_seq_create(f.st, 10), KVF_OK));
	fx_attn_append(&f, 9, 500);
	fx_attn_append(&f, 10, 77);
	for (int j = 0; j < 4 * DIM; j++)
		q[j] = fx_urand(&f.rng) * 2;
	for (int t = 0; t < 500; t++)
		mask[t] = (t % 3) != 0;
	kvf_attn_opts_init(&o);
	o.mask = mask;
	o.mask_len = 500;
	o.scale = 0.2f;
	cr_assert(eq(int, kvf_attend(f.st, 9, 0, q, out, &o), KVF_OK), "%s",
		  kvf_last_error());
	fx_attn_reference(&f, 9, 0, q, 0.2f, mask, 0, rout, rlse, NULL);
	fx_check_close(out, rout, 4 * DIM, 2e-5, "masked");
	/* window of the last 120 tokens vs the first 380 through a mask */
	kvf_attn_opts_init(&o);
	o.window = 120;
	o.lse = lb;
	cr_assert(eq(int, kvf_attend(f.st, 9, 0, q, b, &o), KVF_OK));
	for (int t = 0; t < 500; t++)
		mask[t] = t < 380;
	kvf_attn_opts_init(&o);
	o.mask = mask;
	o.mask_len = 500;
	o.lse = la;
	cr_assert(eq(int, kvf_attend(f.st, 9, 0, q, a, &o), KVF_OK));
	cr_assert(
		eq(int, kvf_attn_merge(4, DIM, a, la, b, lb, out, la), KVF_OK));
	kvf_attn_opts_init(&o);
	o.lse = lw;
	cr_assert(eq(int, kvf_attend(f.st, 9, 0, q, whole, &o), KVF_OK));
	for (int j = 0; j < 4 * DIM; j++)
		cr_assert(le(flt, fabsf(out[j] - whole[j]), 1e-5f),
			  "merged[%d]", j);
	for (int h = 0; h < 4; h++)
		cr_assert(le(flt, fabsf(la[h] - lw[h]), 1e-5f));
	/* a batch equals one call per sequence */
	{
		uint64_t ids[2] = { 10, 9 };
		float qq[2 * 4 * DIM], bo[2 * 4 * DIM], one[4 * DIM];

		memcpy(qq, q, sizeof(q));
		for (int j = 0; j < 4 * DIM; j++)
			qq[4 * DIM + j] = -q[j];
		cr_assert(eq(int,
			     kvf_attend_batch(f.st, 2, ids, 1, qq, bo, NULL),
			     KVF_OK),
			  "%s", kvf_last_error());
		cr_assert(eq(int, kvf_attend(f.st, 10, 1, qq, one, NULL),
			     KVF_OK));
		cr_assert(eq(int, memcmp(one, bo, sizeof(one)), 0));
		cr_assert(eq(int,
			     kvf_attend(f.st, 9, 1, qq + 4 * DIM, one, NULL),
			     KVF_OK));
		cr_assert(eq(int, memcmp(one, bo + 4 * DIM, sizeof(one)), 0));
	}
	free(mask);
	kvf_close(f.st);
}

/* probabilities, top-k and H2O, after a reopen (pages from media) */
Test(attend, scores_topk_h2o)
{
	struct attn_fx f = fx_attn_open("s", KVF_DTYPE_F16, 4, 2);
	float q[4 * DIM], *probs = malloc(4 * 300 * sizeof(float));
	double rout[4 * DIM], rlse[4], *rp = calloc(4 * 300, sizeof(double));
	uint64_t tok[2 * 5];
	float mass[2 * 5], h2o[300];
	uint32_t n_out[2];
	kvf_attn_opts o;

	cr_assert(eq(int, kvf_seq_create(f.st, 3), KVF_OK));
	fx_attn_append(&f, 3, 300);
	kvf_close(f.st);
	cr_assert(
		eq(int, kvf_open(tmp_path(fx.dir, "s"), NULL, &f.st), KVF_OK));
	for (int j = 0; j < 4 * DIM; j++)
		q[j] = fx_urand(&f.rng) * 4;
	cr_assert(eq(int, kvf_scores(f.st, 3, 0, q, NULL, probs, 300), KVF_OK),
		  "%s", kvf_last_error());
	fx_attn_reference(&f, 3, 0, q, 1.0f / sqrtf(DIM), NULL, 0, rout, rlse,
			  rp);
	fx_check_close(probs, rp, 4 * 300, 1e-5, "probs");
	cr_assert(eq(int, kvf_topk(f.st, 3, 0, q, NULL, 5, tok, mass, n_out),
		     KVF_OK));
	for (uint32_t kh = 0; kh < 2; kh++) {
		double best[300];

		cr_assert(eq(u32, n_out[kh], 5));
		for (int t = 0; t < 300; t++)
			best[t] = (rp[(kh * 2) * 300 + t] +
				   rp[(kh * 2 + 1) * 300 + t]) /
				  2;
		for (int j = 0; j < 5; j++) {
			int above = 0;

			for (int t = 0; t < 300; t++)
				above += best[t] > best[tok[kh * 5 + j]] + 1e-6;
			cr_assert(lt(int, above, 5),
				  "head %u token %llu is not in the top 5", kh,
				  (unsigned long long)tok[kh * 5 + j]);
			cr_assert(le(dbl,
				     fabs(mass[kh * 5 + j] -
					  best[tok[kh * 5 + j]]),
				     1e-5));
		}
	}
	kvf_attn_opts_init(&o);
	o.h2o = 1;
	cr_assert(eq(int, kvf_attend(f.st, 3, 0, q, probs, &o), KVF_OK));
	cr_assert(eq(int, kvf_attend(f.st, 3, 0, q, probs, &o), KVF_OK));
	cr_assert(eq(int, kvf_h2o_read(f.st, 3, 0, 1, 0, 300, h2o), KVF_OK));
	for (int t = 0; t < 300; t++)
		cr_assert(le(dbl,
			     fabs(h2o[t] -
				  2 * (rp[2 * 300 + t] + rp[3 * 300 + t])),
			     1e-5),
			  "h2o[%d]", t);
	free(probs);
	free(rp);
	kvf_close(f.st);
}

Test(attend, refusals)
{
	struct attn_fx f = fx_attn_open("s", KVF_DTYPE_F16, 4, 2);
	float q[4 * DIM], out[4 * DIM], probs[4 * 10];
	uint64_t tok[4], ids[2] = { 1, 1 };
	uint32_t n_out[2];
	uint8_t mask[5] = { 1, 1, 1, 1, 1 };
	kvf_attn_opts o;

	memset(q, 0, sizeof(q));
	cr_assert(eq(int, kvf_seq_create(f.st, 1), KVF_OK));
	fx_attn_append(&f, 1, 20);
	EXPECT(kvf_attend(f.st, 2, 0, q, out, NULL), KVF_ENOENT,
	       "sequence 2 does not exist");
	EXPECT(kvf_attend(f.st, 1, 2, q, out, NULL), KVF_ERANGE,
	       "layer 2 out of range");
	EXPECT(kvf_attend(f.st, 1, 0, NULL, out, NULL), KVF_EINVAL,
	       "q is NULL");
	EXPECT(kvf_attend(f.st, 1, 0, q, NULL, NULL), KVF_EINVAL,
	       "out is NULL");
	EXPECT(kvf_attend(NULL, 1, 0, q, out, NULL), KVF_EINVAL,
	       "store is NULL");
	kvf_attn_opts_init(&o);
	o.sparse = 1;
	EXPECT(kvf_attend(f.st, 1, 0, q, out, &o), KVF_ENOTSUP,
	       "needs K^T pages");
	kvf_attn_opts_init(&o);
	o.scale = -1;
	EXPECT(kvf_attend(f.st, 1, 0, q, out, &o), KVF_EINVAL, "opts.scale");
	kvf_attn_opts_init(&o);
	o.h2o = 2;
	EXPECT(kvf_attend(f.st, 1, 0, q, out, &o), KVF_EINVAL,
	       "kvf_attend: opts.h2o 2 must be 0 or 1");
	/* the typed reads name themselves in the read's refusals */
	EXPECT(kvf_read_as(f.st, 1, 0, 2, 0, 1, KVF_DTYPE_F32, out, out), KVF_ERANGE,
	       "kvf_read_as: kv_head 2 out of range");
	EXPECT(kvf_read_as(f.st, 1, 0, 0, 0, 1, KVF_DTYPE_F32, NULL, NULL), KVF_EINVAL,
	       "kvf_read_as: k_out and v_out are both NULL");
	kvf_attn_opts_init(&o);
	o.mask = mask;
	o.mask_len = 5;
	EXPECT(kvf_attend(f.st, 1, 0, q, out, &o), KVF_ERANGE,
	       "mask_len 5 is shorter");
	kvf_attn_opts_init(&o);
	o.struct_size = 0;
	EXPECT(kvf_attend(f.st, 1, 0, q, out, &o), KVF_EINVAL, "struct_size 0");
	EXPECT(kvf_attend_batch(f.st, 2, ids, 0, q, out, NULL), KVF_EINVAL,
	       "given twice");
	EXPECT(kvf_scores(f.st, 1, 0, q, NULL, probs, 10), KVF_ERANGE,
	       "probs_cap 10");
	EXPECT(kvf_topk(f.st, 1, 0, q, NULL, 0, tok, NULL, n_out), KVF_EINVAL,
	       "k is 0");
	EXPECT(kvf_h2o_read(f.st, 1, 0, 2, 0, 1, probs), KVF_ERANGE,
	       "kv_head 2 out of range");
	EXPECT(kvf_h2o_read(f.st, 1, 0, 0, 0, 21, probs), KVF_ERANGE,
	       "past the end");
	EXPECT(kvf_attn_merge(0, DIM, q, q, q, q, out, probs), KVF_EINVAL,
	       "must be > 0");
	kvf_close(f.st);
}

struct iter_seen {
	double *ref; /* [qh][len] reference probabilities */
	uint64_t len;
	double m[8], l[8]; /* softmax of what was seen, per head */
	float *s;          /* [qh][len] scores seen */
	int calls, stop_after;
};

static int seen(void *arg, uint32_t h, uint64_t first, uint32_t n,
		const float *sc)
{
	struct iter_seen *x = arg;

	memcpy(x->s + h * x->len + first, sc, n * sizeof(float));
	return ++x->calls == x->stop_after;
}

/* raw scores block by block: softmax of them is kvf_scores */
Test(attend, scores_iter)
{
	struct attn_fx f = fx_attn_open("s", KVF_DTYPE_BF16, 4, 2);
	float q[4 * DIM], probs[4 * 100];
	struct iter_seen x = { .len = 100 };

	cr_assert(eq(int, kvf_seq_create(f.st, 1), KVF_OK));
	fx_attn_append(&f, 1, 100);
	for (int j = 0; j < 4 * DIM; j++)
		q[j] = fx_urand(&f.rng) * 2;
	x.s = calloc(4 * 100, sizeof(float));
	cr_assert(eq(int, kvf_scores_iter(f.st, 1, 1, q, NULL, seen, &x),
		     KVF_OK));
	cr_assert(eq(int, kvf_scores(f.st, 1, 1, q, NULL, probs, 100), KVF_OK));
	for (int h = 0; h < 4; h++) {
		double m = -INFINITY, l = 0;

		for (int t = 0; t < 100; t++)
			m = fmax(m, x.s[h * 100 + t]);
		for (int t = 0; t < 100; t++)
			l += exp(x.s[h * 100 + t] - m);
		for (int t = 0; t < 100; t++)
			cr_assert(le(dbl,
				     fabs(exp(x.s[h * 100 + t] - m) / l -
					  probs[h * 100 + t]),
				     1e-6));
	}
	/* stopping early is the caller's choice, not an error */
	x.calls = 0;
	x.stop_after = 3;
	cr_assert(eq(int, kvf_scores_iter(f.st, 1, 1, q, NULL, seen, &x),
		     KVF_OK));
	cr_assert(eq(int, x.calls, 3));
	free(x.s);
	kvf_close(f.st);
}

/* A NaN among the scores (a NaN in a stored key, or in q) leaves a head
 * with no softmax: its out and lse are NaN, and its probabilities; the
 * empty answer (out 0, lse -INFINITY) it gave made the head look like one
 * over no token, which kvf_attn_merge then dropped.  The other heads are
 * as without it. */
Test(attend, a_nan_score_makes_the_head_nan)
{
	struct attn_fx f = fx_attn_open("s", KVF_DTYPE_F32, 2, 1);
	float k[10 * DIM], v[10 * DIM], q[2 * DIM], out[2 * DIM], lse[2];
	float probs[2 * 10], m_out[2 * DIM], m_lse[2];
	float zero[2 * DIM] = { 0 }, none[2] = { -INFINITY, -INFINITY };
	kvf_attn_opts o;

	for (uint32_t i = 0; i < 10 * DIM; i++) {
		k[i] = 0.01f * (float)(i % 17);
		v[i] = 1.0f;
	}
	for (uint32_t i = 0; i < 2 * DIM; i++)
		q[i] = 0.1f;
	OK(kvf_seq_create(f.st, 1));
	OK(kvf_seq_create(f.st, 2));
	k[4 * DIM + 3] = NAN;
	for (uint32_t l = 0; l < LAYERS; l++)
		OK(kvf_append(f.st, 1, l, 10, k, v));
	k[4 * DIM + 3] = 0;
	for (uint32_t l = 0; l < LAYERS; l++)
		OK(kvf_append(f.st, 2, l, 10, k, v));
	kvf_attn_opts_init(&o);
	o.lse = lse;
	OK(kvf_attend(f.st, 1, 0, q, out, &o));
	for (uint32_t h = 0; h < 2; h++) {
		cr_assert(isnan(lse[h]), "head %u: lse %g", h, (double)lse[h]);
		cr_assert(isnan(out[h * DIM]), "head %u: out %g", h, (double)out[h * DIM]);
	}
	OK(kvf_scores(f.st, 1, 0, q, NULL, probs, 10));
	cr_assert(isnan(probs[0]) && isnan(probs[19]), "probs %g %g", (double)probs[0], (double)probs[19]);
	/* merged with an empty side, still no answer */
	OK(kvf_attn_merge(2, DIM, out, lse, zero, none, m_out, m_lse));
	cr_assert(isnan(m_lse[0]) && isnan(m_out[0]));
	/* H2O scores take nothing from a head with no softmax: a NaN there
	 * would stay in them for good, and drops would pick at random */
	{
		float h2o[10];

		o.h2o = 1;
		OK(kvf_attend(f.st, 1, 0, q, out, &o));
		o.h2o = 0;
		OK(kvf_h2o_read(f.st, 1, 0, 0, 0, 10, h2o));
		for (int t = 0; t < 10; t++)
			cr_assert(isfinite(h2o[t]), "token %d: %g", t, (double)h2o[t]);
	}
	/* a NaN in q: that head only */
	q[3] = NAN;
	OK(kvf_attend(f.st, 2, 0, q, out, &o));
	cr_assert(isnan(lse[0]) && isnan(out[0]));
	cr_assert(isfinite(lse[1]) && fabsf(out[DIM] - 1.0f) < 1e-5f,
		  "head 1: lse %g out %g", (double)lse[1], (double)out[DIM]);
	kvf_close(f.st);
}
