/*
 * test_sparf.c - SparF sparse attention near the data (store_fixture.h,
 * "attention"): by tokens (sparse = 1) and by whole token groups
 * (sparse = 2), against dense attention and the double-precision
 * reference: every dim and token equals dense, an eighth of them stays
 * close on peaky attention and reads fewer pages, masks, windows, lengths
 * around the group, and the refusals.
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

TestSuite(sparf, .init = fx_setup_dir, .fini = fx_teardown, .timeout = 120);

/* same_as_dense - the 4 heads' outputs equal dense attention's within
 * 2e-5 */
static void same_as_dense(const float *sparse, const float *dense)
{
	for (int j = 0; j < 4 * DIM; j++)
		cr_assert(le(flt, fabsf(sparse[j] - dense[j]), 2e-5f),
			  "[%d] %g vs %g", j, (double)sparse[j],
			  (double)dense[j]);
}

/* SparF with every dim and every token is dense attention */
Test(sparf, sparf_full_equals_dense)
{
	struct attn_fx f = fx_attn_open_kt("s");
	float q[4 * DIM], dense[4 * DIM], sparse[4 * DIM];
	kvf_attn_opts o;

	cr_assert(eq(int, kvf_seq_create(f.st, 1), KVF_OK));
	fx_attn_append(&f, 1, 700); /* two whole K^T blocks and an open one */
	for (int j = 0; j < 4 * DIM; j++)
		q[j] = fx_urand(&f.rng) * 2;
	cr_assert(eq(int, kvf_attend(f.st, 1, 0, q, dense, NULL), KVF_OK));
	kvf_attn_opts_init(&o);
	o.sparse = 1;
	o.top_r = DIM;
	o.top_k = 700;
	cr_assert(eq(int, kvf_attend(f.st, 1, 0, q, sparse, &o), KVF_OK), "%s",
		  kvf_last_error());
	same_as_dense(sparse, dense);
	kvf_close(f.st);
}

/* On peaky attention (a few tokens carry the mass), SparF at top_r =
 * head_dim / 8 and top_k = tokens / 8 stays close to dense; with top_k
 * near the heavy hitters it also reads far fewer pages */
Test(sparf, sparf_eighth_on_peaky_attention)
{
	struct attn_fx f = fx_attn_open_kt("s");
	uint32_t n = 2048;
	size_t cnt = (size_t)n * 2 * DIM;
	uint16_t *k = malloc(cnt * 2), *v = malloc(cnt * 2);
	float q[4 * DIM], dense[4 * DIM], sparse[4 * DIM];
	kvf_stats st0 = { .struct_size = sizeof(st0) },
		  st1 = { .struct_size = sizeof(st1) };
	kvf_attn_opts o;

	cr_assert(eq(int, kvf_seq_create(f.st, 1), KVF_OK));
	/* q points along a few dims; K is noise except a few heavy hitters
	 * that align with q on those dims */
	for (int j = 0; j < 4 * DIM; j++)
		q[j] = (j % DIM) < 8 ? 4.0f : fx_urand(&f.rng) * 0.1f;
	for (uint32_t l = 0; l < LAYERS; l++) {
		for (size_t i = 0; i < cnt; i++) {
			k[i] = kvf_f32_to_f16(fx_urand(&f.rng) * 0.5f);
			v[i] = kvf_f32_to_f16(fx_urand(&f.rng));
		}
		for (uint32_t t = 0; t < n; t += 97)
			for (uint32_t h = 0; h < 2; h++)
				for (uint32_t e = 0; e < 8; e++)
					k[((size_t)t * 2 + h) * DIM + e] =
						kvf_f32_to_f16(3.0f);
		cr_assert(eq(int, kvf_append(f.st, 1, l, n, k, v), KVF_OK));
	}
	cr_assert(eq(int, kvf_close(f.st), KVF_OK));
	cr_assert(
		eq(int, kvf_open(tmp_path(fx.dir, "s"), NULL, &f.st), KVF_OK));
	cr_assert(eq(int, kvf_attend(f.st, 1, 0, q, dense, NULL), KVF_OK));
	kvf_attn_opts_init(&o);
	o.sparse = 1;
	o.top_r = DIM / 8;
	o.top_k = n / 8;
	cr_assert(eq(int, kvf_attend(f.st, 1, 0, q, sparse, &o), KVF_OK), "%s",
		  kvf_last_error()); /* warms the mean of V */
	for (int h = 0; h < 4; h++) {
		double c = fx_cosine(sparse + h * DIM, dense + h * DIM, DIM);

		cr_assert(ge(dbl, c, 0.95), "head %d: cosine %g", h, c);
	}
	/* an eighth of the tokens, chosen one by one, touches nearly every
	 * token group; the pages saved come when the chosen tokens cluster:
	 * here the 22 heavy hitters, each in its own group (by score alone:
	 * the exact set would take room they need) */
	o.top_k = 22;
	o.sink_tokens = KVF_TOKENS_NONE;
	o.recent_tokens = KVF_TOKENS_NONE;
	cr_assert(eq(int, kvf_stats_get(f.st, &st0), KVF_OK));
	cr_assert(eq(int, kvf_attend(f.st, 1, 0, q, sparse, &o), KVF_OK));
	cr_assert(eq(int, kvf_stats_get(f.st, &st1), KVF_OK));
	for (int h = 0; h < 4; h++)
		cr_assert(ge(dbl,
			     fx_cosine(sparse + h * DIM, dense + h * DIM, DIM),
			     0.95));
	cr_assert(st1.sparf_pages_skipped > (st0.sparf_pages_skipped));
	cr_assert(lt(u64, st1.pages_read - st0.pages_read, 2 * 2 * n / 32 / 2),
		  "SparF read %llu pages, dense reads %u",
		  (unsigned long long)(st1.pages_read - st0.pages_read),
		  2 * 2 * n / 32);
	free(k);
	free(v);
	kvf_close(f.st);
}

/* ---- SparF by whole token groups (sparse = 2) ----------------------------- */

#define GROUP 32u /* G, tokens per group: 4096-byte pages of 64 f16 dims */
#define KT_T 256u /* tokens per K^T block: 8 dims of f16 a page */

/* A token given weight: K on dims 0..7 set to k (q points there), and,
 * when v is not 0, every dim of V set to v. */
struct heavy {
	uint32_t t;
	float k, v;
};

/* append_peaky - n tokens to both layers of seq: noise (K in +-0.5, V in
 * +-1) but for heavy[0..n_heavy) in both KV heads */
static void append_peaky(struct attn_fx *f, uint64_t seq, uint32_t n,
			 const struct heavy *heavy, size_t n_heavy)
{
	size_t cnt = (size_t)n * 2 * DIM;
	uint16_t *k = malloc(cnt * 2 + 2), *v = malloc(cnt * 2 + 2);

	for (uint32_t l = 0; l < LAYERS; l++) {
		for (size_t i = 0; i < cnt; i++) {
			k[i] = kvf_f32_to_f16(fx_urand(&f->rng) * 0.5f);
			v[i] = kvf_f32_to_f16(fx_urand(&f->rng));
		}
		for (size_t j = 0; j < n_heavy; j++)
			for (uint32_t h = 0; h < 2; h++)
				for (uint32_t e = 0; e < DIM; e++) {
					size_t at = ((size_t)heavy[j].t * 2 +
						     h) * DIM +
						    e;

					if (e < 8)
						k[at] = kvf_f32_to_f16(
							heavy[j].k);
					if (heavy[j].v != 0)
						v[at] = kvf_f32_to_f16(
							heavy[j].v);
				}
		cr_assert(eq(int, kvf_append(f->st, seq, l, n, k, v), KVF_OK),
			  "%s", kvf_last_error());
	}
	free(k);
	free(v);
}

/* peaky_q - every query head points along dims 0..7, noise elsewhere */
static void peaky_q(struct attn_fx *f, float *q)
{
	for (int j = 0; j < 4 * DIM; j++)
		q[j] = (j % DIM) < 8 ? 4.0f : fx_urand(&f->rng) * 0.1f;
}

/* sparf_opts - options for SparF mode `sparse` at top_r, top_k, choosing
 * by score alone: these tests give top_k just the room their heavy
 * hitters need, so the exact set (sinks and recent window, in
 * test_sparf_quality.c) is off */
static kvf_attn_opts sparf_opts(uint32_t sparse, uint32_t top_r, uint32_t top_k)
{
	kvf_attn_opts o;

	kvf_attn_opts_init(&o);
	o.sparse = sparse;
	o.top_r = top_r;
	o.top_k = top_k;
	o.sink_tokens = KVF_TOKENS_NONE;
	o.recent_tokens = KVF_TOKENS_NONE;
	return o;
}

/* pages_of - sparf_pages_read and pages_read of one kvf_attend call */
static void pages_of(struct attn_fx *f, uint64_t seq, const float *q,
		     float *out, const kvf_attn_opts *o, uint64_t *sparf_pages,
		     uint64_t *media_pages)
{
	kvf_stats s0 = { .struct_size = sizeof(s0) },
		  s1 = { .struct_size = sizeof(s1) };

	cr_assert(eq(int, kvf_stats_get(f->st, &s0), KVF_OK));
	cr_assert(eq(int, kvf_attend(f->st, seq, 0, q, out, o), KVF_OK), "%s",
		  kvf_last_error());
	cr_assert(eq(int, kvf_stats_get(f->st, &s1), KVF_OK));
	*sparf_pages = s1.sparf_pages_read - s0.sparf_pages_read;
	*media_pages = s1.pages_read - s0.pages_read;
}

static void check_cosine(const float *got, const float *want, double min,
			 const char *what)
{
	for (int h = 0; h < 4; h++) {
		double c = fx_cosine(got + h * DIM, want + h * DIM, DIM);

		cr_assert(ge(dbl, c, min), "%s: head %d: cosine %g", what, h,
			  c);
	}
}

/* sparse = 2 with every dim and every token is dense attention, lse too */
Test(sparf, sparf_groups_full_equals_dense)
{
	struct attn_fx f = fx_attn_open_kt("s");
	float q[4 * DIM], dense[4 * DIM], sparse[4 * DIM], ld[4], ls[4];
	kvf_attn_opts d, o = sparf_opts(2, DIM, 700);

	cr_assert(eq(int, kvf_seq_create(f.st, 1), KVF_OK));
	fx_attn_append(&f, 1, 700); /* two whole K^T blocks and an open one */
	for (int j = 0; j < 4 * DIM; j++)
		q[j] = fx_urand(&f.rng) * 2;
	kvf_attn_opts_init(&d);
	d.lse = ld;
	cr_assert(eq(int, kvf_attend(f.st, 1, 0, q, dense, &d), KVF_OK));
	o.lse = ls;
	cr_assert(eq(int, kvf_attend(f.st, 1, 0, q, sparse, &o), KVF_OK), "%s",
		  kvf_last_error());
	same_as_dense(sparse, dense);
	for (int h = 0; h < 4; h++)
		cr_assert(le(flt, fabsf(ls[h] - ld[h]), 1e-4f),
			  "lse[%d] %g vs %g", h, (double)ls[h], (double)ld[h]);
	kvf_close(f.st);
}

/* A window that starts inside a group spans one group more than its
 * tokens fill: top_k = every token in it still takes every group */
Test(sparf, sparf_groups_window_mid_group_full_equals_dense)
{
	struct attn_fx f = fx_attn_open_kt("s");
	float q[4 * DIM], dense[4 * DIM], sparse[4 * DIM];
	kvf_attn_opts d, o = sparf_opts(2, DIM, 45);

	cr_assert(eq(int, kvf_seq_create(f.st, 1), KVF_OK));
	fx_attn_append(&f, 1, 300);
	for (int j = 0; j < 4 * DIM; j++)
		q[j] = fx_urand(&f.rng) * 2;
	kvf_attn_opts_init(&d);
	d.window = 45; /* tokens 255..299: groups 7..9, ceil(45 / 32) = 2 */
	o.window = 45;
	cr_assert(eq(int, kvf_attend(f.st, 1, 0, q, dense, &d), KVF_OK));
	cr_assert(eq(int, kvf_attend(f.st, 1, 0, q, sparse, &o), KVF_OK), "%s",
		  kvf_last_error());
	same_as_dense(sparse, dense);
	kvf_close(f.st);
}

/*
 * At top_r = head_dim / 8 and top_k = tokens / 8, with the heavy hitters
 * scattered one per 8 groups (at a different place in each), sparse = 2
 * stays close to dense and reads no more than the K^T pages of top_r
 * dims plus ceil(top_k / G) groups of K and V; sparse = 1 on the same
 * data, its eighth of the tokens chosen one by one, touches nearly every
 * group.
 */
Test(sparf, sparf_groups_eighth_on_scattered_heavy_hitters)
{
	struct attn_fx f = fx_attn_open_kt("s");
	uint32_t n = 2048, top_r = DIM / 8, top_k = n / 8;
	struct heavy hv[8];
	float q[4 * DIM], dense[4 * DIM], sparse[4 * DIM];
	uint64_t pr2, media2, pr1, media1;
	/* per KV head: n / KT_T blocks of ceil(top_r / 8) K^T pages, and
	 * ceil(top_k / G) groups of a K and a V page */
	uint64_t bound = 2 * ((n / KT_T) * ((top_r + 7) / 8) +
			      2 * ((top_k + GROUP - 1) / GROUP));
	uint64_t dense_pages = 2 * 2 * (n / GROUP);
	kvf_attn_opts o = sparf_opts(2, top_r, top_k);

	for (uint32_t i = 0; i < 8;
	     i++) /* group 8i + (5i % 8), token 7i % 32 */
		hv[i] = (struct heavy){ .t = (8 * i + (5 * i) % 8) * GROUP +
					     (7 * i) % GROUP,
					.k = 3.0f };
	cr_assert(eq(int, kvf_seq_create(f.st, 1), KVF_OK));
	append_peaky(&f, 1, n, hv, 8);
	peaky_q(&f, q);
	cr_assert(eq(int, kvf_close(f.st), KVF_OK));
	cr_assert(
		eq(int, kvf_open(tmp_path(fx.dir, "s"), NULL, &f.st), KVF_OK));
	cr_assert(eq(int, kvf_attend(f.st, 1, 0, q, dense, NULL), KVF_OK));
	cr_assert(eq(int, kvf_attend(f.st, 1, 0, q, sparse, &o), KVF_OK), "%s",
		  kvf_last_error()); /* warms the mean of V */
	check_cosine(sparse, dense, 0.95, "sparse = 2, first call");
	pages_of(&f, 1, q, sparse, &o, &pr2, &media2);
	check_cosine(sparse, dense, 0.95, "sparse = 2");
	cr_assert(le(u64, pr2, bound),
		  "sparse = 2 read %llu SparF pages, bound %llu",
		  (unsigned long long)pr2, (unsigned long long)bound);
	cr_assert(le(u64, media2, bound),
		  "sparse = 2 read %llu pages, bound %llu",
		  (unsigned long long)media2, (unsigned long long)bound);
	cr_assert(lt(u64, 4 * pr2, dense_pages),
		  "sparse = 2 read %llu pages, dense %llu",
		  (unsigned long long)pr2, (unsigned long long)dense_pages);
	o.sparse = 1;
	pages_of(&f, 1, q, sparse, &o, &pr1, &media1);
	check_cosine(sparse, dense, 0.95, "sparse = 1");
	cr_assert(pr1 > (2 * pr2),
		  "sparse = 1 read %llu SparF pages, sparse = 2 %llu",
		  (unsigned long long)pr1, (unsigned long long)pr2);
	/* >=: both read 0 pages from the media here (the memory tier holds
	 * them); the old gt() passed on equal values */
	cr_assert(media1 >= 2 * media2,
		  "sparse = 1 read %llu pages, sparse = 2 %llu",
		  (unsigned long long)media1, (unsigned long long)media2);
	kvf_close(f.st);
}

/*
 * By groups at a short context the budget is a group or two: the default
 * exact set (the sinks' group and the newest) used to take all of it, so
 * no group was ever chosen by score.  Here (100 tokens, 4 groups) one
 * heavy hitter in group 1 carries most of the mass: at the default top_k
 * (an eighth: one group) and at two groups, with the default exact set,
 * SparF by groups must attend its group and come close to dense.
 */
Test(sparf, sparf_groups_short_context_leaves_room_for_scores)
{
	struct attn_fx f = fx_attn_open_kt("s");
	const struct heavy hv = { .t = 50, .k = 3.0f, .v = 4.0f };
	const uint32_t top_k[] = { 0, 2 * GROUP };
	float q[4 * DIM], dense[4 * DIM], sparse[4 * DIM];
	kvf_attn_opts o;

	cr_assert(eq(int, kvf_seq_create(f.st, 1), KVF_OK));
	append_peaky(&f, 1, 100, &hv, 1);
	peaky_q(&f, q);
	cr_assert(eq(int, kvf_attend(f.st, 1, 0, q, dense, NULL), KVF_OK));
	for (size_t i = 0; i < sizeof(top_k) / sizeof(top_k[0]); i++) {
		uint64_t pr, media;

		kvf_attn_opts_init(&o);
		o.sparse = 2;
		o.top_r = DIM / 8;
		o.top_k = top_k[i];
		pages_of(&f, 1, q, sparse, &o, &pr, &media);
		check_cosine(sparse, dense, 0.95,
			     top_k[i] ? "two groups" : "an eighth");
		/* the K^T pages of top_r dims, and no more groups of K and V
		 * than the budget: ceil(top_k / G) a KV head */
		cr_assert(le(u64, pr, 2 * (1 + 2 * ((top_k[i] ? top_k[i] : 13) + GROUP - 1) / GROUP)),
			  "%llu pages", (unsigned long long)pr);
	}
	kvf_close(f.st);
}

/* sparse = 3 is refused before anything is read or written */
Test(sparf, sparf_groups_refuses_sparse_3)
{
	struct attn_fx f = fx_attn_open_kt("s"),
		       plain = fx_attn_open("p", KVF_DTYPE_F16, 4, 2);
	float q[4 * DIM], out[4 * DIM], lse[4], want[4 * DIM];
	uint64_t ids[1] = { 1 };
	kvf_stats s0 = { .struct_size = sizeof(s0) },
		  s1 = { .struct_size = sizeof(s1) };
	kvf_attn_opts o = sparf_opts(3, DIM / 8, 0);

	cr_assert(eq(int, kvf_seq_create(f.st, 1), KVF_OK));
	fx_attn_append(&f, 1, 300);
	peaky_q(&f, q);
	for (int j = 0; j < 4 * DIM; j++)
		out[j] = want[j] = 7.0f;
	for (int h = 0; h < 4; h++)
		lse[h] = 7.0f;
	o.lse = lse;
	cr_assert(eq(int, kvf_stats_get(f.st, &s0), KVF_OK));
	EXPECT(kvf_attend(f.st, 1, 0, q, out, &o), KVF_EINVAL, "opts.sparse 3");
	EXPECT(kvf_attend_batch(f.st, 1, ids, 0, q, out, &o), KVF_EINVAL,
	       "opts.sparse 3");
	cr_assert(eq(int, kvf_stats_get(f.st, &s1), KVF_OK));
	cr_assert(eq(int, memcmp(out, want, sizeof(out)), 0),
		  "out was written");
	for (int h = 0; h < 4; h++)
		cr_assert(eq(flt, lse[h], 7.0f), "lse[%d] was written", h);
	cr_assert(eq(u64, s1.bytes_read, s0.bytes_read));
	cr_assert(eq(u64, s1.pages_read, s0.pages_read));
	cr_assert(eq(u64, s1.sparf_pages_read, s0.sparf_pages_read));
	cr_assert(eq(u64, s1.sparf_pages_skipped, s0.sparf_pages_skipped));
	/* sparse = 2 is checked as sparse = 1 is: K^T pages, outputs only */
	o.sparse = 2;
	cr_assert(eq(int, kvf_seq_create(plain.st, 1), KVF_OK));
	EXPECT(kvf_attend(plain.st, 1, 0, q, out, &o), KVF_ENOTSUP,
	       "needs K^T pages");
	o.h2o = 1;
	EXPECT(kvf_attend(f.st, 1, 0, q, out, &o), KVF_ENOTSUP, "outputs only");
	cr_assert(eq(int, memcmp(out, want, sizeof(out)), 0),
		  "out was written");
	o.h2o = 0;
	cr_assert(eq(int, kvf_attend(f.st, 1, 0, q, out, &o), KVF_OK), "%s",
		  kvf_last_error());
	kvf_close(plain.st);
	kvf_close(f.st);
}

/*
 * A mask and a window with sparse = 2: the tokens left out have K twice
 * as aligned with q as the heavy hitters' and V = 8 in every dim, so one
 * of them attended would pull the output to 8.  Checked at 1/8 (close to
 * the double reference, every element far from 8) and with every dim and
 * token (equal to it): with a mask; with a mask that also leaves out
 * groups 8..15 whole (none of their pages is read); and with a mask and a
 * window that starts inside a group, after three left-out tokens of it.
 */
Test(sparf, sparf_groups_mask_and_window)
{
	static const uint32_t attended[] = { 3, 530, 730,
					     900 }; /* groups 0, 16, 22, 28 */
	struct attn_fx f = fx_attn_open_kt("s");
	uint32_t n = 1024, window = 300,
		 t_start = n - window; /* 724, group 22 */
	struct heavy hv[32];
	size_t n_hv = 0;
	uint8_t *mask = malloc(3 * n);
	float q[4 * DIM], want[4 * DIM], got[4 * DIM];
	double rout[4 * DIM], rlse[4];
	uint64_t pr, media;
	struct {
		const char *what;
		const uint8_t *mask;
		uint32_t window;
		uint64_t whole_pages; /* SparF pages of the whole call; 0: not checked */
	} cases[] = {
		{ "mask", mask, 0, 0 },
		{ "mask and groups 8..15", mask + n, 0,
		  2 * (n / KT_T * 8 + 2 * (n / GROUP - 8)) },
		{ "mask and window", mask + 2 * n, window, 0 },
	};

	for (uint32_t i = 0; i < 4; i++)
		hv[n_hv++] = (struct heavy){ .t = attended[i], .k = 3.0f };
	for (uint32_t t = 40; t < n; t += 64) /* masked, in every odd group */
		hv[n_hv++] = (struct heavy){ .t = t, .k = 6.0f, .v = 8.0f };
	for (uint32_t t = t_start - 3; t < t_start; t++) /* before the window */
		hv[n_hv++] = (struct heavy){ .t = t, .k = 6.0f, .v = 8.0f };
	cr_assert(le(u64, n_hv, 32));
	for (uint32_t t = 0; t < n; t++) {
		mask[2 * n + t] = t % 64 != 40;
		mask[t] = mask[2 * n + t] && (t < t_start - 3 || t >= t_start);
		mask[n + t] = mask[t] && (t < 8 * GROUP || t >= 16 * GROUP);
	}
	cr_assert(eq(int, kvf_seq_create(f.st, 1), KVF_OK));
	append_peaky(&f, 1, n, hv, n_hv);
	peaky_q(&f, q);
	cr_assert(eq(int, kvf_close(f.st), KVF_OK));
	cr_assert(
		eq(int, kvf_open(tmp_path(fx.dir, "s"), NULL, &f.st), KVF_OK));
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		uint32_t span = cases[c].window ? cases[c].window : n;

		fx_attn_reference(&f, 1, 0, q, 1.0f / sqrtf(DIM), cases[c].mask,
				  n - span, rout, rlse, NULL);
		for (int j = 0; j < 4 * DIM; j++)
			want[j] = (float)rout[j];
		for (int whole = 0; whole < 2; whole++) {
			kvf_attn_opts o =
				whole ? sparf_opts(2, DIM, span) :
					sparf_opts(2, DIM / 8, span / 8);

			o.mask = cases[c].mask;
			o.mask_len = n;
			o.window = cases[c].window;
			pages_of(&f, 1, q, got, &o, &pr, &media);
			check_cosine(got, want, 0.99, cases[c].what);
			for (int j = 0; j < 4 * DIM; j++)
				cr_assert(lt(flt, fabsf(got[j]), 2.0f),
					  "%s: [%d] is %g", cases[c].what, j,
					  (double)got[j]);
			if (!whole)
				continue;
			fx_check_close(got, rout, 4 * DIM, 2e-5, cases[c].what);
			if (cases[c].whole_pages)
				cr_assert(eq(u64, pr, cases[c].whole_pages),
					  "%s: %llu SparF pages", cases[c].what,
					  (unsigned long long)pr);
		}
	}
	free(mask);
	kvf_close(f.st);
}

/*
 * Lengths that are not a multiple of the group: G - 1 (one open group),
 * G + 1 (a whole group and a token), 2G - 1, KT_T + 1 (a whole K^T block
 * and an open one), in group buffers and after a reopen.  Every token:
 * equal to dense; top_k = 1: one group of a K and a V page per KV head.
 */
Test(sparf, sparf_groups_lengths_around_the_group)
{
	static const uint32_t lens[] = { GROUP - 1, GROUP + 1, 2 * GROUP - 1,
					 KT_T + 1 };
	struct attn_fx f = fx_attn_open_kt("s");
	float q[4 * DIM], dense[4 * DIM], sparse[4 * DIM];
	kvf_attn_opts o;
	uint64_t pr, media;

	for (uint32_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		cr_assert(eq(int, kvf_seq_create(f.st, i + 1), KVF_OK));
		fx_attn_append(&f, i + 1, lens[i]);
	}
	for (int j = 0; j < 4 * DIM; j++)
		q[j] = fx_urand(&f.rng) * 2;
	for (int reopened = 0; reopened < 2; reopened++) {
		if (reopened) {
			cr_assert(eq(int, kvf_close(f.st), KVF_OK));
			cr_assert(
				eq(int,
				   kvf_open(tmp_path(fx.dir, "s"), NULL, &f.st),
				   KVF_OK));
		}
		for (uint32_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
			uint64_t n = lens[i], nb = n / KT_T;

			cr_assert(eq(int,
				     kvf_attend(f.st, i + 1, 0, q, dense, NULL),
				     KVF_OK));
			o = sparf_opts(2, DIM, lens[i]);
			pages_of(&f, i + 1, q, sparse, &o, &pr, &media);
			for (int j = 0; j < 4 * DIM; j++)
				cr_assert(le(flt, fabsf(sparse[j] - dense[j]),
					     2e-5f),
					  "%u tokens%s: [%d] %g vs %g", lens[i],
					  reopened ? ", reopened" : "", j,
					  (double)sparse[j], (double)dense[j]);
			cr_assert(eq(u64, pr,
				     2 * (nb * 8 +
					  2 * ((n + GROUP - 1) / GROUP))),
				  "%u tokens: %llu SparF pages", lens[i],
				  (unsigned long long)pr);
			o = sparf_opts(2, DIM / 8, 1);
			pages_of(&f, i + 1, q, sparse, &o, &pr, &media);
			for (int j = 0; j < 4 * DIM; j++)
				cr_assert(eq(int, isfinite(sparse[j]), 1),
					  "%u tokens: [%d]", lens[i], j);
			cr_assert(eq(u64, pr, 2 * (nb + 2)),
				  "%u tokens, top_k 1: %llu SparF pages",
				  lens[i], (unsigned long long)pr);
		}
	}
	kvf_close(f.st);
}
