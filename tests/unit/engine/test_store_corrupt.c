/*
 * test_store_corrupt.c - damaged stores: bytes flipped in a data page, a
 * segment summary and the store header, and a catalog from another store.
 *
 * The store is closed, the damage is done with plain pread/pwrite on its
 * files (stripe files are written with O_DIRECT, but a closed store's
 * files are ordinary files), and the store is reopened.  Pages are found
 * by content: every token's bytes are a known function of (sequence,
 * layer, kind, token, head), so the page of a token group is the one
 * holding exactly those rows.  Its address follows from engine/segfmt.h:
 * stripe file s holds segment k of the stripe at k * segment_size, the
 * global segment id is k * n_stripes + s, and a segment's summary follows
 * its data pages.
 *
 * What must hold: a damaged page is never returned as data (KVF_ECORRUPT,
 * naming segment and page), everything else still reads; a damaged summary
 * of a segment older than the last sync makes its pages KVF_ECORRUPT; a
 * damaged summary of a segment newer than the last sync (a write a crash
 * cut short) is dropped silently; a damaged header is refused with the
 * file named (bad magic or checksum KVF_ECORRUPT, newer or older
 * format KVF_EVERSION); another store's catalog is KVF_ECORRUPT.  A
 * segment record ("G") whose length does not match its n_runs, or with a
 * run outside its segment, is refused at open with KVF_ECORRUPT naming the
 * record.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "api/alloc.h"
#include "engine/catalog.h"
#include "engine/meta.h"
#include "engine/segfmt.h"
#include "engine/store_state.h"
#include "kvflash.h"
#include "testutil.h"

#define LAYERS 2
#define QH 4
#define KVH 2
#define DIM 64 /* f16: 128 bytes a token of a head, G = 32 */
#define ROW (DIM * 2)
#define G 32
#define PAGE 4096
#define SEG (64 * 1024) /* 16 pages: 15 data pages and a summary */
#define STRIPES 2
#define SEGS_PER_STRIPE 32
#define LEN0 (8 * G + 5) /* layer 0 of sequence 1: a partial tail group */
#define LEN1 (6 * G)     /* layer 1: whole groups */
#define XLEN 40

static char *dir, *path;

#define OK(call) cr_assert(eq(int, (call), KVF_OK), "%s", kvf_last_error())

static void setup(void)
{
	dir = tmpdir_make("corrupt");
	cr_assert_not_null(dir);
	path = strdup(tmp_path(dir, "s"));
}

static void teardown(void)
{
	free(path);
	tmpdir_remove(dir);
}

TestSuite(store_corrupt, .init = setup, .fini = teardown, .timeout = 60);

/* ---- values --------------------------------------------------------------- */

static void fill_row(unsigned char *dst, uint64_t seq, uint32_t layer, int kind,
		     uint64_t t, uint32_t h)
{
	uint64_t x = seq * 0x9e3779b97f4a7c15ull + layer * 0x100000001b3ull +
		     (uint64_t)kind * 0x3c6ef372fe94f82bull + h * 977u + t;

	for (uint32_t j = 0; j < ROW; j += 8) {
		uint64_t z = x + j * 0x2545f4914f6cdd1dull;

		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		z ^= z >> 31;
		memcpy(dst + j, &z, 8);
	}
}

static kvf_options opts(void)
{
	kvf_model m = { LAYERS, QH, KVH, DIM, KVF_DTYPE_F16 };
	kvf_options o;

	kvf_options_init(&o, &m);
	o.segment_size = SEG;
	o.capacity_bytes = (uint64_t)STRIPES * SEGS_PER_STRIPE * SEG;
	o.n_stripes = STRIPES;
	o.n_threads = 1;
	return o;
}

static void append(kvf_store *st, uint64_t seq, uint32_t layer, uint64_t t0,
		   uint32_t n)
{
	unsigned char *k = malloc((size_t)n * KVH * ROW + 1);
	unsigned char *v = malloc((size_t)n * KVH * ROW + 1);

	for (uint32_t i = 0; i < n; i++)
		for (uint32_t h = 0; h < KVH; h++) {
			fill_row(k + ((size_t)i * KVH + h) * ROW, seq, layer, 0,
				 t0 + i, h);
			fill_row(v + ((size_t)i * KVH + h) * ROW, seq, layer, 1,
				 t0 + i, h);
		}
	OK(kvf_append(st, seq, layer, n, k, v));
	free(k);
	free(v);
}

static void append_x(kvf_store *st, uint64_t seq, uint32_t layer, uint64_t t0,
		     uint32_t n)
{
	unsigned char *x = malloc((size_t)n * QH * ROW + 1);

	for (uint32_t i = 0; i < n; i++)
		for (uint32_t q = 0; q < QH; q++)
			fill_row(x + ((size_t)i * QH + q) * ROW, seq, layer, 2,
				 t0 + i, q);
	OK(kvf_append_x(st, seq, layer, n, x));
	free(x);
}

/* make_store - sequences 1 and 2, synced and closed */
static void make_store(void)
{
	kvf_options o = opts();
	kvf_store *st = NULL;

	OK(kvf_open(path, &o, &st));
	OK(kvf_seq_create(st, 1));
	append(st, 1, 0, 0, LEN0);
	append(st, 1, 1, 0, LEN1);
	append_x(st, 1, 0, 0, XLEN);
	OK(kvf_seq_create(st, 2));
	append(st, 2, 0, 0, 3 * G);
	OK(kvf_close(st));
}

static kvf_store *reopen(void)
{
	kvf_options o = opts();
	kvf_store *st = NULL;

	OK(kvf_open(path, &o, &st));
	return st;
}

/*
 * read_ok - kvf_read of [t0, t1) of one head gives the right K and V (for
 * what & 1, what & 2); nonzero status otherwise
 */
static kvf_status read_ok(kvf_store *st, uint64_t seq, uint32_t layer,
			  uint32_t h, uint64_t t0, uint64_t t1, int what)
{
	size_t n = (size_t)(t1 - t0);
	unsigned char *k = malloc(n * ROW + 1), *v = malloc(n * ROW + 1);
	unsigned char want[ROW];
	kvf_status rc;

	rc = kvf_read(st, seq, layer, h, t0, t1, (what & 1) ? k : NULL,
		      (what & 2) ? v : NULL);
	for (size_t i = 0; rc == KVF_OK && i < n; i++) {
		int good;

		fill_row(want, seq, layer, 0, t0 + i, h);
		good = !(what & 1) || memcmp(k + i * ROW, want, ROW) == 0;
		cr_assert(good,
			  "seq %" PRIu64 " layer %u head %u K token %zu wrong",
			  seq, layer, h, (size_t)t0 + i);
		fill_row(want, seq, layer, 1, t0 + i, h);
		good = !(what & 2) || memcmp(v + i * ROW, want, ROW) == 0;
		cr_assert(good,
			  "seq %" PRIu64 " layer %u head %u V token %zu wrong",
			  seq, layer, h, (size_t)t0 + i);
	}
	free(k);
	free(v);
	return rc;
}

static kvf_status read_x_ok(kvf_store *st, uint64_t seq, uint32_t layer,
			    uint64_t t0, uint64_t t1)
{
	size_t n = (size_t)(t1 - t0);
	unsigned char *x = malloc(n * QH * ROW + 1), want[ROW];
	kvf_status rc = kvf_read_x(st, seq, layer, t0, t1, x);

	for (size_t i = 0; rc == KVF_OK && i < n; i++)
		for (uint32_t q = 0; q < QH; q++) {
			fill_row(want, seq, layer, 2, t0 + i, q);
			cr_assert(memcmp(x + (i * QH + q) * ROW, want, ROW) ==
					  0,
				  "X token %zu slice %u wrong", (size_t)t0 + i,
				  q);
		}
	free(x);
	return rc;
}

/* ---- finding and damaging pages ------------------------------------------ */

struct spot {
	uint32_t stripe; /* stripe file */
	uint64_t seg;    /* segment of the stripe */
	uint32_t page;   /* page in the segment */
	uint32_t segid;  /* global segment id */
};

static const char *stripe_path(uint32_t s)
{
	static char leaf[32];

	snprintf(leaf, sizeof(leaf), "stripe-%03u.kvf", s);
	return tmp_path(path, leaf);
}

static unsigned char *read_stripe(uint32_t s, size_t *len)
{
	int fd = open(stripe_path(s), O_RDONLY);
	struct stat sb;
	unsigned char *buf;

	cr_assert(fd >= 0, "open %s", stripe_path(s));
	cr_assert(eq(int, fstat(fd, &sb), 0));
	buf = malloc((size_t)sb.st_size + 1);
	cr_assert(eq(sz, (size_t)pread(fd, buf, (size_t)sb.st_size, 0),
		     (size_t)sb.st_size));
	close(fd);
	*len = (size_t)sb.st_size;
	return buf;
}

/*
 * find_group - the one page holding tokens [g*G, g*G + n) of (seq, layer,
 * kind, head) from its first byte; fails unless there is exactly one
 */
static struct spot find_group(uint64_t seq, uint32_t layer, int kind,
			      uint32_t h, uint64_t g, uint32_t n)
{
	unsigned char *want = calloc(1, PAGE);
	struct spot found = { 0 };
	int hits = 0;

	for (uint32_t i = 0; i < n; i++)
		fill_row(want + (size_t)i * ROW, seq, layer, kind, g * G + i,
			 h);
	for (uint32_t s = 0; s < STRIPES; s++) {
		size_t len;
		unsigned char *b = read_stripe(s, &len);

		for (size_t off = 0; off + PAGE <= len; off += PAGE)
			if (memcmp(b + off, want, (size_t)n * ROW) == 0) {
				hits++;
				found.stripe = s;
				found.seg = off / SEG;
				found.page = (uint32_t)(off % SEG / PAGE);
				found.segid =
					(uint32_t)(found.seg * STRIPES + s);
			}
		free(b);
	}
	free(want);
	cr_assert(eq(int, hits, 1), "group %" PRIu64 " found %d times", g,
		  hits);
	return found;
}

static void flip(uint32_t stripe, uint64_t off, uint32_t n)
{
	int fd = open(stripe_path(stripe), O_RDWR);
	unsigned char b[64];

	cr_assert(fd >= 0 && n <= sizeof(b));
	cr_assert(eq(int, (int)pread(fd, b, n, (off_t)off), (int)n));
	for (uint32_t i = 0; i < n; i++)
		b[i] ^= 0x5a;
	cr_assert(eq(int, (int)pwrite(fd, b, n, (off_t)off), (int)n));
	close(fd);
}

static uint64_t offset_of(const struct spot *p)
{
	return p->seg * SEG + (uint64_t)p->page * PAGE;
}

/* summary_of - the summary header of the segment at p (its data pages
 * first, then the summary: look for the magic after them) */
static uint32_t summary_page(const struct spot *p, struct seg_summary_header *h)
{
	size_t len;
	unsigned char *b = read_stripe(p->stripe, &len);
	uint32_t at = UINT32_MAX;

	for (uint32_t pg = 1; pg < SEG / PAGE; pg++) {
		const unsigned char *q = b + p->seg * SEG + (size_t)pg * PAGE;

		memcpy(h, q, sizeof(*h));
		if (memcmp(h->magic, SEG_MAGIC, 8) == 0 &&
		    h->segid == p->segid && h->n_data_pages == pg) {
			at = pg;
			break;
		}
	}
	free(b);
	cr_assert(at != UINT32_MAX, "no summary found for segment %u",
		  p->segid);
	return at;
}

static void expect_corrupt(kvf_status rc, const struct spot *p)
{
	char seg[32], page[32];

	snprintf(seg, sizeof(seg), "segment %u ", p->segid);
	snprintf(page, sizeof(page), "page %u", p->page);
	cr_assert(eq(int, rc, KVF_ECORRUPT), "%s", kvf_last_error());
	cr_assert(strstr(kvf_last_error(), seg) &&
			  strstr(kvf_last_error(), page),
		  "message does not name %s and %s: %s", seg, page,
		  kvf_last_error());
}

/* ---- a damaged data page ------------------------------------------------- */

Test(store_corrupt, data_page)
{
	struct spot p;
	kvf_store *st;
	unsigned char *k = malloc((LEN0 + G) * ROW),
		      *v = malloc((LEN0 + G) * ROW);
	uint64_t n;

	make_store();
	/* K of head 1, group 3, layer 0 of sequence 1: byte 100 of token 5 */
	p = find_group(1, 0, 0, 1, 3, G);
	flip(p.stripe, offset_of(&p) + 5 * ROW + 100, 3);
	st = reopen();

	expect_corrupt(kvf_read(st, 1, 0, 1, 3 * G, 4 * G, k, v), &p);
	expect_corrupt(kvf_read(st, 1, 0, 1, 3 * G + 5, 3 * G + 6, k, NULL),
		       &p);
	cr_assert(strstr(kvf_last_error(), "checksum mismatch") != NULL, "%s",
		  kvf_last_error());
	/* a range across it: nothing of the damaged page is handed out */
	memset(k, 0xee, 4 * G * ROW);
	expect_corrupt(kvf_read(st, 1, 0, 1, 2 * G, 5 * G, k, v), &p);
	for (size_t i = (size_t)G * ROW; i < 2 * (size_t)G * ROW; i++)
		cr_assert(eq(u8, k[i], 0xee),
			  "byte %zu of the damaged page returned",
			  i - (size_t)G * ROW);
	/* everything else reads */
	OK(read_ok(st, 1, 0, 1, 0, 3 * G, 3));
	OK(read_ok(st, 1, 0, 1, 4 * G, LEN0, 3));
	OK(read_ok(st, 1, 0, 1, 3 * G, 4 * G, 2)); /* V of the same group */
	OK(read_ok(st, 1, 0, 0, 0, LEN0, 3));
	OK(read_ok(st, 1, 1, 1, 0, LEN1, 3));
	OK(read_ok(st, 2, 0, 1, 0, 3 * G, 3));
	OK(read_x_ok(st, 1, 0, 0, XLEN));
	/* the sequence still grows, and the damage stays reported */
	append(st, 1, 0, LEN0, G);
	OK(kvf_seq_len(st, 1, 0, &n));
	cr_assert(eq(u64, n, LEN0 + G));
	OK(read_ok(st, 1, 0, 1, LEN0 - 3, LEN0 + G, 3));
	expect_corrupt(kvf_read(st, 1, 0, 1, 3 * G, 4 * G, k, v), &p);
	OK(kvf_close(st));
	st = reopen();
	expect_corrupt(kvf_read(st, 1, 0, 1, 0, LEN0 + G, k, NULL), &p);
	OK(read_ok(st, 1, 0, 1, LEN0 - 3, LEN0 + G, 3));
	OK(kvf_close(st));
	free(k);
	free(v);
}

/* the partial tail group's page: reads of it, and appends that must load
 * it, are refused; nothing changes */
Test(store_corrupt, tail_page)
{
	struct spot p;
	kvf_store *st;
	unsigned char k[G * KVH * ROW], v[G * KVH * ROW];
	uint64_t n;

	make_store();
	p = find_group(1, 0, 1, 0, 8, 5); /* V of head 0: 5 tokens */
	flip(p.stripe, offset_of(&p) + 2 * ROW + 7, 1);
	st = reopen();
	expect_corrupt(kvf_read(st, 1, 0, 0, 8 * G, LEN0, NULL, v), &p);
	OK(read_ok(st, 1, 0, 0, 8 * G, LEN0, 1)); /* K of the tail */
	OK(read_ok(st, 1, 0, 0, 0, 8 * G, 3));
	memset(k, 1, sizeof(k));
	memset(v, 2, sizeof(v));
	expect_corrupt(kvf_append(st, 1, 0, 1, k, v), &p);
	OK(kvf_seq_len(st, 1, 0, &n));
	cr_assert(eq(u64, n, LEN0), "a refused append changed the length");
	expect_corrupt(kvf_read(st, 1, 0, 0, 8 * G, LEN0, NULL, v), &p);
	/* other layers and sequences go on */
	append(st, 1, 1, LEN1, 3);
	append(st, 2, 0, 3 * G, 2);
	OK(read_ok(st, 1, 1, 0, 0, LEN1 + 3, 3));
	OK(read_ok(st, 2, 0, 1, 0, 3 * G + 2, 3));
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

Test(store_corrupt, summary_before_sync)
{
	struct seg_summary_header h;
	struct seg_summary_entry *e;
	struct spot p, q;
	kvf_stats stats = { .struct_size = sizeof(stats) };
	kvf_store *st;
	uint32_t sp, n_damaged = 0;
	size_t len;
	unsigned char *b;

	make_store();
	/* the segment holding group 2 of K head 0, layer 0, sequence 1 */
	p = find_group(1, 0, 0, 0, 2, G);
	sp = summary_page(&p, &h);
	b = read_stripe(p.stripe, &len);
	e = malloc(h.n_data_pages * sizeof(*e));
	memcpy(e, b + p.seg * SEG + (size_t)sp * PAGE + sizeof(h),
	       h.n_data_pages * sizeof(*e));
	free(b);
	/* one byte of an entry: the summary's checksum no longer matches */
	q = p;
	q.page = sp;
	flip(q.stripe, offset_of(&q) + sizeof(h) + 9, 1);

	st = reopen();
	OK(kvf_stats_get(st, &stats));
	cr_assert(eq(u32, stats.segments_corrupt, 1));
	for (uint32_t i = 0; i < h.n_data_pages; i++) {
		struct entry_key k = key_of(&e[i]);
		uint64_t t0 = (uint64_t)k.group * G, t1 = t0 + G;
		uint64_t len_of = k.seq == 2 ? 3 * G : k.layer ? LEN1 : LEN0;
		unsigned char *buf = malloc((size_t)G * QH * ROW);
		kvf_status rc;

		if (t1 > len_of || k.kind > 1)
			continue; /* partial groups and X: checked below */
		rc = kvf_read(st, k.seq, k.layer, k.head, t0, t1,
			      k.kind == 0 ? buf : NULL,
			      k.kind == 1 ? buf : NULL);
		q.page = i;
		expect_corrupt(rc, &q);
		n_damaged++;
		free(buf);
	}
	cr_assert(n_damaged > 0);
	/* pages in other segments still read: find one group outside */
	for (uint64_t g = 0; g < 8; g++) {
		struct spot o = find_group(1, 0, 0, 1, g, G);

		if (o.segid != p.segid)
			OK(read_ok(st, 1, 0, 1, g * G, (g + 1) * G, 1));
		else
			expect_corrupt(read_ok(st, 1, 0, 1, g * G, (g + 1) * G,
					       1),
				       &o);
	}
	OK(kvf_close(st));
	free(e);
}

/* committed_after_sync - segid has a catalog record ("G", engine/meta.h)
 * newer than the last sync's ("N") */
static void committed_after_sync(uint32_t segid)
{
	struct catalog *c = NULL;
	unsigned char key[5], tag = META_TAG_SYNC;
	struct meta_seg rec;
	struct meta_sync ms;
	void *val;
	size_t vlen;

	OK(catalog_open(tmp_path(path, "meta"), 0, 1, CATALOG_FSYNC, &c));
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
Test(store_corrupt, summary_after_sync)
{
	struct seg_summary_header h;
	struct spot p, q;
	kvf_options o = opts();
	kvf_stats stats = { .struct_size = sizeof(stats) };
	kvf_store *st;
	uint64_t n;

	make_store();
	st = reopen();
	/* whole segments past the synced length, then a crash: a handle
	 * that goes fatal closes without syncing */
	append(st, 2, 1, 0, 16 * G);
	cr_assert(eq(int, kvf_sync(st), KVF_OK));
	append(st, 2, 1, 16 * G, 16 * G);
	/* a fork commits the parent's full segments before its own record */
	OK(kvf_seq_fork(st, 2, 3, 0));
	catalog_fail_commits(st->cat, 1000);
	cr_assert(eq(int, kvf_sync(st), KVF_EFATAL));
	cr_assert(eq(int, kvf_close(st), KVF_EFATAL));
	p = find_group(2, 1, 0, 0, 20, G);
	summary_page(&p, &h);
	committed_after_sync(p.segid);
	q = p;
	q.page = h.n_data_pages;
	flip(q.stripe, offset_of(&q) + 20, 4);
	OK(kvf_open(path, &o, &st));
	OK(kvf_stats_get(st, &stats));
	cr_assert(eq(u32, stats.segments_corrupt, 0));
	OK(kvf_seq_len(st, 2, 1, &n));
	cr_assert(eq(u64, n, 16 * G));
	OK(read_ok(st, 2, 1, 1, 0, 16 * G, 3));
	/* and the space is reused */
	append(st, 2, 1, 16 * G, 16 * G);
	OK(read_ok(st, 2, 1, 0, 0, 32 * G, 3));
	OK(kvf_close(st));
}

/* ---- the store header ---------------------------------------------------- */

static void header_rw(struct store_header *h, int write)
{
	int fd = open(tmp_path(path, STORE_HEADER_FILE),
		      write ? O_WRONLY : O_RDONLY);

	cr_assert(fd >= 0);
	if (write)
		cr_assert(eq(int, (int)pwrite(fd, h, sizeof(*h), 0),
			     (int)sizeof(*h)));
	else
		cr_assert(eq(int, (int)pread(fd, h, sizeof(*h), 0),
			     (int)sizeof(*h)));
	close(fd);
}

/* header_sum - the checksum h needs (the store's header_checksum) */
static uint64_t header_sum(const struct store_header *h)
{
	return XXH3_64bits(h, offsetof(struct store_header, checksum));
}

/* refused - kvf_open (read-write and read-only) fails with code and a
 * message naming the header file and containing what */
static void refused(kvf_status code, const char *what)
{
	kvf_options o = opts();
	kvf_store *st = (kvf_store *)&o;

	for (int ro = 0; ro < 2; ro++) {
		o.read_only = (uint32_t)ro;
		cr_assert(eq(int, kvf_open(path, ro ? &o : NULL, &st), code),
			  "%s", kvf_last_error());
		cr_assert_null(st);
		cr_assert(strstr(kvf_last_error(), what) != NULL &&
				  strstr(kvf_last_error(), "/s/KVFLASH") !=
					  NULL,
			  "\"%s\" lacks \"%s\" or the file", kvf_last_error(),
			  what);
	}
}

Test(store_corrupt, header)
{
	struct store_header good, bad;
	kvf_store *st;

	make_store();
	header_rw(&good, 0);

	bad = good;
	bad.magic[0] ^= 0x20;
	header_rw(&bad, 1);
	refused(KVF_ECORRUPT, "without the KVFLASH magic");

	bad = good;
	bad.n_layers ^= 0x100; /* the checksum no longer matches */
	header_rw(&bad, 1);
	refused(KVF_ECORRUPT, "is damaged: checksum");

	bad = good;
	bad.checksum ^= 1;
	header_rw(&bad, 1);
	refused(KVF_ECORRUPT, "is damaged: checksum");

	/* a version field damaged in a header of our layout is damage */
	bad = good;
	bad.format_version = STORE_FORMAT_VERSION + 1;
	header_rw(&bad, 1);
	refused(KVF_ECORRUPT, "is damaged: checksum");

	/* a newer format's header checks out by its own checksum */
	bad = good;
	bad.format_version = STORE_FORMAT_VERSION + 1;
	bad.checksum = header_sum(&bad);
	header_rw(&bad, 1);
	{
		char msg[80];

		snprintf(msg, sizeof(msg),
			 "has format version %u; this library reads up to %u",
			 STORE_FORMAT_VERSION + 1, STORE_FORMAT_VERSION);
		refused(KVF_EVERSION, msg);
	}

	/* an older format: refused by version once the header checks out */
	bad = good;
	bad.format_version = STORE_FORMAT_VERSION - 1;
	bad.checksum = header_sum(&bad);
	header_rw(&bad, 1);
	{
		char msg[96];

		snprintf(msg, sizeof(msg),
			 "has format version %u, which this library no longer reads (it reads %u)",
			 STORE_FORMAT_VERSION - 1, STORE_FORMAT_VERSION);
		refused(KVF_EVERSION, msg);
	}

	bad = good;
	bad.header_size = 64;
	header_rw(&bad, 1);
	refused(KVF_ECORRUPT, "is damaged");

	cr_assert(eq(int, truncate(tmp_path(path, STORE_HEADER_FILE), 100), 0));
	refused(KVF_ECORRUPT, "is damaged: 100 bytes");

	/* put back, it opens and reads */
	header_rw(&good, 1);
	st = reopen();
	OK(read_ok(st, 1, 0, 1, 0, LEN0, 3));
	OK(kvf_close(st));
}

/* ---- the catalog ----------------------------------------------------------- */

static int rm_one(const char *p, const struct stat *sb, int flag,
		  struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static void remove_tree(const char *p)
{
	cr_assert(eq(int, nftw(p, rm_one, 8, FTW_DEPTH | FTW_PHYS), 0));
}

static void move_dir(const char *from, const char *to)
{
	cr_assert(eq(int, rename(from, to), 0), "rename %s %s", from, to);
}

Test(store_corrupt, catalog_of_another_store)
{
	kvf_options o = opts();
	char *other = strdup(tmp_path(dir, "other"));
	char *meta = strdup(tmp_path(path, "meta"));
	char *saved = strdup(tmp_path(dir, "meta-saved"));
	kvf_store *st = NULL;

	make_store();
	/* same options, so only the catalog tells them apart */
	OK(kvf_open(other, &o, &st));
	OK(kvf_seq_create(st, 1));
	OK(kvf_close(st));
	move_dir(meta, saved);
	move_dir(tmp_path(other, "meta"), meta);
	st = (kvf_store *)&o;
	cr_assert(eq(int, kvf_open(path, &o, &st), KVF_ECORRUPT), "%s",
		  kvf_last_error());
	cr_assert_null(st);
	cr_assert(strstr(kvf_last_error(), "meta belongs to another store") !=
			  NULL,
		  "%s", kvf_last_error());

	/* a catalog with no configuration at all */
	{
		struct catalog *c = NULL;

		remove_tree(meta);
		OK(catalog_open(meta, 1, 0, CATALOG_FSYNC, &c));
		catalog_close(c);
	}
	cr_assert(eq(int, kvf_open(path, &o, &st), KVF_ECORRUPT), "%s",
		  kvf_last_error());
	cr_assert(strstr(kvf_last_error(),
			 "meta has no configuration record") != NULL,
		  "%s", kvf_last_error());

	/* its own catalog back: fine */
	remove_tree(meta);
	move_dir(saved, meta);
	st = reopen();
	OK(read_ok(st, 1, 0, 1, 0, LEN0, 3));
	OK(kvf_close(st));
	free(other);
	free(meta);
	free(saved);
}

/* ---- segment records ------------------------------------------------------ */

/* seg_record_get - the "G" record of segid (kvf_malloc'd), store closed */
static void *seg_record_get(uint32_t segid, size_t *vlen)
{
	struct catalog *c = NULL;
	unsigned char key[5];
	void *val;

	OK(catalog_open(tmp_path(path, "meta"), 0, 1, CATALOG_FSYNC, &c));
	meta_key_u32(key, META_TAG_SEG, segid);
	OK(catalog_get(c, key, sizeof(key), &val, vlen));
	catalog_close(c);
	return val;
}

/* seg_record_put - replace the "G" record of segid, store closed */
static void seg_record_put(uint32_t segid, const void *val, size_t vlen)
{
	struct catalog *c = NULL;
	struct catalog_batch *b = catalog_batch_new();
	unsigned char key[5];

	cr_assert_not_null(b);
	OK(catalog_open(tmp_path(path, "meta"), 0, 0, CATALOG_FSYNC, &c));
	meta_key_u32(key, META_TAG_SEG, segid);
	catalog_batch_put(b, key, sizeof(key), val, vlen);
	OK(catalog_commit(c, b, 1));
	catalog_batch_free(b);
	catalog_close(c);
}

/* A "G" record whose length is not sizeof(meta_seg) + n_runs runs: open
 * (read-write and read-only) fails with KVF_ECORRUPT naming the record
 * and its length, and leaves no handle; put back, the store opens. */
Test(store_corrupt, segment_record_length_mismatch)
{
	struct spot p;
	struct meta_seg rec;
	unsigned char *good, *bad;
	size_t len;
	kvf_store *st;

	make_store();
	p = find_group(1, 0, 0, 1, 3, G);
	good = seg_record_get(p.segid, &len);
	memcpy(&rec, good, sizeof(rec));
	cr_assert(eq(sz, len, sizeof(rec) + rec.n_runs * sizeof(struct meta_run)));
	bad = malloc(len + 1);
	for (int k = 0; k < 3; k++) {
		struct meta_seg r = rec;
		size_t bad_len = len;
		char msg[80];

		memcpy(bad, good, len);
		if (k == 0)
			r.n_runs++; /* one run more than the record holds */
		else if (k == 1)
			bad[bad_len++] = 0; /* a byte more than its runs */
		else
			r.n_runs = UINT32_MAX; /* far more runs than bytes */
		memcpy(bad, &r, sizeof(r));
		seg_record_put(p.segid, bad, bad_len);
		snprintf(msg, sizeof(msg),
			 "catalog record segment %u is malformed (%zu bytes)",
			 p.segid, bad_len);
		for (int ro = 0; ro < 2; ro++) {
			kvf_options o = opts();

			o.read_only = (uint32_t)ro;
			st = (kvf_store *)&o;
			cr_assert(eq(int, kvf_open(path, &o, &st), KVF_ECORRUPT),
				  "case %d: %s", k, kvf_last_error());
			cr_assert_null(st);
			cr_assert(strstr(kvf_last_error(), msg) != NULL,
				  "case %d: \"%s\" lacks \"%s\"", k,
				  kvf_last_error(), msg);
		}
	}
	seg_record_put(p.segid, good, len);
	st = reopen();
	OK(read_ok(st, 1, 0, 1, 0, LEN0, 3));
	OK(kvf_close(st));
	free(bad);
	kvf_free(good);
}

/*
 * A "G" record of the right length whose last run is malformed: it
 * reaches past the segment's data pages, is empty, has stride 0, names
 * groups that wrap past 2^32, or an unknown namespace.  Open (read-write
 * and read-only) fails with KVF_ECORRUPT naming the record and the run;
 * put back, the store opens and reads.
 */
Test(store_corrupt, segment_record_bad_run)
{
	struct spot p;
	struct meta_seg rec;
	struct meta_run last;
	unsigned char *good, *bad;
	size_t len, at;
	kvf_store *st;

	make_store();
	p = find_group(1, 0, 0, 1, 3, G);
	good = seg_record_get(p.segid, &len);
	memcpy(&rec, good, sizeof(rec));
	cr_assert(gt(u32, rec.n_runs, 0));
	at = sizeof(rec) + (rec.n_runs - 1) * sizeof(last);
	memcpy(&last, good + at, sizeof(last));
	/* the runs are in page order: the last one ends at the last page */
	cr_assert(eq(u32, last.page + last.n, rec.n_data_pages));
	bad = malloc(len);
	for (int k = 0; k < 5; k++) {
		struct meta_run r = last;
		char msg[96];

		if (k == 0)
			r.n += 3; /* past the data pages */
		else if (k == 1)
			r.n = 0;
		else if (k == 2)
			r.stride = 0;
		else if (k == 3)
			r.group = UINT32_MAX; /* the run's second group wraps */
		else
			r.ns = 7;
		cr_assert(ge(u16, last.n, 2));
		memcpy(bad, good, len);
		memcpy(bad + at, &r, sizeof(r));
		seg_record_put(p.segid, bad, len);
		snprintf(msg, sizeof(msg),
			 "catalog record segment %u is malformed: run %u names",
			 p.segid, rec.n_runs - 1);
		for (int ro = 0; ro < 2; ro++) {
			kvf_options o = opts();

			o.read_only = (uint32_t)ro;
			st = (kvf_store *)&o;
			cr_assert(eq(int, kvf_open(path, &o, &st), KVF_ECORRUPT),
				  "case %d: %s", k, kvf_last_error());
			cr_assert_null(st);
			cr_assert(strstr(kvf_last_error(), msg) != NULL,
				  "case %d: \"%s\" lacks \"%s\"", k,
				  kvf_last_error(), msg);
		}
	}
	seg_record_put(p.segid, good, len);
	st = reopen();
	OK(read_ok(st, 1, 0, 1, 0, LEN0, 3));
	OK(kvf_close(st));
	free(bad);
	kvf_free(good);
}
