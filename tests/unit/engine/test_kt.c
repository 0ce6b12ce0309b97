/*
 * test_kt.c - K^T pages hold exactly the transposed K: for every head and
 * dim group, kt_read of any token range equals K read row-wise and
 * transposed, through block boundaries, the open block, a reopen (which
 * rebuilds the open block from K) and a fork (which shares whole blocks).
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stdlib.h>
#include <string.h>

#include "engine/writes/kt.h"
#include "engine/reads/kt_read.h"
#include "engine/sequences/seq.h"
#include "engine/sequences/seq_stream.h"
#include "kvflash.h"
#include "store_fixture.h"
#include "testutil.h"


/* the fixture's DIM 64 in f16: G = 32, E = 8, T = 256 tokens a K^T page */

TestSuite(kt, .init = fx_setup_dir, .fini = fx_teardown, .timeout = 60);

static kvf_store *open_kt(int create)
{
	kvf_model m = { LAYERS, KVH * 2, KVH, DIM, KVF_DTYPE_F16 };
	kvf_options o;
	kvf_store *st = NULL;

	o = fx_options_for(&m, 128 * 1024, 64ull << 20, 3);
	o.kt_pages = 1;
	cr_assert(eq(int, kvf_open(fx.path, create ? &o : NULL, &st), KVF_OK),
		  "%s", kvf_last_error());
	return st;
}

static void append(kvf_store *st, uint64_t seq, uint64_t t0, uint32_t n,
		   uint64_t *rng)
{
	size_t bytes = (size_t)n * KVH * DIM * 2;
	uint16_t *k = malloc(bytes + 2), *v = malloc(bytes + 2);

	(void)t0;
	rng_fill(rng, k, bytes);
	rng_fill(rng, v, bytes);
	for (uint32_t l = 0; l < LAYERS; l++)
		cr_assert(eq(int, kvf_append(st, seq, l, n, k, v), KVF_OK), "%s",
			  kvf_last_error());
	free(k);
	free(v);
}

/* compare kt_read with K for random ranges of every head and dim group */
static void check_kt(kvf_store *st, uint64_t id, uint64_t *rng)
{
	uint16_t *k, *kt;
	struct seq *seq;
	uint64_t len;

	cr_assert(eq(int, kvf_seq_len(st, id, 0, &len), KVF_OK));
	k = malloc(len * DIM * 2 + 2);
	kt = malloc(len * 8 * 2 + 2);
	for (int iter = 0; iter < 12; iter++) {
		uint32_t l = (uint32_t)rng_below(rng, LAYERS);
		uint32_t h = (uint32_t)rng_below(rng, KVH);
		uint32_t dg = (uint32_t)rng_below(rng, DIM / 8);
		uint64_t t0 = rng_below(rng, len), t1 = t0 + 1 + rng_below(rng, len - t0);

		if (iter == 0)
			t0 = 0, t1 = len;
		cr_assert(eq(int, kvf_read(st, id, l, h, t0, t1, k, NULL), KVF_OK));
		cr_assert(eq(int, seq_get_locked(st, "test", id, &seq), KVF_OK));
		cr_assert(eq(int, kt_read(st, seq, l, h, dg, t0, t1, kt), KVF_OK),
			  "%s", kvf_last_error());
		seq_unlock_put(st, seq);
		for (uint64_t t = 0; t < t1 - t0; t++)
			for (uint32_t e = 0; e < 8; e++)
				cr_assert(eq(u16, kt[e * (t1 - t0) + t], k[t * DIM + dg * 8 + e]),
					  "seq %llu layer %u head %u dim %u token %llu",
					  (unsigned long long)id, l, h, dg * 8 + e,
					  (unsigned long long)(t0 + t));
	}
	free(k);
	free(kt);
}

Test(kt, transposed_pages_match_k)
{
	uint64_t rng = rng_seed("kt");
	kvf_store *st = open_kt(1);
	kvf_stats s = { .struct_size = sizeof(s) };
	uint64_t t = 0;
	static const uint32_t chunks[] = { 1, 31, 300, 7, 255, 256, 1, 600 };

	cr_assert(eq(int, kvf_seq_create(st, 5), KVF_OK));
	for (size_t i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++) {
		append(st, 5, t, chunks[i], &rng);
		t += chunks[i];
		check_kt(st, 5, &rng);
	}
	cr_assert(eq(int, kvf_stats_get(st, &s), KVF_OK));
	/* K^T of every complete block: as many pages as the K they copy */
	cr_assert(eq(u64, s.kt_bytes, (uint64_t)(t / 256) * 256 / 32 * 4096 * LAYERS * KVH));
	cr_assert(eq(int, kvf_seq_fork(st, 5, 6, t - 100), KVF_OK), "%s", kvf_last_error());
	check_kt(st, 6, &rng);
	append(st, 6, t - 100, 333, &rng);
	check_kt(st, 6, &rng);
	cr_assert(eq(int, kvf_close(st), KVF_OK), "%s", kvf_last_error());
	st = open_kt(0);
	check_kt(st, 5, &rng);
	check_kt(st, 6, &rng);
	append(st, 5, t, 300, &rng);
	check_kt(st, 5, &rng);
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}
