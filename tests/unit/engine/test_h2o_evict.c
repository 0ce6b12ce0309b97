/*
 * test_h2o_evict.c - kvf_h2o_evict (docs/store.md, "H2O eviction"): its
 * refusals change nothing; after a drop every attention path equals the
 * double-precision reference (store_fixture.h, "attention") over the full
 * sequence with the dropped tokens masked, the full sequence being a fork
 * taken before the drop (it keeps its own references to the pages); the
 * marks survive a sync and reopen and a killed writer, a fork inherits
 * them, a truncation below them clears them, kvf_verify finds nothing
 * missing, and the room goes back (live pages fall).
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "engine/base/catalog.h"
#include "engine/base/meta.h"
#include "engine/sequences/seq.h"
#include "engine/sequences/seq_state.h"
#include "kvflash.h"
#include "store_fixture.h"
#include "testutil.h"

TestSuite(h2o_evict, .init = fx_setup_dir, .fini = fx_teardown, .timeout = 120);

#define QHE 4
#define KVHE 2
#define LEN (12 * G + 5) /* a part-filled tail group */
#define FULL 2           /* the fork that keeps every token */

static uint32_t ev_codec = KVF_CODEC_NONE; /* the store's codec */
static double ev_tol = 2e-5; /* attention against the reference: a
			      * codec's rows decoded in registers round
			      * otherwise than kvf_read's */
static double ev_prob_rel = 1e-5; /* kvf_scores' probabilities: error
				   * relative to the probability, over an
				   * absolute ev_tol / 2 */

static kvf_options ev_opts(void)
{
	kvf_model m = { LAYERS, QHE, KVHE, DIM, KVF_DTYPE_F16 };
	kvf_options o = fx_options_for(&m, 256 * 1024, 128ull << 20, 2);

	o.kt_pages = 1;
	o.codec = ev_codec;
	return o;
}

static struct attn_fx ev_open(void)
{
	kvf_options o = ev_opts();
	struct attn_fx f = { .dt = KVF_DTYPE_F16, .qh = QHE, .kvh = KVHE,
			     .dim = DIM };

	f.rng = rng_seed("h2o_evict");
	OK(kvf_open(tmp_path(fx.dir, "s"), &o, &f.st));
	return f;
}

static void ev_reopen(struct attn_fx *f)
{
	kvf_options o = ev_opts();

	OK(kvf_close(f->st));
	f->st = NULL;
	OK(kvf_open(tmp_path(fx.dir, "s"), &o, &f->st));
}

/* gather - H2O scores of every layer of seq from a few random queries */
static void gather(struct attn_fx *f, uint64_t seq)
{
	float q[QHE * DIM], out[QHE * DIM];
	kvf_attn_opts o;

	kvf_attn_opts_init(&o);
	o.h2o = 1;
	for (int i = 0; i < 4; i++)
		for (uint32_t l = 0; l < LAYERS; l++) {
			for (uint32_t j = 0; j < QHE * DIM; j++)
				q[j] = fx_urand(&f->rng) * 3;
			OK(kvf_attend(f->st, seq, l, q, out, &o));
		}
}

/* ev_make - sequence 1 of LEN tokens, its full copy FULL, synced, with
 * scores gathered on 1 */
static struct attn_fx ev_make(void)
{
	struct attn_fx f = ev_open();

	OK(kvf_seq_create(f.st, 1));
	fx_attn_append(&f, 1, LEN);
	OK(kvf_seq_fork(f.st, 1, FULL, LEN));
	OK(kvf_sync(f.st));
	gather(&f, 1);
	return f;
}

/* mask_of - per token of KV head h of seq's layer: 1 kept, 0 dropped
 * (kvf_read says which, token by token: a codec store's groups are not
 * G tokens); the tokens kept */
static uint64_t mask_of(struct attn_fx *f, uint64_t seq, uint32_t layer,
			uint32_t h, uint8_t *mask)
{
	unsigned char k[ROW];
	uint64_t kept = 0;

	for (uint64_t t = 0; t < LEN; t++) {
		kvf_status rc = kvf_read(f->st, seq, layer, h, t, t + 1, k, NULL);

		cr_assert(rc == KVF_OK || rc == KVF_ENOENT, "%s", kvf_last_error());
		if (rc == KVF_ENOENT)
			fx_has("dropped by kvf_h2o_evict");
		mask[t] = rc == KVF_OK;
		kept += rc == KVF_OK;
	}
	return kept;
}

/* masks_of - mask_of of every KV head; the tokens kept, summed */
static uint64_t masks_of(struct attn_fx *f, uint64_t seq, uint32_t layer,
			 uint8_t mask[KVHE][LEN])
{
	uint64_t kept = 0;

	for (uint32_t h = 0; h < KVHE; h++)
		kept += mask_of(f, seq, layer, h, mask[h]);
	return kept;
}

/* ref_masked - the reference over FULL with each KV head's mask applied
 * to the query heads that share it */
static void ref_masked(struct attn_fx *f, uint32_t layer, const float *q,
		       uint8_t mask[KVHE][LEN], double *out, double *lse,
		       double *probs)
{
	uint32_t d = QHE / KVHE;
	double o[QHE * DIM], l[QHE], *p = malloc(QHE * LEN * sizeof(double));

	for (uint32_t kh = 0; kh < KVHE; kh++) {
		fx_attn_reference(f, FULL, layer, q, 1.0f / sqrtf(DIM), mask[kh], 0,
				  o, l, p);
		for (uint32_t h = kh * d; h < (kh + 1) * d; h++) {
			memcpy(out + h * DIM, o + h * DIM, DIM * sizeof(double));
			lse[h] = l[h];
			memcpy(probs + (size_t)h * LEN, p + (size_t)h * LEN,
			       LEN * sizeof(double));
		}
	}
	free(p);
}

/* same_as_masked - dense, batch, multi-query, SparF (top_k all) and the
 * probabilities of seq's layer equal the reference over FULL masked */
static void same_as_masked(struct attn_fx *f, uint64_t seq, uint32_t layer,
			   uint8_t mask[KVHE][LEN])
{
	float q[QHE * DIM], out[QHE * DIM], lse[QHE];
	float *probs = malloc(QHE * LEN * sizeof(float));
	double rout[QHE * DIM], rlse[QHE], *rp = malloc(QHE * LEN * sizeof(double));
	uint64_t pos = LEN - 1, seqs[1] = { seq };
	kvf_attn_opts o;

	for (uint32_t j = 0; j < QHE * DIM; j++)
		q[j] = fx_urand(&f->rng) * 3;
	ref_masked(f, layer, q, mask, rout, rlse, rp);
	kvf_attn_opts_init(&o);
	o.lse = lse;
	OK(kvf_attend(f->st, seq, layer, q, out, &o));
	fx_check_close(out, rout, QHE * DIM, ev_tol, "dense");
	for (uint32_t h = 0; h < QHE; h++)
		cr_assert(le(dbl, fabs(lse[h] - rlse[h]), 1e-4));
	OK(kvf_attend_batch(f->st, 1, seqs, layer, q, out, NULL));
	fx_check_close(out, rout, QHE * DIM, ev_tol, "batch");
	OK(kvf_attend_multi(f->st, seq, layer, 1, &pos, q, out, NULL));
	fx_check_close(out, rout, QHE * DIM, ev_tol, "multi");
	for (uint32_t sp = 1; sp <= 2; sp++) {
		kvf_attn_opts_init(&o);
		o.sparse = sp;
		o.top_k = LEN; /* every token: exact over the kept ones */
		OK(kvf_attend(f->st, seq, layer, q, out, &o));
		fx_check_close(out, rout, QHE * DIM, 2e-4, "SparF, all tokens");
	}
	OK(kvf_scores(f->st, seq, layer, q, NULL, probs, LEN));
	for (uint32_t h = 0; h < QHE; h++)
		for (uint64_t t = 0; t < LEN; t++) {
			cr_assert(le(dbl, fabs(probs[h * LEN + t] - rp[h * LEN + t]),
				     ev_tol / 2 + ev_prob_rel * rp[h * LEN + t]),
				  "probs[%u][%llu]", h, (unsigned long long)t);
			if (!mask[h / (QHE / KVHE)][t])
				cr_assert(eq(flt, probs[h * LEN + t], 0.0f));
		}
	free(probs);
	free(rp);
}

/* no_dropped_chosen - top-k, raw scores and SparF at an eighth pick no
 * dropped token; SparF's output is finite */
struct iter_seen {
	uint8_t (*mask)[LEN];
	uint64_t handed;
};

static int iter_fn(void *arg, uint32_t q_head, uint64_t first, uint32_t n,
		   const float *scores)
{
	struct iter_seen *s = arg;

	(void)scores;
	for (uint32_t i = 0; i < n; i++)
		cr_assert(s->mask[q_head / (QHE / KVHE)][first + i],
			  "token %llu handed out", (unsigned long long)(first + i));
	s->handed += n;
	return 0;
}

static void no_dropped_chosen(struct attn_fx *f, uint64_t seq, uint32_t layer,
			      uint8_t mask[KVHE][LEN], uint64_t kept)
{
	float q[QHE * DIM], out[QHE * DIM], mass[KVHE * 16];
	uint64_t tok[KVHE * 16];
	uint32_t n_out[KVHE];
	struct iter_seen seen = { mask, 0 };
	kvf_attn_opts o;

	for (uint32_t j = 0; j < QHE * DIM; j++)
		q[j] = fx_urand(&f->rng) * 3;
	OK(kvf_topk(f->st, seq, layer, q, NULL, 16, tok, mass, n_out));
	for (uint32_t h = 0; h < KVHE; h++)
		for (uint32_t j = 0; j < n_out[h]; j++)
			cr_assert(mask[h][tok[h * 16 + j]],
				  "top-k chose dropped token %llu",
				  (unsigned long long)tok[h * 16 + j]);
	OK(kvf_scores_iter(f->st, seq, layer, q, NULL, iter_fn, &seen));
	cr_assert(eq(u64, seen.handed, kept * (QHE / KVHE)));
	for (uint32_t sp = 1; sp <= 2; sp++) {
		kvf_attn_opts_init(&o);
		o.sparse = sp;
		OK(kvf_attend(f->st, seq, layer, q, out, &o));
		for (uint32_t j = 0; j < QHE * DIM; j++)
			cr_assert(isfinite(out[j]));
	}
}

/* first_dropped - the first dropped group of KV head 0's mask */
static uint64_t first_dropped(const uint8_t *mask)
{
	for (uint64_t t = 0; t < LEN; t++)
		if (!mask[t])
			return t / G;
	cr_assert(0, "nothing dropped");
	return 0;
}

static uint64_t live_pages(kvf_store *st)
{
	kvf_stats s = { .struct_size = sizeof(s) };

	OK(kvf_stats_get(st, &s));
	return s.live_pages;
}

static void verify_clean(kvf_store *st)
{
	kvf_verify_report r = { .struct_size = sizeof(r) };

	OK(kvf_verify(st, NULL, NULL, &r));
	cr_assert(eq(u64, r.bad_pages, 0));
	cr_assert(eq(u32, r.bad_segments, 0));
}

Test(h2o_evict, refusals_change_nothing)
{
	struct attn_fx f = ev_open();
	kvf_h2o_evict_opts o;
	uint64_t dropped = 7, pages;
	uint8_t mask[KVHE][LEN];

	OK(kvf_seq_create(f.st, 1));
	fx_attn_append(&f, 1, LEN);
	OK(kvf_sync(f.st));
	pages = live_pages(f.st);
	kvf_h2o_evict_opts_init(&o);
	EXPECT(kvf_h2o_evict(f.st, 1, 0, &o, &dropped), KVF_EINVAL,
	       "no H2O scores: attend it with opts.h2o = 1 first");
	cr_assert(eq(u64, dropped, 7)); /* written only on success */
	gather(&f, 1);
	EXPECT(kvf_h2o_evict(NULL, 1, 0, &o, NULL), KVF_EINVAL, "NULL");
	EXPECT(kvf_h2o_evict(f.st, 9, 0, &o, NULL), KVF_ENOENT, "9");
	EXPECT(kvf_h2o_evict(f.st, 1, LAYERS, &o, NULL), KVF_ERANGE,
	       "layer 2 out of range");
	o.keep = 0;
	EXPECT(kvf_h2o_evict(f.st, 1, 0, &o, NULL), KVF_EINVAL, "opts.keep 0");
	o.keep = 1.5;
	EXPECT(kvf_h2o_evict(f.st, 1, 0, &o, NULL), KVF_EINVAL, "opts.keep 1.5");
	o.keep = NAN;
	EXPECT(kvf_h2o_evict(f.st, 1, 0, &o, NULL), KVF_EINVAL, "must be in (0, 1]");
	o.keep_tokens = 5; /* keep is unused then, but never NaN */
	EXPECT(kvf_h2o_evict(f.st, 1, 0, &o, NULL), KVF_EINVAL, "opts.keep nan is not finite");
	o.keep_tokens = 0;
	{
		/* a newer caller's struct, its unknown tail set */
		union {
			kvf_h2o_evict_opts o;
			unsigned char b[sizeof(kvf_h2o_evict_opts) + 8];
		} big;

		memset(&big, 0, sizeof(big));
		kvf_h2o_evict_opts_init(&big.o);
		big.o.struct_size = sizeof(big);
		big.b[sizeof(kvf_h2o_evict_opts) + 3] = 1;
		EXPECT(kvf_h2o_evict(f.st, 1, 0, &big.o, NULL), KVF_EVERSION, "opts");
	}
	/* a layer never scored refuses the whole call */
	OK(kvf_seq_create(f.st, 5));
	fx_attn_append(&f, 5, LEN);
	OK(kvf_sync(f.st));
	{
		float q[QHE * DIM] = { 0 }, out[QHE * DIM];
		kvf_attn_opts ao;

		kvf_attn_opts_init(&ao);
		ao.h2o = 1;
		OK(kvf_attend(f.st, 5, 0, q, out, &ao));
	}
	kvf_h2o_evict_opts_init(&o);
	EXPECT(kvf_h2o_evict(f.st, 5, KVF_LAYER_ALL, &o, &dropped), KVF_EINVAL,
	       "layer 1 of sequence 5 has no H2O scores");
	cr_assert(eq(u64, masks_of(&f, 5, 0, mask), KVHE * LEN));
	cr_assert(eq(u64, live_pages(f.st), 2 * pages));
	for (uint32_t l = 0; l < LAYERS; l++)
		cr_assert(eq(u64, masks_of(&f, 1, l, mask), KVHE * LEN));
	/* keep 1 and a window over everything drop nothing */
	o.keep = 1;
	OK(kvf_h2o_evict(f.st, 1, KVF_LAYER_ALL, &o, &dropped));
	cr_assert(eq(u64, dropped, 0));
	o.keep = 0.25;
	o.window = LEN;
	OK(kvf_h2o_evict(f.st, 1, KVF_LAYER_ALL, &o, &dropped));
	cr_assert(eq(u64, dropped, 0));
	cr_assert(eq(u64, live_pages(f.st), 2 * pages));
	kvf_close(f.st);
	f.st = NULL;
}

Test(h2o_evict, drop_then_attend_is_masked_attention)
{
	struct attn_fx f = ev_make();
	kvf_h2o_evict_opts o;
	uint64_t dropped, kept, budget = (LEN + 1) / 2;
	uint8_t mask[KVHE][LEN];
	float sc[LEN];

	kvf_h2o_evict_opts_init(&o);
	o.keep = 0.5;
	o.window = 2 * G;
	OK(kvf_h2o_evict(f.st, 1, 0, &o, &dropped));
	cr_assert(dropped > 0, "nothing dropped");
	kept = masks_of(&f, 1, 0, mask);
	cr_assert(eq(u64, kept, KVHE * LEN - dropped));
	for (uint32_t h = 0; h < KVHE; h++) {
		uint64_t k = 0;

		for (uint64_t t = 0; t < LEN; t++)
			k += mask[h][t];
		/* whole groups, down to the budget and no further */
		cr_assert(le(u64, k, budget), "head %u kept %llu", h,
			  (unsigned long long)k);
		cr_assert(k + G > budget, "head %u kept %llu of %llu", h,
			  (unsigned long long)k, (unsigned long long)budget);
		/* the sinks' group, the window and the tail stay */
		for (uint64_t t = 0; t < G; t++)
			cr_assert(mask[h][t]);
		for (uint64_t t = LEN - 2 * G; t < LEN; t++)
			cr_assert(mask[h][t]);
		/* the dropped tokens' scores read 0 */
		OK(kvf_h2o_read(f.st, 1, 0, h, 0, LEN, sc));
		for (uint64_t t = 0; t < LEN; t++)
			if (!mask[h][t])
				cr_assert(eq(flt, sc[t], 0.0f));
	}
	/* layer 1 was not asked */
	{
		uint8_t m1[KVHE][LEN];

		cr_assert(eq(u64, masks_of(&f, 1, 1, m1), KVHE * LEN));
	}
	same_as_masked(&f, 1, 0, mask);
	no_dropped_chosen(&f, 1, 0, mask, kept);
	/* H2O accumulation goes on, adding nothing to dropped tokens */
	gather(&f, 1);
	for (uint32_t h = 0; h < KVHE; h++) {
		OK(kvf_h2o_read(f.st, 1, 0, h, 0, LEN, sc));
		for (uint64_t t = 0; t < LEN; t++)
			if (!mask[h][t])
				cr_assert(eq(flt, sc[t], 0.0f));
	}
	/* appends go on, past the dropped groups */
	fx_attn_append(&f, 1, G);
	{
		float q[QHE * DIM] = { 0 }, out[QHE * DIM];
		uint64_t n;

		OK(kvf_seq_len(f.st, 1, 0, &n));
		cr_assert(eq(u64, n, LEN + G));
		OK(kvf_attend(f.st, 1, 0, q, out, NULL));
	}
	kvf_close(f.st);
	f.st = NULL;
}

/* each KV head drops the groups of least summed score among those that
 * could go, by its own scores */
Test(h2o_evict, drops_the_least_valued_groups_of_each_head)
{
	struct attn_fx f = ev_make();
	kvf_h2o_evict_opts o;
	float sc[KVHE][LEN], gs[KVHE][LEN / G + 1];
	uint8_t mask[KVHE][LEN];
	uint64_t dropped;

	for (uint32_t h = 0; h < KVHE; h++) {
		OK(kvf_h2o_read(f.st, 1, 1, h, 0, LEN, sc[h]));
		for (uint64_t g = 0; g <= LEN / G; g++) {
			gs[h][g] = 0;
			for (uint64_t t = g * G; t < (g + 1) * G && t < LEN; t++)
				gs[h][g] += sc[h][t];
		}
	}
	kvf_h2o_evict_opts_init(&o);
	o.keep = 0.25;
	o.sinks = KVF_TOKENS_NONE;
	o.window = KVF_TOKENS_NONE;
	OK(kvf_h2o_evict(f.st, 1, 1, &o, &dropped));
	masks_of(&f, 1, 1, mask);
	for (uint32_t h = 0; h < KVHE; h++) {
		float drop_max = -1, keep_min = INFINITY;
		uint64_t k = 0;

		/* candidates: every whole group but the last */
		for (uint64_t g = 0; g < LEN / G; g++) {
			if (!mask[h][g * G] && gs[h][g] > drop_max)
				drop_max = gs[h][g];
			if (mask[h][g * G] && gs[h][g] < keep_min)
				keep_min = gs[h][g];
		}
		cr_assert(le(flt, drop_max, keep_min), "head %u: dropped %g, kept %g",
			  h, (double)drop_max, (double)keep_min);
		for (uint64_t t = 0; t < LEN; t++)
			k += mask[h][t];
		cr_assert(le(u64, k, (LEN + 3) / 4));
	}
	/* each head's order is checked against its own scores above: one
	 * choice shared by the heads fails it wherever their scores call
	 * for different groups (asserting that random heads differ failed
	 * one run in about 40, when their scores chose the same groups) */
	same_as_masked(&f, 1, 1, mask);
	kvf_close(f.st);
	f.st = NULL;
}

Test(h2o_evict, survives_reopen_and_verify_is_clean)
{
	struct attn_fx f = ev_make();
	kvf_h2o_evict_opts o;
	uint8_t mask[LAYERS][KVHE][LEN], again[KVHE][LEN];
	uint64_t dropped;

	kvf_h2o_evict_opts_init(&o);
	o.keep = 0.25;
	OK(kvf_h2o_evict(f.st, 1, KVF_LAYER_ALL, &o, &dropped));
	cr_assert(dropped > 0, "nothing dropped");
	for (uint32_t l = 0; l < LAYERS; l++)
		masks_of(&f, 1, l, mask[l]);
	verify_clean(f.st);
	OK(kvf_sync(f.st));
	ev_reopen(&f);
	verify_clean(f.st);
	for (uint32_t l = 0; l < LAYERS; l++) {
		masks_of(&f, 1, l, again);
		cr_assert(eq(int, memcmp(again, mask[l], sizeof(again)), 0),
			  "layer %u", l);
		same_as_masked(&f, 1, l, mask[l]);
	}
	/* SparF's means of V, rebuilt from the kept tokens, across a reopen */
	{
		float q[QHE * DIM], a[QHE * DIM], b[QHE * DIM];
		kvf_attn_opts so;

		kvf_attn_opts_init(&so);
		so.sparse = 1;
		for (uint32_t j = 0; j < QHE * DIM; j++)
			q[j] = fx_urand(&f.rng);
		OK(kvf_attend(f.st, 1, 0, q, a, &so));
		OK(kvf_sync(f.st));
		ev_reopen(&f);
		OK(kvf_attend(f.st, 1, 0, q, b, &so));
		for (uint32_t j = 0; j < QHE * DIM; j++)
			cr_assert(le(flt, fabsf(a[j] - b[j]), 1e-5f));
	}
	kvf_close(f.st);
	f.st = NULL;
}

Test(h2o_evict, room_is_given_back)
{
	struct attn_fx f = ev_open();
	kvf_h2o_evict_opts o;
	uint64_t before, dropped;
	kvf_stats s0 = { .struct_size = sizeof(s0) }, s1 = s0;

	OK(kvf_seq_create(f.st, 1));
	fx_attn_append(&f, 1, LEN);
	OK(kvf_sync(f.st));
	gather(&f, 1);
	before = live_pages(f.st);
	kvf_h2o_evict_opts_init(&o);
	o.keep = 0.5;
	OK(kvf_h2o_evict(f.st, 1, KVF_LAYER_ALL, &o, &dropped));
	cr_assert(dropped > 0, "nothing dropped");
	/* one K and one V page a (group, head): G tokens of DIM f16 a page */
	cr_assert(eq(u64, before - live_pages(f.st), dropped / G * 2));
	/* after the durable point the emptied segments are reused */
	OK(kvf_stats_get(f.st, &s0));
	OK(kvf_sync(f.st));
	OK(kvf_stats_get(f.st, &s1));
	cr_assert(ge(u64, s1.segments_free + s1.segments_dying,
		     s0.segments_free + s0.segments_dying));
	ev_reopen(&f);
	cr_assert(eq(u64, before - live_pages(f.st), dropped / G * 2));
	verify_clean(f.st);
	kvf_close(f.st);
	f.st = NULL;
}

Test(h2o_evict, a_fork_inherits_the_marks)
{
	struct attn_fx f = ev_make();
	kvf_h2o_evict_opts o;
	uint8_t mask[KVHE][LEN], child[KVHE][LEN];
	uint64_t dropped, g, n;

	kvf_h2o_evict_opts_init(&o);
	o.keep = 0.5;
	OK(kvf_h2o_evict(f.st, 1, 0, &o, &dropped));
	masks_of(&f, 1, 0, mask);
	g = first_dropped(mask[0]);
	EXPECT(kvf_seq_fork(f.st, 1, 3, g * G + 1), KVF_ERANGE,
	       "which kvf_h2o_evict dropped");
	EXPECT(kvf_seq_len(f.st, 3, 0, &n), KVF_ENOENT, "3");
	OK(kvf_seq_fork(f.st, 1, 3, LEN));
	masks_of(&f, 3, 0, child);
	cr_assert(eq(int, memcmp(child, mask, sizeof(mask)), 0));
	same_as_masked(&f, 3, 0, mask);
	/* a fork at a group's end takes the marks below it */
	OK(kvf_seq_fork(f.st, 1, 4, (g + 1) * G));
	EXPECT(kvf_read(f.st, 4, 0, 0, g * G, g * G + 1, NULL, (char[ROW]){ 0 }),
	       KVF_ENOENT, "dropped by kvf_h2o_evict");
	OK(kvf_sync(f.st));
	ev_reopen(&f);
	masks_of(&f, 3, 0, child);
	cr_assert(eq(int, memcmp(child, mask, sizeof(mask)), 0));
	verify_clean(f.st);
	/* freeing the parent leaves the child as it was */
	OK(kvf_seq_free(f.st, 1));
	masks_of(&f, 3, 0, child);
	cr_assert(eq(int, memcmp(child, mask, sizeof(mask)), 0));
	same_as_masked(&f, 3, 0, mask);
	kvf_close(f.st);
	f.st = NULL;
}

Test(h2o_evict, a_cut_below_clears_the_marks)
{
	struct attn_fx f = ev_make();
	kvf_h2o_evict_opts o;
	uint8_t mask[KVHE][LEN];
	uint64_t dropped, g, n;
	static unsigned char k[(LEN + 3 * G) * ROW];

	kvf_h2o_evict_opts_init(&o);
	o.keep = 0.5;
	OK(kvf_h2o_evict(f.st, 1, KVF_LAYER_ALL, &o, &dropped));
	masks_of(&f, 1, 0, mask);
	g = first_dropped(mask[0]);
	EXPECT(kvf_seq_truncate(f.st, 1, g * G + 3), KVF_ERANGE,
	       "falls inside token group");
	OK(kvf_seq_len(f.st, 1, 0, &n));
	cr_assert(eq(u64, n, LEN));
	OK(kvf_seq_truncate(f.st, 1, g * G));
	/* the positions of the dropped groups take new tokens */
	fx_attn_append(&f, 1, 3 * G);
	OK(kvf_read(f.st, 1, 0, 0, g * G, (g + 3) * G, k, NULL));
	OK(kvf_sync(f.st));
	ev_reopen(&f);
	/* head 0 of layer 0 holds every token below the cut again (g was
	 * its first dropped group); every head the new ones */
	OK(kvf_read(f.st, 1, 0, 0, 0, (g + 3) * G, NULL, k));
	for (uint32_t l = 0; l < LAYERS; l++)
		for (uint32_t h = 0; h < KVHE; h++)
			OK(kvf_read(f.st, 1, l, h, g * G, (g + 3) * G, k, k));
	verify_clean(f.st);
	kvf_close(f.st);
	f.st = NULL;
}

Test(h2o_evict, export_is_refused)
{
	struct attn_fx f = ev_make();
	kvf_h2o_evict_opts o;
	uint64_t dropped;

	kvf_h2o_evict_opts_init(&o);
	OK(kvf_h2o_evict(f.st, 1, 0, &o, &dropped));
	EXPECT(kvf_seq_export(f.st, 1, tmp_path(fx.dir, "x.kvseq")), KVF_ENOTSUP,
	       "cannot be exported");
	cr_assert(fx_path_gone(tmp_path(fx.dir, "x.kvseq")));
	OK(kvf_seq_export(f.st, FULL, tmp_path(fx.dir, "y.kvseq")));
	kvf_close(f.st);
	f.st = NULL;
}

/* killed - a child makes the store as ev_make does, drops (when drop),
 * appends `more`, syncs (when sync_after) and is killed */
static void killed(int drop, uint32_t more, int sync_after)
{
	int fd, status, killed_;
	pid_t pid = fx_spawn(&fd);

	if (pid == 0) {
		struct attn_fx f = ev_make();
		kvf_h2o_evict_opts o;
		uint64_t dropped;

		kvf_h2o_evict_opts_init(&o);
		o.keep = 0.5;
		if (drop)
			CHILD_MUST(kvf_h2o_evict(f.st, 1, KVF_LAYER_ALL, &o, &dropped));
		if (more)
			fx_attn_append(&f, 1, more);
		if (sync_after)
			CHILD_MUST(kvf_sync(f.st));
		fx_child_say("D");
		raise(SIGKILL);
	}
	free(fx_collect(fd));
	cr_assert(eq(int, waitpid(pid, &status, 0), pid));
	killed_ = WIFSIGNALED(status);
	cr_assert(killed_, "the child failed");
}

/* after_kill - the store reopens clean; each layer dropped (or not) and,
 * with nothing appended after, attends as the masked reference */
static void after_kill(int dropped_expected, uint32_t more)
{
	struct attn_fx f = { .dt = KVF_DTYPE_F16, .qh = QHE, .kvh = KVHE,
			     .dim = DIM };
	kvf_options o = ev_opts();
	uint8_t mask[KVHE][LEN];

	f.rng = rng_seed("after");
	OK(kvf_open(tmp_path(fx.dir, "s"), &o, &f.st));
	verify_clean(f.st);
	for (uint32_t l = 0; l < LAYERS; l++) {
		uint64_t kept = masks_of(&f, 1, l, mask);

		if (dropped_expected)
			cr_assert(lt(u64, kept, KVHE * LEN), "layer %u", l);
		else
			cr_assert(eq(u64, kept, KVHE * LEN), "layer %u", l);
		if (more == 0)
			same_as_masked(&f, 1, l, mask);
	}
	kvf_close(f.st);
}

Test(h2o_evict, killed_before_the_drop)
{
	killed(0, 0, 0);
	after_kill(0, 0);
}

Test(h2o_evict, killed_after_the_drop_committed)
{
	/* no sync after the drop: the record alone brings it back */
	killed(1, 0, 0);
	after_kill(1, 0);
}

Test(h2o_evict, killed_after_a_drop_and_more_tokens)
{
	killed(1, 2 * G + 3, 1);
	after_kill(1, 2 * G + 3);
}

/* prefix reuse shares no dropped group: the ids a sequence registered
 * stop at its first dropped token, and it registers no more */
Test(h2o_evict, prefix_reuse_stops_at_the_first_dropped_group)
{
	struct attn_fx f = ev_open();
	kvf_h2o_evict_opts o;
	uint32_t ids[LEN];
	uint64_t reused, dropped, first = LEN;
	uint8_t mask[LAYERS][KVHE][LEN];

	for (uint32_t i = 0; i < LEN; i++)
		ids[i] = i * 7 + 1;
	OK(kvf_seq_create_tokens(f.st, 1, ids, LEN, &reused));
	cr_assert(eq(u64, reused, 0));
	fx_attn_append(&f, 1, LEN);
	OK(kvf_sync(f.st));
	gather(&f, 1);
	kvf_h2o_evict_opts_init(&o);
	o.keep = 0.5;
	OK(kvf_h2o_evict(f.st, 1, KVF_LAYER_ALL, &o, &dropped));
	for (uint32_t l = 0; l < LAYERS; l++) {
		masks_of(&f, 1, l, mask[l]);
		for (uint32_t h = 0; h < KVHE; h++) {
			uint64_t g = first_dropped(mask[l][h]);

			first = g * G < first ? g * G : first;
		}
	}
	OK(kvf_seq_create_tokens(f.st, 2, ids, LEN, &reused));
	cr_assert(eq(u64, reused, first), "shared %llu, first dropped %llu",
		  (unsigned long long)reused, (unsigned long long)first);
	EXPECT(kvf_seq_add_tokens(f.st, 1, ids, 4), KVF_ENOTSUP,
	       "it registers no more token ids");
	/* and after a reopen */
	OK(kvf_seq_free(f.st, 2));
	OK(kvf_sync(f.st));
	ev_reopen(&f);
	OK(kvf_seq_create_tokens(f.st, 2, ids, LEN, &reused));
	cr_assert(eq(u64, reused, first));
	kvf_close(f.st);
	f.st = NULL;
}

/* a codec store: encoded groups drop as plain ones do, and attention on
 * the encoded pages equals the reference over the decoded rows masked */
Test(h2o_evict, codec_store)
{
	struct attn_fx f;
	kvf_h2o_evict_opts o;
	uint8_t mask[KVHE][LEN];
	uint64_t dropped;

	ev_codec = KVF_CODEC_INT8;
	ev_tol = 1e-4;
	/* the reference's rows are kvf_read's, rounded to f16: a key off by
	 * up to 2^-11 of itself moves a score by up to a few 1e-3 here
	 * (|q| < 3, 64 dims), and a probability by as much of itself (one
	 * seed in about a hundred moved one by 4.2e-4) */
	ev_prob_rel = 2e-3;
	f = ev_make();
	kvf_h2o_evict_opts_init(&o);
	o.keep = 0.5;
	OK(kvf_h2o_evict(f.st, 1, KVF_LAYER_ALL, &o, &dropped));
	cr_assert(dropped > 0, "nothing dropped");
	masks_of(&f, 1, 0, mask);
	same_as_masked(&f, 1, 0, mask);
	verify_clean(f.st);
	OK(kvf_sync(f.st));
	ev_reopen(&f);
	verify_clean(f.st);
	same_as_masked(&f, 1, 0, mask);
	kvf_close(f.st);
	f.st = NULL;
	ev_codec = KVF_CODEC_NONE;
	ev_tol = 2e-5;
	ev_prob_rel = 1e-5;
}

/* kept_mean_is - the running mean of V of every KV head of seq's layer
 * (SparF's, engine/sequences/seq_state.h) is the mean of the head's kept
 * V rows below len, read back group by group */
static void kept_mean_is(struct attn_fx *f, uint64_t seq, uint32_t layer,
			 uint64_t len)
{
	static unsigned char v[G * ROW];
	struct seq *s;

	for (uint32_t h = 0; h < KVHE; h++) {
		double want[DIM] = { 0 };
		uint64_t n = 0;

		for (uint64_t g = 0; g * G < len; g++) {
			uint64_t t1 = (g + 1) * G < len ? (g + 1) * G : len;
			kvf_status rc = kvf_read(f->st, seq, layer, h, g * G, t1,
						 NULL, v);

			cr_assert(rc == KVF_OK || rc == KVF_ENOENT, "%s",
				  kvf_last_error());
			for (uint64_t t = 0; rc == KVF_OK && t < t1 - g * G; t++, n++)
				for (uint32_t j = 0; j < DIM; j++)
					want[j] += fx_to_f(KVF_DTYPE_F16, v, t * DIM + j);
		}
		OK(seq_get_locked(f->st, "test", seq, &s));
		cr_assert(eq(u64, s->vbar_n[layer * KVHE + h], n), "head %u", h);
		for (uint32_t j = 0; j < DIM; j++)
			cr_assert(le(dbl, fabs(s->vbar[(layer * KVHE + h) * DIM + j] -
					       want[j] / n), 1e-5),
				  "head %u element %u", h, j);
		seq_unlock_put(f->st, s);
	}
}

/* SparF's mean of V catches up past the dropped groups on tokens appended
 * after them (it once walked the marks without end), and an append folds
 * its V rows into a mean that covers the kept tokens (it once left them
 * to SparF, which read V back at every call) */
Test(h2o_evict, sparf_after_a_drop_and_an_append)
{
	struct attn_fx f = ev_make();
	kvf_h2o_evict_opts o;
	kvf_attn_opts so;
	float q[QHE * DIM], out[QHE * DIM];
	uint64_t dropped;

	kvf_h2o_evict_opts_init(&o);
	o.keep = 0.5;
	OK(kvf_h2o_evict(f.st, 1, 0, &o, &dropped));
	cr_assert(dropped > 0, "nothing dropped");
	kvf_attn_opts_init(&so);
	so.sparse = 1;
	for (uint32_t j = 0; j < QHE * DIM; j++)
		q[j] = fx_urand(&f.rng);
	OK(kvf_attend(f.st, 1, 0, q, out, &so));
	kept_mean_is(&f, 1, 0, LEN);
	fx_attn_append(&f, 1, G + 3);
	kept_mean_is(&f, 1, 0, LEN + G + 3); /* folded by the append */
	OK(kvf_attend(f.st, 1, 0, q, out, &so));
	kept_mean_is(&f, 1, 0, LEN + G + 3);
	fx_attn_append(&f, 1, 2 * G);
	OK(kvf_sync(f.st));
	ev_reopen(&f);
	OK(kvf_attend(f.st, 1, 0, q, out, &so));
	kept_mean_is(&f, 1, 0, LEN + 3 * G + 3);
	kvf_close(f.st);
	f.st = NULL;
}

/* a cut below marks that only a higher lane holds (layer 1's KV heads)
 * rewrites the "D" record: the tokens appended at their positions come
 * back after a reopen */
Test(h2o_evict, a_cut_clears_the_marks_of_every_lane)
{
	struct attn_fx f = ev_make();
	kvf_h2o_evict_opts o;
	uint8_t mask[KVHE][LEN];
	uint64_t dropped, g = LEN;
	static unsigned char k[LAYERS][KVHE][LEN * ROW], v[LAYERS][KVHE][LEN * ROW];
	static unsigned char k2[LEN * ROW], v2[LEN * ROW];

	kvf_h2o_evict_opts_init(&o);
	o.keep = 0.5;
	OK(kvf_h2o_evict(f.st, 1, 1, &o, &dropped));
	cr_assert(dropped > 0, "nothing dropped");
	cr_assert(eq(u64, masks_of(&f, 1, 0, mask), KVHE * LEN));
	masks_of(&f, 1, 1, mask);
	for (uint32_t h = 0; h < KVHE; h++) {
		uint64_t fh = first_dropped(mask[h]);

		g = fh < g ? fh : g;
	}
	OK(kvf_seq_truncate(f.st, 1, g * G));
	fx_attn_append(&f, 1, 3 * G);
	for (uint32_t l = 0; l < LAYERS; l++)
		for (uint32_t h = 0; h < KVHE; h++)
			OK(kvf_read(f.st, 1, l, h, 0, (g + 3) * G, k[l][h], v[l][h]));
	OK(kvf_sync(f.st));
	ev_reopen(&f);
	for (uint32_t l = 0; l < LAYERS; l++)
		for (uint32_t h = 0; h < KVHE; h++) {
			OK(kvf_read(f.st, 1, l, h, 0, (g + 3) * G, k2, v2));
			cr_assert(eq(int, memcmp(k2, k[l][h], (g + 3) * G * ROW), 0));
			cr_assert(eq(int, memcmp(v2, v[l][h], (g + 3) * G * ROW), 0));
		}
	verify_clean(f.st);
	kvf_close(f.st);
	f.st = NULL;
}

/* killed_drop_past_sync - a child makes the store as ev_make does
 * (synced at LEN), appends 4G more, drops one group of every lane wholly
 * past the synced length (those tokens have no score: least valued) and
 * is killed */
static void killed_drop_past_sync(void)
{
	int fd, status, killed_;
	pid_t pid = fx_spawn(&fd);

	if (pid == 0) {
		struct attn_fx f = ev_make();
		kvf_h2o_evict_opts o;
		uint64_t dropped;

		fx_attn_append(&f, 1, 4 * G);
		/* a fork places the parent's pages waiting for write-back
		 * (only placed groups may go); it records no parent length */
		CHILD_MUST(kvf_seq_fork(f.st, 1, 3, G));
		kvf_h2o_evict_opts_init(&o);
		o.sinks = KVF_TOKENS_NONE;
		o.window = KVF_TOKENS_NONE;
		o.keep_tokens = LEN + 3 * G;
		CHILD_MUST(kvf_h2o_evict(f.st, 1, KVF_LAYER_ALL, &o, &dropped));
		if (dropped != LAYERS * KVHE * G ||
		    kvf_read(f.st, 1, 0, 0, 13 * G, 14 * G, NULL,
			     (char[G * ROW]){ 0 }) != KVF_ENOENT)
			fx_child_say("E dropped %llu tokens, not group 13 of each lane",
				     (unsigned long long)dropped);

		fx_child_say("D");
		raise(SIGKILL);
	}
	{
		char *said = fx_collect(fd);

		cr_assert(strstr(said, "E ") == NULL, "%s", said);
		free(said);
	}
	cr_assert(eq(int, waitpid(pid, &status, 0), pid));
	killed_ = WIFSIGNALED(status);
	cr_assert(killed_, "the child failed");
}

/* a drop of groups past the synced length, lost with the length in a
 * crash: the reopen clears their marks in the "D" record too, so tokens
 * appended there again are not dropped at the next reopen; a read-only
 * open clears them in memory */
Test(h2o_evict, marks_a_crash_took_past_the_length_are_cleared_for_good)
{
	struct attn_fx f = { .dt = KVF_DTYPE_F16, .qh = QHE, .kvh = KVHE,
			     .dim = DIM };
	kvf_options o = ev_opts();
	uint64_t n;
	static unsigned char k[LAYERS][KVHE][(LEN + 3 * G) * ROW],
		v[LAYERS][KVHE][(LEN + 3 * G) * ROW];
	static unsigned char k2[(LEN + 3 * G) * ROW], v2[(LEN + 3 * G) * ROW];

	killed_drop_past_sync();
	f.rng = rng_seed("past the sync");
	o.read_only = 1;
	OK(kvf_open(tmp_path(fx.dir, "s"), &o, &f.st));
	OK(kvf_seq_len(f.st, 1, 0, &n));
	cr_assert(eq(u64, n, LEN));
	OK(kvf_seq_export(f.st, 1, tmp_path(fx.dir, "x.kvseq")));
	OK(kvf_close(f.st));
	o = ev_opts();
	OK(kvf_open(tmp_path(fx.dir, "s"), &o, &f.st));
	verify_clean(f.st);
	fx_attn_append(&f, 1, 3 * G);
	for (uint32_t l = 0; l < LAYERS; l++)
		for (uint32_t h = 0; h < KVHE; h++)
			OK(kvf_read(f.st, 1, l, h, 0, LEN + 3 * G, k[l][h], v[l][h]));
	OK(kvf_sync(f.st));
	ev_reopen(&f);
	for (uint32_t l = 0; l < LAYERS; l++)
		for (uint32_t h = 0; h < KVHE; h++) {
			OK(kvf_read(f.st, 1, l, h, 0, LEN + 3 * G, k2, v2));
			cr_assert(eq(int, memcmp(k2, k[l][h], sizeof(k2)), 0));
			cr_assert(eq(int, memcmp(v2, v[l][h], sizeof(v2)), 0));
		}
	verify_clean(f.st);
	kvf_close(f.st);
	f.st = NULL;
}

/* the group the last synced length ends inside stays until a sync moves
 * that length on: recovery gives the sequence that length back, and the
 * group's synced tokens must have their pages then */
Test(h2o_evict, the_group_of_the_synced_length_stays)
{
	struct attn_fx f = ev_make(); /* synced at LEN: inside group 12 */
	kvf_h2o_evict_opts o;
	uint64_t dropped;
	static unsigned char v[G * ROW];

	fx_attn_append(&f, 1, 4 * G);
	OK(kvf_seq_fork(f.st, 1, 3, G)); /* places the waiting pages */
	kvf_h2o_evict_opts_init(&o);
	o.sinks = KVF_TOKENS_NONE;
	o.window = KVF_TOKENS_NONE;
	o.keep_tokens = 1;
	OK(kvf_h2o_evict(f.st, 1, KVF_LAYER_ALL, &o, &dropped));
	/* every whole group but 12 and the tail (16) */
	cr_assert(eq(u64, dropped, LAYERS * KVHE * 15 * G));
	for (uint32_t l = 0; l < LAYERS; l++)
		for (uint32_t h = 0; h < KVHE; h++)
			for (uint64_t g = 0; g < 16; g++)
				cr_assert(eq(int, kvf_read(f.st, 1, l, h, g * G, (g + 1) * G,
							   NULL, v),
					     g == 12 ? KVF_OK : KVF_ENOENT),
					  "layer %u head %u group %llu", l, h,
					  (unsigned long long)g);
	/* synced past it, it may go */
	OK(kvf_sync(f.st));
	OK(kvf_h2o_evict(f.st, 1, KVF_LAYER_ALL, &o, &dropped));
	cr_assert(eq(u64, dropped, LAYERS * KVHE * G));
	EXPECT(kvf_read(f.st, 1, 1, 1, 12 * G, 13 * G, NULL, v), KVF_ENOENT,
	       "token group 12");
	OK(kvf_sync(f.st));
	ev_reopen(&f);
	verify_clean(f.st);
	OK(kvf_read(f.st, 1, 1, 1, 16 * G, LEN + 4 * G, NULL, v));
	kvf_close(f.st);
	f.st = NULL;
}

/* K,V recomputed from X (never dropped) would bring the dropped tokens
 * back: kvf_attend_x, kvf_attend_x_start and kvf_recompute_kv refuse a
 * range holding one, naming it, and write nothing; around it they work */
Test(h2o_evict, recompute_refuses_dropped_tokens)
{
	struct attn_fx f = ev_make();
	kvf_h2o_evict_opts o;
	uint8_t mask[KVHE][LEN];
	uint64_t dropped, first = LEN;
	uint16_t *x = malloc((size_t)LEN * QHE * DIM * sizeof(uint16_t));
	float *w = calloc((size_t)QHE * DIM * KVHE * DIM, sizeof(float));
	float *kv = malloc((size_t)LEN * KVHE * DIM * sizeof(float));
	float q[QHE * DIM], out[QHE * DIM];
	char msg[64];
	kvf_job *job = (kvf_job *)&f;

	for (size_t i = 0; i < (size_t)LEN * QHE * DIM; i++)
		fx_put_f(KVF_DTYPE_F16, x, i, fx_urand(&f.rng));
	for (size_t i = 0; i < (size_t)QHE * DIM * KVHE * DIM; i++)
		w[i] = fx_urand(&f.rng) / 16;
	for (uint32_t j = 0; j < QHE * DIM; j++)
		q[j] = fx_urand(&f.rng);
	OK(kvf_append_x(f.st, 1, 0, LEN, x));
	OK(kvf_kv_weights_set(f.st, 0, w, w, 0));
	kvf_h2o_evict_opts_init(&o);
	o.keep = 0.5;
	OK(kvf_h2o_evict(f.st, 1, 0, &o, &dropped));
	masks_of(&f, 1, 0, mask);
	for (uint32_t h = 0; h < KVHE; h++) {
		uint64_t g = first_dropped(mask[h]);

		first = g * G < first ? g * G : first;
	}
	snprintf(msg, sizeof(msg), "token %llu of sequence 1 layer 0",
		 (unsigned long long)first);
	for (uint32_t j = 0; j < QHE * DIM; j++)
		out[j] = 7;
	EXPECT(kvf_attend_x(f.st, 1, 0, 0, LEN, q, out, NULL), KVF_ENOTSUP, msg);
	EXPECT(kvf_attend_x(f.st, 1, 0, first, first + 1, q, out, NULL),
	       KVF_ENOTSUP, "dropped by kvf_h2o_evict");
	EXPECT(kvf_attend_x_start(f.st, 1, 0, 0, LEN, q, out, NULL, &job),
	       KVF_ENOTSUP, msg);
	cr_assert_null(job);
	for (uint32_t j = 0; j < QHE * DIM; j++)
		cr_assert(eq(flt, out[j], 7.0f));
	for (size_t i = 0; i < (size_t)LEN * KVHE * DIM; i++)
		kv[i] = 7;
	EXPECT(kvf_recompute_kv(f.st, 1, 0, 0, LEN, kv, kv), KVF_ENOTSUP, msg);
	for (size_t i = 0; i < (size_t)LEN * KVHE * DIM; i++)
		cr_assert(eq(flt, kv[i], 7.0f));
	/* below the first dropped token */
	OK(kvf_recompute_kv(f.st, 1, 0, 0, first, kv, kv));
	OK(kvf_attend_x(f.st, 1, 0, 0, first, q, out, NULL));
	OK(kvf_attend_x_start(f.st, 1, 0, 0, first, q, out, NULL, &job));
	OK(kvf_job_wait(job));
	free(x);
	free(w);
	free(kv);
	kvf_close(f.st);
	f.st = NULL;
}

/* a drop rewrites the means of V of the other lanes at the next sync
 * (it deletes the "V" record): a second drop on lanes whose means were
 * already reset loses none of them at a reopen */
Test(h2o_evict, a_drop_keeps_the_other_lanes_means)
{
	struct attn_fx f = ev_make();
	kvf_h2o_evict_opts o;
	uint64_t dropped, n[LAYERS * KVHE];
	struct seq *s;

	kvf_h2o_evict_opts_init(&o);
	o.keep = 0.5;
	OK(kvf_h2o_evict(f.st, 1, 0, &o, &dropped));
	cr_assert(dropped > 0, "nothing dropped");
	OK(kvf_sync(f.st));
	o.keep = 0.25;
	OK(kvf_h2o_evict(f.st, 1, 0, &o, &dropped));
	cr_assert(dropped > 0, "nothing dropped");
	OK(seq_get_locked(f.st, "test", 1, &s));
	memcpy(n, s->vbar_n, sizeof(n));
	seq_unlock_put(f.st, s);
	OK(kvf_sync(f.st));
	ev_reopen(&f);
	OK(seq_get_locked(f.st, "test", 1, &s));
	cr_assert_not_null(s->vbar, "no means of V came back");
	for (uint32_t l = KVHE; l < LAYERS * KVHE; l++) {
		cr_assert(eq(u64, n[l], LEN), "lane %u", l);
		cr_assert(eq(u64, s->vbar_n[l], LEN), "lane %u", l);
	}
	seq_unlock_put(f.st, s);
	kept_mean_is(&f, 1, 1, LEN);
	kvf_close(f.st);
	f.st = NULL;
}

/* a "D" record of no word (no mark) loads as no mark (it copied nothing
 * into marks never made: undefined behaviour, which UBSan reports) */
Test(h2o_evict, a_record_of_no_mark_loads)
{
	struct attn_fx f = ev_open();
	struct meta_drop m = { .n_lanes = LAYERS * KVHE, .words = 0 };
	struct catalog *c = NULL;
	struct catalog_batch *b;
	unsigned char key[9];
	uint8_t mask[KVHE][LEN];
	struct seq *s;

	OK(kvf_seq_create(f.st, 1));
	fx_attn_append(&f, 1, LEN);
	OK(kvf_sync(f.st));
	OK(seq_get_locked(f.st, "test", 1, &s));
	m.create_seqno = s->create_seqno;
	seq_unlock_put(f.st, s);
	OK(kvf_close(f.st));
	OK(catalog_open(tmp_path(fx.dir, "s/meta"), 0, 0, CATALOG_FSYNC, &c));
	b = catalog_batch_new();
	cr_assert_not_null(b);
	meta_key_u64(key, META_TAG_DROP, 1);
	catalog_batch_put(b, key, sizeof(key), &m, sizeof(m));
	OK(catalog_commit(c, b, 1));
	catalog_batch_free(b);
	catalog_close(c);
	{
		kvf_options o = ev_opts();

		OK(kvf_open(tmp_path(fx.dir, "s"), &o, &f.st));
	}
	for (uint32_t l = 0; l < LAYERS; l++)
		cr_assert(eq(u64, masks_of(&f, 1, l, mask), KVHE * LEN));
	verify_clean(f.st);
	kvf_close(f.st);
	f.st = NULL;
}
