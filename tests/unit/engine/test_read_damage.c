/*
 * test_read_damage.c - reads of a damaged store: bytes flipped in a data
 * page and in a segment summary, found and damaged through the fixture's
 * "store to damage" (store_fixture.h) with the store closed, then
 * reopened.
 *
 * What must hold: a damaged page is never returned as data (KVF_ECORRUPT,
 * naming segment and page), everything else still reads; a damaged summary
 * of a segment older than the last sync makes its pages KVF_ECORRUPT; a
 * damaged summary of a segment newer than the last sync (a write a crash
 * cut short) is dropped silently.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/alloc.h"
#include "engine/base/catalog.h"
#include "engine/base/meta.h"
#include "engine/base/segfmt.h"
#include "engine/base/store_state.h"
#include "kvflash.h"
#include "store_fixture.h"
#include "testutil.h"

TestSuite(read_damage, .init = fx_setup_dir, .fini = fx_teardown,
	  .timeout = 60);

/* ---- a damaged data page ------------------------------------------------- */

Test(read_damage, data_page)
{
	struct fx_spot p;
	kvf_store *st;
	unsigned char *k = malloc((DMG_LEN0 + G) * ROW),
		      *v = malloc((DMG_LEN0 + G) * ROW);
	uint64_t n;

	fx_make_damage_store(fx.path);
	/* K of head 1, group 3, layer 0 of sequence 1: byte 100 of token 5 */
	p = fx_find_group(fx.path, 1, 0, 0, 1, 3, G);
	fx_flip(fx.path, p.stripe, fx_spot_offset(&p) + 5 * ROW + 100, 3);
	st = fx_reopen(fx.path);

	fx_expect_corrupt(kvf_read(st, 1, 0, 1, 3 * G, 4 * G, k, v), &p);
	fx_expect_corrupt(kvf_read(st, 1, 0, 1, 3 * G + 5, 3 * G + 6, k, NULL),
			  &p);
	cr_assert(strstr(kvf_last_error(), "checksum mismatch") != NULL, "%s",
		  kvf_last_error());
	/* a range across it: nothing of the damaged page is handed out */
	memset(k, 0xee, 4 * G * ROW);
	fx_expect_corrupt(kvf_read(st, 1, 0, 1, 2 * G, 5 * G, k, v), &p);
	for (size_t i = (size_t)G * ROW; i < 2 * (size_t)G * ROW; i++)
		cr_assert(eq(u8, k[i], 0xee),
			  "byte %zu of the damaged page returned",
			  i - (size_t)G * ROW);
	/* everything else reads */
	OK(fx_read_check(st, 1, 0, 1, 0, 3 * G, 3));
	OK(fx_read_check(st, 1, 0, 1, 4 * G, DMG_LEN0, 3));
	OK(fx_read_check(st, 1, 0, 1, 3 * G, 4 * G,
			 2)); /* V of the same group */
	OK(fx_read_check(st, 1, 0, 0, 0, DMG_LEN0, 3));
	OK(fx_read_check(st, 1, 1, 1, 0, DMG_LEN1, 3));
	OK(fx_read_check(st, 2, 0, 1, 0, 3 * G, 3));
	OK(fx_read_x_check(st, 1, 0, 0, DMG_XLEN));
	/* the sequence still grows, and the damage stays reported */
	OK(fx_append(st, 1, 1, 0, DMG_LEN0, G));
	OK(kvf_seq_len(st, 1, 0, &n));
	cr_assert(eq(u64, n, DMG_LEN0 + G));
	OK(fx_read_check(st, 1, 0, 1, DMG_LEN0 - 3, DMG_LEN0 + G, 3));
	fx_expect_corrupt(kvf_read(st, 1, 0, 1, 3 * G, 4 * G, k, v), &p);
	OK(kvf_close(st));
	st = fx_reopen(fx.path);
	fx_expect_corrupt(kvf_read(st, 1, 0, 1, 0, DMG_LEN0 + G, k, NULL), &p);
	OK(fx_read_check(st, 1, 0, 1, DMG_LEN0 - 3, DMG_LEN0 + G, 3));
	OK(kvf_close(st));
	free(k);
	free(v);
}

/* the partial tail group's page: reads of it, and appends that must load
 * it, are refused; nothing changes */
Test(read_damage, tail_page)
{
	struct fx_spot p;
	kvf_store *st;
	unsigned char k[G * KVH * ROW], v[G * KVH * ROW];
	uint64_t n;

	fx_make_damage_store(fx.path);
	p = fx_find_group(fx.path, 1, 0, 1, 0, 8,
			  5); /* V of head 0: 5 tokens */
	fx_flip(fx.path, p.stripe, fx_spot_offset(&p) + 2 * ROW + 7, 1);
	st = fx_reopen(fx.path);
	fx_expect_corrupt(kvf_read(st, 1, 0, 0, 8 * G, DMG_LEN0, NULL, v), &p);
	OK(fx_read_check(st, 1, 0, 0, 8 * G, DMG_LEN0, 1)); /* K of the tail */
	OK(fx_read_check(st, 1, 0, 0, 0, 8 * G, 3));
	memset(k, 1, sizeof(k));
	memset(v, 2, sizeof(v));
	fx_expect_corrupt(kvf_append(st, 1, 0, 1, k, v), &p);
	OK(kvf_seq_len(st, 1, 0, &n));
	cr_assert(eq(u64, n, DMG_LEN0), "a refused append changed the length");
	fx_expect_corrupt(kvf_read(st, 1, 0, 0, 8 * G, DMG_LEN0, NULL, v), &p);
	/* other layers and sequences go on */
	OK(fx_append(st, 1, 1, 1, DMG_LEN1, 3));
	OK(fx_append(st, 2, 2, 0, 3 * G, 2));
	OK(fx_read_check(st, 1, 1, 0, 0, DMG_LEN1 + 3, 3));
	OK(fx_read_check(st, 2, 0, 1, 0, 3 * G + 2, 3));
	OK(kvf_close(st));
}

/* ---- a damaged segment summary ------------------------------------------- */

/* a summary entry's key: which group of which stream */
struct entry_key {
	uint64_t seq;
	uint32_t layer, kind, head, group;
};

static struct entry_key key_of(const struct seg_summary_entry *e)
{
	struct entry_key k = { e->key_hi, (uint32_t)(e->key_lo >> 48),
			       (uint32_t)(e->key_lo >> 44) & 0xf,
			       (uint32_t)(e->key_lo >> 32) & 0xfff,
			       (uint32_t)e->key_lo };

	return k;
}

Test(read_damage, summary_before_sync)
{
	struct seg_summary_header h;
	struct seg_summary_entry *e;
	struct fx_spot p, q;
	kvf_stats stats = { .struct_size = sizeof(stats) };
	kvf_store *st;
	uint32_t sp, n_damaged = 0;
	size_t len;
	unsigned char *b;

	fx_make_damage_store(fx.path);
	/* the segment holding group 2 of K head 0, layer 0, sequence 1 */
	p = fx_find_group(fx.path, 1, 0, 0, 0, 2, G);
	sp = fx_summary_page(fx.path, &p, &h);
	b = fx_read_stripe(fx.path, p.stripe, &len);
	e = malloc(h.n_data_pages * sizeof(*e));
	memcpy(e, b + p.seg * FX_SEG + (size_t)sp * FX_PAGE + sizeof(h),
	       h.n_data_pages * sizeof(*e));
	free(b);
	/* one byte of an entry: the summary's checksum no longer matches */
	q = p;
	q.page = sp;
	fx_flip(fx.path, q.stripe, fx_spot_offset(&q) + sizeof(h) + 9, 1);

	st = fx_reopen(fx.path);
	OK(kvf_stats_get(st, &stats));
	cr_assert(eq(u32, stats.segments_corrupt, 1));
	for (uint32_t i = 0; i < h.n_data_pages; i++) {
		struct entry_key k = key_of(&e[i]);
		uint64_t t0 = (uint64_t)k.group * G, t1 = t0 + G;
		uint64_t len_of = k.seq == 2 ? 3 * G :
				  k.layer    ? DMG_LEN1 :
					       DMG_LEN0;
		unsigned char *buf;
		kvf_status rc;

		if (t1 > len_of || k.kind > 1)
			continue; /* partial groups and X: checked below */
		buf = malloc((size_t)G * QH * ROW);
		rc = kvf_read(st, k.seq, k.layer, k.head, t0, t1,
			      k.kind == 0 ? buf : NULL,
			      k.kind == 1 ? buf : NULL);
		q.page = i;
		fx_expect_corrupt(rc, &q);
		n_damaged++;
		free(buf);
	}
	cr_assert(n_damaged > 0);
	/* pages in other segments still read: find one group outside */
	for (uint64_t g = 0; g < 8; g++) {
		struct fx_spot o = fx_find_group(fx.path, 1, 0, 0, 1, g, G);

		if (o.segid != p.segid)
			OK(fx_read_check(st, 1, 0, 1, g * G, (g + 1) * G, 1));
		else
			fx_expect_corrupt(fx_read_check(st, 1, 0, 1, g * G,
							(g + 1) * G, 1),
					  &o);
	}
	OK(kvf_close(st));
	free(e);
}

/* committed_after_sync - segid has a catalog record ("G", engine/base/meta.h)
 * newer than the last sync's ("N") */
static void committed_after_sync(uint32_t segid)
{
	struct catalog *c = NULL;
	unsigned char key[5], tag = META_TAG_SYNC;
	struct meta_seg rec;
	struct meta_sync ms;
	void *val;
	size_t vlen;

	OK(catalog_open(tmp_path(fx.path, "meta"), 0, 1, CATALOG_FSYNC, &c));
	meta_key_u32(key, META_TAG_SEG, segid);
	OK(catalog_get(c, key, sizeof(key), &val, &vlen));
	memcpy(&rec, val, sizeof(rec));
	kvf_free(val);
	OK(catalog_get(c, &tag, 1, &val, &vlen));
	memcpy(&ms, val, sizeof(ms));
	kvf_free(val);
	catalog_close(c);
	cr_assert(rec.seqno > ms.seqno,
		  "segment %u: seqno %" PRIu64
		  " is not after the sync's %" PRIu64,
		  segid, rec.seqno, ms.seqno);
}

/*
 * A segment committed after the last sync, whose summary is bad, is a
 * write a crash cut short: dropped at open without complaint, since
 * nothing of it is inside the synced lengths.
 */
Test(read_damage, summary_after_sync)
{
	struct seg_summary_header h;
	struct fx_spot p, q;
	kvf_options o = fx_filled_opts();
	kvf_stats stats = { .struct_size = sizeof(stats) };
	kvf_store *st;
	uint64_t n;

	fx_make_damage_store(fx.path);
	st = fx_reopen(fx.path);
	/* whole segments past the synced length, then a crash: a handle
	 * that goes fatal closes without syncing */
	OK(fx_append(st, 2, 2, 1, 0, 16 * G));
	cr_assert(eq(int, kvf_sync(st), KVF_OK));
	OK(fx_append(st, 2, 2, 1, 16 * G, 16 * G));
	/* a fork commits the parent's full segments before its own record */
	OK(kvf_seq_fork(st, 2, 3, 0));
	catalog_fail_commits(st->cat, 1000);
	cr_assert(eq(int, kvf_sync(st), KVF_EFATAL));
	cr_assert(eq(int, kvf_close(st), KVF_EFATAL));
	p = fx_find_group(fx.path, 2, 1, 0, 0, 20, G);
	fx_summary_page(fx.path, &p, &h);
	committed_after_sync(p.segid);
	q = p;
	q.page = h.n_data_pages;
	fx_flip(fx.path, q.stripe, fx_spot_offset(&q) + 20, 4);
	OK(kvf_open(fx.path, &o, &st));
	OK(kvf_stats_get(st, &stats));
	cr_assert(eq(u32, stats.segments_corrupt, 0));
	OK(kvf_seq_len(st, 2, 1, &n));
	cr_assert(eq(u64, n, 16 * G));
	OK(fx_read_check(st, 2, 1, 1, 0, 16 * G, 3));
	/* and the space is reused */
	OK(fx_append(st, 2, 2, 1, 16 * G, 16 * G));
	OK(fx_read_check(st, 2, 1, 0, 0, 32 * G, 3));
	OK(kvf_close(st));
}
