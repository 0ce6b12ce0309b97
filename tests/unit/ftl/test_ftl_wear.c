/*
 * test_ftl_wear.c - wear accounting and leveling: the erase histogram and
 * the wear-evenness index; the free pool hands out the least-worn block
 * first (or the most-worn, for cold data); static wear leveling keeps the
 * erase gap bounded under a hot/cold workload that, without it, lets the
 * gap grow without limit.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <math.h>

#include "api/status.h"
#include "ftl/ftl_wear.h"
#include "ftl/media_flash.h"
#include "testutil.h"

Test(ftl_wear, histogram_and_evenness)
{
	struct wear_hist h;

	cr_assert(eq(int, wear_hist_init(&h, 4), KVF_OK));
	cr_assert(eq(dbl, wear_evenness(h.n, h.sum, h.sum_sq), 1.0));
	/* one block takes every erase: evenness 1/n */
	for (uint32_t ec = 0; ec < 200; ec++) {
		cr_assert(eq(int, wear_hist_reserve(&h, ec + 1), KVF_OK));
		wear_hist_erased(&h, ec);
	}
	cr_assert(eq(u32, h.min_ec, 0));
	cr_assert(eq(u32, h.max_ec, 200));
	cr_assert(eq(u64, h.sum, 200));
	cr_assert(eq(u64, h.sum_sq, 40000));
	cr_assert(fabs(wear_evenness(h.n, h.sum, h.sum_sq) - 0.25) < 1e-12);
	/* bring the others up to 200 too: even again */
	for (int b = 0; b < 3; b++)
		for (uint32_t ec = 0; ec < 200; ec++)
			wear_hist_erased(&h, ec);
	cr_assert(eq(u32, h.min_ec, 200));
	cr_assert(fabs(wear_evenness(h.n, h.sum, h.sum_sq) - 1.0) < 1e-12);
	wear_hist_retire(&h, 200);
	cr_assert(eq(u64, h.n, 3));
	cr_assert(eq(u64, h.sum, 600));
	wear_hist_release(&h);
}

Test(ftl_wear, pool_least_worn_first_by_die)
{
	uint32_t ec[8] = { 5, 2, 9, 2, 1, 7, 3, 4 };
	struct free_pool p;

	/* 2 dies: even blocks on die 0, odd on die 1 */
	cr_assert(eq(int, pool_init(&p, 8, 2, ec, 1), KVF_OK));
	for (uint32_t b = 0; b < 8; b++)
		pool_put(&p, b);
	cr_assert(eq(u32, p.n_free, 8));
	cr_assert(eq(u32, pool_take(&p, 0, POOL_LEAST_WORN), 4)); /* ec 1 */
	cr_assert(eq(u32, pool_take(&p, 1, POOL_LEAST_WORN), 1)); /* ec 2 */
	cr_assert(eq(u32, pool_take(&p, 1, POOL_LEAST_WORN), 3)); /* ec 2 */
	cr_assert(eq(u32, pool_take(&p, 0, POOL_MOST_WORN), 2));  /* ec 9 */
	cr_assert(eq(u32, pool_take(&p, 0, POOL_LEAST_WORN), 6)); /* ec 3 */
	cr_assert(eq(u32, pool_take(&p, 0, POOL_LEAST_WORN), 0)); /* ec 5 */
	/* die 0 is empty: the die with most free blocks serves */
	cr_assert(eq(u32, pool_take(&p, 0, POOL_LEAST_WORN), 7)); /* ec 4 */
	cr_assert(eq(u32, pool_take(&p, 0, POOL_LEAST_WORN), 5));
	cr_assert(eq(u32, pool_take(&p, 0, POOL_LEAST_WORN), WEAR_NONE));
	pool_release(&p);
}

Test(ftl_wear, pool_without_dynamic_wl_is_oldest_first)
{
	uint32_t ec[4] = { 9, 1, 5, 0 };
	struct free_pool p;

	cr_assert(eq(int, pool_init(&p, 4, 1, ec, 0), KVF_OK));
	pool_put(&p, 2);
	pool_put(&p, 0);
	pool_put(&p, 3);
	cr_assert(eq(u32, pool_take(&p, 0, POOL_LEAST_WORN), 2));
	pool_put(&p, 1);
	cr_assert(eq(u32, pool_take(&p, 0, POOL_MOST_WORN), 0));
	cr_assert(eq(u32, pool_take(&p, 0, POOL_LEAST_WORN), 3));
	cr_assert(eq(u32, pool_take(&p, 0, POOL_LEAST_WORN), 1));
	pool_release(&p);
}

struct wear_run {
	uint32_t gap_max;   /* largest erase gap seen (erases) */
	double gap_late;    /* mean gap over the second half (erases) */
	uint32_t gap_mid;   /* the gap halfway (erases) */
	uint32_t gap_end;   /* the gap at the end (erases) */
	double evenness;    /* wear-evenness index at the end */
	uint64_t wl_moves;  /* blocks moved by static WL */
};

/* a hot/cold run: the hot 1/8 of the pages takes every write after the
 * fill; the cold pages are written once */
static struct wear_run hot_cold(enum kvf_flash_mapping mapping, uint32_t dies,
				uint32_t gap, uint64_t seed)
{
	struct kvf_flash_config fc;
	struct kvf_media_config mc = {
		.kind = KVF_MEDIA_FLASH,
		.geo = { .n_stripes = 1, .page_size = 4096,
			 .pages_per_segment = 16, .segs_per_stripe = 96 },
		.flash = &fc,
	};
	uint64_t n_lpn = 96 * 16, hot = n_lpn / 8, lpns[16];
	struct wear_run r = { 0 };
	struct kvf_flash_stats s;
	struct kvf_media *m;
	const int iters = 8000;

	kvf_flash_config_init(&fc);
	fc.mapping = mapping;
	fc.backing = KVF_FLASH_BACKING_NONE;
	fc.spare_factor = 0.15;
	fc.wl_static_gap = gap;
	fc.pe_limit = 1000000;
	fc.channels = dies;
	cr_assert(eq(int, kvf_media_open(&mc, &m), KVF_OK), "%s",
		  kvf_last_error());
	for (uint64_t l = 0; l < n_lpn; l++)
		cr_assert(eq(int, kvf_flash_write_lpns(m, 0, &l, 1, 0), KVF_OK));
	for (int i = 0; i < iters; i++) {
		uint32_t g;

		for (int k = 0; k < 16; k++)
			lpns[k] = mapping == KVF_FLASH_MAP_PAGE ?
				  rng_below(&seed, hot) :
				  ((uint64_t)i * 16 + k) % hot; /* in order */
		cr_assert(eq(int, kvf_flash_write_lpns(m, 0, lpns, 16, 0),
			     KVF_OK), "%s", kvf_last_error());
		cr_assert(eq(int, kvf_flash_stats(m, &s), KVF_OK));
		g = s.erase_max - s.erase_min;
		if (g > r.gap_max)
			r.gap_max = g;
		if (i == iters / 2)
			r.gap_mid = g;
		if (i >= iters / 2)
			r.gap_late += (double)g / (iters - iters / 2);
	}
	cr_assert(eq(int, kvf_flash_check(m), KVF_OK), "%s", kvf_last_error());
	r.gap_end = s.erase_max - s.erase_min;
	r.evenness = s.wear_evenness;
	r.wl_moves = s.wl_moves;
	kvf_media_free(m);
	return r;
}

/*
 * wl_expect - static WL at threshold T bounds the gap: it comes back to
 * about T, and bursts (many cold blocks at the minimum at once, worn
 * blocks busy holding data) overshoot by at most about T; without it the
 * gap grows with every write to the hot pages
 */
static void wl_expect(enum kvf_flash_mapping mapping, uint32_t dies,
		      const char *name)
{
	uint64_t seed = rng_seed(name);
	const uint32_t t = 8;
	struct wear_run off = hot_cold(mapping, dies, 0, seed);
	struct wear_run on = hot_cold(mapping, dies, t, seed);

	cr_assert(off.gap_end > (40), "gap without WL %u", off.gap_end);
	cr_assert(off.gap_mid * 1.5 < (double)off.gap_end,
		  "gap without WL: %u halfway, %u at the end", off.gap_mid,
		  off.gap_end);
	cr_assert(eq(u64, off.wl_moves, 0));
	cr_assert(on.wl_moves > (0));
	cr_assert(le(u32, on.gap_max, 2 * t + 2), "gap with WL reached %u",
		  on.gap_max);
	cr_assert(le(dbl, on.gap_late, 1.5 * t + 2),
		  "gap with WL averaged %.1f over the second half", on.gap_late);
	cr_assert(on.evenness > (0.99));
	cr_assert(on.evenness > (off.evenness));
}

Test(ftl_wear, static_wl_bounds_gap_one_die, .timeout = 60)
{
	wl_expect(KVF_FLASH_MAP_PAGE, 1, "ftl_wear.static_wl_bounds_gap_one_die");
}

Test(ftl_wear, static_wl_bounds_gap_four_dies, .timeout = 60)
{
	wl_expect(KVF_FLASH_MAP_PAGE, 4,
		  "ftl_wear.static_wl_bounds_gap_four_dies");
}

Test(ftl_wear, static_wl_bounds_gap_block_mapping, .timeout = 60)
{
	wl_expect(KVF_FLASH_MAP_BLOCK, 1,
		  "ftl_wear.static_wl_bounds_gap_block_mapping");
}
