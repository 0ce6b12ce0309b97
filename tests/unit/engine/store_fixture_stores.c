/*
 * store_fixture_stores.c - the fixture's stores beside the filled one
 * (store_fixture.h): "a store to damage" for tests that damage a closed
 * store's files and reopen it (the store, reads that check every byte,
 * finding a token group's page in the stripe files by its content;
 * gathered from test_store_corrupt.c), and "the inspected store" of
 * test_inspect.c and test_verify.c.
 *
 * Pages are found by content: every token's bytes are a known function of
 * (sequence, layer, kind, token, head) (fx_byte), so the page of a token
 * group is the one holding exactly those rows.  Its address follows from
 * engine/base/segfmt.h: stripe file s holds segment k of the stripe at
 * k * segment_size, the global segment id is k * n_stripes + s, and a
 * segment's summary follows its data pages.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store_fixture.h"
#include "testutil.h"

void fx_row(unsigned char *dst, uint64_t seq, uint32_t layer, int kind,
	    uint64_t t, uint32_t h)
{
	for (uint32_t i = 0; i < ROW; i++)
		dst[i] = fx_byte(seq, layer, kind, t, h, i);
}

/* fx_make_damage_store - sequences 1 and 2, synced and closed */
void fx_make_damage_store(const char *path)
{
	kvf_options o = fx_filled_opts();
	kvf_store *st = NULL;

	OK(kvf_open(path, &o, &st));
	OK(kvf_seq_create(st, 1));
	OK(fx_append(st, 1, 1, 0, 0, DMG_LEN0));
	OK(fx_append(st, 1, 1, 1, 0, DMG_LEN1));
	OK(fx_append_x(st, 1, 0, 0, DMG_XLEN));
	OK(kvf_seq_create(st, 2));
	OK(fx_append(st, 2, 2, 0, 0, 3 * G));
	OK(kvf_close(st));
}

kvf_store *fx_reopen(const char *path)
{
	kvf_options o = fx_filled_opts();
	kvf_store *st = NULL;

	OK(kvf_open(path, &o, &st));
	return st;
}

kvf_status fx_read_check(kvf_store *st, uint64_t seq, uint32_t layer,
			 uint32_t h, uint64_t t0, uint64_t t1, int what)
{
	return fx_read_check_of(st, seq, seq, layer, h, t0, t1, what);
}

kvf_status fx_read_check_of(kvf_store *st, uint64_t seq, uint64_t data_seq,
			    uint32_t layer, uint32_t h, uint64_t t0,
			    uint64_t t1, int what)
{
	size_t n = (size_t)(t1 - t0);
	unsigned char *k = malloc(n * ROW + 1), *v = malloc(n * ROW + 1);
	unsigned char want[ROW];
	kvf_status rc;

	rc = kvf_read(st, seq, layer, h, t0, t1, (what & 1) ? k : NULL,
		      (what & 2) ? v : NULL);
	for (size_t i = 0; rc == KVF_OK && i < n; i++) {
		int good;

		fx_row(want, data_seq, layer, 0, t0 + i, h);
		good = !(what & 1) || memcmp(k + i * ROW, want, ROW) == 0;
		cr_assert(good,
			  "seq %" PRIu64 " layer %u head %u K token %zu wrong",
			  seq, layer, h, (size_t)t0 + i);
		fx_row(want, data_seq, layer, 1, t0 + i, h);
		good = !(what & 2) || memcmp(v + i * ROW, want, ROW) == 0;
		cr_assert(good,
			  "seq %" PRIu64 " layer %u head %u V token %zu wrong",
			  seq, layer, h, (size_t)t0 + i);
	}
	free(k);
	free(v);
	return rc;
}

void fx_check_tokens(kvf_store *st, uint64_t seq, uint64_t data_seq,
		     uint32_t layer, uint64_t t0, uint64_t t1)
{
	for (uint32_t h = 0; h < KVH; h++)
		OK(fx_read_check_of(st, seq, data_seq, layer, h, t0, t1, 3));
}

kvf_status fx_read_x_check(kvf_store *st, uint64_t seq, uint32_t layer,
			   uint64_t t0, uint64_t t1)
{
	size_t n = (size_t)(t1 - t0);
	unsigned char *x = malloc(n * QH * ROW + 1), want[ROW];
	kvf_status rc = kvf_read_x(st, seq, layer, t0, t1, x);

	for (size_t i = 0; rc == KVF_OK && i < n; i++)
		for (uint32_t q = 0; q < QH; q++) {
			fx_row(want, seq, layer, 2, t0 + i, q);
			cr_assert(memcmp(x + (i * QH + q) * ROW, want, ROW) ==
					  0,
				  "X token %zu slice %u wrong", (size_t)t0 + i,
				  q);
		}
	free(x);
	return rc;
}

const char *fx_stripe_path(const char *path, uint32_t s)
{
	static char leaf[32];

	snprintf(leaf, sizeof(leaf), "stripe-%03u.kvf", s);
	return tmp_path(path, leaf);
}

unsigned char *fx_read_stripe(const char *path, uint32_t s, size_t *len)
{
	int fd = open(fx_stripe_path(path, s), O_RDONLY);
	struct stat sb;
	unsigned char *buf;

	cr_assert(fd >= 0, "open %s", fx_stripe_path(path, s));
	cr_assert(eq(int, fstat(fd, &sb), 0));
	buf = malloc((size_t)sb.st_size + 1);
	cr_assert(eq(sz, (size_t)pread(fd, buf, (size_t)sb.st_size, 0),
		     (size_t)sb.st_size));
	close(fd);
	*len = (size_t)sb.st_size;
	return buf;
}

struct fx_spot fx_find_group(const char *path, uint64_t seq, uint32_t layer,
			     int kind, uint32_t h, uint64_t g, uint32_t n)
{
	unsigned char *want = calloc(1, FX_PAGE);
	struct fx_spot found = { 0 };
	int hits = 0;

	for (uint32_t i = 0; i < n; i++)
		fx_row(want + (size_t)i * ROW, seq, layer, kind, g * G + i, h);
	for (uint32_t s = 0; s < FX_STRIPES; s++) {
		size_t len;
		unsigned char *b = fx_read_stripe(path, s, &len);

		for (size_t off = 0; off + FX_PAGE <= len; off += FX_PAGE)
			if (memcmp(b + off, want, (size_t)n * ROW) == 0) {
				hits++;
				found.stripe = s;
				found.seg = off / FX_SEG;
				found.page = (uint32_t)(off % FX_SEG / FX_PAGE);
				found.segid =
					(uint32_t)(found.seg * FX_STRIPES + s);
			}
		free(b);
	}
	free(want);
	cr_assert(eq(int, hits, 1), "group %" PRIu64 " found %d times", g,
		  hits);
	return found;
}

void fx_flip(const char *path, uint32_t stripe, uint64_t off, uint32_t n)
{
	int fd = open(fx_stripe_path(path, stripe), O_RDWR);
	unsigned char b[64];

	cr_assert(fd >= 0 && n <= sizeof(b));
	cr_assert(eq(int, (int)pread(fd, b, n, (off_t)off), (int)n));
	for (uint32_t i = 0; i < n; i++)
		b[i] ^= 0x5a;
	cr_assert(eq(int, (int)pwrite(fd, b, n, (off_t)off), (int)n));
	close(fd);
}

uint64_t fx_spot_offset(const struct fx_spot *p)
{
	return p->seg * FX_SEG + (uint64_t)p->page * FX_PAGE;
}

uint32_t fx_summary_page(const char *path, const struct fx_spot *p,
			 struct seg_summary_header *h)
{
	size_t len;
	unsigned char *b = fx_read_stripe(path, p->stripe, &len);
	uint32_t at = UINT32_MAX;

	for (uint32_t pg = 1; pg < FX_SEG / FX_PAGE; pg++) {
		const unsigned char *q =
			b + p->seg * FX_SEG + (size_t)pg * FX_PAGE;

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

void fx_expect_corrupt(kvf_status rc, const struct fx_spot *p)
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

/* ---- the inspected store ------------------------------------------------- */

kvf_options fx_inspect_opts(void)
{
	return fx_options_for(NULL, FX_SEG, 8ull << 20, FX_STRIPES);
}

kvf_store *fx_open_inspected(const char *path, int read_only)
{
	kvf_options o = fx_inspect_opts();
	kvf_store *st = NULL;

	if (read_only) { /* a zero model: everything as stored */
		kvf_options_init(&o, NULL);
		o.read_only = 1;
	}
	cr_assert(eq(int, kvf_open(path, &o, &st), KVF_OK), "%s",
		  kvf_last_error());
	return st;
}

kvf_store *fx_make_inspected(const char *path)
{
	kvf_store *st = fx_open_inspected(path, 0);

	cr_assert(eq(int, kvf_seq_create(st, 1), KVF_OK));
	for (uint32_t l = 0; l < LAYERS; l++)
		OK(fx_append(st, 1, 1, l, 0, 100));
	OK(fx_append_x(st, 1, 1, 0, 40));
	cr_assert(eq(int, kvf_seq_fork(st, 1, 2, 64), KVF_OK), "%s",
		  kvf_last_error());
	for (uint32_t l = 0; l < LAYERS; l++)
		OK(fx_append(st, 2, 2, l, 64, 36));
	cr_assert(eq(int, kvf_seq_create(st, 7), KVF_OK));
	cr_assert(eq(int, kvf_sync(st), KVF_OK), "%s", kvf_last_error());
	return st;
}
