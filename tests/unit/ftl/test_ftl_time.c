/*
 * test_ftl_time.c - the timing model: per-die and per-channel busy time,
 * channel parallelism (a read striped over 8 channels models about 8x one
 * channel, through the whole media path too), dies sharing a channel,
 * copy-back, cell-type defaults, and request latency in sync issue mode.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "ftl/ftl_time.h"
#include "ftl/media_flash.h"
#include "testutil.h"

#define PAGE 4096u

static struct kvf_flash_timing tlc(void)
{
	struct kvf_flash_timing t = { 0 };

	cr_assert_not_null(ftl_cell_defaults(KVF_FLASH_TLC, &t, NULL));
	return t;
}

Test(ftl_time, cell_defaults_ordered_and_overridable)
{
	static const enum kvf_flash_cell cells[] = {
		KVF_FLASH_SLC, KVF_FLASH_MLC, KVF_FLASH_TLC, KVF_FLASH_QLC
	};
	struct kvf_flash_timing prev = { 0 };
	uint32_t prev_pe = 0;

	for (int i = 0; i < 4; i++) {
		struct kvf_flash_timing t = { 0 };
		uint32_t pe = 0;

		cr_assert_not_null(ftl_cell_defaults(cells[i], &t, &pe));
		if (i > 0) {
			/* more bits per cell: slower and less durable */
			cr_assert(t.read_ns > (prev.read_ns));
			cr_assert(t.prog_ns > (prev.prog_ns));
			cr_assert(t.erase_ns > (prev.erase_ns));
			cr_assert(lt(u32, pe, prev_pe));
		}
		prev = t;
		prev_pe = pe;
	}
	{
		struct kvf_flash_timing t = { .read_ns = 1234 };
		uint32_t pe = 77;

		cr_assert(eq(str, (char *)ftl_cell_defaults(0, &t, &pe), "TLC"));
		cr_assert(eq(u32, t.read_ns, 1234));
		cr_assert(eq(u32, pe, 77));
		cr_assert_null(ftl_cell_defaults((enum kvf_flash_cell)9, &t, &pe));
	}
}

Test(ftl_time, eight_channels_read_eight_times_faster)
{
	struct kvf_flash_timing t = tlc();
	struct ftl_time a, b;
	uint64_t one, eight;

	cr_assert(eq(int, ftl_time_init(&a, 8, 8, &t, PAGE), KVF_OK));
	cr_assert(eq(int, ftl_time_init(&b, 8, 8, &t, PAGE), KVF_OK));
	for (int i = 0; i < 64; i++)
		ftl_time_read(&a, 0, 0);
	for (int i = 0; i < 64; i++)
		ftl_time_read(&b, (uint32_t)i % 8, (uint32_t)i % 8);
	one = a.end_ns;
	eight = b.end_ns;
	cr_assert(eq(u64, one, 64 * (a.read_ns + a.xfer_ns)));
	cr_assert(eq(u64, eight, 8 * (b.read_ns + b.xfer_ns)));
	cr_assert(eq(u64, a.die_busy_ns[0], one));
	cr_assert(eq(u64, b.ch_busy_ns[3], 8 * b.xfer_ns));
	ftl_time_release(&a);
	ftl_time_release(&b);
}

Test(ftl_time, dies_on_one_channel_share_its_transfers)
{
	struct kvf_flash_timing t = tlc();
	struct ftl_time tm;

	t.channel_mbps = 40; /* slow bus: transfers dominate */
	cr_assert(eq(int, ftl_time_init(&tm, 8, 1, &t, PAGE), KVF_OK));
	for (uint32_t d = 0; d < 8; d++)
		ftl_time_read(&tm, d, 0);
	/* the senses overlap, the transfers queue on the one channel */
	cr_assert(eq(u64, tm.end_ns, tm.read_ns + 8 * tm.xfer_ns));
	cr_assert(eq(u64, tm.ch_busy_ns[0], 8 * tm.xfer_ns));
	ftl_time_release(&tm);
}

Test(ftl_time, program_erase_and_copy)
{
	struct kvf_flash_timing t = tlc();
	struct ftl_time tm;
	uint64_t x;

	cr_assert(eq(int, ftl_time_init(&tm, 2, 2, &t, PAGE), KVF_OK));
	x = tm.xfer_ns;
	cr_assert(eq(u64, x, (PAGE * 1000u + 799) / 800)); /* 800 MB/s */
	cr_assert(eq(u64, ftl_time_program(&tm, 0, 0), x + tm.prog_ns));
	/* the next program on the die waits for the first */
	cr_assert(eq(u64, ftl_time_program(&tm, 0, 0), 2 * (x + tm.prog_ns)));
	cr_assert(eq(u64, ftl_time_erase(&tm, 1), tm.erase_ns));
	/* copy-back inside one die never touches a channel */
	{
		uint64_t ch0 = tm.ch_busy_ns[0], start = tm.die_free_ns[0];

		cr_assert(eq(u64, ftl_time_copy(&tm, 0, 0, 0, 0),
			     start + tm.read_ns + tm.prog_ns));
		cr_assert(eq(u64, tm.ch_busy_ns[0], ch0));
	}
	/* across dies: read out, then program in after the read */
	{
		uint64_t r0 = time_max(tm.die_free_ns[0], 0) + tm.read_ns + x;
		uint64_t p0 = time_max(r0, tm.die_free_ns[1]);

		cr_assert(eq(u64, ftl_time_copy(&tm, 0, 0, 1, 1),
			     p0 + x + tm.prog_ns));
	}
	cr_assert(ftl_time_idle_at(&tm, tm.end_ns));
	cr_assert(not(ftl_time_idle_at(&tm, tm.end_ns - 1)));
	ftl_time_release(&tm);
}

/* flash media of `stripes` stripes over 8 channels, one die each */
static struct kvf_media *open_channels(uint32_t stripes,
				       enum kvf_flash_issue issue)
{
	struct kvf_flash_config fc;
	struct kvf_media_config mc = {
		.kind = KVF_MEDIA_FLASH,
		.geo = { .n_stripes = stripes, .page_size = PAGE,
			 .pages_per_segment = 16, .segs_per_stripe = 64 / stripes },
		.flash = &fc,
	};
	struct kvf_media *m = NULL;

	kvf_flash_config_init(&fc);
	fc.channels = 8;
	fc.issue = issue;
	fc.spare_factor = 0.25;
	cr_assert(eq(int, kvf_media_open(&mc, &m), KVF_OK), "%s",
		  kvf_last_error());
	return m;
}

static uint64_t now_ns(struct kvf_media *m)
{
	struct kvf_flash_stats s;

	cr_assert(eq(int, kvf_flash_idle(m, 0), KVF_OK));
	cr_assert(eq(int, kvf_flash_stats(m, &s), KVF_OK));
	return s.device_time_ns;
}

Test(ftl_time, media_read_over_eight_stripes_is_eight_times_faster)
{
	struct kvf_media *m = open_channels(8, KVF_FLASH_ISSUE_QUEUED);
	void *buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN, 16 * PAGE);
	struct kvf_media_io io[8];
	uint64_t t0, t_one, t_eight;
	double ratio;

	memset(buf, 7, 16 * PAGE);
	for (uint32_t s = 0; s < 8; s++)
		cr_assert(eq(int, kvf_media_write_segment(m, s, 0, buf, 16 * PAGE),
			     KVF_OK), "%s", kvf_last_error());
	/* 16 pages from one stripe: one channel, one die */
	t0 = now_ns(m);
	cr_assert(eq(int, kvf_media_read_pages(m, 0, 0, 0, 16, buf), KVF_OK));
	t_one = now_ns(m) - t0;
	/* the same 16 pages' worth as 2 pages from each of 8 stripes */
	for (uint32_t s = 0; s < 8; s++)
		io[s] = (struct kvf_media_io){ .stripe = s, .seg = 0,
					       .page = 2, .n_pages = 2,
					       .buf = (char *)buf + s * 2 * PAGE };
	t0 = now_ns(m);
	cr_assert(eq(int, kvf_media_read(m, io, 8), KVF_OK));
	t_eight = now_ns(m) - t0;
	ratio = (double)t_one / (double)t_eight;
	cr_assert(ratio > 7.5 && ratio < 8.5,
		  "8-channel read speed-up %.2f (one %llu ns, eight %llu ns)",
		  ratio, (unsigned long long)t_one,
		  (unsigned long long)t_eight);
	kvf_free(buf);
	kvf_media_free(m);
}

Test(ftl_time, sync_issue_measures_latency)
{
	struct kvf_media *m = open_channels(1, KVF_FLASH_ISSUE_SYNC);
	struct kvf_flash_timing t = tlc();
	void *buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN, PAGE);
	struct kvf_flash_stats s;
	/* a transfer moves the page and its 224-byte spare area */
	uint64_t x = ((PAGE + 224) * 1000u + 799) / 800;

	memset(buf, 1, PAGE);
	for (uint32_t i = 0; i < 10; i++)
		cr_assert(eq(int, kvf_media_write(m, &(struct kvf_media_io){
				.stripe = 0, .seg = i, .page = 0, .n_pages = 1,
				.buf = buf }, 1), KVF_OK));
	cr_assert(eq(int, kvf_flash_stats(m, &s), KVF_OK));
	cr_assert(eq(u64, s.latency_requests, 10));
	/* nothing queues: every write costs one transfer and one program */
	cr_assert(eq(u64, s.latency_max_ns, x + t.prog_ns));
	cr_assert(eq(u64, s.latency_sum_ns, 10 * (x + t.prog_ns)));
	cr_assert(le(u64, s.latency_p50_ns, x + t.prog_ns));
	cr_assert(ge(dbl, (double)s.latency_p50_ns,
		     0.9 * (double)(x + t.prog_ns)));
	kvf_free(buf);
	kvf_media_free(m);
}
