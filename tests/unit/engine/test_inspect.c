/*
 * test_inspect.c - the inspection calls (kvf_store_info_get, kvf_seq_list,
 * kvf_seq_x_len, kvf_seq_info_get, kvf_segment_info_get): what they report
 * on the fixture's inspected store (store_fixture.h), and every status
 * they give with its message and untouched outputs.  kvf_verify is
 * test_verify.c.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api/alloc.h"
#include "api/status.h"
#include "kvflash.h"
#include "store_fixture.h"
#include "testutil.h"

TestSuite(inspect, .init = fx_setup_dir, .fini = fx_teardown, .timeout = 60);

/* ---- kvf_store_info_get --------------------------------------------------- */

Test(inspect, store_info)
{
	kvf_store *st = fx_make_inspected(fx.path);
	kvf_store_info si = { .struct_size = sizeof(si) };

	cr_assert(eq(int, kvf_store_info_get(st, &si), KVF_OK));
	cr_assert(eq(u32, si.format_version, 4));
	cr_assert(eq(u32, si.group_pages, 1));
	cr_assert(eq(u32, si.library_version, kvf_version_number()));
	cr_assert(eq(u32, si.model.n_layers, LAYERS));
	cr_assert(eq(u32, si.model.n_q_heads, QH));
	cr_assert(eq(u32, si.model.n_kv_heads, KVH));
	cr_assert(eq(u32, si.model.head_dim, DIM));
	cr_assert(eq(int, si.model.dtype, KVF_DTYPE_F16));
	cr_assert(eq(u32, si.page_size, 4096));
	cr_assert(eq(u32, si.group_tokens, G));
	cr_assert(eq(u64, si.segment_size, FX_SEG));
	cr_assert(eq(u32, si.n_stripes, FX_STRIPES));
	cr_assert(eq(u64, si.segs_per_stripe, INSPECT_SEGS / FX_STRIPES));
	cr_assert(eq(u32, si.data_pages_per_segment, 15));
	cr_assert(eq(u64, si.capacity_bytes, 8ull << 20));
	cr_assert(eq(int, si.media, KVF_MEDIA_FILE));
	cr_assert(eq(u32, si.kt_pages, 0));
	cr_assert(ne(u64, si.store_id, 0));
	cr_assert(eq(u32, si.read_only, 0));
	cr_assert(eq(int, kvf_close(st), KVF_OK));

	st = fx_open_inspected(fx.path, 1);
	{
		kvf_store_info ro = { .struct_size = sizeof(ro) };

		cr_assert(eq(int, kvf_store_info_get(st, &ro), KVF_OK));
		cr_assert(eq(u32, ro.read_only, 1));
		cr_assert(eq(u64, ro.store_id, si.store_id));
		cr_assert(eq(u64, ro.capacity_bytes, si.capacity_bytes));
	}
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

Test(inspect, store_info_statuses)
{
	kvf_store *st = fx_make_inspected(fx.path);
	struct {
		kvf_store_info si;
		uint64_t tail[2];
	} big;
	kvf_store_info si;
	size_t old_size;

	cr_assert(eq(int, kvf_store_info_get(NULL, &si), KVF_EINVAL));
	fx_has("kvf_store_info_get: store is NULL");
	cr_assert(eq(int, kvf_store_info_get(st, NULL), KVF_EINVAL));
	fx_has("kvf_store_info_get: out is NULL");
	memset(&si, 0x5a, sizeof(si));
	si.struct_size = 4;
	cr_assert(eq(int, kvf_store_info_get(st, &si), KVF_EINVAL));
	fx_has("struct_size 4 is too small");
	cr_assert(eq(u32, si.format_version, 0x5a5a5a5a), "output untouched");
	/* a newer caller: a larger struct with a zero tail is fine */
	memset(&big, 0, sizeof(big));
	big.si.struct_size = sizeof(big);
	cr_assert(eq(int, kvf_store_info_get(st, &big.si), KVF_OK));
	cr_assert(eq(u64, big.si.struct_size, sizeof(big)));
	cr_assert(eq(u64, big.tail[1], 0));
	big.tail[1] = 1;
	cr_assert(eq(int, kvf_store_info_get(st, &big.si), KVF_EVERSION));
	fx_has("kvf_store_info_get: out.struct_size");
	/* an older caller: only its prefix is written */
	memset(&si, 0x5a, sizeof(si));
	old_size = offsetof(kvf_store_info, page_size);
	si.struct_size = old_size;
	cr_assert(eq(int, kvf_store_info_get(st, &si), KVF_OK));
	cr_assert(eq(u32, si.model.n_layers, LAYERS));
	cr_assert(eq(u32, si.page_size, 0x5a5a5a5a), "past the caller's size");
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

/* ---- kvf_seq_list ------------------------------------------------------------ */

Test(inspect, seq_list)
{
	kvf_store *st = fx_open_inspected(fx.path, 0);
	uint64_t want[] = { 0, 3, 5, 9, 1000, UINT64_MAX - 1 };
	uint64_t ids[8];
	size_t n = 99;

	cr_assert(eq(int, kvf_seq_list(st, NULL, 0, &n), KVF_OK));
	cr_assert(eq(sz, n, 0));
	for (int i = 5; i >= 0; i--)
		cr_assert(eq(int, kvf_seq_create(st, want[i]), KVF_OK));
	cr_assert(eq(int, kvf_seq_list(st, NULL, 0, &n), KVF_OK));
	cr_assert(eq(sz, n, 6));
	memset(ids, 0xff, sizeof(ids));
	cr_assert(eq(int, kvf_seq_list(st, ids, 8, &n), KVF_OK));
	cr_assert(eq(sz, n, 6));
	for (int i = 0; i < 6; i++)
		cr_assert(eq(u64, ids[i], want[i]), "ascending");
	cr_assert(eq(u64, ids[6], UINT64_MAX), "nothing past n");
	/* room for fewer: the first cap, and the total */
	memset(ids, 0, sizeof(ids));
	cr_assert(eq(int, kvf_seq_list(st, ids, 2, &n), KVF_OK));
	cr_assert(eq(sz, n, 6));
	cr_assert(eq(u64, ids[0], 0));
	cr_assert(eq(u64, ids[1], 3));
	cr_assert(eq(u64, ids[2], 0));
	cr_assert(eq(int, kvf_seq_free(st, 5), KVF_OK));
	cr_assert(eq(int, kvf_seq_list(st, ids, 8, &n), KVF_OK));
	cr_assert(eq(sz, n, 5));
	cr_assert(eq(u64, ids[2], 9));
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

Test(inspect, seq_list_statuses)
{
	kvf_store *st = fx_open_inspected(fx.path, 0);
	uint64_t ids[4] = { 42, 42, 42, 42 };
	size_t n = 42;

	cr_assert(eq(int, kvf_seq_create(st, 1), KVF_OK));
	cr_assert(eq(int, kvf_seq_list(NULL, ids, 4, &n), KVF_EINVAL));
	fx_has("kvf_seq_list: store is NULL");
	cr_assert(eq(int, kvf_seq_list(st, ids, 4, NULL), KVF_EINVAL));
	fx_has("kvf_seq_list: n is NULL");
	cr_assert(eq(int, kvf_seq_list(st, NULL, 4, &n), KVF_EINVAL));
	fx_has("kvf_seq_list: ids is NULL with cap 4");
	kvf_alloc_fail_at(1, 0);
	cr_assert(eq(int, kvf_seq_list(st, ids, 4, &n), KVF_ENOMEM));
	kvf_alloc_fail_at(0, 0);
	fx_has("kvf_seq_list: out of memory");
	cr_assert(eq(sz, n, 42), "n untouched");
	cr_assert(eq(u64, ids[0], 42), "ids untouched");
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

/* ---- kvf_seq_x_len, kvf_seq_info_get --------------------------------------- */

Test(inspect, seq_info)
{
	kvf_store *st = fx_make_inspected(fx.path);
	kvf_seq_info a = { .struct_size = sizeof(a) };
	kvf_seq_info b = { .struct_size = sizeof(b) };
	kvf_seq_info e = { .struct_size = sizeof(e) };
	uint64_t n;
	/* per layer: K and V of 2 heads = 4 streams; 100 tokens = 4 groups */
	uint64_t kv_pages = LAYERS * 4 * 4, x_pages = QH * 2;

	cr_assert(eq(int, kvf_seq_info_get(st, 1, &a), KVF_OK));
	cr_assert(eq(u64, a.id, 1));
	cr_assert(eq(u64, a.family, 1));
	cr_assert(eq(u64, a.parent, KVF_SEQ_NONE));
	cr_assert(eq(u64, a.tokens, LAYERS * 100));
	cr_assert(eq(u64, a.x_tokens, 40));
	cr_assert(eq(u64, a.pages, kv_pages + x_pages));
	/* the fork shares the 2 full groups below 64 of every K/V stream and
	 * (its X copy holds 40 tokens) the first X group of each slice */
	cr_assert(eq(u64, a.shared_pages, LAYERS * 4 * 2 + QH), "%llu",
		  (unsigned long long)a.shared_pages);
	cr_assert(eq(int, kvf_seq_info_get(st, 2, &b), KVF_OK));
	cr_assert(eq(u64, b.family, 1));
	cr_assert(eq(u64, b.parent, 1));
	cr_assert(eq(u64, b.tokens, LAYERS * 100));
	cr_assert(eq(u64, b.shared_pages, a.shared_pages));
	cr_assert(eq(int, kvf_seq_info_get(st, 7, &e), KVF_OK));
	cr_assert(eq(u64, e.tokens, 0));
	cr_assert(eq(u64, e.pages, 0));

	cr_assert(eq(int, kvf_seq_x_len(st, 1, 1, &n), KVF_OK));
	cr_assert(eq(u64, n, 40));
	cr_assert(eq(int, kvf_seq_x_len(st, 1, 0, &n), KVF_OK));
	cr_assert(eq(u64, n, 0));
	cr_assert(eq(int, kvf_seq_x_len(st, 2, 1, &n), KVF_OK));
	cr_assert(eq(u64, n, 40), "the fork took the X below 64");
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

Test(inspect, seq_info_statuses)
{
	kvf_store *st = fx_make_inspected(fx.path);
	kvf_seq_info si;
	uint64_t n = 42;

	memset(&si, 0x5a, sizeof(si));
	si.struct_size = sizeof(si);
	cr_assert(eq(int, kvf_seq_info_get(st, 99, &si), KVF_ENOENT));
	fx_has("kvf_seq_info_get: sequence 99 does not exist");
	cr_assert(eq(u64, si.id, 0x5a5a5a5a5a5a5a5aull), "output untouched");
	cr_assert(eq(int, kvf_seq_info_get(NULL, 1, &si), KVF_EINVAL));
	fx_has("store is NULL");
	cr_assert(eq(int, kvf_seq_info_get(st, 1, NULL), KVF_EINVAL));
	fx_has("kvf_seq_info_get: out is NULL");
	si.struct_size = 0;
	cr_assert(eq(int, kvf_seq_info_get(st, 1, &si), KVF_EINVAL));
	fx_has("struct_size 0 is too small");

	cr_assert(eq(int, kvf_seq_x_len(st, 99, 0, &n), KVF_ENOENT));
	fx_has("kvf_seq_x_len: sequence 99 does not exist");
	cr_assert(eq(int, kvf_seq_x_len(st, 1, LAYERS, &n), KVF_ERANGE));
	fx_has("kvf_seq_x_len: layer 2 out of range (store has 2 layers)");
	cr_assert(eq(int, kvf_seq_x_len(st, 1, 0, NULL), KVF_EINVAL));
	fx_has("kvf_seq_x_len: n_tokens is NULL");
	cr_assert(eq(int, kvf_seq_x_len(NULL, 1, 0, &n), KVF_EINVAL));
	cr_assert(eq(u64, n, 42), "output untouched");
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

/* ---- kvf_segment_info_get -------------------------------------------------- */

/* count_states - segments by state */
static void count_states(kvf_store *st, uint32_t *count)
{
	memset(count, 0, 5 * sizeof(*count));
	for (uint32_t i = 0; i < INSPECT_SEGS; i++) {
		kvf_segment_info g = { .struct_size = sizeof(g) };

		cr_assert(eq(int, kvf_segment_info_get(st, i, &g), KVF_OK));
		cr_assert(eq(u32, g.segid, i));
		cr_assert(eq(u32, g.stripe, i % FX_STRIPES));
		cr_assert(eq(u64, g.seg_in_stripe, i / FX_STRIPES));
		cr_assert(le(u32, (uint32_t)g.state, KVF_SEG_CORRUPT));
		count[g.state]++;
	}
}

Test(inspect, segment_info)
{
	kvf_store *st = fx_open_inspected(fx.path, 0);
	kvf_stats s = { .struct_size = sizeof(s) };
	uint32_t count[5];
	struct timespec ts;
	uint64_t now;
	int sealed = 0;

	cr_assert(eq(int, kvf_stats_get(st, &s), KVF_OK));
	cr_assert(eq(u32, s.segments_total, INSPECT_SEGS));
	count_states(st, count);
	cr_assert(eq(u32, count[KVF_SEG_FREE], INSPECT_SEGS));

	/* 100 tokens: 3 full groups per stream wait in open segments */
	cr_assert(eq(int, kvf_seq_create(st, 3), KVF_OK));
	OK(fx_append(st, 3, 3, 0, 0, 100));
	count_states(st, count);
	/* (no count of open segments is asserted: with the memory tier's
	 * delayed write-back the full groups wait in DRAM, and none need be
	 * open; the old gt() check passed on 0 only because Criterion's gt()
	 * passes on equal values) */
	for (uint32_t i = 0; i < INSPECT_SEGS; i++) {
		kvf_segment_info g = { .struct_size = sizeof(g) };

		kvf_segment_info_get(st, i, &g);
		if (g.state != KVF_SEG_OPEN)
			continue;
		cr_assert(eq(u64, g.owner, 3));
		cr_assert(eq(u32, g.data_pages, 0));
		cr_assert(g.live_pages > (0));
		cr_assert(eq(u64, g.seqno, 0));
		cr_assert(eq(u64, g.write_ns, 0));
	}

	cr_assert(eq(int, kvf_sync(st), KVF_OK));
	clock_gettime(CLOCK_REALTIME, &ts);
	now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	count_states(st, count);
	cr_assert(eq(u32, count[KVF_SEG_OPEN], 0));
	for (uint32_t i = 0; i < INSPECT_SEGS; i++) {
		kvf_segment_info g = { .struct_size = sizeof(g) };

		kvf_segment_info_get(st, i, &g);
		if (g.state == KVF_SEG_FREE) {
			cr_assert(eq(u64, g.owner, KVF_SEQ_NONE));
			cr_assert(eq(u32, g.live_pages, 0));
			cr_assert(eq(u64, g.seqno, 0));
			continue;
		}
		cr_assert(eq(int, g.state, KVF_SEG_SEALED));
		cr_assert(eq(u64, g.owner, 3));
		cr_assert(g.data_pages > (0));
		cr_assert(eq(u32, g.live_pages, g.data_pages));
		cr_assert(g.seqno > (0));
		cr_assert(le(u64, g.write_ns, now));
		cr_assert(g.write_ns > (now - 60ull * 1000000000ull));
		sealed++;
	}
	cr_assert(sealed > (0));

	/* freed and synced: the segments are trimmed and free again */
	cr_assert(eq(int, kvf_seq_free(st, 3), KVF_OK));
	count_states(st, count);
	cr_assert(eq(u32, count[KVF_SEG_DYING], (uint32_t)sealed));
	cr_assert(eq(int, kvf_sync(st), KVF_OK));
	count_states(st, count);
	cr_assert(eq(u32, count[KVF_SEG_FREE], INSPECT_SEGS));
	{
		uint32_t erased = 0;

		for (uint32_t i = 0; i < INSPECT_SEGS; i++) {
			kvf_segment_info g = { .struct_size = sizeof(g) };

			kvf_segment_info_get(st, i, &g);
			erased += g.erase_count;
		}
		cr_assert(eq(u32, erased, (uint32_t)sealed));
	}
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}

Test(inspect, segment_info_statuses)
{
	kvf_store *st = fx_open_inspected(fx.path, 0);
	kvf_segment_info g;

	memset(&g, 0x5a, sizeof(g));
	g.struct_size = sizeof(g);
	cr_assert(eq(int, kvf_segment_info_get(st, INSPECT_SEGS, &g),
		     KVF_ERANGE));
	fx_has("kvf_segment_info_get: segment 128 out of range (store has 128 segments: 2 stripes of 64)");
	cr_assert(eq(u32, g.segid, 0x5a5a5a5a), "output untouched");
	cr_assert(
		eq(int, kvf_segment_info_get(st, UINT32_MAX, &g), KVF_ERANGE));
	cr_assert(eq(int, kvf_segment_info_get(NULL, 0, &g), KVF_EINVAL));
	fx_has("kvf_segment_info_get: store is NULL");
	cr_assert(eq(int, kvf_segment_info_get(st, 0, NULL), KVF_EINVAL));
	fx_has("kvf_segment_info_get: out is NULL");
	cr_assert(eq(int, kvf_close(st), KVF_OK));
}
