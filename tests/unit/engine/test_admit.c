/*
 * test_admit.c - endurance-aware admission (kvf_options.admit_tokens):
 * bad combinations refused with nothing made; a sequence freed before it
 * reaches the threshold never costs a media write, and reads back exactly
 * while it waits; one that reaches it is written and survives a reopen; a
 * sync leaves a sequence not admitted off the media, and kvf_close admits
 * it; a fork admits the parent; a tier with no room admits; the room
 * of pages that wait past a run's length stays promised, page for page.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stdint.h>
#include <string.h>

#include "engine/base/store_state.h"
#include "engine/sequences/seq.h"
#include "engine/sequences/seq_state.h"
#include "engine/sequences/seq_stream.h"
#include "store_fixture.h"
#include "testutil.h"

TestSuite(admit, .init = fx_setup_dir, .fini = fx_teardown, .timeout = 120);

static kvf_options admit_opts(uint64_t admit)
{
	kvf_options o = fx_options(64ull << 20, 1);

	o.direct_io = 2; /* tmpfs may refuse O_DIRECT */
	o.admit_tokens = admit;
	return o;
}

static kvf_stats stats_of(kvf_store *st)
{
	kvf_stats s = { .struct_size = sizeof(s) };

	OK(kvf_stats_get(st, &s));
	return s;
}

/* put - n tokens at t0 on every layer of seq */
static void put(kvf_store *st, uint64_t seq, uint64_t t0, uint32_t n)
{
	for (uint32_t l = 0; l < LAYERS; l++)
		OK(fx_append(st, seq, seq, l, t0, n));
}

Test(admit, bad_combinations_refused)
{
	kvf_options o = admit_opts(64);
	kvf_store *st = (kvf_store *)1;

	o.dram_budget = 0;
	cr_assert(eq(int, kvf_open(fx.path, &o, &st), KVF_EINVAL));
	cr_assert_null(st);
	cr_assert(strstr(kvf_last_error(), "admit_tokens 64") &&
		  strstr(kvf_last_error(), "dram_budget is 0"), "%s", kvf_last_error());
	o = admit_opts(64);
	o.media = KVF_MEDIA_MEMORY;
	cr_assert(eq(int, kvf_open(fx.path, &o, &st), KVF_EINVAL));
	cr_assert(strstr(kvf_last_error(), "memory store") != NULL, "%s", kvf_last_error());
	cr_assert(fx_path_gone(fx.path) || strcmp(fx_dir_listing(fx.path), "") == 0,
		  "nothing made: %s", fx_dir_listing(fx.path));
}

Test(admit, short_sequence_never_written)
{
	kvf_options o = admit_opts(10 * G);
	kvf_store *st;
	kvf_stats s0, s1;

	OK(kvf_open(fx.path, &o, &st));
	OK(kvf_sync(st));
	s0 = stats_of(st);
	OK(kvf_seq_create(st, 5));
	put(st, 5, 0, 3 * G + 7); /* a prefill */
	for (uint32_t t = 0; t < 2 * G; t++)
		put(st, 5, 3 * G + 7 + t, 1); /* decode steps */
	for (uint32_t l = 0; l < LAYERS; l++)
		cr_assert(fx_data_ok(st, 5, l, 5 * G + 7), "reads while waiting");
	OK(kvf_sync(st)); /* not admitted: not written */
	s1 = stats_of(st);
	cr_assert(eq(u64, s1.host_bytes_written, s0.host_bytes_written));
	cr_assert(s1.writeback_bytes >= (uint64_t)5 * LAYERS * 2 * KVH * 4096);
	OK(kvf_seq_free(st, 5));
	s1 = stats_of(st);
	cr_assert(eq(u64, s1.host_bytes_written, s0.host_bytes_written));
	cr_assert(eq(u64, s1.writeback_bytes, 0));
	cr_assert(s1.dram_only_bytes >= (uint64_t)5 * LAYERS * 2 * KVH * 4096);
	cr_assert(s1.dram_peak <= o.dram_budget);
	OK(kvf_close(st));
}

Test(admit, long_sequence_admitted_and_durable)
{
	kvf_options o = admit_opts(4 * G);
	kvf_store *st;
	kvf_stats s0, s1;

	OK(kvf_open(fx.path, &o, &st));
	s0 = stats_of(st);
	OK(kvf_seq_create(st, 6));
	put(st, 6, 0, 3 * G);
	OK(kvf_sync(st));
	cr_assert(eq(u64, stats_of(st).host_bytes_written, s0.host_bytes_written));
	put(st, 6, 3 * G, G + 5); /* reaches 4G: admitted, written */
	OK(kvf_sync(st));
	s1 = stats_of(st);
	cr_assert(s1.host_bytes_written >= s0.host_bytes_written +
		  (uint64_t)4 * LAYERS * 2 * KVH * 4096);
	OK(kvf_close(st));
	OK(kvf_open(fx.path, NULL, &st));
	for (uint32_t l = 0; l < LAYERS; l++)
		cr_assert(fx_data_ok(st, 6, l, 4 * G + 5));
	OK(kvf_close(st));
}

Test(admit, close_admits_what_waits)
{
	kvf_options o = admit_opts(1000 * G);
	kvf_store *st;

	OK(kvf_open(fx.path, &o, &st));
	OK(kvf_seq_create(st, 7));
	put(st, 7, 0, 2 * G + 3);
	OK(kvf_close(st));
	OK(kvf_open(fx.path, NULL, &st));
	for (uint32_t l = 0; l < LAYERS; l++)
		cr_assert(fx_data_ok(st, 7, l, 2 * G + 3));
	OK(kvf_close(st));
}

Test(admit, fork_admits_the_parent)
{
	kvf_options o = admit_opts(1000 * G);
	kvf_store *st;
	uint64_t before;

	OK(kvf_open(fx.path, &o, &st));
	OK(kvf_seq_create(st, 8));
	put(st, 8, 0, 2 * G);
	before = stats_of(st).host_bytes_written;
	OK(kvf_seq_fork(st, 8, 9, 2 * G));
	cr_assert(stats_of(st).host_bytes_written > before);
	put(st, 8, 2 * G, G); /* admitted: a sync writes it */
	before = stats_of(st).host_bytes_written;
	OK(kvf_sync(st));
	cr_assert(stats_of(st).host_bytes_written > before);
	for (uint32_t l = 0; l < LAYERS; l++) {
		uint64_t n = 0;

		cr_assert(fx_data_ok(st, 8, l, 3 * G));
		OK(kvf_seq_len(st, 9, l, &n));
		cr_assert(eq(u64, n, 2 * G));
	}
	OK(kvf_close(st));
}

Test(admit, full_tier_admits)
{
	kvf_options o = admit_opts(1000 * G);
	kvf_store *st;
	uint64_t before;

	o.dram_budget = 4ull << 20; /* half of it for waiting pages */
	OK(kvf_open(fx.path, &o, &st));
	before = stats_of(st).host_bytes_written;
	OK(kvf_seq_create(st, 10));
	/* 2 layers x 4 streams x 4 KiB a group: 2 MiB is 64 groups */
	for (int i = 0; i < 4; i++)
		put(st, 10, (uint64_t)i * 32 * G, 32 * G);
	cr_assert(stats_of(st).host_bytes_written > before, "written when DRAM is short");
	cr_assert(stats_of(st).dram_peak <= o.dram_budget);
	for (uint32_t l = 0; l < LAYERS; l++)
		cr_assert(fx_data_ok(st, 10, l, 128 * G));
	OK(kvf_close(st));
	OK(kvf_open(fx.path, NULL, &st));
	for (uint32_t l = 0; l < LAYERS; l++)
		cr_assert(fx_data_ok(st, 10, l, 128 * G));
	OK(kvf_close(st));
}

/* a sequence in the prefix index is admitted at once: it is there to be
 * shared from the media */
Test(admit, prefix_sequence_admitted)
{
	kvf_options o = admit_opts(1000 * G);
	uint32_t tokens[2 * G];
	kvf_store *st;
	uint64_t before, reused = 1;

	for (uint32_t i = 0; i < 2 * G; i++)
		tokens[i] = i * 7 + 1;
	OK(kvf_open(fx.path, &o, &st));
	OK(kvf_seq_create_tokens(st, 11, tokens, 2 * G, &reused));
	cr_assert(eq(u64, reused, 0));
	put(st, 11, 0, 2 * G);
	before = stats_of(st).host_bytes_written;
	OK(kvf_sync(st));
	cr_assert(stats_of(st).host_bytes_written > before);
	OK(kvf_close(st));
}

/* waiting_pages - pages of seq waiting for write-back, over its K/V
 * streams; promised_pages - the room the segment table holds for pages
 * waiting, over the stripes */
static uint64_t waiting_pages(kvf_store *st, uint64_t id)
{
	struct seq *seq = NULL;
	uint64_t n = 0;

	OK(seq_get_locked(st, "test", id, &seq));
	for (uint32_t i = 0; i < seq_n_kv_streams(st); i++) {
		uint32_t sid;
		struct stream *s = seq_stream_at(st, seq, i, &sid);

		n += s && s->wb ? s->wb->n : 0;
	}
	seq_unlock_put(st, seq);
	return n;
}

static uint64_t promised_pages(kvf_store *st)
{
	uint64_t n = 0;

	pthread_mutex_lock(&st->segtab.lock);
	for (uint32_t s = 0; s < st->hdr.n_stripes; s++)
		n += st->segtab.promised[s];
	pthread_mutex_unlock(&st->segtab.lock);
	return n;
}

/* a sequence not admitted keeps its pages waiting past a run's length,
 * and the room they will take stays promised, page for page, until they
 * go out */
Test(admit, waiting_room_stays_promised)
{
	kvf_options o = admit_opts(100 * G);
	kvf_store *st;

	OK(kvf_open(fx.path, &o, &st));
	OK(kvf_seq_create(st, 1));
	for (uint64_t t = 0; t < 40 * G; t++) /* 40 pages a stream wait */
		put(st, 1, t, 1);
	cr_assert(eq(u64, stats_of(st).writeback_runs, 0));
	cr_assert(eq(u64, waiting_pages(st, 1), 40ull * LAYERS * 2 * KVH));
	cr_assert(eq(u64, promised_pages(st), waiting_pages(st, 1)));
	put(st, 1, 40 * G, 60 * G); /* reaches admit_tokens: all go out */
	cr_assert(eq(u64, waiting_pages(st, 1), 0));
	cr_assert(eq(u64, promised_pages(st), 0));
	OK(kvf_close(st));
}
