/*
 * test_media_common.c - the media contract, run against the memory and the
 * file backend alike: round trips at many sizes and offsets, striping,
 * zeros for unwritten and trimmed pages, and every refusal of the checked
 * front (status, message, nothing changed).
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stdlib.h>
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "flash_fixture.h"
#include "ftl/media.h"
#include "testutil.h"

#define PAGE 4096u
#define PPS 16u   /* pages per segment */
#define SEGS 8u   /* segments per stripe */

struct fixture {
	char *dir;
	char *paths[4];
	struct kvf_media *m;
};

static void open_media(struct fixture *f, kvf_media_kind kind,
		       uint32_t n_stripes)
{
	struct kvf_media_config cfg = {
		.kind = kind,
		.geo = { .n_stripes = n_stripes, .page_size = PAGE,
			 .pages_per_segment = PPS, .segs_per_stripe = SEGS },
	};

	memset(f, 0, sizeof(*f));
	if (kind == KVF_MEDIA_FILE) {
		f->dir = tmpdir_make("media");
		cr_assert_not_null(f->dir);
		for (uint32_t i = 0; i < n_stripes; i++)
			f->paths[i] = strdup(tmp_path(f->dir, i == 0 ? "s0" :
						      i == 1 ? "s1" :
						      i == 2 ? "s2" : "s3"));
		cfg.paths = (const char *const *)f->paths;
	}
	cr_assert(eq(int, kvf_media_open(&cfg, &f->m), KVF_OK), "%s",
		  kvf_last_error());
}

static void close_media(struct fixture *f)
{
	kvf_media_free(f->m);
	for (int i = 0; i < 4; i++)
		free(f->paths[i]);
	tmpdir_remove(f->dir);
}

static void *page_buf(uint32_t n_pages)
{
	void *p = kvf_aligned_alloc(KVF_MEDIA_ALIGN, (size_t)n_pages * PAGE);

	cr_assert_not_null(p);
	return p;
}

/* round_trips - write random runs at many (stripe, seg, page, n) and read
 * every one back, then the whole media against a shadow copy */
static void round_trips(kvf_media_kind kind)
{
	struct fixture f;
	uint64_t rng = rng_seed("media round trips");
	size_t total = (size_t)4 * SEGS * PPS * PAGE;
	unsigned char *shadow = calloc(1, total);
	unsigned char *buf = page_buf(PPS), *back = page_buf(PPS);

	open_media(&f, kind, 4);
	for (int iter = 0; iter < 300; iter++) {
		struct kvf_media_io io;
		size_t off;

		io.stripe = (uint32_t)rng_below(&rng, 4);
		io.seg = rng_below(&rng, SEGS);
		io.page = (uint32_t)rng_below(&rng, PPS);
		io.n_pages = 1 + (uint32_t)rng_below(&rng, PPS - io.page);
		io.buf = buf;
		rng_fill(&rng, buf, (size_t)io.n_pages * PAGE);
		cr_assert(eq(int, kvf_media_write(f.m, &io, 1), KVF_OK), "%s",
			  kvf_last_error());
		off = (((size_t)io.stripe * SEGS + io.seg) * PPS + io.page) * PAGE;
		memcpy(shadow + off, buf, (size_t)io.n_pages * PAGE);
		io.buf = back;
		cr_assert(eq(int, kvf_media_read(f.m, &io, 1), KVF_OK));
		cr_assert(eq(int, memcmp(back, buf, (size_t)io.n_pages * PAGE), 0),
			  "iteration %d differs", iter);
	}
	for (uint32_t s = 0; s < 4; s++)
		for (uint64_t g = 0; g < SEGS; g++) {
			size_t off = ((size_t)s * SEGS + g) * PPS * PAGE;

			cr_assert(eq(int, kvf_media_read_pages(f.m, s, g, 0, PPS, back),
				     KVF_OK));
			cr_assert(eq(int, memcmp(back, shadow + off, (size_t)PPS * PAGE), 0),
				  "stripe %u segment %llu differs", s,
				  (unsigned long long)g);
		}
	kvf_free(buf);
	kvf_free(back);
	free(shadow);
	close_media(&f);
}

Test(media_mem, round_trips) { round_trips(KVF_MEDIA_MEMORY); }
Test(media_file, round_trips) { round_trips(KVF_MEDIA_FILE); }

/* batch - one call with many requests over all stripes */
static void batch(kvf_media_kind kind)
{
	struct fixture f;
	struct kvf_media_io io[4 * SEGS];
	unsigned char *bufs = page_buf(4 * SEGS * PPS);
	unsigned char *back = page_buf(4 * SEGS * PPS);

	open_media(&f, kind, 4);
	for (uint32_t i = 0; i < 4 * SEGS; i++) {
		memset(bufs + (size_t)i * PPS * PAGE, (int)(i + 1), (size_t)PPS * PAGE);
		io[i] = (struct kvf_media_io){ .stripe = i % 4, .seg = i / 4,
					       .page = 0, .n_pages = PPS,
					       .buf = bufs + (size_t)i * PPS * PAGE };
	}
	cr_assert(eq(int, kvf_media_write(f.m, io, 4 * SEGS), KVF_OK), "%s",
		  kvf_last_error());
	for (uint32_t i = 0; i < 4 * SEGS; i++)
		io[i].buf = back + (size_t)i * PPS * PAGE;
	cr_assert(eq(int, kvf_media_read(f.m, io, 4 * SEGS), KVF_OK));
	cr_assert(eq(int, memcmp(bufs, back, (size_t)4 * SEGS * PPS * PAGE), 0));
	kvf_free(bufs);
	kvf_free(back);
	close_media(&f);
}

Test(media_mem, batch) { batch(KVF_MEDIA_MEMORY); }
Test(media_file, batch) { batch(KVF_MEDIA_FILE); }

/* zeros - unwritten pages and trimmed segments read as zeros; a trim
 * leaves the neighbouring segments alone */
static void zeros(kvf_media_kind kind)
{
	struct fixture f;
	unsigned char *buf = page_buf(PPS), *back = page_buf(PPS);
	struct kvf_media_stats st;

	open_media(&f, kind, 2);
	cr_assert(eq(int, kvf_media_read_pages(f.m, 1, 3, 2, 5, back), KVF_OK));
	for (size_t i = 0; i < (size_t)5 * PAGE; i++)
		cr_assert(eq(u8, back[i], 0));
	memset(buf, 0xab, (size_t)PPS * PAGE);
	cr_assert(eq(int, kvf_media_write_segment(f.m, 1, 3, buf, (size_t)PPS * PAGE), KVF_OK));
	cr_assert(eq(int, kvf_media_write_segment(f.m, 1, 4, buf, (size_t)PPS * PAGE), KVF_OK));
	cr_assert(eq(int, kvf_media_trim_segment(f.m, 1, 3), KVF_OK), "%s",
		  kvf_last_error());
	cr_assert(eq(int, kvf_media_read_pages(f.m, 1, 3, 0, PPS, back), KVF_OK));
	for (size_t i = 0; i < (size_t)PPS * PAGE; i++)
		cr_assert(eq(u8, back[i], 0), "byte %zu of trimmed segment", i);
	cr_assert(eq(int, kvf_media_read_pages(f.m, 1, 4, 0, PPS, back), KVF_OK));
	cr_assert(eq(int, memcmp(back, buf, (size_t)PPS * PAGE), 0));
	kvf_media_stats(f.m, &st);
	cr_assert(eq(u64, st.trims, 1));
	cr_assert(eq(u64, st.bytes_written, 2ull * PPS * PAGE));
	cr_assert(eq(u64, st.host_pages_written, 2ull * PPS));
	kvf_free(buf);
	kvf_free(back);
	close_media(&f);
}

Test(media_mem, zeros_and_trim) { zeros(KVF_MEDIA_MEMORY); }
Test(media_file, zeros_and_trim) { zeros(KVF_MEDIA_FILE); }

static void refusals(kvf_media_kind kind)
{
	struct fixture f;
	unsigned char *buf = page_buf(PPS + 1), *back = page_buf(PPS);
	struct kvf_media_stats before, after;
	struct kvf_media_io io = { .stripe = 0, .seg = 0, .page = 0,
				   .n_pages = 1, .buf = buf };
	struct kvf_media_io bad;

	open_media(&f, kind, 2);
	memset(buf, 0x5a, (size_t)(PPS + 1) * PAGE);
	cr_assert(eq(int, kvf_media_write_segment(f.m, 0, 0, buf, (size_t)PPS * PAGE), KVF_OK));
	kvf_media_stats(f.m, &before);
	memset(buf, 0x11, (size_t)(PPS + 1) * PAGE);

	bad = io, bad.stripe = 2;
	EXPECT(kvf_media_write(f.m, &bad, 1), KVF_ERANGE, "stripe 2 out of range (media has 2)");
	bad = io, bad.seg = SEGS;
	EXPECT(kvf_media_write(f.m, &bad, 1), KVF_ERANGE, "segment 8 out of range");
	bad = io, bad.page = PPS - 1, bad.n_pages = 2;
	EXPECT(kvf_media_write(f.m, &bad, 1), KVF_ERANGE, "past the segment end");
	bad = io, bad.page = PPS;
	EXPECT(kvf_media_read(f.m, &bad, 1), KVF_ERANGE, "past the segment end");
	bad = io, bad.n_pages = 0;
	EXPECT(kvf_media_write(f.m, &bad, 1), KVF_EINVAL, "n_pages is 0");
	bad = io, bad.buf = buf + 512;
	EXPECT(kvf_media_write(f.m, &bad, 1), KVF_EINVAL, "not 4096-byte aligned");
	bad = io, bad.buf = NULL;
	EXPECT(kvf_media_read(f.m, &bad, 1), KVF_EINVAL, "buf is NULL");
	EXPECT(kvf_media_write(f.m, NULL, 1), KVF_EINVAL, "io is NULL");
	EXPECT(kvf_media_write(NULL, &io, 1), KVF_EINVAL, "media is NULL");
	/* a bad request anywhere in a batch refuses the whole batch */
	{
		struct kvf_media_io two[2] = { io, io };

		two[1].seg = 99;
		EXPECT(kvf_media_write(f.m, two, 2), KVF_ERANGE, "request 1: segment 99");
	}
	EXPECT(kvf_media_write_segment(f.m, 0, 0, buf, 100), KVF_EINVAL,
	       "length 100 is not a positive multiple of the page size 4096");
	EXPECT(kvf_media_write_segment(f.m, 0, 0, buf, (size_t)(PPS + 1) * PAGE),
	       KVF_ERANGE, "exceeds the segment size");
	EXPECT(kvf_media_trim_segment(f.m, 0, SEGS), KVF_ERANGE, "segment 8 out of range");
	EXPECT(kvf_media_trim_segment(f.m, 5, 0), KVF_ERANGE, "stripe 5 out of range");

	kvf_media_stats(f.m, &after);
	cr_assert(eq(u64, after.bytes_written, before.bytes_written));
	cr_assert(eq(u64, after.write_ios, before.write_ios));
	cr_assert(eq(u64, after.trims, before.trims));
	cr_assert(eq(int, kvf_media_read_pages(f.m, 0, 0, 0, PPS, back), KVF_OK));
	for (size_t i = 0; i < (size_t)PPS * PAGE; i++)
		cr_assert(eq(u8, back[i], 0x5a), "byte %zu changed", i);

	kvf_media_close(f.m);
	EXPECT(kvf_media_write(f.m, &io, 1), KVF_ECLOSED, "media is closed");
	EXPECT(kvf_media_read(f.m, &io, 1), KVF_ECLOSED, "media is closed");
	EXPECT(kvf_media_trim_segment(f.m, 0, 0), KVF_ECLOSED, "media is closed");
	EXPECT(kvf_media_sync(f.m), KVF_ECLOSED, "media is closed");
	kvf_media_close(f.m); /* twice is harmless */
	kvf_free(buf);
	kvf_free(back);
	close_media(&f);
}

Test(media_mem, refusals) { refusals(KVF_MEDIA_MEMORY); }
Test(media_file, refusals) { refusals(KVF_MEDIA_FILE); }

Test(media_open, bad_geometry)
{
	struct kvf_media_config cfg = {
		.kind = KVF_MEDIA_MEMORY,
		.geo = { .n_stripes = 1, .page_size = PAGE,
			 .pages_per_segment = PPS, .segs_per_stripe = SEGS },
	};
	struct kvf_media *m = (struct kvf_media *)&cfg; /* must become NULL */

	cfg.geo.n_stripes = 0;
	EXPECT(kvf_media_open(&cfg, &m), KVF_EINVAL, "n_stripes 0 out of range");
	cr_assert_null(m);
	cfg.geo.n_stripes = KVF_MEDIA_MAX_STRIPES + 1;
	EXPECT(kvf_media_open(&cfg, &m), KVF_EINVAL, "n_stripes 65 out of range");
	cfg.geo.n_stripes = 1;
	cfg.geo.page_size = 3000;
	EXPECT(kvf_media_open(&cfg, &m), KVF_EINVAL, "page_size 3000 is not a power of two");
	cfg.geo.page_size = PAGE;
	cfg.geo.pages_per_segment = 0;
	EXPECT(kvf_media_open(&cfg, &m), KVF_EINVAL, "pages_per_segment is 0");
	cfg.geo.pages_per_segment = PPS;
	cfg.geo.segs_per_stripe = 0;
	EXPECT(kvf_media_open(&cfg, &m), KVF_EINVAL, "segs_per_stripe is 0");
	cfg.geo.segs_per_stripe = UINT64_MAX / 2;
	EXPECT(kvf_media_open(&cfg, &m), KVF_EINVAL, "overflow a stripe");
	cfg.geo.segs_per_stripe = SEGS;
	cfg.kind = (kvf_media_kind)42;
	EXPECT(kvf_media_open(&cfg, &m), KVF_EINVAL, "unknown media kind 42");
	EXPECT(kvf_media_open(NULL, &m), KVF_EINVAL, "cfg is NULL");
	EXPECT(kvf_media_open(&cfg, NULL), KVF_EINVAL, "out is NULL");
}

Test(media_mem, out_of_memory)
{
	struct kvf_media_config cfg = {
		.kind = KVF_MEDIA_MEMORY,
		.geo = { .n_stripes = 1, .page_size = PAGE,
			 .pages_per_segment = PPS, .segs_per_stripe = SEGS },
	};
	struct kvf_media *m = NULL;
	unsigned char *buf = page_buf(1), *back = page_buf(1);

	kvf_alloc_fail_at(1, 0);
	EXPECT(kvf_media_open(&cfg, &m), KVF_ENOMEM, "out of memory");
	cr_assert_null(m);
	kvf_alloc_fail_at(2, 0);
	EXPECT(kvf_media_open(&cfg, &m), KVF_ENOMEM, "table of 8 segments");
	cr_assert(eq(int, kvf_media_open(&cfg, &m), KVF_OK));
	memset(buf, 7, PAGE);
	kvf_alloc_fail_at(1, 0);
	EXPECT(kvf_media_write_segment(m, 0, 2, buf, PAGE), KVF_ENOMEM,
	       "cannot allocate segment 2 of stripe 0");
	cr_assert(eq(int, kvf_media_read_pages(m, 0, 2, 0, 1, back), KVF_OK));
	cr_assert(eq(u8, back[0], 0), "a failed write left data behind");
	kvf_media_free(m);
	kvf_free(buf);
	kvf_free(back);
}
