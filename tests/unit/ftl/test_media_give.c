/*
 * test_media_give.c - kvf_media_give_segment, and the memory backend's
 * spare buffers that came with it.
 *
 * The memory backend takes the given buffer as the segment itself (no
 * copy) and hands the caller another whole-segment buffer: a spare (a
 * trimmed segment's bytes), the segment's old bytes when it is given again
 * without a trim, or a new allocation.  Pages past len read as zeros
 * whatever the given buffer held there.  The file backend writes len bytes
 * and leaves *buf alone.  Every refusal gives a precise status and a
 * message naming kvf_media_give_segment, and changes nothing: not *buf,
 * not the bytes it points to, not the media's contents or counters.
 *
 * The spares: a first kvf_media_write to a segment may reuse a trimmed
 * segment's bytes, and must still read zeros in every page it did not
 * write.
 *
 * Ownership is checked by the sanitizers (the suite runs under ASan and
 * LSan in CI): every buffer handed back is freed here with kvf_free, every
 * buffer given is freed by kvf_media_free.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "ftl/media.h"
#include "testutil.h"

#define PAGE 4096u
#define PPS 8u     /* pages per segment: 32 KiB segments */
#define SEGS 8u    /* segments per stripe */
#define STRIPES 2u /* 16 segments: the memory backend keeps 4 spares */
#define SEG_BYTES ((size_t)PPS * PAGE)

#define OK(call) cr_assert(eq(int, (call), KVF_OK), "%s", kvf_last_error())

/* EXPECT - the call's status, and a message naming the call and `text` */
#define EXPECT(call, status, text)                                            \
	do {                                                                  \
		kvf_clear_error();                                            \
		cr_assert(eq(int, (call), (status)), "%s", kvf_last_error()); \
		cr_assert(ne(ptr,                                             \
			     strstr(kvf_last_error(),                         \
				    "kvf_media_give_segment"),                \
			     NULL),                                           \
			  "message '%s' does not name the call",              \
			  kvf_last_error());                                  \
		cr_assert(ne(ptr, strstr(kvf_last_error(), (text)), NULL),    \
			  "message '%s' lacks '%s'", kvf_last_error(),        \
			  (text));                                            \
	} while (0)

static char *dir; /* file backend: the test's directory, else NULL */
static char *paths[STRIPES];

static void teardown(void)
{
	for (uint32_t i = 0; i < STRIPES; i++) {
		free(paths[i]);
		paths[i] = NULL;
	}
	if (dir)
		tmpdir_remove(dir);
	dir = NULL;
}

TestSuite(give, .fini = teardown, .timeout = 30);

static struct kvf_media_config config(kvf_media_kind kind)
{
	struct kvf_media_config cfg = {
		.kind = kind,
		.geo = { .n_stripes = STRIPES,
			 .page_size = PAGE,
			 .pages_per_segment = PPS,
			 .segs_per_stripe = SEGS },
	};

	if (kind == KVF_MEDIA_FILE) {
		if (dir == NULL) {
			dir = tmpdir_make("give");
			cr_assert_not_null(dir);
			paths[0] = strdup(tmp_path(dir, "s0"));
			paths[1] = strdup(tmp_path(dir, "s1"));
		}
		cfg.paths = (const char *const *)paths;
	}
	return cfg;
}

static struct kvf_media *open_media(kvf_media_kind kind, int read_only)
{
	struct kvf_media_config cfg = config(kind);
	struct kvf_media *m = NULL;

	cfg.read_only = (uint32_t)read_only;
	OK(kvf_media_open(&cfg, &m));
	return m;
}

/* seg_buf - a whole-segment buffer as kvf_media_give_segment wants it */
static unsigned char *seg_buf(void)
{
	unsigned char *p = kvf_aligned_alloc(KVF_MEDIA_ALIGN, SEG_BYTES);

	cr_assert_not_null(p);
	return p;
}

/* fill - pages [0, n) of p with pattern `tag` (no zero byte), the rest of
 * the segment with 0xee */
static void fill(unsigned char *p, uint32_t n, unsigned tag)
{
	for (size_t i = 0; i < (size_t)n * PAGE; i++)
		p[i] = (unsigned char)(1 + (tag * 131u + i * 7u + (i >> 12)) %
						   255u);
	memset(p + (size_t)n * PAGE, 0xee, SEG_BYTES - (size_t)n * PAGE);
}

/* pattern_ok - page `page` holds page `page` of fill(.., tag) */
static int pattern_ok(const unsigned char *got, uint32_t page, unsigned tag)
{
	for (size_t j = 0; j < PAGE; j++) {
		size_t i = (size_t)page * PAGE + j;

		if (got[j] !=
		    (unsigned char)(1 +
				    (tag * 131u + i * 7u + (i >> 12)) % 255u))
			return 0;
	}
	return 1;
}

static int all_zero(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != 0)
			return 0;
	return 1;
}

/*
 * expect_pages - (stripe, seg) read through kvf_media_read_pages: the pages
 * in `mask` (bit pg for page pg) hold fill(.., tag), the others zeros
 */
static void expect_pages(struct kvf_media *m, uint32_t stripe, uint64_t seg,
			 uint32_t mask, unsigned tag)
{
	unsigned char *back = seg_buf();

	memset(back, 0xcd, SEG_BYTES);
	OK(kvf_media_read_pages(m, stripe, seg, 0, PPS, back));
	for (uint32_t pg = 0; pg < PPS; pg++) {
		const unsigned char *b = back + (size_t)pg * PAGE;

		if (mask & (1u << pg))
			cr_assert(pattern_ok(b, pg, tag),
				  "stripe %u segment %llu page %u: not what was written",
				  stripe, (unsigned long long)seg, pg);
		else
			cr_assert(all_zero(b, PAGE),
				  "stripe %u segment %llu page %u: not zeros",
				  stripe, (unsigned long long)seg, pg);
	}
	kvf_free(back);
}

/* expect_segment - pages [0, n) hold fill(.., tag), the rest zeros */
static void expect_segment(struct kvf_media *m, uint32_t stripe, uint64_t seg,
			   uint32_t n, unsigned tag)
{
	expect_pages(m, stripe, seg, (uint32_t)((1ull << n) - 1), tag);
}

/* write_pages - pages [page, page + n) of (stripe, seg) from the same
 * pages of src, with kvf_media_write */
static void write_pages(struct kvf_media *m, uint32_t stripe, uint64_t seg,
			uint32_t page, uint32_t n, const unsigned char *src)
{
	struct kvf_media_io io = { .stripe = stripe,
				   .seg = seg,
				   .page = page,
				   .n_pages = n,
				   .buf = (void *)(src + (size_t)page * PAGE) };

	OK(kvf_media_write(m, &io, 1));
}

static struct kvf_media_stats stats(struct kvf_media *m)
{
	struct kvf_media_stats s;

	kvf_media_stats(m, &s);
	return s;
}

/* ---- the memory backend takes the buffer -------------------------------- */

Test(give, memory_takes_the_buffer)
{
	struct kvf_media *m = open_media(KVF_MEDIA_MEMORY, 0);
	unsigned char *given = seg_buf(), *p = given;
	struct kvf_media_stats s;

	fill(given, 5, 1); /* 5 pages given, 3 pages of 0xee past len */
	OK(kvf_media_give_segment(m, 1, 3, &p, 5 * PAGE));
	cr_assert_not_null(p, "no buffer handed back");
	cr_assert(ne(ptr, p, given), "the given buffer came back");
	cr_assert(eq(u64, (uintptr_t)p % KVF_MEDIA_ALIGN, 0),
		  "handed back %p, not aligned", (void *)p);

	/* the written pages, and zeros past len despite the 0xee */
	expect_segment(m, 1, 3, 5, 1);
	/* in place: the media's bytes are the given buffer itself */
	for (uint32_t pg = 0; pg < PPS; pg++) {
		const unsigned char *q = kvf_media_map(m, 1, 3, pg);

		cr_assert(eq(ptr, (void *)q, given + (size_t)pg * PAGE),
			  "page %u not mapped from the given buffer", pg);
		if (pg < 5)
			cr_assert(pattern_ok(q, pg, 1), "mapped page %u", pg);
		else
			cr_assert(all_zero(q, PAGE), "mapped page %u", pg);
	}
	/* the neighbours were not touched */
	cr_assert_null(kvf_media_map(m, 1, 2, 0));
	cr_assert_null(kvf_media_map(m, 1, 4, 0));
	cr_assert_null(kvf_media_map(m, 0, 3, 0));
	expect_segment(m, 0, 3, 0, 0);

	s = stats(m);
	cr_assert(eq(u64, s.bytes_written, 5ull * PAGE));
	cr_assert(eq(u64, s.write_ios, 1));
	cr_assert(eq(u64, s.host_pages_written, 5));

	/* what came back is the caller's, a whole segment: writing all of
	 * it changes nothing on the media */
	memset(p, 0x99, SEG_BYTES);
	expect_segment(m, 1, 3, 5, 1);
	kvf_free(p);
	kvf_media_free(m); /* frees `given` */
}

/* a whole segment (len = segment size) and a single page */
Test(give, memory_whole_segment_and_one_page)
{
	struct kvf_media *m = open_media(KVF_MEDIA_MEMORY, 0);
	unsigned char *a = seg_buf(), *b = seg_buf(), *pa = a, *pb = b;

	fill(a, PPS, 2);
	fill(b, 1, 3);
	OK(kvf_media_give_segment(m, 0, SEGS - 1, &pa, SEG_BYTES));
	OK(kvf_media_give_segment(m, 1, 0, &pb, PAGE));
	cr_assert(pa != NULL && pa != a && pb != NULL && pb != b && pa != pb);
	expect_segment(m, 0, SEGS - 1, PPS, 2);
	expect_segment(m, 1, 0, 1, 3);
	cr_assert(eq(u64, stats(m).bytes_written, SEG_BYTES + PAGE));
	cr_assert(eq(u64, stats(m).write_ios, 2));
	kvf_free(pa);
	kvf_free(pb);
	kvf_media_free(m);
}

/* given again without a trim: the caller gets the segment's old bytes */
Test(give, memory_again_hands_back_old_bytes)
{
	struct kvf_media *m = open_media(KVF_MEDIA_MEMORY, 0);
	unsigned char *first = seg_buf(), *p = first, *second;

	fill(first, 4, 4);
	OK(kvf_media_give_segment(m, 0, 2, &p, 4 * PAGE));
	second = p;
	fill(second, 6, 5);
	OK(kvf_media_give_segment(m, 0, 2, &p, 6 * PAGE));
	cr_assert(eq(ptr, p, first),
		  "giving segment 0/2 again handed back %p, not its old bytes %p",
		  (void *)p, (void *)first);
	expect_segment(m, 0, 2, 6, 5);
	cr_assert(eq(ptr, (void *)kvf_media_map(m, 0, 2, 0), second));
	cr_assert(eq(u64, stats(m).bytes_written, 10ull * PAGE));
	cr_assert(eq(u64, stats(m).write_ios, 2));
	cr_assert(eq(u64, stats(m).trims, 0));

	/* the old bytes are the caller's now: it may give them again */
	fill(p, 2, 6);
	OK(kvf_media_give_segment(m, 1, 1, &p, 2 * PAGE));
	cr_assert(p != NULL && p != first && p != second);
	expect_segment(m, 1, 1, 2, 6);
	expect_segment(m, 0, 2, 6, 5);
	kvf_free(p);
	kvf_media_free(m); /* frees `first` and `second` */
}

/* trim, then give: zeros in between; the trimmed bytes come back as the
 * spare, and their stale pages do not leak into the new segment */
Test(give, memory_trim_then_give)
{
	struct kvf_media *m = open_media(KVF_MEDIA_MEMORY, 0);
	unsigned char *first = seg_buf(), *p = first, *q;

	fill(first, PPS, 7);
	OK(kvf_media_give_segment(m, 1, 5, &p, SEG_BYTES));
	OK(kvf_media_trim_segment(m, 1, 5));
	cr_assert_null(kvf_media_map(m, 1, 5, 0));
	expect_segment(m, 1, 5, 0, 0);

	fill(p, 3, 8);
	q = p;
	OK(kvf_media_give_segment(m, 1, 5, &p, 3 * PAGE));
	cr_assert(eq(ptr, p, first),
		  "the trimmed buffer was not handed back as the spare");
	cr_assert(eq(ptr, (void *)kvf_media_map(m, 1, 5, 0), q));
	expect_segment(m, 1, 5, 3, 8);

	/* and again, to another segment: no spare left, a new buffer */
	fill(p, PPS, 9);
	OK(kvf_media_give_segment(m, 0, 0, &p, SEG_BYTES));
	cr_assert(p != NULL && p != first && p != q);
	expect_segment(m, 0, 0, PPS, 9);
	expect_segment(m, 1, 5, 3, 8);
	cr_assert(eq(u64, stats(m).trims, 1));
	cr_assert(eq(u64, stats(m).write_ios, 3));
	cr_assert(eq(u64, stats(m).bytes_written, 2 * SEG_BYTES + 3 * PAGE));
	kvf_free(p);
	kvf_media_free(m);
}

/* trimmed segments the media keeps as spares, and given buffers, are all
 * freed at close (LSan), however many there are */
Test(give, memory_spares_freed_at_close)
{
	struct kvf_media *m = open_media(KVF_MEDIA_MEMORY, 0);
	unsigned char *p = seg_buf();

	for (uint32_t round = 0; round < 3; round++) {
		for (uint64_t g = 0; g < SEGS; g++) {
			fill(p, 1 + (uint32_t)g % PPS, round);
			OK(kvf_media_give_segment(m, round % STRIPES, g, &p,
						  (1 + g % PPS) * PAGE));
		}
		for (uint64_t g = 0; g < SEGS; g += 2)
			OK(kvf_media_trim_segment(m, round % STRIPES, g));
	}
	for (uint64_t g = 1; g < SEGS; g += 2)
		expect_segment(m, 0, g, 1 + (uint32_t)g % PPS, 2);
	kvf_free(p);
	kvf_media_free(m);
}

/* ---- spares and kvf_media_write ----------------------------------------- */

/*
 * A first write to a segment takes a spare (a trimmed segment's bytes) and
 * must zero every page it does not write: at the start, at the end, in
 * the middle, and with two requests to one new segment in one call.
 */
Test(give, memory_spare_reused_by_write_reads_zeros)
{
	struct kvf_media *m = open_media(KVF_MEDIA_MEMORY, 0);
	unsigned char *full = seg_buf(), *data = seg_buf();
	const unsigned char *old[4];
	struct kvf_media_io two[2];

	/* four whole segments of 0xab, mapped, then trimmed: 4 spares */
	memset(full, 0xab, SEG_BYTES);
	for (uint64_t g = 0; g < 4; g++) {
		OK(kvf_media_write_segment(m, 0, g, full, SEG_BYTES));
		old[g] = kvf_media_map(m, 0, g, 0);
		cr_assert_not_null(old[g]);
	}
	for (uint64_t g = 0; g < 4; g++)
		OK(kvf_media_trim_segment(m, 0, g));
	for (uint64_t g = 0; g < 4; g++)
		expect_segment(m, 0, g, 0, 0);

	/* one first write each: pages 3..4, page 0, the last page */
	fill(data, PPS, 10);
	write_pages(m, 1, 6, 3, 2, data);
	write_pages(m, 1, 7, 0, 1, data);
	write_pages(m, 0, 5, PPS - 1, 1, data);
	expect_pages(m, 1, 6, 0x18, 10);
	expect_pages(m, 1, 7, 0x01, 10);
	expect_pages(m, 0, 5, 1u << (PPS - 1), 10);
	/* two requests to one new segment in one call: pages 1 and 5..6 */
	two[0] = (struct kvf_media_io){ .stripe = 0,
					.seg = 6,
					.page = 1,
					.n_pages = 1,
					.buf = data + PAGE };
	two[1] = (struct kvf_media_io){ .stripe = 0,
					.seg = 6,
					.page = 5,
					.n_pages = 2,
					.buf = data + 5 * PAGE };
	OK(kvf_media_write(m, two, 2));
	expect_pages(m, 0, 6, 0x62, 10);

	/* the four first writes took the four trimmed buffers */
	for (uint32_t i = 0; i < 4; i++) {
		static const uint32_t st[4] = { 1, 1, 0, 0 };
		static const uint64_t sg[4] = { 6, 7, 5, 6 };
		const unsigned char *q = kvf_media_map(m, st[i], sg[i], 0);
		int reused = 0;

		for (int k = 0; k < 4; k++)
			reused |= q == old[k];
		cr_assert(reused,
			  "segment %u/%llu did not reuse a spare: this "
			  "test no longer covers the spare path",
			  st[i], (unsigned long long)sg[i]);
	}
	/* no spare left: a new, zeroed allocation */
	write_pages(m, 1, 0, 2, 1, data);
	expect_pages(m, 1, 0, 0x04, 10);
	kvf_free(full);
	kvf_free(data);
	kvf_media_free(m);
}

/* ---- the file backend: a plain write ------------------------------------ */

Test(give, file_writes_and_leaves_buf)
{
	struct kvf_media *m = open_media(KVF_MEDIA_FILE, 0);
	unsigned char *buf = seg_buf(), *p = buf, *copy = seg_buf();
	struct kvf_media_stats s;

	fill(buf, 5, 11);
	memcpy(copy, buf, SEG_BYTES);
	OK(kvf_media_give_segment(m, 1, 2, &p, 5 * PAGE));
	cr_assert(eq(ptr, p, buf), "the file backend changed *buf");
	cr_assert(eq(int, memcmp(buf, copy, SEG_BYTES), 0),
		  "the file backend changed the given bytes");
	expect_segment(m, 1, 2, 5, 11);
	cr_assert_null(kvf_media_map(m, 1, 2, 0));
	s = stats(m);
	cr_assert(eq(u64, s.bytes_written, 5ull * PAGE));
	cr_assert(eq(u64, s.write_ios, 1));

	/* the caller still owns buf: reuse it for the next segment */
	fill(buf, PPS, 12);
	OK(kvf_media_give_segment(m, 0, SEGS - 1, &p, SEG_BYTES));
	cr_assert(eq(ptr, p, buf));
	expect_segment(m, 0, SEGS - 1, PPS, 12);
	expect_segment(m, 1, 2, 5, 11);
	OK(kvf_media_sync(m));
	kvf_media_free(m);

	/* durable like any write */
	m = open_media(KVF_MEDIA_FILE, 1);
	expect_segment(m, 1, 2, 5, 11);
	expect_segment(m, 0, SEGS - 1, PPS, 12);
	kvf_media_free(m);
	kvf_free(buf);
	kvf_free(copy);
}

/* ---- refusals ------------------------------------------------------------ */

/*
 * refusals - each bad argument: its status and message, and nothing
 * changed: *buf, the bytes it points to (the memory backend zeroes the
 * tail of what it takes: not before every check has passed), the media's
 * counters and segment 0/0, which holds 3 given pages
 */
static void refusals(kvf_media_kind kind)
{
	struct kvf_media *m = open_media(kind, 0);
	unsigned char *buf = seg_buf(), *p = buf, *copy = seg_buf();
	unsigned char *none = NULL;
	struct kvf_media_stats before, after;

	fill(buf, 3, 13);
	OK(kvf_media_give_segment(m, 0, 0, &p, 3 * PAGE));
	if (kind == KVF_MEDIA_FILE)
		cr_assert(eq(ptr, p, buf));
	buf = p;
	fill(buf, 2, 14); /* 2 pages, then 0xee */
	memcpy(copy, buf, SEG_BYTES);
	before = stats(m);

	EXPECT(kvf_media_give_segment(m, 0, 1, NULL, PAGE), KVF_EINVAL,
	       "kvf_media_give_segment: buf is NULL");
	EXPECT(kvf_media_give_segment(m, 0, 1, &none, PAGE), KVF_EINVAL,
	       "buf is NULL");
	cr_assert_null(none);
	EXPECT(kvf_media_give_segment(NULL, 0, 1, &p, PAGE), KVF_EINVAL,
	       "kvf_media_give_segment: media is NULL");
	EXPECT(kvf_media_give_segment(m, 0, 1, &p, 0), KVF_EINVAL,
	       "length 0 is not a positive multiple of the page size 4096");
	EXPECT(kvf_media_give_segment(m, 0, 1, &p, PAGE + 512), KVF_EINVAL,
	       "length 4608 is not a positive multiple of the page size 4096");
	EXPECT(kvf_media_give_segment(m, 0, 1, &p, 100), KVF_EINVAL,
	       "length 100 is not a positive multiple");
	EXPECT(kvf_media_give_segment(m, 0, 1, &p, SEG_BYTES + PAGE),
	       KVF_ERANGE, "length 36864 exceeds the segment size 32768");
	EXPECT(kvf_media_give_segment(m, STRIPES, 1, &p, 2 * PAGE), KVF_ERANGE,
	       "stripe 2 out of range (media has 2)");
	EXPECT(kvf_media_give_segment(m, UINT32_MAX, 1, &p, 2 * PAGE),
	       KVF_ERANGE, "out of range (media has 2)");
	EXPECT(kvf_media_give_segment(m, 1, SEGS, &p, 2 * PAGE), KVF_ERANGE,
	       "segment 8 out of range (stripe holds 8)");
	EXPECT(kvf_media_give_segment(m, 0, UINT64_MAX, &p, 2 * PAGE),
	       KVF_ERANGE, "out of range (stripe holds 8)");
	{
		unsigned char *odd = buf + 512;

		EXPECT(kvf_media_give_segment(m, 0, 1, &odd, PAGE), KVF_EINVAL,
		       "not 4096-byte aligned");
		cr_assert(eq(ptr, odd, buf + 512));
	}

	cr_assert(eq(ptr, p, buf), "a refused call changed *buf");
	cr_assert(eq(int, memcmp(buf, copy, SEG_BYTES), 0),
		  "a refused call changed the caller's bytes");
	after = stats(m);
	cr_assert(eq(u64, after.bytes_written, before.bytes_written));
	cr_assert(eq(u64, after.write_ios, before.write_ios));
	cr_assert(eq(u64, after.trims, before.trims));
	expect_segment(m, 0, 0, 3, 13);
	expect_segment(m, 0, 1, 0, 0);
	expect_segment(m, 1, 1, 0, 0);

	/* closed */
	kvf_media_close(m);
	EXPECT(kvf_media_give_segment(m, 0, 1, &p, 2 * PAGE), KVF_ECLOSED,
	       "kvf_media_give_segment: media is closed");
	cr_assert(eq(ptr, p, buf));
	cr_assert(eq(int, memcmp(buf, copy, SEG_BYTES), 0));
	after = stats(m);
	cr_assert(eq(u64, after.write_ios, before.write_ios));
	kvf_media_free(m);
	kvf_free(buf);
	kvf_free(copy);
}

Test(give, memory_refusals)
{
	refusals(KVF_MEDIA_MEMORY);
}
Test(give, file_refusals)
{
	refusals(KVF_MEDIA_FILE);
}

/* read-only media: refused as kvf_media_write refuses it */
static void read_only(kvf_media_kind kind)
{
	struct kvf_media *m;
	unsigned char *buf = seg_buf(), *p = buf, *copy = seg_buf();
	struct kvf_media_io io = {
		.stripe = 0, .seg = 1, .page = 0, .n_pages = 1, .buf = buf
	};
	kvf_status write_rc;

	if (kind == KVF_MEDIA_FILE) { /* the stripe files must exist */
		m = open_media(kind, 0);
		kvf_media_free(m);
	}
	m = open_media(kind, 1);
	fill(buf, 2, 15);
	memcpy(copy, buf, SEG_BYTES);
	write_rc = kvf_media_write(m, &io, 1);
	cr_assert(eq(int, write_rc, KVF_ENOTSUP), "%s", kvf_last_error());
	EXPECT(kvf_media_give_segment(m, 0, 1, &p, 2 * PAGE), write_rc,
	       "kvf_media_give_segment: the media is open read-only");
	cr_assert(eq(ptr, p, buf));
	cr_assert(eq(int, memcmp(buf, copy, SEG_BYTES), 0));
	cr_assert(eq(u64, stats(m).write_ios, 0));
	cr_assert(eq(u64, stats(m).bytes_written, 0));
	cr_assert_null(kvf_media_map(m, 0, 1, 0));
	expect_segment(m, 0, 1, 0, 0);
	kvf_media_free(m);
	kvf_free(buf);
	kvf_free(copy);
}

Test(give, memory_read_only)
{
	read_only(KVF_MEDIA_MEMORY);
}
Test(give, file_read_only)
{
	read_only(KVF_MEDIA_FILE);
}

/* out of memory for the buffer to hand back: nothing taken, nothing
 * changed; with a spare at hand nothing is allocated */
Test(give, memory_out_of_memory)
{
	struct kvf_media *m = open_media(KVF_MEDIA_MEMORY, 0);
	unsigned char *buf = seg_buf(), *p = buf, *copy = seg_buf();

	fill(buf, 4, 16);
	memcpy(copy, buf, SEG_BYTES);
	kvf_alloc_fail_at(1, 1);
	EXPECT(kvf_media_give_segment(m, 1, 4, &p, 4 * PAGE), KVF_ENOMEM,
	       "cannot allocate a buffer of 32768 bytes");
	kvf_alloc_fail_at(0, 0);
	cr_assert(eq(ptr, p, buf));
	cr_assert(eq(int, memcmp(buf, copy, SEG_BYTES), 0),
		  "a failed give changed the caller's bytes");
	cr_assert(eq(u64, stats(m).write_ios, 0));
	cr_assert_null(kvf_media_map(m, 1, 4, 0));
	expect_segment(m, 1, 4, 0, 0);

	/* a trimmed segment's bytes are a spare: no allocation needed */
	OK(kvf_media_give_segment(m, 1, 4, &p, 4 * PAGE));
	OK(kvf_media_trim_segment(m, 1, 4));
	fill(p, 1, 17);
	kvf_alloc_fail_at(1, 1);
	OK(kvf_media_give_segment(m, 0, 7, &p, PAGE));
	kvf_alloc_fail_at(0, 0);
	cr_assert(eq(ptr, p, buf), "the spare was not handed back");
	expect_segment(m, 0, 7, 1, 17);
	expect_segment(m, 1, 4, 0, 0);
	kvf_free(p);
	kvf_free(copy);
	kvf_media_free(m);
}
