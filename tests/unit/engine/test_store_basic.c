/*
 * test_store_basic.c - the store's round trips: append, read back from
 * group buffers, open segments and media, sync, reopen, fork, free.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stdlib.h>
#include <string.h>

#include "kvflash.h"
#include "testutil.h"

#define LAYERS 3
#define QH 4
#define KVH 2
#define DIM 64 /* f16: 128 bytes a token, G = 32 tokens a 4 KiB page */

static char *dir;

static void setup(void)
{
	dir = tmpdir_make("store");
	cr_assert_not_null(dir);
}

static void teardown(void)
{
	tmpdir_remove(dir);
}

TestSuite(store, .init = setup, .fini = teardown, .timeout = 60);

static kvf_options opts_small(void)
{
	kvf_model m = { LAYERS, QH, KVH, DIM, KVF_DTYPE_F16 };
	kvf_options o;

	kvf_options_init(&o, &m);
	o.segment_size = 64 * 1024; /* 16 pages */
	o.capacity_bytes = 64ull << 20;
	o.n_stripes = 2;
	return o;
}

static kvf_store *open_store(void)
{
	kvf_options o = opts_small();
	kvf_store *st = NULL;

	cr_assert(eq(int, kvf_open(tmp_path(dir, "s"), &o, &st), KVF_OK), "%s",
		  kvf_last_error());
	return st;
}

/* token value: a deterministic u16 per (seq, layer, kind, token, head, d) */
static uint16_t val(uint64_t seq, uint32_t layer, int kind, uint64_t t,
		    uint32_t h, uint32_t d)
{
	uint64_t x = seq * 1000003u + layer * 7919u + (uint64_t)kind * 104729u +
		     t * 131u + h * 31u + d;

	return (uint16_t)(x ^ (x >> 16));
}

static void append_tokens(kvf_store *st, uint64_t seq, uint32_t layer,
			  uint64_t t0, uint32_t n)
{
	uint16_t *k = malloc((size_t)n * KVH * DIM * 2);
	uint16_t *v = malloc((size_t)n * KVH * DIM * 2);

	for (uint32_t i = 0; i < n; i++)
		for (uint32_t h = 0; h < KVH; h++)
			for (uint32_t d = 0; d < DIM; d++) {
				k[((size_t)i * KVH + h) * DIM + d] = val(seq, layer, 0, t0 + i, h, d);
				v[((size_t)i * KVH + h) * DIM + d] = val(seq, layer, 1, t0 + i, h, d);
			}
	cr_assert(eq(int, kvf_append(st, seq, layer, n, k, v), KVF_OK), "%s",
		  kvf_last_error());
	free(k);
	free(v);
}

static void check_tokens(kvf_store *st, uint64_t seq, uint64_t data_seq,
			 uint32_t layer, uint64_t t0, uint64_t t1)
{
	size_t n = (size_t)(t1 - t0);
	uint16_t *k = malloc(n * DIM * 2 + 2), *v = malloc(n * DIM * 2 + 2);

	for (uint32_t h = 0; h < KVH; h++) {
		cr_assert(eq(int, kvf_read(st, seq, layer, h, t0, t1, k, v), KVF_OK),
			  "%s", kvf_last_error());
		for (size_t i = 0; i < n; i++)
			for (uint32_t d = 0; d < DIM; d++) {
				cr_assert(eq(u16, k[i * DIM + d], val(data_seq, layer, 0, t0 + i, h, d)),
					  "seq %llu layer %u head %u token %llu dim %u (K)",
					  (unsigned long long)seq, layer, h,
					  (unsigned long long)(t0 + i), d);
				cr_assert(eq(u16, v[i * DIM + d], val(data_seq, layer, 1, t0 + i, h, d)));
			}
	}
	free(k);
	free(v);
}

Test(store, append_read_sync_reopen)
{
	kvf_store *st = open_store();
	uint64_t n;

	cr_assert(eq(int, kvf_seq_create(st, 7), KVF_OK));
	/* prefill 1000 tokens on every layer, then decode 45 single tokens */
	for (uint32_t l = 0; l < LAYERS; l++)
		append_tokens(st, 7, l, 0, 1000);
	for (uint64_t t = 1000; t < 1045; t++)
		for (uint32_t l = 0; l < LAYERS; l++)
			append_tokens(st, 7, l, t, 1);
	for (uint32_t l = 0; l < LAYERS; l++) {
		cr_assert(eq(int, kvf_seq_len(st, 7, l, &n), KVF_OK));
		cr_assert(eq(u64, n, 1045));
		check_tokens(st, 7, 7, l, 0, 1045);
		check_tokens(st, 7, 7, l, 31, 33);
		check_tokens(st, 7, 7, l, 1040, 1045);
	}
	cr_assert(eq(int, kvf_sync(st), KVF_OK), "%s", kvf_last_error());
	append_tokens(st, 7, 0, 1045, 3); /* not synced: gone after reopen */
	cr_assert(eq(int, kvf_close(st), KVF_OK), "%s", kvf_last_error());
	{
		kvf_store *st2 = NULL;

		cr_assert(eq(int, kvf_open(tmp_path(dir, "s"), NULL, &st2), KVF_OK),
			  "%s", kvf_last_error());
		cr_assert(eq(int, kvf_seq_len(st2, 7, 0, &n), KVF_OK));
		cr_assert(eq(u64, n, 1048), "close syncs");
		for (uint32_t l = 0; l < LAYERS; l++)
			check_tokens(st2, 7, 7, l, 0, l == 0 ? 1048 : 1045);
		append_tokens(st2, 7, 1, 1045, 40);
		check_tokens(st2, 7, 7, 1, 1000, 1085);
		cr_assert(eq(int, kvf_close(st2), KVF_OK));
	}
}

Test(store, fork_and_free)
{
	kvf_store *st = open_store();
	kvf_stats s = { .struct_size = sizeof(s) };

	cr_assert(eq(int, kvf_seq_create(st, 1), KVF_OK));
	for (uint32_t l = 0; l < LAYERS; l++)
		append_tokens(st, 1, l, 0, 300);
	cr_assert(eq(int, kvf_seq_fork(st, 1, 2, 250), KVF_OK), "%s",
		  kvf_last_error());
	for (uint32_t l = 0; l < LAYERS; l++) {
		check_tokens(st, 2, 1, l, 0, 250);
		append_tokens(st, 2, l, 250, 10); /* child's own tokens */
	}
	cr_assert(eq(int, kvf_seq_free(st, 1), KVF_OK));
	cr_assert(eq(int, kvf_sync(st), KVF_OK), "%s", kvf_last_error());
	check_tokens(st, 2, 1, 0, 0, 250);
	cr_assert(eq(int, kvf_close(st), KVF_OK));
	cr_assert(eq(int, kvf_open(tmp_path(dir, "s"), NULL, &st), KVF_OK), "%s",
		  kvf_last_error());
	for (uint32_t l = 0; l < LAYERS; l++)
		check_tokens(st, 2, 1, l, 0, 250);
	cr_assert(eq(int, kvf_read(st, 1, 0, 0, 0, 1, NULL, NULL), KVF_EINVAL));
	{
		uint16_t buf[DIM];

		cr_assert(eq(int, kvf_read(st, 1, 0, 0, 0, 1, buf, NULL), KVF_ENOENT));
	}
	cr_assert(eq(int, kvf_stats_get(st, &s), KVF_OK));
	cr_assert(eq(u64, s.n_sequences, 1));
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}
