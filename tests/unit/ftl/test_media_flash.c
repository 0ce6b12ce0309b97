/*
 * test_media_flash.c - the flash emulator as a media backend: the media
 * contract (round trips, zeros for unwritten and trimmed pages, striping),
 * every refused configuration (status, message, nothing left open), the
 * flash-only calls refused on other media, spare factor and
 * over-provisioning conventions, the statistics and the lifetime
 * projection, and out-of-memory at open.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <math.h>
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "flash_fixture.h"
#include "ftl/media_flash.h"
#include "testutil.h"

#define PAGE 4096u
#define PPS 16u

static struct kvf_media_config config(struct kvf_flash_config *fc,
				      uint32_t stripes, uint64_t segs)
{
	struct kvf_media_config mc = {
		.kind = KVF_MEDIA_FLASH,
		.geo = { .n_stripes = stripes, .page_size = PAGE,
			 .pages_per_segment = PPS, .segs_per_stripe = segs },
		.flash = fc,
	};

	kvf_flash_config_init(fc);
	return mc;
}


static void fill(void *buf, uint32_t n_pages, uint32_t seed)
{
	uint32_t *w = buf;

	for (uint32_t i = 0; i < n_pages * PAGE / 4; i++)
		w[i] = seed * 2654435761u + i;
}

static int is_zero(const unsigned char *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (p[i])
			return 0;
	return 1;
}

Test(media_flash, defaults_open_and_round_trip)
{
	struct kvf_media_config mc = {
		.kind = KVF_MEDIA_FLASH,
		.geo = { .n_stripes = 2, .page_size = PAGE,
			 .pages_per_segment = PPS, .segs_per_stripe = 32 },
	};
	unsigned char *w = kvf_aligned_alloc(KVF_MEDIA_ALIGN, PPS * PAGE);
	unsigned char *r = kvf_aligned_alloc(KVF_MEDIA_ALIGN, PPS * PAGE);
	struct kvf_media_stats ms;
	struct kvf_flash_stats fs;
	struct kvf_media *m;

	/* flash = NULL: every default, 2 stripes need 2 dies -> refused */
	cr_assert(eq(int, kvf_media_open(&mc, &m), KVF_EINVAL));
	ffx_expect_msg("1 dies (1 channels x 1) cannot be shared evenly by 2 stripes");
	cr_assert_null(m);
	mc.geo.n_stripes = 1;
	cr_assert(eq(int, kvf_media_open(&mc, &m), KVF_OK), "%s",
		  kvf_last_error());
	cr_assert(kvf_media_is_flash(m));
	/* unwritten pages read as zeros */
	cr_assert(eq(int, kvf_media_read_pages(m, 0, 5, 0, PPS, r), KVF_OK));
	cr_assert(is_zero(r, PPS * PAGE));
	fill(w, PPS, 1);
	cr_assert(eq(int, kvf_media_write_segment(m, 0, 5, w, PPS * PAGE), KVF_OK));
	cr_assert(eq(int, kvf_media_read_pages(m, 0, 5, 0, PPS, r), KVF_OK));
	cr_assert(eq(int, memcmp(w, r, PPS * PAGE), 0));
	/* partial overwrite inside the segment */
	fill(w, 3, 2);
	cr_assert(eq(int, kvf_media_write(m, &(struct kvf_media_io){
			.stripe = 0, .seg = 5, .page = 7, .n_pages = 3, .buf = w },
			1), KVF_OK));
	cr_assert(eq(int, kvf_media_read_pages(m, 0, 5, 7, 3, r), KVF_OK));
	cr_assert(eq(int, memcmp(w, r, 3 * PAGE), 0));
	/* a trimmed segment reads as zeros */
	cr_assert(eq(int, kvf_media_trim_segment(m, 0, 5), KVF_OK));
	cr_assert(eq(int, kvf_media_read_pages(m, 0, 5, 0, PPS, r), KVF_OK));
	cr_assert(is_zero(r, PPS * PAGE));
	cr_assert(eq(int, kvf_media_sync(m), KVF_OK));
	kvf_media_stats(m, &ms);
	cr_assert(eq(str, (char *)ms.backend, "flash"));
	cr_assert(eq(u64, ms.host_pages_written, PPS + 3));
	cr_assert(eq(u64, ms.nand_pages_programmed, PPS + 3));
	cr_assert(eq(u64, ms.bytes_written, (PPS + 3) * PAGE));
	cr_assert(eq(u64, ms.trims, 1));
	cr_assert(eq(u64, ms.syncs, 1));
	cr_assert(eq(int, kvf_flash_stats(m, &fs), KVF_OK));
	cr_assert(eq(str, (char *)fs.cell, "TLC"));
	cr_assert(eq(str, (char *)fs.gc, "greedy"));
	cr_assert(eq(str, (char *)fs.mapping, "page"));
	cr_assert(eq(u32, fs.pages_per_block, PPS));
	cr_assert(eq(u32, fs.oob_bytes, 224));
	cr_assert(eq(u64, fs.raw_bytes, fs.physical_pages * (PAGE + 224)));
	/* the default spare factor is honored, both conventions agree */
	cr_assert(ge(dbl, fs.spare_factor, 0.07));
	cr_assert(fabs(fs.over_provisioning -
		       fs.spare_factor / (1.0 - fs.spare_factor)) < 1e-9);
	cr_assert(eq(u64, fs.logical_pages, 32 * PPS));
	kvf_media_close(m);
	cr_assert(eq(int, kvf_media_read_pages(m, 0, 0, 0, 1, r), KVF_ECLOSED));
	cr_assert(eq(int, kvf_flash_stats(m, &fs), KVF_ECLOSED));
	cr_assert(eq(int, kvf_flash_idle(m, 0), KVF_ECLOSED));
	kvf_media_free(m);
	kvf_free(w);
	kvf_free(r);
}

Test(media_flash, stripes_are_independent)
{
	struct kvf_flash_config fc;
	struct kvf_media_config mc = config(&fc, 4, 16);
	unsigned char *w = kvf_aligned_alloc(KVF_MEDIA_ALIGN, 4 * PAGE);
	unsigned char *r = kvf_aligned_alloc(KVF_MEDIA_ALIGN, 4 * PAGE);
	struct kvf_media_io io[4];
	struct kvf_media *m;

	fc.channels = 4;
	fc.dies_per_channel = 2;
	cr_assert(eq(int, kvf_media_open(&mc, &m), KVF_OK), "%s",
		  kvf_last_error());
	for (uint32_t s = 0; s < 4; s++) {
		fill(w + s * PAGE, 1, 10 + s);
		io[s] = (struct kvf_media_io){ .stripe = s, .seg = 3, .page = 2,
					       .n_pages = 1, .buf = w + s * PAGE };
	}
	cr_assert(eq(int, kvf_media_write(m, io, 4), KVF_OK));
	for (uint32_t s = 0; s < 4; s++) {
		uint32_t blk, pg;
		struct nand *n = kvf_flash_nand(m);

		cr_assert(eq(int, kvf_media_read_pages(m, s, 3, 2, 1, r), KVF_OK));
		cr_assert(eq(int, memcmp(r, w + s * PAGE, PAGE), 0));
		/* stripe s lives on channel s */
		cr_assert(eq(int, kvf_flash_locate(m, s, 3 * PPS + 2, &blk, &pg),
			     KVF_OK));
		cr_assert(eq(u32, nand_channel_of(n, blk), s));
	}
	cr_assert(eq(int, kvf_media_read_pages(m, 1, 3, 3, 1, r), KVF_OK));
	cr_assert(is_zero(r, PAGE));
	kvf_media_free(m);
	kvf_free(w);
	kvf_free(r);
}

/* refuse - open must fail with status and a message naming the problem */
static void refuse(struct kvf_media_config *mc, kvf_status want,
		   const char *needle)
{
	struct kvf_media *m = (struct kvf_media *)&m;

	cr_assert(eq(int, kvf_media_open(mc, &m), want), "for '%s'", needle);
	cr_assert_null(m);
	ffx_expect_msg(needle);
}

Test(media_flash, bad_configs_refused)
{
	struct kvf_flash_config fc;
	struct kvf_media_config mc;

	mc = config(&fc, 1, 16);
	fc.page_size = 8192;
	refuse(&mc, KVF_EINVAL, "page_size 8192 differs from the media page size 4096");
	mc = config(&fc, 1, 16);
	mc.geo.page_size = 2048;
	refuse(&mc, KVF_EINVAL, "page size 2048: NAND pages are 4096, 8192 or 16384 bytes");
	mc = config(&fc, 1, 16);
	fc.mapping = KVF_FLASH_MAP_BLOCK;
	fc.pages_per_block = 32;
	refuse(&mc, KVF_EINVAL, "block-level mapping needs a segment of exactly one block");
	mc = config(&fc, 1, 16);
	fc.pages_per_block = 1;
	refuse(&mc, KVF_EINVAL, "pages_per_block 1 out of range");
	mc = config(&fc, 3, 16);
	fc.channels = 4;
	refuse(&mc, KVF_EINVAL, "4 dies (4 channels x 1) cannot be shared evenly by 3 stripes");
	mc = config(&fc, 1, 16);
	fc.spare_factor = 1.5;
	refuse(&mc, KVF_EINVAL, "spare_factor 1.5 is not in (0, 1)");
	mc = config(&fc, 1, 16);
	fc.blocks_per_plane = 20;
	refuse(&mc, KVF_EINVAL, "each stripe needs at least 22 blocks");
	mc = config(&fc, 1, 16);
	fc.backing = KVF_FLASH_BACKING_FILE;
	refuse(&mc, KVF_EINVAL, "file backing needs a path");
	mc = config(&fc, 1, 16);
	fc.gc = (enum kvf_flash_gc_policy)7;
	refuse(&mc, KVF_EINVAL, "unknown GC policy 7");
	mc = config(&fc, 1, 16);
	fc.cell = (enum kvf_flash_cell)9;
	refuse(&mc, KVF_EINVAL, "unknown cell type 9");
	mc = config(&fc, 1, 16);
	fc.n_streams = 17;
	refuse(&mc, KVF_EINVAL, "17 streams exceed the limit of 16");
	mc = config(&fc, 1, 16);
	fc.frontier_width = 65;
	refuse(&mc, KVF_EINVAL, "frontier_width 65 exceeds the limit of 64");
	mc = config(&fc, 1, 16);
	fc.gc_fg_free = 0;
	fc.frontier_width = 4;
	fc.gc_fg_free = 3;
	refuse(&mc, KVF_EINVAL, "gc_fg_free 3 is below what GC and wear leveling need (4 blocks)");
	mc = config(&fc, 1, 16);
	fc.oob_bytes = 2048;
	refuse(&mc, KVF_EINVAL, "oob_bytes 2048 exceeds a quarter of the 4096-byte page");
	mc = config(&fc, 1, 16);
	fc.channels = 300;
	refuse(&mc, KVF_EINVAL, "exceeds the limits");
}

Test(media_flash, flash_calls_refused_elsewhere)
{
	struct kvf_media_config mc = {
		.kind = KVF_MEDIA_MEMORY,
		.geo = { .n_stripes = 1, .page_size = PAGE,
			 .pages_per_segment = PPS, .segs_per_stripe = 4 },
	};
	struct kvf_flash_stats fs;
	struct kvf_media *m;
	uint64_t lpn = 0;

	cr_assert(eq(int, kvf_media_open(&mc, &m), KVF_OK));
	cr_assert(not(kvf_media_is_flash(m)));
	cr_assert(eq(int, kvf_flash_stats(m, &fs), KVF_EINVAL));
	ffx_expect_msg("the media is the memory backend, not the flash emulator");
	cr_assert(eq(int, kvf_flash_write_lpns(m, 0, &lpn, 1, 0), KVF_EINVAL));
	cr_assert(eq(int, kvf_flash_power_cut(m, 1), KVF_EINVAL));
	cr_assert(eq(int, kvf_flash_check(m), KVF_EINVAL));
	cr_assert_null(kvf_flash_nand(m));
	cr_assert(eq(int, kvf_flash_stats(NULL, &fs), KVF_EINVAL));
	kvf_media_free(m);
}

Test(media_flash, flash_call_arguments_checked)
{
	struct kvf_flash_config fc;
	struct kvf_media_config mc = config(&fc, 1, 8);
	unsigned char *w = kvf_aligned_alloc(KVF_MEDIA_ALIGN, PAGE);
	struct kvf_media *m;
	uint64_t lpn = 8 * PPS;

	cr_assert(eq(int, kvf_media_open(&mc, &m), KVF_OK), "%s",
		  kvf_last_error());
	cr_assert(eq(int, kvf_flash_write_lpns(m, 0, &lpn, 1, 0), KVF_ERANGE));
	ffx_expect_msg("logical pages 128..128 past the end of stripe 0 (128 pages)");
	cr_assert(eq(int, kvf_flash_write_lpns(m, 1, &lpn, 1, 0), KVF_ERANGE));
	ffx_expect_msg("stripe 1 out of range");
	cr_assert(eq(int, kvf_flash_trim_pages(m, 0, 120, 9), KVF_ERANGE));
	cr_assert(eq(int, kvf_flash_power_cut(m, 0), KVF_EINVAL));
	cr_assert(eq(int, kvf_flash_write(m, &(struct kvf_media_io){
			.stripe = 0, .seg = 0, .page = 15, .n_pages = 2, .buf = w },
			1, 0), KVF_ERANGE));
	ffx_expect_msg("pages 15..16 past the segment end");
	cr_assert(eq(int, kvf_flash_write(m, &(struct kvf_media_io){
			.stripe = 0, .seg = 0, .page = 0, .n_pages = 1,
			.buf = w + 8 }, 1, 0), KVF_EINVAL));
	ffx_expect_msg("is not 4096-byte aligned");
	cr_assert(eq(u64, (uint64_t)kvf_media_is_flash(m), 1));
	{
		struct kvf_flash_stats fs;

		cr_assert(eq(int, kvf_flash_stats(m, &fs), KVF_OK));
		cr_assert(eq(u64, fs.host_pages, 0));
	}
	kvf_media_free(m);
	kvf_free(w);
}

Test(media_flash, stats_account_every_program, .timeout = 60)
{
	uint64_t seed = rng_seed("media_flash.stats_account_every_program");
	struct kvf_flash_config fc;
	struct kvf_media_config mc = config(&fc, 1, 64);
	struct kvf_flash_stats s;
	struct kvf_media_stats ms;
	struct kvf_media *m;
	uint64_t lpns[256], n_lpn = 64 * PPS;

	fc.backing = KVF_FLASH_BACKING_NONE;
	fc.spare_factor = 0.2;
	fc.cell = KVF_FLASH_QLC;
	cr_assert(eq(int, kvf_media_open(&mc, &m), KVF_OK), "%s",
		  kvf_last_error());
	for (int i = 0; i < 100; i++) {
		for (int k = 0; k < 256; k++)
			lpns[k] = rng_below(&seed, n_lpn);
		cr_assert(eq(int, kvf_flash_write_lpns(m, 0, lpns, 256, 0), KVF_OK));
	}
	cr_assert(eq(int, kvf_flash_stats(m, &s), KVF_OK));
	kvf_media_stats(m, &ms);
	cr_assert(eq(u64, s.host_pages, 25600));
	cr_assert(eq(u64, s.host_write_requests, 25600));
	cr_assert(eq(u64, s.nand_programs, s.host_pages + s.gc_programs));
	cr_assert(eq(u64, s.gc_programs, s.gc_victim_valid));
	cr_assert(eq(u64, s.erases, s.gc_victims));
	cr_assert(eq(u64, ms.nand_pages_programmed, s.nand_programs));
	cr_assert(eq(u64, ms.host_pages_written, s.host_pages));
	cr_assert(fabs(s.device_wa - (double)s.nand_programs / s.host_pages) <
		  1e-12);
	cr_assert(s.device_wa > (1.5));
	cr_assert(eq(u32, s.pe_limit, 1000));
	/* the histogram covers every block */
	{
		uint64_t n = 0;

		for (uint32_t i = 0; i < KVF_FLASH_HIST_BUCKETS; i++)
			n += s.erase_hist[i];
		cr_assert(eq(u64, n, s.blocks));
		cr_assert(eq(u32, s.hist_lo, s.erase_min));
		cr_assert(le(dbl, (double)s.erase_min, s.erase_mean));
		cr_assert(le(dbl, s.erase_mean, (double)s.erase_max));
		cr_assert(fabs(s.erase_mean - (double)s.erases / s.blocks) < 1e-9);
	}
	cr_assert(s.wear_evenness > (0.5));
	cr_assert(le(dbl, s.wear_evenness, 1.0));
	/* modeled time: at least every program's tPROG over the one die */
	cr_assert(ge(u64, s.device_time_ns, s.nand_programs * 2500000ull));
	cr_assert(eq(u64, s.die_busy_max_ns, s.die_busy_ns));
	/* effective spare: the erased reserve makes it a bit smaller */
	cr_assert(lt(dbl, s.spare_factor_effective, s.spare_factor));
	cr_assert(s.spare_factor_effective > (s.spare_factor - 0.05));
	/* lifetime: the projection follows kvf_flash_project */
	{
		struct kvf_flash_lifetime l;

		kvf_flash_project(&s, (double)s.host_pages * PAGE,
				  (double)s.erases, PAGE, &l);
		cr_assert(l.host_bytes_total > ((double)s.host_pages * PAGE));
		cr_assert(fabs(l.host_bytes_total - s.life.host_bytes_total) <
			  1e-6 * l.host_bytes_total);
		cr_assert(fabs(l.requests_remaining * PAGE -
			       l.host_bytes_remaining) < 1.0);
	}
	kvf_media_free(m);
}

Test(media_flash, lifetime_projection_formula)
{
	struct kvf_flash_stats s = { 0 };
	struct kvf_flash_lifetime l;

	s.blocks = 1000;
	s.pages_per_block = 64;
	s.page_size = 4096;
	s.logical_pages = 50000;
	s.pe_limit = 3000;
	s.erase_max = 20;
	s.erase_mean = 10.0;
	s.host_pages = 1000000;
	/* 10000 erases over 4e9 host bytes: 2.5e-9 per byte per block-set,
	 * the worst block wears twice the mean */
	kvf_flash_project(&s, 4e9, 10000, 16384, &l);
	{
		double rate = 10000.0 / 4e9 / 1000.0 * 2.0;
		double left = (3000.0 - 20.0) / rate;

		cr_assert(fabs(l.host_bytes_remaining - left) < 1e-6 * left);
		cr_assert(fabs(l.host_bytes_total - (4096e6 + left)) < 1e-6 * left);
		cr_assert(fabs(l.requests_remaining - left / 16384) < 1e-3);
		cr_assert(fabs(l.drive_writes -
			       l.host_bytes_total / (50000.0 * 4096)) < 1e-9);
	}
	kvf_flash_project(&s, 0, 0, 4096, &l);
	cr_assert(eq(dbl, l.host_bytes_total, 0.0));
}

Test(media_flash, out_of_memory_at_open_leaves_nothing)
{
	struct kvf_flash_config fc;
	struct kvf_media_config mc = config(&fc, 2, 16);
	struct kvf_media *m = NULL;
	kvf_status rc = KVF_ENOMEM;
	uint64_t n;

	fc.channels = 2;
	fc.wl_static_gap = 5;
	for (n = 1; n < 200 && rc == KVF_ENOMEM; n++) {
		kvf_alloc_fail_at(n, 0);
		rc = kvf_media_open(&mc, &m);
		kvf_alloc_fail_at(0, 0);
		if (rc == KVF_ENOMEM)
			cr_assert_null(m);
	}
	cr_assert(eq(int, rc, KVF_OK), "%s", kvf_last_error());
	cr_assert(n > (10)); /* many allocations were each failed */
	kvf_media_free(m);
}
