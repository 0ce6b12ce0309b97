/*
 * test_tier.c - the memory tier (kvf_options.dram_budget): bad budgets
 * refused; attention bitwise the same with the tier on and off; a warm
 * call served from DRAM; a sequence larger than the budget read once a
 * step, only what is not cached; group buffers refused past the budget
 * with nothing changed; the budget never exceeded while threads append
 * and attend at once; pages of reused segments never served; written
 * segments cached in place, a full cache recycling its memory, the
 * stage profile; a sync lays a layer's waiting runs head by head, K and
 * V side by side, before its tails; a full group waits for write-back
 * in the page it filled, not in a copy, and an append that seals one and
 * is refused for memory changes nothing.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/alloc.h"
#include "engine/base/key.h"
#include "engine/base/store_state.h"
#include "engine/segments/writer_state.h"
#include "engine/sequences/seq.h"
#include "engine/sequences/seq_state.h"
#include "engine/sequences/seq_stream.h"
#include "store_fixture.h"
#include "testutil.h"

TestSuite(tier, .init = fx_setup_dir, .fini = fx_teardown, .timeout = 120);

static kvf_options tier_opts(uint64_t budget)
{
	kvf_options o = fx_options(64ull << 20, 2);

	o.dram_budget = budget;
	o.direct_io = 2; /* tmpfs may refuse O_DIRECT */
	return o;
}

static kvf_stats stats_of(kvf_store *st)
{
	kvf_stats s = { .struct_size = sizeof(s) };

	OK(kvf_stats_get(st, &s));
	return s;
}

/* f16 values in [1/8, 1) with random signs: attention stays finite */
static void fill_f16(uint64_t *rng, uint16_t *h, size_t n)
{
	for (size_t i = 0; i < n; i++)
		h[i] = (uint16_t)(0x3000 + rng_below(rng, 0x0c00)) |
		       (uint16_t)(rng_below(rng, 2) << 15);
}

/* append n tokens to every layer of seq */
static kvf_status put(kvf_store *st, uint64_t seq, uint32_t n, uint64_t *rng)
{
	size_t elts = (size_t)n * KVH * DIM;
	uint16_t *k = malloc(elts * 2), *v = malloc(elts * 2);
	kvf_status rc = KVF_OK;

	cr_assert(k && v);
	for (uint32_t l = 0; l < LAYERS && rc == KVF_OK; l++) {
		fill_f16(rng, k, elts);
		fill_f16(rng, v, elts);
		rc = kvf_append(st, seq, l, n, k, v);
	}
	free(k);
	free(v);
	return rc;
}

static void query(uint64_t *rng, float *q)
{
	for (uint32_t i = 0; i < QH * DIM; i++)
		q[i] = (float)rng_below(rng, 2001) / 1000.0f - 1.0f;
}

static void attend(kvf_store *st, uint64_t seq, uint32_t layer, const float *q,
		   float *out, uint32_t sparse)
{
	kvf_attn_opts a;

	kvf_attn_opts_init(&a);
	a.sparse = sparse;
	OK(kvf_attend(st, seq, layer, q, out, &a));
}

Test(tier, bad_budgets_refused)
{
	kvf_options o = tier_opts(1000);
	kvf_store *st = NULL;

	cr_assert(eq(int, kvf_open(tmp_path(fx.dir, "a"), &o, &st), KVF_EINVAL));
	cr_assert(strstr(kvf_last_error(), "dram_budget 1000") != NULL, "%s",
		  kvf_last_error());
	cr_assert_null(st);
	o.dram_budget = UINT64_MAX;
	cr_assert(eq(int, kvf_open(tmp_path(fx.dir, "a"), &o, &st), KVF_EINVAL));
	cr_assert(strstr(kvf_last_error(), "memory") != NULL, "%s", kvf_last_error());
	cr_assert(fx_path_gone(tmp_path(fx.dir, "a")), "a refused open made %s",
		  tmp_path(fx.dir, "a"));
	o.dram_budget = 0;
	OK(kvf_open(tmp_path(fx.dir, "a"), &o, &st));
	cr_assert(eq(u64, stats_of(st).dram_budget, 0));
	OK(kvf_close(st));
	/* the budget is the handle's, not the store's: a reopen may change it */
	o.dram_budget = 8ull << 20;
	OK(kvf_open(tmp_path(fx.dir, "a"), &o, &st));
	cr_assert(eq(u64, stats_of(st).dram_budget, 8ull << 20));
	OK(kvf_close(st));
}

/* the same bytes in the same order: on or off, dense attention is the
 * same to the bit, cold and warm, and SparF too */
Test(tier, results_identical_on_and_off)
{
	uint64_t rng = rng_seed("tier identical");
	kvf_options o = tier_opts(0);
	const char *p = strdup(tmp_path(fx.dir, "s"));
	float q[QH * DIM], off[2][QH * DIM], on[2][QH * DIM], on2[2][QH * DIM];
	kvf_store *st;

	o.kt_pages = 1;
	OK(kvf_open(p, &o, &st));
	OK(kvf_seq_create(st, 1));
	OK(put(st, 1, 40 * G + 5, &rng));
	OK(kvf_close(st));
	query(&rng, q);
	OK(kvf_open(p, &o, &st));
	attend(st, 1, 0, q, off[0], 0);
	attend(st, 1, 1, q, off[1], 1);
	cr_assert(eq(u64, stats_of(st).cache_hits, 0));
	OK(kvf_close(st));
	o.dram_budget = 16ull << 20;
	OK(kvf_open(p, &o, &st));
	attend(st, 1, 0, q, on[0], 0);  /* cold: from the media */
	attend(st, 1, 1, q, on[1], 1);
	attend(st, 1, 0, q, on2[0], 0); /* warm: from DRAM */
	attend(st, 1, 1, q, on2[1], 1);
	cr_assert(stats_of(st).cache_hits > (0));
	OK(kvf_close(st));
	for (int l = 0; l < 2; l++) {
		cr_assert(eq(int, memcmp(off[l], on[l], sizeof(off[l])), 0),
			  "layer %d: tier on (cold) differs from off", l);
		cr_assert(eq(int, memcmp(off[l], on2[l], sizeof(off[l])), 0),
			  "layer %d: tier on (warm) differs from off", l);
	}
	free((void *)p);
}

/* a sequence that fits: the second call reads nothing from the media */
Test(tier, warm_call_reads_nothing)
{
	uint64_t rng = rng_seed("tier warm");
	kvf_options o = tier_opts(16ull << 20);
	const char *p = strdup(tmp_path(fx.dir, "s"));
	float q[QH * DIM], out[QH * DIM];
	kvf_stats a, b, c;
	kvf_store *st;

	OK(kvf_open(p, &o, &st));
	OK(kvf_seq_create(st, 1));
	OK(put(st, 1, 64 * G, &rng));
	OK(kvf_close(st));
	OK(kvf_open(p, &o, &st));
	query(&rng, q);
	a = stats_of(st);
	attend(st, 1, 0, q, out, 0);
	b = stats_of(st);
	attend(st, 1, 0, q, out, 0);
	c = stats_of(st);
	/* K and V of 2 heads, 64 pages each */
	cr_assert(eq(u64, b.attend_bytes_read - a.attend_bytes_read,
		     2ull * KVH * 64 * 4096));
	cr_assert(eq(u64, b.attend_calls - a.attend_calls, 1));
	cr_assert(eq(u64, c.attend_bytes_read - b.attend_bytes_read, 0),
		  "the warm call read %" PRIu64 " bytes",
		  c.attend_bytes_read - b.attend_bytes_read);
	cr_assert(eq(u64, c.cache_hits - b.cache_hits, 2ull * KVH * 64));
	cr_assert(le(u64, c.dram_peak, o.dram_budget));
	cr_assert(eq(u64, c.cache_bytes, c.cache_recent_bytes + c.cache_hot_bytes));
	OK(kvf_close(st));
	free((void *)p);
}

/* written pages stay in DRAM: what a decode loop just appended is read
 * back without the media */
Test(tier, written_pages_served)
{
	uint64_t rng = rng_seed("tier written");
	kvf_options o = tier_opts(16ull << 20);
	float q[QH * DIM], out[QH * DIM];
	kvf_stats a, b;
	kvf_store *st;

	OK(kvf_open(tmp_path(fx.dir, "s"), &o, &st));
	OK(kvf_seq_create(st, 1));
	OK(put(st, 1, 64 * G, &rng));
	OK(kvf_sync(st)); /* every segment written out */
	query(&rng, q);
	a = stats_of(st);
	attend(st, 1, 0, q, out, 0);
	b = stats_of(st);
	cr_assert(eq(u64, b.attend_bytes_read - a.attend_bytes_read, 0),
		  "attention over just-written pages read %" PRIu64 " bytes",
		  b.attend_bytes_read - a.attend_bytes_read);
	OK(kvf_close(st));
}

/* larger than the budget: each step reads only what is not cached, and
 * that stays steady from step to step (nothing read twice in a step) */
Test(tier, larger_than_budget)
{
	uint64_t rng = rng_seed("tier larger");
	kvf_options o = tier_opts(2ull << 20); /* 512 pages, less its tables */
	const char *p = strdup(tmp_path(fx.dir, "s"));
	uint64_t pages = 2ull * KVH * 512, step[4], cached[4];
	float q[QH * DIM], ref[QH * DIM], out[QH * DIM];
	kvf_stats a, b;
	kvf_store *st;

	o.dram_budget = 0;
	OK(kvf_open(p, &o, &st));
	OK(kvf_seq_create(st, 1));
	OK(put(st, 1, 512 * G, &rng)); /* 2048 pages a layer: 4x the budget */
	query(&rng, q);
	attend(st, 1, 0, q, ref, 0);
	OK(kvf_close(st));
	o.dram_budget = 2ull << 20;
	OK(kvf_open(p, &o, &st));
	for (int s = 0; s < 4; s++) {
		a = stats_of(st);
		attend(st, 1, 0, q, out, 0);
		b = stats_of(st);
		step[s] = b.attend_bytes_read - a.attend_bytes_read;
		cached[s] = b.cache_bytes;
		cr_assert(eq(int, memcmp(ref, out, sizeof(ref)), 0), "step %d", s);
		cr_assert(le(u64, b.dram_peak, o.dram_budget));
		cr_assert(le(u64, step[s], pages * 4096), "step %d read %" PRIu64,
			  s, step[s]);
	}
	/* what is cached after the first step is not read again */
	cr_assert(eq(u64, step[0], pages * 4096));
	cr_assert(lt(u64, step[1], pages * 4096));
	/* against the cache the step found: the grower may grow it while
	 * the step reads, and after */
	cr_assert(le(u64, step[1] + cached[0], pages * 4096 + 4096 * 4),
		  "step 2 read %" PRIu64 " with %" PRIu64 " cached", step[1],
		  cached[0]);
	cr_assert(b.cache_bytes > ((1ull << 20)),
		  "only %" PRIu64 " bytes cached", b.cache_bytes);
	for (int s = 2; s < 4; s++)
		cr_assert(le(u64, step[s], step[1] + 16 * 4096),
			  "step %d read %" PRIu64 ", step 2 %" PRIu64, s, step[s],
			  step[1]);
	OK(kvf_close(st));
	free((void *)p);
}

/* group buffers past the budget are refused, naming it; nothing changes */
Test(tier, group_buffers_past_the_budget)
{
	uint64_t rng = rng_seed("tier buffers");
	kvf_options o = tier_opts(1ull << 20);
	kvf_status rc = KVF_OK;
	uint64_t id, len;
	kvf_store *st;

	OK(kvf_open(tmp_path(fx.dir, "s"), &o, &st));
	/* each sequence holds 8 group buffers (2 layers, K and V, 2 heads) */
	for (id = 1; id < 1000 && rc == KVF_OK; id++) {
		OK(kvf_seq_create(st, id));
		rc = put(st, id, 1, &rng);
	}
	cr_assert(eq(int, rc, KVF_ENOMEM), "%s", kvf_last_error());
	cr_assert(strstr(kvf_last_error(), "dram_budget") != NULL, "%s", kvf_last_error());
	cr_assert(le(u64, stats_of(st).dram_peak, o.dram_budget));
	OK(kvf_seq_len(st, id - 1, 0, &len));
	cr_assert(le(u64, len, 1));
	/* freeing sequences gives the room back */
	for (uint64_t i = 1; i < id - 1; i++)
		OK(kvf_seq_free(st, i));
	OK(kvf_seq_free(st, id - 1));
	OK(kvf_seq_create(st, 5000));
	OK(put(st, 5000, 3 * G, &rng));
	OK(kvf_close(st));
}

/* the least budget (1 MiB) and uneven appends to a few sequences, no
 * sync: pages waiting for write-back go out to their open segments, where
 * they may not stay by pointer (nothing could evict them there, and a
 * hold for the next stream's index would find the budget full of them
 * with the cache empty); the budget holds, and dram_peak covers
 * dram_bytes */
Test(tier, a_small_budget_keeps_no_page_it_cannot_give_back)
{
	static const struct { uint32_t seq, n; } trace[] = {
		{ 5, 4 },  { 2, 253 }, { 6, 19 },  { 5, 3 },   { 6, 10 },  { 3, 12 },
		{ 5, 212 }, { 6, 13 }, { 3, 6 },   { 5, 1 },   { 1, 6 },   { 2, 201 },
		{ 5, 13 }, { 4, 16 },  { 2, 17 },  { 1, 18 },  { 2, 15 },  { 6, 99 },
		{ 2, 11 }, { 2, 14 },  { 6, 7 },   { 2, 19 },  { 3, 149 }, { 4, 78 },
	};
	/* heads of 128: a group of 16 tokens fills a page */
	kvf_model m = { 2, 4, 2, 128, KVF_DTYPE_F16 };
	uint64_t rng = rng_seed("tier small budget");
	uint16_t *k = malloc(253 * 2 * 128 * 2), *v = malloc(253 * 2 * 128 * 2);
	kvf_options o;
	kvf_stats s;
	kvf_store *st;

	cr_assert(k && v);
	kvf_options_init(&o, &m);
	o.dram_budget = 1ull << 20; /* the least */
	o.direct_io = 2;
	OK(kvf_open(tmp_path(fx.dir, "s"), &o, &st));
	for (uint64_t id = 1; id <= 6; id++)
		OK(kvf_seq_create(st, id));
	for (size_t i = 0; i < sizeof(trace) / sizeof(trace[0]); i++) {
		for (uint32_t l = 0; l < m.n_layers; l++) {
			fill_f16(&rng, k, (size_t)trace[i].n * 2 * 128);
			fill_f16(&rng, v, (size_t)trace[i].n * 2 * 128);
			cr_assert(eq(int, kvf_append(st, trace[i].seq, l, trace[i].n, k, v), KVF_OK),
				  "append %zu: %s", i, kvf_last_error());
		}
		s = stats_of(st);
		cr_assert(le(u64, s.dram_bytes, o.dram_budget));
		cr_assert(le(u64, s.dram_bytes, s.dram_peak));
	}
	OK(kvf_sync(st));
	OK(kvf_close(st));
	free(k);
	free(v);
}

Test(tier, no_tier_peak_covers_what_is_held)
{
	kvf_options o = tier_opts(0);
	uint64_t rng = rng_seed("tier no peak");
	kvf_stats s;
	kvf_store *st;

	OK(kvf_open(tmp_path(fx.dir, "s"), &o, &st));
	OK(kvf_seq_create(st, 1));
	OK(put(st, 1, 3, &rng));
	s = stats_of(st);
	cr_assert(s.dram_bytes > 0); /* group buffers, the index */
	cr_assert(le(u64, s.dram_bytes, s.dram_peak), "dram_bytes %llu, dram_peak %llu",
		  (unsigned long long)s.dram_bytes, (unsigned long long)s.dram_peak);
	OK(kvf_close(st));
}

/* threads append and attend at once; the budget holds throughout */
struct worker {
	kvf_store *st;
	uint64_t seq;
	uint64_t budget;
	int fail;
};

static void *work(void *arg)
{
	struct worker *w = arg;
	uint64_t rng = w->seq * 7919;
	float q[QH * DIM], out[QH * DIM];
	kvf_attn_opts a;

	kvf_attn_opts_init(&a);
	query(&rng, q);
	for (int step = 0; step < 200 && !w->fail; step++) {
		kvf_stats s = { .struct_size = sizeof(s) };

		if (put(w->st, w->seq, step % 7 ? 1 : G, &rng) != KVF_OK ||
		    kvf_attend(w->st, w->seq, step % LAYERS, q, out, &a) != KVF_OK ||
		    kvf_stats_get(w->st, &s) != KVF_OK || s.dram_bytes > w->budget)
			w->fail = 1;
	}
	return NULL;
}

Test(tier, budget_never_exceeded_under_concurrency)
{
	kvf_options o = tier_opts(3ull << 20);
	struct worker w[4];
	pthread_t t[4];
	kvf_store *st;

	o.n_threads = 2;
	OK(kvf_open(tmp_path(fx.dir, "s"), &o, &st));
	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker){ st, (uint64_t)i + 1, o.dram_budget, 0 };
		OK(kvf_seq_create(st, w[i].seq));
	}
	for (int i = 0; i < 4; i++)
		cr_assert(eq(int, pthread_create(&t[i], NULL, work, &w[i]), 0));
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		cr_assert(eq(int, w[i].fail, 0), "worker %d: %s", i, kvf_last_error());
	}
	cr_assert(le(u64, stats_of(st).dram_peak, o.dram_budget));
	cr_assert(stats_of(st).cache_evictions > (0));
	OK(kvf_close(st));
}

/* segments reused by the cleaner: their old pages never come back from
 * the cache (every read is checked against the index) */
Test(tier, reused_segments_not_served)
{
	uint64_t rng = rng_seed("tier reuse");
	kvf_options o = fx_options(2ull * 32 * 64 * 1024, 2); /* 64 segments */
	float q[QH * DIM], out[QH * DIM], on[2][LAYERS][QH * DIM];
	kvf_store *st;

	o.dram_budget = 8ull << 20;
	o.direct_io = 2;
	OK(kvf_open(tmp_path(fx.dir, "s"), &o, &st));
	query(&rng, q);
	for (uint64_t round = 0; round < 12; round++) {
		uint64_t id = round + 1;

		OK(kvf_seq_create(st, id));
		OK(put(st, id, 16 * G, &rng));
		attend(st, id, 0, q, out, 0);
		if (round >= 2)
			OK(kvf_seq_free(st, id - 2));
		OK(kvf_sync(st));
	}
	cr_assert(stats_of(st).segments_reclaimed > (0));
	for (uint64_t id = 11; id <= 12; id++)
		for (uint32_t l = 0; l < LAYERS; l++)
			attend(st, id, l, q, on[id - 11][l], 0);
	OK(kvf_close(st));
	o.dram_budget = 0;
	OK(kvf_open(tmp_path(fx.dir, "s"), &o, &st));
	for (uint64_t id = 11; id <= 12; id++)
		for (uint32_t l = 0; l < LAYERS; l++) {
			attend(st, id, l, q, out, 0);
			cr_assert(eq(int, memcmp(out, on[id - 11][l], sizeof(out)), 0),
				  "sequence %" PRIu64 " layer %u: the tier served other bytes",
				  id, l);
		}
	OK(kvf_close(st));
}

/* write-back keeps the media's promise: decode appends on a store with
 * the tier on are refused KVF_ENOSPC when the media could not take what
 * they add; what waited goes out in the room promised to it, and every
 * token written before the refusal reads back after a reopen */
Test(tier, enospc_with_write_back)
{
	uint64_t rng = rng_seed("tier enospc"), rng0 = rng;
	kvf_options o = fx_options(2ull * 16 * 64 * 1024, 2); /* 32 segments */
	const char *p = strdup(tmp_path(fx.dir, "s"));
	uint16_t k[KVH * DIM], v[KVH * DIM], bk[DIM], bv[DIM];
	uint64_t len[3] = { 0, 0, 0 }, got[3] = { 0, 0, 0 };
	kvf_status rc = KVF_OK;
	kvf_store *st;

	o.dram_budget = 8ull << 20;
	o.direct_io = 2;
	OK(kvf_open(p, &o, &st));
	OK(kvf_seq_create(st, 1));
	OK(kvf_seq_create(st, 2));
	/* layer 0 only, a token at a time, the two sequences in turn */
	for (int step = 0; rc == KVF_OK && step < 100000; step++) {
		uint64_t id = 1 + (uint64_t)(step & 1);

		fill_f16(&rng, k, KVH * DIM);
		fill_f16(&rng, v, KVH * DIM);
		if ((rc = kvf_append(st, id, 0, 1, k, v)) == KVF_OK)
			len[id]++;
	}
	cr_assert(eq(int, rc, KVF_ENOSPC), "%s", kvf_last_error());
	cr_assert(stats_of(st).writeback_runs > (0), "no run written back");
	cr_assert(len[1] + len[2] > (8 * G), "only %" PRIu64 " tokens fit",
		  len[1] + len[2]);
	/* the partial tail groups need pages of their own, as without the
	 * tier: room comes from freeing sequence 2 */
	OK(kvf_seq_free(st, 2));
	len[2] = 0;
	OK(kvf_sync(st));
	OK(kvf_close(st));
	OK(kvf_open(p, &o, &st));
	for (int step = 0; got[1] < len[1]; step++) {
		uint64_t id = 1 + (uint64_t)(step & 1);

		fill_f16(&rng0, k, KVH * DIM);
		fill_f16(&rng0, v, KVH * DIM);
		for (uint32_t h = 0; h < KVH && id == 1; h++) {
			OK(kvf_read(st, id, 0, h, got[id], got[id] + 1, bk, bv));
			cr_assert(eq(int, memcmp(bk, k + h * DIM, sizeof(bk)), 0),
				  "sequence %" PRIu64 " token %" PRIu64, id, got[id]);
			cr_assert(eq(int, memcmp(bv, v + h * DIM, sizeof(bv)), 0),
				  "sequence %" PRIu64 " token %" PRIu64, id, got[id]);
		}
		got[id]++;
	}
	OK(kvf_close(st));
	free((void *)p);
}

/* the value of token t, head h, dim d of (seq, layer, kind): any f16
 * bits with the top exponent bit clear (finite) */
static uint16_t val(uint64_t seq, uint32_t l, int kind, uint64_t t, uint32_t h,
		    uint32_t d)
{
	uint64_t x = (seq << 40) ^ ((uint64_t)l << 32) ^ ((uint64_t)kind << 31) ^
		     (t << 12) ^ ((uint64_t)h << 8) ^ d;

	x *= 0x9e3779b97f4a7c15ull;
	return (uint16_t)(x >> 48) & 0xbfffu;
}

/* append n tokens from token t0 of seq to every layer, one call a layer */
static kvf_status put_known(kvf_store *st, uint64_t seq, uint64_t t0, uint32_t n)
{
	size_t elts = (size_t)n * KVH * DIM;
	uint16_t *k = malloc(elts * 2), *v = malloc(elts * 2);
	kvf_status rc = KVF_OK;

	cr_assert(k && v);
	for (uint32_t l = 0; l < LAYERS && rc == KVF_OK; l++) {
		for (uint32_t t = 0; t < n; t++)
			for (uint32_t h = 0; h < KVH; h++)
				for (uint32_t d = 0; d < DIM; d++) {
					size_t i = ((size_t)t * KVH + h) * DIM + d;

					k[i] = val(seq, l, 0, t0 + t, h, d);
					v[i] = val(seq, l, 1, t0 + t, h, d);
				}
		rc = kvf_append(st, seq, l, n, k, v);
	}
	free(k);
	free(v);
	return rc;
}

/* every token of seq's n is the one appended */
static void check_known(kvf_store *st, uint64_t seq, uint64_t n)
{
	uint16_t *k = malloc(n * DIM * 2), *v = malloc(n * DIM * 2);

	cr_assert(k && v);
	for (uint32_t l = 0; l < LAYERS; l++)
		for (uint32_t h = 0; h < KVH; h++) {
			OK(kvf_read(st, seq, l, h, 0, n, k, v));
			for (uint64_t t = 0; t < n; t++)
				for (uint32_t d = 0; d < DIM; d++) {
					cr_assert(eq(u16, k[t * DIM + d], val(seq, l, 0, t, h, d)),
						  "seq %llu layer %u head %u K token %llu",
						  (unsigned long long)seq, l, h,
						  (unsigned long long)t);
					cr_assert(eq(u16, v[t * DIM + d], val(seq, l, 1, t, h, d)),
						  "seq %llu layer %u head %u V token %llu",
						  (unsigned long long)seq, l, h,
						  (unsigned long long)t);
				}
		}
	free(k);
	free(v);
}

/* written segments enter the cache whole, without a copy: a sync's
 * segments are all taken (a small cache makes its buffers on the spot),
 * and what was written is then read from DRAM */
Test(tier, written_segments_cached_in_place)
{
	kvf_options o = tier_opts(16ull << 20);
	float q[QH * DIM], out[QH * DIM];
	uint64_t rng = rng_seed("tier in place");
	kvf_stats a, b;
	kvf_store *st;

	OK(kvf_open(tmp_path(fx.dir, "s"), &o, &st));
	OK(kvf_seq_create(st, 1));
	OK(put_known(st, 1, 0, 40 * G));
	OK(kvf_sync(st));
	a = stats_of(st);
	cr_assert(a.cache_segments > (0));
	cr_assert(eq(u64, a.cache_segments_skipped, 0));
	/* every data page written is cached: taken whole, none copied */
	cr_assert(eq(u64, a.cache_bytes, a.data_bytes));
	query(&rng, q);
	attend(st, 1, 0, q, out, 0);
	b = stats_of(st);
	cr_assert(eq(u64, b.attend_bytes_read - a.attend_bytes_read, 0));
	check_known(st, 1, 40 * G);
	cr_assert(le(u64, b.dram_peak, o.dram_budget));
	OK(kvf_close(st));
}

/* a cache full of written segments recycles them: decode appends of
 * several sequences past the budget (their pages waiting for write-back
 * in memory the cache gives up), then a prefill; every token reads back
 * as appended, before and after a reopen, and the budget holds */
Test(tier, full_cache_recycles_its_memory)
{
	kvf_options o = tier_opts(3ull << 20); /* 48 segments of 64 KiB */
	const char *p = strdup(tmp_path(fx.dir, "s"));
	kvf_stats s;
	kvf_store *st;

	OK(kvf_open(p, &o, &st));
	for (uint64_t q = 1; q <= 4; q++)
		OK(kvf_seq_create(st, q));
	for (uint32_t t = 0; t < 40 * G; t++) /* 4 x 2.5 MiB, a token a call */
		for (uint64_t q = 1; q <= 3; q++)
			OK(put_known(st, q, t, 1));
	OK(put_known(st, 4, 0, 40 * G));
	OK(kvf_sync(st));
	s = stats_of(st);
	cr_assert(le(u64, s.dram_peak, o.dram_budget));
	cr_assert(s.cache_evictions > (0));
	cr_assert(s.cache_segments > (48));
	cr_assert(s.writeback_runs > (0));
	for (uint64_t q = 1; q <= 4; q++)
		check_known(st, q, 40 * G);
	OK(kvf_close(st));
	OK(kvf_open(p, &o, &st));
	for (uint64_t q = 1; q <= 4; q++)
		check_known(st, q, 40 * G);
	OK(kvf_close(st));
	free((void *)p);
}

/* a decode loop that nobody reads keeps a small cache: the memory of its
 * written pages goes to the pages that wait next, where it grew the
 * cache by every page written (each one fresh memory, faulted in) up to
 * the budget; once read, the cache grows again */
Test(tier, a_written_only_decode_loop_reuses_its_memory)
{
	kvf_options o = tier_opts(256ull << 20);
	float q[QH * DIM], out[QH * DIM];
	uint64_t rng = rng_seed("tier written only");
	kvf_stats s, r;
	kvf_store *st;

	o.capacity_bytes = 160ull << 20;
	OK(kvf_open(tmp_path(fx.dir, "s"), &o, &st));
	OK(kvf_seq_create(st, 1));
	for (uint32_t t = 0; t < 64 * 1024; t++) /* 64 MiB, a token a call */
		OK(put_known(st, 1, t, 1));
	OK(kvf_sync(st));
	s = stats_of(st);
	cr_assert(s.writeback_runs >= (8 * 2048 / WB_RUN));
	cr_assert(s.dram_peak < (40ull << 20),
		  "a loop nobody read took %" PRIu64 " bytes", s.dram_peak);
	/* read, the cache takes what it reads (a layer: 32 MiB) */
	query(&rng, q);
	attend(st, 1, 0, q, out, 0);
	r = stats_of(st);
	cr_assert(r.cache_bytes > (24ull << 20), "%" PRIu64, r.cache_bytes);
	check_known(st, 1, 64 * 1024);
	OK(kvf_close(st));
}

/* kvf_options.profile: refused past 1; off, the stage times stay 0; on,
 * an append and a sync are timed stage by stage */
Test(tier, stage_profile)
{
	kvf_options o = tier_opts(16ull << 20);
	kvf_store *st;
	kvf_stats s;

	o.profile = 2;
	cr_assert(eq(int, kvf_open(tmp_path(fx.dir, "s"), &o, &st), KVF_EINVAL));
	cr_assert(strstr(kvf_last_error(), "profile 2") != NULL, "%s",
		  kvf_last_error());
	o.profile = 0;
	OK(kvf_open(tmp_path(fx.dir, "s"), &o, &st));
	OK(kvf_seq_create(st, 1));
	OK(put_known(st, 1, 0, 8 * G));
	OK(kvf_sync(st));
	s = stats_of(st);
	cr_assert(eq(u64, s.prof_append_ns + s.prof_copy_ns + s.prof_hash_ns +
				  s.prof_sync_ns + s.prof_writer_ns, 0));
	OK(kvf_close(st));
	o.profile = 1; /* a handle option: the reopen changes it */
	OK(kvf_open(tmp_path(fx.dir, "s"), &o, &st));
	OK(put_known(st, 1, 8 * G, 8 * G));
	OK(kvf_sync(st));
	s = stats_of(st);
	cr_assert(s.prof_append_ns > (0));
	cr_assert(s.prof_copy_ns > (0));
	cr_assert(s.prof_hash_ns > (0));
	cr_assert(s.prof_sync_ns > (0));
	cr_assert(s.prof_writer_ns > (0));
	check_known(st, 1, 16 * G);
	OK(kvf_close(st));
}

/* memory that pages waiting for write-back took from the cache comes back
 * to the budget once they are written: after a sync wrote them, group
 * buffers of new sequences fill nearly the whole budget, not only what
 * the waiting pages left */
Test(tier, written_back_memory_returns)
{
	kvf_options o = tier_opts(2ull << 20); /* 32 segments of 64 KiB */
	uint32_t n = 0;
	kvf_status rc = KVF_OK;
	kvf_store *st;

	OK(kvf_open(tmp_path(fx.dir, "s"), &o, &st));
	OK(kvf_seq_create(st, 1));
	for (uint32_t t = 0; t < 31 * G; t++) /* 31 pages a stream wait */
		OK(put_known(st, 1, t, 1));
	cr_assert(stats_of(st).writeback_bytes > (512u << 10));
	OK(kvf_sync(st));
	cr_assert(eq(u64, stats_of(st).writeback_bytes, 0));
	/* each new sequence holds a group buffer per stream: 8 of 4 KiB */
	while (rc == KVF_OK && n < 1000) {
		OK(kvf_seq_create(st, 100 + n));
		rc = put_known(st, 100 + n, 0, 1);
		n += rc == KVF_OK;
	}
	cr_assert(eq(int, rc, KVF_ENOMEM), "%s", kvf_last_error());
	cr_assert(strstr(kvf_last_error(), "dram_budget") != NULL, "%s",
		  kvf_last_error());
	/* 2 MiB, less the tables, the index and sequence 1's buffers */
	cr_assert(ge(u32, n, 48), "only %u sequences' group buffers fit", n);
	cr_assert(le(u64, stats_of(st).dram_peak, o.dram_budget));
	check_known(st, 1, 31 * G);
	OK(kvf_close(st));
}

/* page_at - where entry e of stream (layer, kind, head) of seq 1 is, as
 * page number counted over the store (segment, then page) */
static uint64_t page_at(kvf_store *st, uint32_t layer, int kind, uint32_t h,
			uint64_t e)
{
	struct seq *seq = NULL;
	struct page_ref r;

	OK(seq_get_locked(st, "test", 1, &seq));
	r = stream_page(seq_kv_stream(st, seq, layer, (enum kv_kind)kind, h), e);
	seq_unlock_put(st, seq);
	cr_assert(ne(u32, r.addr, ADDR_NONE));
	return (uint64_t)addr_seg(r.addr, st->page_bits) * st->data_per_seg +
	       addr_page(r.addr, st->page_bits);
}

Test(tier, sync_lays_heads_side_by_side)
{
	/* one stripe of 1 MiB segments: everything below fits one */
	kvf_options o = fx_options_for(NULL, 1u << 20, 64ull << 20, 1);
	uint64_t want = 0;
	kvf_store *st;

	o.dram_budget = 16ull << 20;
	o.direct_io = 2;
	OK(kvf_open(tmp_path(fx.dir, "s"), &o, &st));
	OK(kvf_seq_create(st, 1));
	/* a decode loop: three whole groups and a tail, all waiting */
	for (uint32_t t = 0; t < 3 * G + 5; t++)
		OK(put_known(st, 1, t, 1));
	cr_assert(eq(u64, stats_of(st).writeback_runs, 0));
	OK(kvf_sync(st));
	/* layer by layer: each head's K run then its V run, then the
	 * layer's tails in the same order, one page after another */
	want = page_at(st, 0, 0, 0, 0);
	for (uint32_t l = 0; l < LAYERS; l++) {
		for (uint32_t h = 0; h < KVH; h++)
			for (int kind = 0; kind < 2; kind++)
				for (uint64_t g = 0; g < 3; g++, want++)
					cr_assert(eq(u64, page_at(st, l, kind, h, g), want),
						  "layer %u head %u %s group %llu",
						  l, h, kind ? "V" : "K",
						  (unsigned long long)g);
		for (uint32_t h = 0; h < KVH; h++)
			for (int kind = 0; kind < 2; kind++, want++)
				cr_assert(eq(u64, page_at(st, l, kind, h, 3), want),
					  "layer %u head %u %s tail", l, h,
					  kind ? "V" : "K");
	}
	check_known(st, 1, 3 * G + 5);
	OK(kvf_close(st));
}

/*
 * A truncation into a whole group of several pages that a write-back run
 * ended inside: head_dim 768 (rows of 1536 bytes, groups of 8 tokens in 3
 * pages), runs of 32 pages, so the second run of a stream ends after the
 * first page of its group 21 and the rest of that group waits.  The cut
 * drops what waits, so the kept tail's tokens in those pages are not on
 * media: the next sync must write them, and they must read back after a
 * reopen.
 */
Test(tier, truncation_into_a_group_a_run_split)
{
	kvf_model m = { 1, 1, 1, 768, KVF_DTYPE_F16 };
	kvf_options o = fx_options_for(&m, 1u << 20, 64ull << 20, 1);
	kvf_store_info si = { .struct_size = sizeof(si) };
	const size_t row = 768 * 2;
	uint64_t rng = rng_seed("tier_run_split");
	uint16_t *k = malloc(180 * row), *v = malloc(180 * row);
	unsigned char *rk = malloc(180 * row), *rv = malloc(180 * row);
	const char *p = tmp_path(fx.dir, "split");
	kvf_store *st;

	cr_assert(k && v && rk && rv);
	o.dram_budget = 16ull << 20;
	o.direct_io = 2;
	fill_f16(&rng, k, 180 * 768);
	fill_f16(&rng, v, 180 * 768);
	OK(kvf_open(p, &o, &st));
	OK(kvf_store_info_get(st, &si));
	cr_assert(eq(u32, si.group_tokens, 8));
	cr_assert(eq(u32, si.group_pages, 3));
	OK(kvf_seq_create(st, 1));
	/* 22 whole groups, a token at a time: runs of 32 pages go out at
	 * 32 and 64 pages, the second ending after group 21's first page */
	for (uint32_t t = 0; t < 22 * 8; t++)
		OK(kvf_append(st, 1, 0, 1, (const char *)k + t * row,
			      (const char *)v + t * row));
	cr_assert(eq(u64, stats_of(st).writeback_runs, 4), "two runs of K, two of V");
	/* keep 21 * 8 + 6 tokens, the sixth in the group's third page,
	 * then one new token */
	OK(kvf_seq_truncate(st, 1, 21 * 8 + 6));
	OK(kvf_append(st, 1, 0, 1, (const char *)k + 179 * row,
		      (const char *)v + 179 * row));
	OK(kvf_sync(st));
	OK(kvf_close(st));
	OK(kvf_open(p, &o, &st));
	OK(kvf_read(st, 1, 0, 0, 0, 21 * 8 + 7, rk, rv));
	cr_assert(memcmp(rk, k, (21 * 8 + 6) * row) == 0, "K kept");
	cr_assert(memcmp(rv, v, (21 * 8 + 6) * row) == 0, "V kept");
	cr_assert(memcmp(rk + (21 * 8 + 6) * row, (const char *)k + 179 * row,
			 row) == 0, "K appended after the cut");
	cr_assert(memcmp(rv + (21 * 8 + 6) * row, (const char *)v + 179 * row,
			 row) == 0, "V appended after the cut");
	OK(kvf_close(st));
	free(k);
	free(v);
	free(rk);
	free(rv);
}

/* k0 - sequence 1's layer 0 K head 0 stream, as the test reads it */
static struct stream k0(kvf_store *st, unsigned char **waiting_first)
{
	struct seq *seq = NULL;
	struct stream s;

	OK(seq_get_locked(st, "test", 1, &seq));
	s = *seq_kv_stream(st, seq, 0, KIND_K, 0);
	*waiting_first = s.wb && s.wb->n ? s.wb->page[0] : NULL;
	seq_unlock_put(st, seq);
	return s;
}

/* a decode loop's full group waits for write-back in the page it filled,
 * not in a copy: the group buffer is a page of the tier, handed to the
 * waiting run as it is, and the next group fills another; every token
 * reads back as appended while it waits, after a truncation into the
 * group buffer that took its place, and after a sync and a reopen */
Test(tier, a_waiting_group_is_its_buffer)
{
	kvf_options o = tier_opts(16ull << 20);
	const char *p = tmp_path(fx.dir, "s");
	unsigned char *first, *filled;
	struct stream s;
	kvf_store *st;

	OK(kvf_open(p, &o, &st));
	OK(kvf_seq_create(st, 1));
	for (uint32_t t = 0; t < G - 1; t++)
		OK(put_known(st, 1, t, 1));
	s = k0(st, &first);
	cr_assert(s.gbuf_page, "a stream that may wait fills a page of the tier");
	cr_assert_null(first);
	filled = s.gbuf;
	OK(put_known(st, 1, G - 1, 1)); /* completes group 0 */
	s = k0(st, &first);
	cr_assert(s.wb && s.wb->n == 1, "group 0 waits");
	cr_assert(first == filled, "group 0 waits in the page it filled");
	cr_assert(s.gbuf != filled && s.gbuf_page);
	for (uint32_t t = G; t < 2 * G + 3; t++)
		OK(put_known(st, 1, t, 1));
	check_known(st, 1, 2 * G + 3);
	/* a cut into group 1, which waits in its own buffer now, and the
	 * tail group's tokens again */
	OK(kvf_seq_truncate(st, 1, G + 2));
	for (uint32_t t = G + 2; t < 2 * G + 5; t++)
		OK(put_known(st, 1, t, 1));
	check_known(st, 1, 2 * G + 5);
	OK(kvf_sync(st));
	cr_assert(eq(u64, stats_of(st).writeback_bytes, 0));
	check_known(st, 1, 2 * G + 5);
	OK(kvf_close(st));
	OK(kvf_open(p, &o, &st));
	check_known(st, 1, 2 * G + 5);
	cr_assert(le(u64, stats_of(st).dram_peak, o.dram_budget));
	OK(kvf_close(st));
}

/* steal_pool / return_pool - empty the store's spare segment buffers, so
 * that the next segment an append opens allocates its buffer */
static struct segbuf *steal_pool(kvf_store *st)
{
	struct segbuf *sb;

	pthread_mutex_lock(&st->bufs.lock);
	sb = st->bufs.free;
	st->bufs.free = NULL;
	st->bufs.n_free = 0;
	pthread_mutex_unlock(&st->bufs.lock);
	return sb;
}

static void return_pool(kvf_store *st, struct segbuf *sb)
{
	pthread_mutex_lock(&st->bufs.lock);
	while (sb) {
		struct segbuf *next = sb->next;

		sb->next = st->bufs.free;
		st->bufs.free = sb;
		st->bufs.n_free++;
		sb = next;
	}
	pthread_mutex_unlock(&st->bufs.lock);
}

/* layer l of seq 1 holds tokens [0, n) as appended */
static void check_layer(kvf_store *st, uint32_t l, uint64_t n)
{
	uint16_t *k = malloc((n + 1) * DIM * 2), *v = malloc((n + 1) * DIM * 2);
	uint64_t len;

	cr_assert(k && v);
	OK(kvf_seq_len(st, 1, l, &len));
	cr_assert(eq(u64, len, n));
	for (uint32_t h = 0; h < KVH; h++) {
		OK(kvf_read(st, 1, l, h, 0, n, k, v));
		for (uint64_t t = 0; t < n; t++)
			for (uint32_t d = 0; d < DIM; d++) {
				cr_assert(eq(u16, k[t * DIM + d], val(1, l, 0, t, h, d)),
					  "layer %u head %u K token %llu", l, h,
					  (unsigned long long)t);
				cr_assert(eq(u16, v[t * DIM + d], val(1, l, 1, t, h, d)),
					  "layer %u head %u V token %llu", l, h,
					  (unsigned long long)t);
			}
	}
	free(k);
	free(v);
}

/* an append that completes a group waiting for write-back, refused for
 * memory from each of its allocations on in turn (the segment buffers'
 * among them, the pool emptied), changes nothing: the layer holds the
 * tokens it held, every one as appended, and the same append then goes
 * through; runs fill and go out on the way, opening segments */
Test(tier, a_refused_sealing_append_changes_nothing)
{
	kvf_options o = tier_opts(16ull << 20);
	const char *p = tmp_path(fx.dir, "s");
	uint16_t k[KVH * DIM], v[KVH * DIM];
	uint32_t refused = 0;
	kvf_store *st;

	OK(kvf_open(p, &o, &st));
	OK(kvf_seq_create(st, 1));
	for (uint64_t t = 0; t < 34 * G; t++)
		for (uint32_t l = 0; l < LAYERS; l++) {
			for (uint32_t h = 0; h < KVH; h++)
				for (uint32_t d = 0; d < DIM; d++) {
					k[h * DIM + d] = val(1, l, 0, t, h, d);
					v[h * DIM + d] = val(1, l, 1, t, h, d);
				}
			if (t % G != G - 1) {
				OK(kvf_append(st, 1, l, 1, k, v));
				continue;
			}
			for (uint64_t n = 1;; n++) {
				struct segbuf *pool = steal_pool(st);
				kvf_status rc;

				kvf_alloc_fail_at(n, 1);
				rc = kvf_append(st, 1, l, 1, k, v);
				kvf_alloc_fail_at(0, 0);
				return_pool(st, pool);
				if (rc == KVF_OK)
					break;
				cr_assert(eq(int, rc, KVF_ENOMEM), "%s", kvf_last_error());
				refused++;
				check_layer(st, l, t);
			}
		}
	/* 68 sealing appends, each refused at least once */
	cr_assert(ge(u32, refused, 68), "only %u appends refused", refused);
	cr_assert(ge(u64, stats_of(st).writeback_runs, 4), "runs went out");
	check_known(st, 1, 34 * G);
	OK(kvf_sync(st));
	OK(kvf_close(st));
	OK(kvf_open(p, &o, &st));
	check_known(st, 1, 34 * G);
	OK(kvf_close(st));
}
