/*
 * test_cleaner.c - the cleaner makes room: frequent syncs leave many
 * partly filled segments, and a store too small to hold them all must
 * compact them (copying live pages, forked ones for every owner) and keep
 * every token readable, across a reopen too.  Live data that really does
 * not fit is refused with KVF_ENOSPC and changes nothing.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stdlib.h>
#include <string.h>

#include "kvflash.h"
#include "testutil.h"

#define LAYERS 2
#define KVH 2
#define DIM 64 /* f16: G = 32 tokens a 4 KiB page */

static char *dir;

static void setup(void)
{
	dir = tmpdir_make("cleaner");
	cr_assert_not_null(dir);
}

static void teardown(void)
{
	tmpdir_remove(dir);
}

TestSuite(cleaner, .init = setup, .fini = teardown, .timeout = 120);

static kvf_store *open_tiny(uint64_t capacity)
{
	kvf_model m = { LAYERS, KVH, KVH, DIM, KVF_DTYPE_F16 };
	kvf_options o;
	kvf_store *st = NULL;

	kvf_options_init(&o, &m);
	o.segment_size = 64 * 1024; /* 16 pages: 15 data + 1 summary */
	o.capacity_bytes = capacity;
	o.n_stripes = 2;
	cr_assert(eq(int, kvf_open(tmp_path(dir, "s"), &o, &st), KVF_OK), "%s",
		  kvf_last_error());
	return st;
}

static uint16_t val(uint64_t seq, uint32_t l, int kind, uint64_t t, uint32_t h,
		    uint32_t d)
{
	uint64_t x = seq * 7777u + l * 131u + (uint64_t)kind * 31u + t * 17u +
		     h * 3u + d;

	return (uint16_t)(x * 2654435761u >> 7);
}

static kvf_status append(kvf_store *st, uint64_t seq, uint64_t data_seq,
			 uint64_t t0, uint32_t n)
{
	uint16_t *k = malloc((size_t)n * KVH * DIM * 2);
	uint16_t *v = malloc((size_t)n * KVH * DIM * 2);
	kvf_status rc = KVF_OK;

	for (uint32_t l = 0; l < LAYERS && rc == KVF_OK; l++) {
		for (uint32_t i = 0; i < n; i++)
			for (uint32_t h = 0; h < KVH; h++)
				for (uint32_t d = 0; d < DIM; d++) {
					size_t at = ((size_t)i * KVH + h) * DIM + d;

					k[at] = val(data_seq, l, 0, t0 + i, h, d);
					v[at] = val(data_seq, l, 1, t0 + i, h, d);
				}
		rc = kvf_append(st, seq, l, n, k, v);
	}
	free(k);
	free(v);
	return rc;
}

static void check(kvf_store *st, uint64_t seq, uint64_t data_seq, uint64_t t1)
{
	uint16_t *k = malloc((size_t)t1 * DIM * 2), *v = malloc((size_t)t1 * DIM * 2);

	for (uint32_t l = 0; l < LAYERS; l++)
		for (uint32_t h = 0; h < KVH; h++) {
			cr_assert(eq(int, kvf_read(st, seq, l, h, 0, t1, k, v), KVF_OK),
				  "%s", kvf_last_error());
			for (uint64_t t = 0; t < t1; t++)
				for (uint32_t d = 0; d < DIM; d++) {
					cr_assert(eq(u16, k[t * DIM + d], val(data_seq, l, 0, t, h, d)),
						  "seq %llu layer %u head %u token %llu",
						  (unsigned long long)seq, l, h,
						  (unsigned long long)t);
					cr_assert(eq(u16, v[t * DIM + d], val(data_seq, l, 1, t, h, d)));
				}
		}
	free(k);
	free(v);
}

/* A small trickle of tokens and a sync each time: each sync writes the
 * partial groups and seals a mostly empty segment.  Without the cleaner the
 * 40 segments run out long before the data does. */
Test(cleaner, compacts_partly_filled_segments)
{
	kvf_store *st = open_tiny(40 * 64 * 1024);
	kvf_stats s = { .struct_size = sizeof(s) };
	uint64_t t = 0;

	cr_assert(eq(int, kvf_seq_create(st, 1), KVF_OK));
	for (int round = 0; round < 120; round++) {
		cr_assert(eq(int, append(st, 1, 1, t, 5), KVF_OK), "round %d: %s",
			  round, kvf_last_error());
		t += 5;
		cr_assert(eq(int, kvf_sync(st), KVF_OK), "round %d: %s", round,
			  kvf_last_error());
	}
	check(st, 1, 1, t);
	cr_assert(eq(int, kvf_stats_get(st, &s), KVF_OK));
	cr_assert(gt(u64, s.segments_cleaned, 0), "the cleaner never ran");
	cr_assert(gt(u64, s.cleaner_bytes, 0));
	cr_assert(eq(int, kvf_close(st), KVF_OK), "%s", kvf_last_error());
	st = NULL;
	cr_assert(eq(int, kvf_open(tmp_path(dir, "s"), NULL, &st), KVF_OK), "%s",
		  kvf_last_error());
	check(st, 1, 1, t);
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

/* Pages shared by a fork move for both owners; the parent is freed so its
 * own slots are gone while the child's stay. */
Test(cleaner, moves_shared_pages_for_every_owner)
{
	kvf_store *st = open_tiny(48 * 64 * 1024);
	uint64_t t = 0;

	cr_assert(eq(int, kvf_seq_create(st, 1), KVF_OK));
	for (int round = 0; round < 20; round++) {
		cr_assert(eq(int, append(st, 1, 1, t, 7), KVF_OK), "%s", kvf_last_error());
		t += 7;
		cr_assert(eq(int, kvf_sync(st), KVF_OK), "%s", kvf_last_error());
	}
	cr_assert(eq(int, kvf_seq_fork(st, 1, 2, t), KVF_OK), "%s", kvf_last_error());
	cr_assert(eq(int, kvf_seq_fork(st, 1, 3, t - 40), KVF_OK), "%s", kvf_last_error());
	cr_assert(eq(int, kvf_seq_free(st, 1), KVF_OK));
	/* more partly filled segments from another sequence force cleaning */
	cr_assert(eq(int, kvf_seq_create(st, 4), KVF_OK));
	for (uint64_t u = 0, round = 0; round < 80; round++, u += 3) {
		cr_assert(eq(int, append(st, 4, 4, u, 3), KVF_OK), "round %llu: %s",
			  (unsigned long long)round, kvf_last_error());
		cr_assert(eq(int, kvf_sync(st), KVF_OK), "%s", kvf_last_error());
	}
	check(st, 2, 1, t);
	check(st, 3, 1, t - 40);
	check(st, 4, 4, 240);
	cr_assert(eq(int, kvf_close(st), KVF_OK), "%s", kvf_last_error());
	st = NULL;
	cr_assert(eq(int, kvf_open(tmp_path(dir, "s"), NULL, &st), KVF_OK), "%s",
		  kvf_last_error());
	check(st, 2, 1, t);
	check(st, 3, 1, t - 40);
	check(st, 4, 4, 240);
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

/* Live data beyond capacity: KVF_ENOSPC, and the refused append changed
 * nothing; freeing a sequence makes room again. */
Test(cleaner, enospc_when_live_data_fills_the_store)
{
	kvf_store *st = open_tiny(16 * 64 * 1024);
	uint64_t t = 0, n;
	kvf_status rc;

	cr_assert(eq(int, kvf_seq_create(st, 1), KVF_OK));
	cr_assert(eq(int, kvf_seq_create(st, 2), KVF_OK));
	for (;;) {
		rc = append(st, 1, 1, t, 32);
		if (rc != KVF_OK)
			break;
		t += 32;
		cr_assert(lt(u64, t, 100000));
	}
	cr_assert(eq(int, rc, KVF_ENOSPC), "%s", kvf_last_error());
	cr_assert(ne(ptr, strstr(kvf_last_error(), "full of live data"), NULL),
		  "%s", kvf_last_error());
	/* layer 0 of the failed append may have gone in before layer 1 was
	 * refused: each kvf_append call is all or nothing on its own */
	cr_assert(eq(int, kvf_seq_len(st, 1, LAYERS - 1, &n), KVF_OK));
	cr_assert(eq(u64, n, t));
	check(st, 1, 1, t);
	cr_assert(eq(int, kvf_seq_free(st, 1), KVF_OK));
	cr_assert(eq(int, append(st, 2, 2, 0, 64), KVF_OK), "%s", kvf_last_error());
	check(st, 2, 2, 64);
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}
