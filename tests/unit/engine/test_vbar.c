/*
 * test_vbar.c - SparF's running means of V: folded as V is appended, kept
 * in the catalog at sync ("V" records), taken back at open, so the first
 * SparF call after a reopen reads no V for them; caught up from the pages
 * when a sequence has none (a fork's child); written again only when a
 * mean changed, and again after a sync that failed; a malformed record
 * refused.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/alloc.h"
#include "compute/half.h"
#include "engine/base/catalog.h"
#include "engine/base/meta.h"
#include "engine/base/store_state.h"
#include "kvflash.h"
#include "store_fixture.h"
#include "testutil.h"

#define LEN 1000 /* tokens: not a multiple of the token group */


TestSuite(vbar, .init = fx_setup_dir, .fini = fx_teardown, .timeout = 60);

static kvf_store *open_store(const char *name)
{
	kvf_model m = { LAYERS, QH, KVH, DIM, KVF_DTYPE_F16 };
	kvf_options o;
	kvf_store *st = NULL;

	kvf_options_init(&o, &m);
	o.kt_pages = 1;
	o.segment_size = 128 * 1024;
	o.capacity_bytes = 64ull << 20;
	o.n_threads = 2;
	o.dram_budget = 0; /* every call's reads go to the media, counted */
	OK(kvf_open(tmp_path(fx.dir, name), &o, &st));
	return st;
}

static float urand(uint64_t *rng)
{
	return (float)((double)(rng_next(rng) >> 11) / 9007199254740992.0 * 2 - 1);
}

/* fill - LEN tokens of every layer of seq, appended n at a time */
static void fill(kvf_store *st, uint64_t seq, uint32_t n, uint64_t *rng)
{
	size_t cnt = (size_t)n * KVH * DIM;
	uint16_t *k = malloc(cnt * 2), *v = malloc(cnt * 2);

	OK(kvf_seq_create(st, seq));
	for (uint32_t t = 0; t < LEN; t += n)
		for (uint32_t l = 0; l < LAYERS; l++) {
			uint32_t m = LEN - t < n ? LEN - t : n;

			for (size_t i = 0; i < (size_t)m * KVH * DIM; i++) {
				k[i] = kvf_f32_to_f16(urand(rng));
				v[i] = kvf_f32_to_f16(urand(rng));
			}
			OK(kvf_append(st, seq, l, m, k, v));
		}
	free(k);
	free(v);
}

/* sparf - SparF (by tokens) on layer 1 of seq; returns the bytes it read */
static uint64_t sparf(kvf_store *st, uint64_t seq, const float *q, float *out)
{
	kvf_attn_opts o;
	kvf_stats a = { .struct_size = sizeof(a) }, b = { .struct_size = sizeof(b) };

	kvf_attn_opts_init(&o);
	o.sparse = 1;
	o.top_r = DIM / 4;
	o.top_k = 16;
	OK(kvf_stats_get(st, &a));
	OK(kvf_attend(st, seq, 1, q, out, &o));
	OK(kvf_stats_get(st, &b));
	return b.bytes_read - a.bytes_read;
}

static void query(float *q, uint64_t *rng)
{
	for (uint32_t i = 0; i < QH * DIM; i++)
		q[i] = 3 * urand(rng);
}

/* bytes of V of one layer of a sequence: what a catch-up would read */
static const uint64_t v_bytes = (uint64_t)LEN * KVH * DIM * 2;

Test(vbar, means_survive_a_reopen_and_are_not_read_back)
{
	uint64_t rng = rng_seed("vbar reopen");
	kvf_store *st = open_store("s");
	float q[QH * DIM], before[QH * DIM], again[QH * DIM], after[QH * DIM];
	uint64_t first, second;

	fill(st, 7, 100, &rng);
	query(q, &rng);
	OK(kvf_sync(st));
	OK(kvf_close(st));
	/* cold: nothing of this sequence is in memory but its means.  The
	 * first call also rebuilds the partial K^T block from K (a quarter
	 * of v_bytes here); without its means it would read all of V too */
	st = open_store("s");
	first = sparf(st, 7, q, before);
	second = sparf(st, 7, q, again);
	cr_assert(lt(u64, first - second, v_bytes / 2),
		  "the first SparF call after a reopen read %llu bytes, the next %llu; V is %llu",
		  (unsigned long long)first, (unsigned long long)second,
		  (unsigned long long)v_bytes);
	OK(kvf_close(st));
	st = open_store("s");
	sparf(st, 7, q, after);
	for (uint32_t i = 0; i < QH * DIM; i++)
		cr_assert(eq(flt, before[i], after[i]), "element %u: %g then %g", i,
			  (double)before[i], (double)after[i]);
	OK(kvf_close(st));
}

Test(vbar, folded_means_equal_means_read_back_from_the_pages)
{
	uint64_t rng = rng_seed("vbar fork");
	kvf_store *st = open_store("s");
	float q[QH * DIM], parent[QH * DIM], child[QH * DIM];

	/* one token at a time (decode) for the parent's means; the fork's
	 * child has none, so its first call reads V and folds it */
	fill(st, 1, 1, &rng);
	OK(kvf_seq_fork(st, 1, 2, LEN));
	query(q, &rng);
	sparf(st, 1, q, parent);
	sparf(st, 2, q, child);
	for (uint32_t i = 0; i < QH * DIM; i++)
		cr_assert(lt(dbl, fabs((double)parent[i] - child[i]), 1e-5),
			  "element %u: parent %g, child %g", i, (double)parent[i],
			  (double)child[i]);
	OK(kvf_close(st));
}

Test(vbar, a_freed_sequence_leaves_no_means_behind)
{
	uint64_t rng = rng_seed("vbar free");
	kvf_store *st = open_store("s");
	float q[QH * DIM], fresh[QH * DIM], reopened[QH * DIM];

	fill(st, 3, 50, &rng);
	OK(kvf_sync(st));
	OK(kvf_seq_free(st, 3));
	OK(kvf_sync(st));
	OK(kvf_close(st));
	st = open_store("s");
	cr_assert(eq(int, kvf_seq_len(st, 3, 0, &(uint64_t){ 0 }), KVF_ENOENT));
	/* the same id again, other tokens: its own means, before and after */
	fill(st, 3, 50, &rng);
	query(q, &rng);
	sparf(st, 3, q, fresh);
	OK(kvf_close(st));
	st = open_store("s");
	sparf(st, 3, q, reopened);
	for (uint32_t i = 0; i < QH * DIM; i++)
		cr_assert(eq(flt, fresh[i], reopened[i]), "element %u", i);
	OK(kvf_close(st));
}

Test(vbar, a_malformed_record_is_refused_at_open)
{
	uint64_t rng = rng_seed("vbar bad");
	kvf_store *st = open_store("s");
	struct catalog *c = NULL;
	struct catalog_batch *b;
	unsigned char key[9], junk[3] = { 1, 2, 3 };

	fill(st, 9, 100, &rng);
	OK(kvf_close(st));
	OK(catalog_open(tmp_path(fx.dir, "s/meta"), 0, 0, CATALOG_FSYNC, &c));
	b = catalog_batch_new();
	cr_assert_not_null(b);
	meta_key_u64(key, META_TAG_VBAR, 9);
	catalog_batch_put(b, key, sizeof(key), junk, sizeof(junk));
	OK(catalog_commit(c, b, 1));
	catalog_batch_free(b);
	catalog_close(c);
	{
		kvf_model m = { LAYERS, QH, KVH, DIM, KVF_DTYPE_F16 };
		kvf_options o;

		kvf_options_init(&o, &m);
		o.kt_pages = 1;
		o.segment_size = 128 * 1024;
		o.capacity_bytes = 64ull << 20;
		st = NULL;
		cr_assert(eq(int, kvf_open(fx.path, &o, &st), KVF_ECORRUPT),
			  "%s", kvf_last_error());
		cr_assert_null(st);
		cr_assert(strstr(kvf_last_error(), "means of V of sequence 9") != NULL,
			  "%s", kvf_last_error());
	}
}

/* has_vbar_record - the catalog holds sequence id's "V" record */
static int has_vbar_record(kvf_store *st, uint64_t id)
{
	unsigned char key[9];
	void *val = NULL;
	size_t vlen = 0;
	kvf_status rc;

	meta_key_u64(key, META_TAG_VBAR, id);
	rc = catalog_get(st->cat, key, sizeof(key), &val, &vlen);
	kvf_free(val);
	return rc == KVF_OK;
}

Test(vbar, unchanged_means_are_not_written_again)
{
	uint64_t rng = rng_seed("vbar idle");
	kvf_store *st = open_store("s");
	float q[QH * DIM], out[QH * DIM];
	unsigned long long before;
	size_t record = (size_t)LAYERS * KVH * (8 + 4 * DIM);

	fill(st, 4, 100, &rng);
	query(q, &rng);
	sparf(st, 4, q, out);
	OK(kvf_sync(st));
	cr_assert(has_vbar_record(st, 4));
	before = catalog_bytes_written(st->cat);
	/* SparF calls that find the means current change nothing to write */
	for (int i = 0; i < 5; i++) {
		sparf(st, 4, q, out);
		OK(kvf_sync(st));
	}
	cr_assert(lt(u64, catalog_bytes_written(st->cat) - before, record),
		  "five idle syncs wrote %llu catalog bytes; a record is %zu",
		  catalog_bytes_written(st->cat) - before, record);
	OK(kvf_close(st));
}

/* a sync that fails part way (out of memory at its nth allocation) and
 * the one after it: every sequence's means end up in the catalog */
Test(vbar, a_failed_sync_leaves_nothing_unwritten)
{
	for (uint64_t nth = 1; nth < 400; nth++) {
		uint64_t rng = rng_seed("vbar failed sync");
		char name[32];
		kvf_store *st;
		float q[QH * DIM], out[QH * DIM];
		kvf_status rc;
		int past;

		snprintf(name, sizeof(name), "s%llu", (unsigned long long)nth);
		st = open_store(name);

		fill(st, 1, 100, &rng);
		fill(st, 2, 100, &rng);
		kvf_alloc_fail_at(nth, 0);
		rc = kvf_sync(st);
		kvf_alloc_fail_at(0, 0);
		/* a sync that could not build a record skips it (the record
		 * only saves reading V), one that failed wrote nothing */
		if (rc != KVF_OK)
			cr_assert(eq(int, rc, KVF_ENOMEM), "allocation %llu: %s",
				  (unsigned long long)nth, kvf_last_error());
		past = rc == KVF_OK && has_vbar_record(st, 1) &&
		       has_vbar_record(st, 2);
		OK(kvf_sync(st));
		cr_assert(has_vbar_record(st, 1) && has_vbar_record(st, 2),
			  "after a sync failed at allocation %llu", (unsigned long long)nth);
		query(q, &rng);
		sparf(st, 1, q, out);
		OK(kvf_close(st));
		if (past) { /* nth is past the sync's allocations */
			cr_assert(nth > (1));
			return;
		}
	}
	cr_fail("every sync up to the 400th allocation failed");
}
