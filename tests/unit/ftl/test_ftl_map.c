/*
 * test_ftl_map.c - the FTL through the flash media: a model-based random
 * test (every logical page always reads its latest data, under page- and
 * block-level mapping, every GC policy, streams, TRIM, background GC and
 * static wear leveling, with every invariant checked as it runs); TRIM'd
 * pages are never copied by GC; blocks retire at the P/E limit and the
 * device turns read-only; stream hints keep lifetimes apart; block-mapping
 * merges and padding.  Power cuts are test_ftl_power.c.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stdio.h>
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "flash_fixture.h"
#include "ftl/media_flash.h"
#include "testutil.h"

/* ---- the model-based random test ---- */

struct model {
	struct kvf_media *m;
	uint32_t stripes;   /* stripes */
	uint32_t pps;       /* pages per segment */
	uint64_t n_lpn;     /* logical pages per stripe */
	uint32_t *ver;      /* [stripe * n_lpn + lpn] latest version, 0 none */
	uint32_t next_ver;  /* next version to write */
	uint32_t streams;   /* streams to pick from */
	unsigned char *buf; /* pps pages */
	unsigned char *tmp; /* one page */
};

static void model_write(struct model *md, uint64_t *seed)
{
	uint32_t s = (uint32_t)rng_below(seed, md->stripes);
	uint64_t seg = rng_below(seed, md->n_lpn / md->pps);
	uint32_t kind = (uint32_t)rng_below(seed, 4), page, n;
	uint32_t stream = (uint32_t)rng_below(seed, md->streams);
	struct kvf_media_io io;

	if (kind == 0) { /* a whole segment */
		page = 0;
		n = md->pps;
	} else if (kind == 1) { /* a run inside the segment */
		page = (uint32_t)rng_below(seed, md->pps);
		n = 1 + (uint32_t)rng_below(seed, md->pps - page);
	} else { /* one page */
		page = (uint32_t)rng_below(seed, md->pps);
		n = 1;
	}
	for (uint32_t i = 0; i < n; i++)
		ffx_fill(md->buf + (size_t)i * FFX_PAGE, s, seg * md->pps + page + i,
		     md->next_ver + i);
	io = (struct kvf_media_io){ .stripe = s, .seg = seg, .page = page,
				    .n_pages = n, .buf = md->buf };
	cr_assert(eq(int, kvf_flash_write(md->m, &io, 1, stream), KVF_OK),
		  "%s", kvf_last_error());
	for (uint32_t i = 0; i < n; i++)
		md->ver[s * md->n_lpn + seg * md->pps + page + i] =
			md->next_ver + i;
	md->next_ver += n;
}

static void model_trim(struct model *md, uint64_t *seed)
{
	uint32_t s = (uint32_t)rng_below(seed, md->stripes);
	uint64_t seg = rng_below(seed, md->n_lpn / md->pps), lpn, n;

	if (rng_below(seed, 2) == 0) {
		cr_assert(eq(int, kvf_media_trim_segment(md->m, s, seg), KVF_OK),
			  "%s", kvf_last_error());
		lpn = seg * md->pps;
		n = md->pps;
	} else {
		lpn = rng_below(seed, md->n_lpn);
		n = 1 + rng_below(seed, 3);
		if (lpn + n > md->n_lpn)
			n = md->n_lpn - lpn;
		cr_assert(eq(int, kvf_flash_trim_pages(md->m, s, lpn, n), KVF_OK),
			  "%s", kvf_last_error());
	}
	for (uint64_t i = 0; i < n; i++)
		md->ver[s * md->n_lpn + lpn + i] = 0;
}

static void model_verify(struct model *md, uint32_t s, uint64_t lpn)
{
	uint64_t seg = lpn / md->pps;
	uint32_t page = (uint32_t)(lpn % md->pps);

	cr_assert(eq(int, kvf_media_read_pages(md->m, s, seg, page, 1, md->buf),
		     KVF_OK), "%s", kvf_last_error());
	cr_assert(ffx_same(md->buf, s, lpn, md->ver[s * md->n_lpn + lpn], md->tmp),
		  "stripe %u lpn %llu: wrong data (expected version %u)", s,
		  (unsigned long long)lpn, md->ver[s * md->n_lpn + lpn]);
}

static void run_model(struct kvf_flash_config *fc, uint32_t stripes,
		      uint32_t ops, const char *name)
{
	uint64_t seed = rng_seed(name);
	struct model md = { .stripes = stripes, .pps = 8, .next_ver = 1 };

	md.streams = fc->n_streams ? fc->n_streams : 1;
	md.n_lpn = 24 * md.pps;
	md.m = ffx_open_flash(fc, stripes, md.pps, md.n_lpn / md.pps);
	md.ver = kvf_calloc(stripes * md.n_lpn, sizeof(uint32_t));
	md.buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN, (size_t)md.pps * FFX_PAGE);
	md.tmp = kvf_malloc(FFX_PAGE);
	cr_assert(md.ver && md.buf && md.tmp);
	for (uint32_t op = 0; op < ops; op++) {
		uint32_t r = (uint32_t)rng_below(&seed, 100);

		if (r < 60) {
			model_write(&md, &seed);
		} else if (r < 66) {
			model_trim(&md, &seed);
		} else if (r < 68) {
			cr_assert(eq(int, kvf_flash_idle(md.m, 50000000), KVF_OK),
				  "%s", kvf_last_error());
		} else {
			uint32_t s = (uint32_t)rng_below(&seed, stripes);

			model_verify(&md, s, rng_below(&seed, md.n_lpn));
		}
		if (op % 256 == 0)
			cr_assert(eq(int, kvf_flash_check(md.m), KVF_OK), "%s",
				  kvf_last_error());
	}
	for (uint32_t s = 0; s < stripes; s++)
		for (uint64_t l = 0; l < md.n_lpn; l++)
			model_verify(&md, s, l);
	cr_assert(eq(int, kvf_flash_check(md.m), KVF_OK), "%s",
		  kvf_last_error());
	{
		struct kvf_flash_stats st = ffx_flash_stats(md.m);

		/* the run did make the FTL work */
		cr_assert(st.erases > (50));
		if (fc->mapping == KVF_FLASH_MAP_PAGE)
			cr_assert(st.gc_programs > (0));
		else
			cr_assert(st.merges > (0));
		cr_assert(eq(u64, st.nand_programs,
			     st.host_pages + st.gc_programs + st.wl_programs +
				     st.pad_programs));
	}
	kvf_media_free(md.m);
	kvf_free(md.ver);
	kvf_free(md.buf);
	kvf_free(md.tmp);
}

static struct kvf_flash_config small(enum kvf_flash_mapping mapping,
				     enum kvf_flash_gc_policy gc)
{
	struct kvf_flash_config fc;

	kvf_flash_config_init(&fc);
	fc.mapping = mapping;
	fc.gc = gc;
	fc.spare_factor = 0.2;
	fc.channels = 2;
	return fc;
}

Test(ftl_map, model_page_greedy_streams, .timeout = 60)
{
	struct kvf_flash_config fc = small(KVF_FLASH_MAP_PAGE,
					   KVF_FLASH_GC_GREEDY);

	fc.n_streams = 3;
	run_model(&fc, 2, 6000, "ftl_map.model_page_greedy_streams");
}

Test(ftl_map, model_page_cost_benefit, .timeout = 60)
{
	struct kvf_flash_config fc = small(KVF_FLASH_MAP_PAGE,
					   KVF_FLASH_GC_COST_BENEFIT);

	run_model(&fc, 1, 6000, "ftl_map.model_page_cost_benefit");
}

Test(ftl_map, model_page_fifo_static_wl, .timeout = 60)
{
	struct kvf_flash_config fc = small(KVF_FLASH_MAP_PAGE,
					   KVF_FLASH_GC_FIFO);

	fc.wl_static_gap = 4;
	fc.dies_per_channel = 2;
	run_model(&fc, 2, 6000, "ftl_map.model_page_fifo_static_wl");
}

Test(ftl_map, model_page_dchoices_no_dynamic_wl, .timeout = 60)
{
	struct kvf_flash_config fc = small(KVF_FLASH_MAP_PAGE,
					   KVF_FLASH_GC_DCHOICES);

	fc.gc_d = 3;
	fc.wl_dynamic = KVF_MEDIA_OFF;
	fc.frontier_width = 1;
	run_model(&fc, 1, 6000, "ftl_map.model_page_dchoices_no_dynamic_wl");
}

Test(ftl_map, model_block_mapping, .timeout = 60)
{
	struct kvf_flash_config fc = small(KVF_FLASH_MAP_BLOCK, 0);

	fc.wl_static_gap = 3;
	run_model(&fc, 2, 6000, "ftl_map.model_block_mapping");
}

Test(ftl_map, model_file_backing, .timeout = 60)
{
	char *dir = tmpdir_make("ftl_model_file");
	struct kvf_flash_config fc = small(KVF_FLASH_MAP_PAGE,
					   KVF_FLASH_GC_GREEDY);

	cr_assert_not_null(dir);
	fc.backing = KVF_FLASH_BACKING_FILE;
	fc.path = tmp_path(dir, "flash.img");
	run_model(&fc, 1, 2000, "ftl_map.model_file_backing");
	tmpdir_remove(dir);
}

/* ---- TRIM and GC ---- */

/* write_segments - segments 0..n-1 of stripe 0 whole, in order, each page
 * at version 1 (segments of 8 pages; buf holds one) */
static void write_segments(struct kvf_media *m, uint64_t n,
			   unsigned char *buf)
{
	for (uint64_t seg = 0; seg < n; seg++) {
		for (uint32_t p = 0; p < 8; p++)
			ffx_fill(buf + p * FFX_PAGE, 0, seg * 8 + p, 1);
		cr_assert(eq(int,
			     kvf_media_write_segment(m, 0, seg, buf,
						     8 * FFX_PAGE),
			     KVF_OK));
	}
}


static void trim_never_copied(enum kvf_flash_gc_policy gc)
{
	struct kvf_flash_config fc;
	struct kvf_flash_stats a, b;
	unsigned char *buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN, 8 * FFX_PAGE);
	unsigned char *tmp = kvf_malloc(FFX_PAGE);
	struct kvf_media *m;

	kvf_flash_config_init(&fc);
	fc.gc = gc;
	fc.blocks_per_plane = 40;
	fc.gc_bg_free = 14;
	m = ffx_open_flash(&fc, 1, 8, 32);
	/* sequential fill: block i holds segment i (one die, one frontier) */
	write_segments(m, 32, buf);
	/* blocks 0..3 lose every page, blocks 4..7 half of theirs */
	for (uint64_t seg = 0; seg < 4; seg++)
		cr_assert(eq(int, kvf_media_trim_segment(m, 0, seg), KVF_OK));
	for (uint64_t seg = 4; seg < 8; seg++)
		cr_assert(eq(int, kvf_flash_trim_pages(m, 0, seg * 8, 4), KVF_OK));
	a = ffx_flash_stats(m);
	cr_assert(eq(u64, a.trimmed_pages, 48));
	/* background GC until 14 blocks are free: exactly blocks 0..7 */
	cr_assert(eq(int, kvf_flash_idle(m, 1000000000000ull), KVF_OK));
	b = ffx_flash_stats(m);
	cr_assert(eq(u64, b.gc_victims - a.gc_victims, 8));
	cr_assert(eq(u64, b.bg_victims - a.bg_victims, 8));
	/* only the 16 live pages moved; none of the 48 trimmed ones */
	cr_assert(eq(u64, b.gc_programs - a.gc_programs, 16));
	cr_assert(eq(u64, b.gc_victim_valid - a.gc_victim_valid, 16));
	for (uint64_t l = 0; l < 64; l++) {
		uint32_t blk, pg;
		int trimmed = l < 32 || l % 8 < 4;

		cr_assert(eq(int, kvf_flash_locate(m, 0, l, &blk, &pg), KVF_OK));
		cr_assert(eq(int, blk == UINT32_MAX, trimmed), "lpn %llu",
			  (unsigned long long)l);
		cr_assert(eq(int, kvf_media_read_pages(m, 0, l / 8, l % 8, 1, buf),
			     KVF_OK));
		cr_assert(ffx_same(buf, 0, l, trimmed ? 0 : 1, tmp), "lpn %llu",
			  (unsigned long long)l);
	}
	cr_assert(eq(int, kvf_flash_check(m), KVF_OK), "%s", kvf_last_error());
	kvf_media_free(m);
	kvf_free(buf);
	kvf_free(tmp);
}

Test(ftl_map, trimmed_pages_never_copied_greedy)
{
	trim_never_copied(KVF_FLASH_GC_GREEDY);
}

Test(ftl_map, trimmed_pages_never_copied_fifo)
{
	trim_never_copied(KVF_FLASH_GC_FIFO);
}

/* ---- wear-out ---- */

Test(ftl_map, retire_at_pe_limit_then_read_only, .timeout = 60)
{
	uint64_t seed = rng_seed("ftl_map.retire_at_pe_limit_then_read_only");
	struct kvf_flash_config fc;
	struct kvf_flash_stats s, early = { 0 };
	uint64_t lpns[64], first_retire = 0, n_lpn = 64 * 16;
	struct kvf_media *m;
	kvf_status rc = KVF_OK;

	kvf_flash_config_init(&fc);
	fc.pe_limit = 40;
	fc.spare_factor = 0.25;
	fc.backing = KVF_FLASH_BACKING_NONE;
	m = ffx_open_flash(&fc, 1, 16, 64);
	for (uint64_t i = 0; i < 200000 && rc == KVF_OK; i++) {
		for (int k = 0; k < 64; k++)
			lpns[k] = rng_below(&seed, n_lpn);
		rc = kvf_flash_write_lpns(m, 0, lpns, 64, 0);
		s = ffx_flash_stats(m);
		if (early.host_pages == 0 && s.erase_mean >= 8.0)
			early = s;
		if (first_retire == 0 && s.retired_blocks > 0)
			first_retire = s.host_pages;
	}
	cr_assert(eq(int, rc, KVF_ENOSPC), "%s", kvf_last_error());
	ffx_expect_msg("is worn out and read-only");
	s = ffx_flash_stats(m);
	cr_assert(eq(u32, s.worn_out, 1));
	cr_assert(s.retired_blocks > (0));
	cr_assert(eq(u64, s.lost_bytes, s.retired_blocks * 16 * FFX_PAGE));
	cr_assert(le(u32, s.erase_max, 40));
	/* every block that retired did so at exactly the limit */
	cr_assert(eq(int, kvf_flash_check(m), KVF_OK), "%s", kvf_last_error());
	/* read-only: writes refused, reads still served */
	cr_assert(eq(int, kvf_flash_write_lpns(m, 0, lpns, 1, 0), KVF_ENOSPC));
	cr_assert(eq(int, kvf_flash_read_lpns(m, 0, lpns, 8), KVF_OK));
	/* the early projection of TBW (to the first retirement) holds */
	{
		double want = (double)first_retire * FFX_PAGE;
		double got = early.life.host_bytes_total;

		cr_assert(got > 0.75 * want && got < 1.25 * want,
			  "projected %.0f bytes, first retirement at %.0f", got,
			  want);
	}
	kvf_media_free(m);
}

/* ---- streams ---- */

Test(ftl_map, streams_keep_lifetimes_apart)
{
	uint64_t seed = rng_seed("ftl_map.streams_keep_lifetimes_apart");
	struct kvf_flash_config fc;
	uint64_t n_lpn = 64 * 16, hot = n_lpn / 8, lpn;
	double wa[2];

	for (int use = 0; use < 2; use++) {
		struct kvf_flash_stats a, b;
		struct kvf_media *m;
		uint32_t mixed;
		uint8_t *owner;

		kvf_flash_config_init(&fc);
		fc.n_streams = 2;
		fc.spare_factor = 0.15;
		fc.backing = KVF_FLASH_BACKING_NONE;
		m = ffx_open_flash(&fc, 1, 16, 64);
		for (lpn = 0; lpn < n_lpn; lpn++)
			cr_assert(eq(int, kvf_flash_write_lpns(m, 0, &lpn, 1,
							       use && lpn >= hot),
				     KVF_OK));
		for (int phase = 0; phase < 2; phase++) {
			if (phase == 1)
				a = ffx_flash_stats(m);
			for (uint64_t i = 0; i < 60 * n_lpn; i++) {
				/* 90% of writes to the hot 1/8 */
				int is_hot = rng_below(&seed, 10) < 9;

				lpn = is_hot ? rng_below(&seed, hot) :
					       hot + rng_below(&seed, n_lpn - hot);
				cr_assert(eq(int, kvf_flash_write_lpns(
						     m, 0, &lpn, 1,
						     use && !is_hot), KVF_OK));
			}
		}
		b = ffx_flash_stats(m);
		wa[use] = (double)(b.nand_programs - a.nand_programs) /
			  (double)(b.host_pages - a.host_pages);
		/* with streams no block mixes the classes, GC copies
		 * included; without, they do */
		owner = kvf_calloc(b.blocks, 1);
		for (lpn = 0; lpn < n_lpn; lpn++) {
			uint32_t blk, pg;

			cr_assert(eq(int, kvf_flash_locate(m, 0, lpn, &blk, &pg),
				     KVF_OK));
			owner[blk] |= lpn < hot ? 1 : 2;
		}
		mixed = 0;
		for (uint32_t blk = 0; blk < b.blocks; blk++)
			mixed += owner[blk] == 3;
		if (use)
			cr_assert(eq(u32, mixed, 0));
		else
			cr_assert(mixed > (0));
		kvf_free(owner);
		kvf_media_free(m);
	}
	/* streams save 16-19% of the copies over seeds (40 runs: ratio
	 * 0.807-0.840); 0.85 failed about one seed in 40 */
	cr_assert(lt(dbl, wa[1], 0.88 * wa[0]),
		  "hot/cold WA with streams %.3f, without %.3f", wa[1], wa[0]);
}

Test(ftl_map, stream_out_of_range_refused)
{
	struct kvf_flash_config fc;
	struct kvf_media *m;
	uint64_t lpn = 0;

	kvf_flash_config_init(&fc);
	fc.n_streams = 2;
	m = ffx_open_flash(&fc, 1, 8, 16);
	cr_assert(eq(int, kvf_flash_write_lpns(m, 0, &lpn, 1, 2), KVF_EINVAL));
	ffx_expect_msg("stream 2 out of range (the device has 2 streams)");
	cr_assert(eq(u64, ffx_flash_stats(m).host_pages, 0));
	kvf_media_free(m);
}

/* ---- block mapping ---- */

Test(ftl_map, block_mapping_merge_pad_trim)
{
	struct kvf_flash_config fc;
	struct kvf_flash_stats a, b;
	unsigned char *buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN, 8 * FFX_PAGE);
	unsigned char *tmp = kvf_malloc(FFX_PAGE);
	struct kvf_media *m;

	kvf_flash_config_init(&fc);
	fc.mapping = KVF_FLASH_MAP_BLOCK;
	fc.spare_factor = 0.2;
	m = ffx_open_flash(&fc, 1, 8, 16);
	/* whole-segment writes program each page once: WA 1 */
	write_segments(m, 16, buf);
	a = ffx_flash_stats(m);
	cr_assert(eq(u64, a.nand_programs, 128));
	cr_assert(eq(u64, a.erases, 0));
	/* rewriting one page of a full block merges: 7 copies, 1 erase */
	ffx_fill(buf, 0, 3 * 8 + 5, 2);
	cr_assert(eq(int, kvf_media_write(m, &(struct kvf_media_io){
			.stripe = 0, .seg = 3, .page = 5, .n_pages = 1,
			.buf = buf }, 1), KVF_OK));
	b = ffx_flash_stats(m);
	cr_assert(eq(u64, b.gc_programs - a.gc_programs, 7));
	cr_assert(eq(u64, b.erases - a.erases, 1));
	cr_assert(eq(u64, b.merges - a.merges, 1));
	cr_assert(eq(int, kvf_media_read_pages(m, 0, 3, 5, 1, buf), KVF_OK));
	cr_assert(ffx_same(buf, 0, 3 * 8 + 5, 2, tmp));
	cr_assert(eq(int, kvf_media_read_pages(m, 0, 3, 4, 1, buf), KVF_OK));
	cr_assert(ffx_same(buf, 0, 3 * 8 + 4, 1, tmp));
	/* trimming a whole segment erases its block at once */
	a = b;
	cr_assert(eq(int, kvf_media_trim_segment(m, 0, 7), KVF_OK));
	b = ffx_flash_stats(m);
	cr_assert(eq(u64, b.erases - a.erases, 1));
	cr_assert(eq(int, kvf_media_read_pages(m, 0, 7, 0, 1, buf), KVF_OK));
	cr_assert(ffx_same(buf, 0, 7 * 8, 0, tmp));
	/* a write past the write pointer pads the gap, in place */
	a = b;
	ffx_fill(buf, 0, 7 * 8 + 6, 3);
	cr_assert(eq(int, kvf_media_write(m, &(struct kvf_media_io){
			.stripe = 0, .seg = 7, .page = 6, .n_pages = 1,
			.buf = buf }, 1), KVF_OK));
	b = ffx_flash_stats(m);
	cr_assert(eq(u64, b.pad_programs - a.pad_programs, 6));
	cr_assert(eq(u64, b.host_pages - a.host_pages, 1));
	cr_assert(eq(int, kvf_media_read_pages(m, 0, 7, 2, 1, buf), KVF_OK));
	cr_assert(ffx_same(buf, 0, 7 * 8 + 2, 0, tmp)); /* padding reads zeros */
	cr_assert(eq(int, kvf_media_read_pages(m, 0, 7, 6, 1, buf), KVF_OK));
	cr_assert(ffx_same(buf, 0, 7 * 8 + 6, 3, tmp));
	cr_assert(eq(int, kvf_flash_check(m), KVF_OK), "%s", kvf_last_error());
	kvf_media_free(m);
	kvf_free(buf);
	kvf_free(tmp);
}
