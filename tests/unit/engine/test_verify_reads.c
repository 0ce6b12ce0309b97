/*
 * test_verify_reads.c - kvf_options.verify_reads: which pages a read checks
 * against the hash the index keeps.
 *
 * A memory store reads committed pages in place (kvf_media_map) and, by
 * default (verify_reads = 0), does not check them at read time: the store
 * wrote them itself and hashed them then.  With verify_reads = 1 every
 * page is checked.  The damage is done in the memory media's own bytes:
 * the page of a token group is found through the engine's index
 * (seq_kv_stream, stream_page; engine/lifecycle/store.h), mapped, and one byte
 * flipped.  Then:
 *  - verify_reads = 1: kvf_read (K alone, and K and V together) and
 *    kvf_attend give KVF_ECORRUPT naming segment and page, return nothing
 *    of the damaged page, and every other page still reads;
 *  - verify_reads = 0: the same reads succeed and return the flipped byte
 *    (the documented behaviour).
 * Values other than 0 and 1 are refused by kvf_open, creating nothing.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "api/status.h"
#include "engine/segments/openseg.h"
#include "engine/segments/segtable.h"
#include "engine/sequences/seq.h"
#include "engine/base/store_state.h"
#include "engine/base/key.h"
#include "engine/segments/openseg.h"
#include "engine/sequences/seq_state.h"
#include "engine/sequences/seq_stream.h"
#include "kvflash.h"
#include "store_fixture.h"
#include "testutil.h"

#define VR_LEN0 (3 * G + 5) /* layer 0: three whole groups and a tail */
#define VR_LEN1 (2 * G)     /* layer 1: two whole groups */
/* the byte flipped: token 3, the high byte of its element 3 */
#define FLIP_AT (3 * ROW + 7)
#define FLIP 0x5a


TestSuite(verify_reads, .init = fx_setup_dir, .fini = fx_teardown, .timeout = 30);

/* ---- values -------------------------------------------------------------- */

static unsigned char byte_of(uint32_t layer, int kind, uint64_t t, uint32_t h,
			     uint32_t i)
{
	uint64_t x = (layer * 7919u + (uint64_t)kind * 104729u) ^
		     (t * 131u + h * 31u + i) ^ 0x9e3779b97f4a7c15ull;

	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 32;
	if (i % 2 == 0)
		return (unsigned char)x; /* low byte of an f16 */
	/* high byte: sign, exponent 11..14: |value| in [1/16, 1), so
	 * attention stays finite (FLIP there makes it large, not NaN) */
	return (unsigned char)((x & 0x80) | (0x2c + (x >> 8) % 16));
}

static kvf_options opts(kvf_media_kind media, uint32_t verify)
{
	kvf_model m = { LAYERS, QH, KVH, DIM, KVF_DTYPE_F16 };
	kvf_options o;

	kvf_options_init(&o, &m);
	o.media = media;
	o.segment_size = 64 * 1024; /* 16 pages, 15 of them data */
	o.capacity_bytes = 2ull * 32 * 64 * 1024;
	o.n_stripes = 2;
	o.n_threads = 1;
	o.verify_reads = verify;
	return o;
}

static void append(kvf_store *st, uint32_t layer, uint32_t n)
{
	size_t bytes = (size_t)n * KVH * ROW;
	unsigned char *k = malloc(bytes), *v = malloc(bytes);

	cr_assert(k && v);
	for (uint32_t t = 0; t < n; t++)
		for (uint32_t h = 0; h < KVH; h++)
			for (uint32_t i = 0; i < ROW; i++) {
				size_t o = ((size_t)t * KVH + h) * ROW + i;

				k[o] = byte_of(layer, 0, t, h, i);
				v[o] = byte_of(layer, 1, t, h, i);
			}
	OK(kvf_append(st, 1, layer, n, k, v));
	free(k);
	free(v);
}

/* open_filled - a store at DIR/s with sequence 1 (VR_LEN0 and VR_LEN1 tokens),
 * synced: every whole group is on the media */
static kvf_store *open_filled(kvf_media_kind media, uint32_t verify)
{
	kvf_options o = opts(media, verify);
	kvf_store *st = NULL;

	OK(kvf_open(fx.path, &o, &st));
	OK(kvf_seq_create(st, 1));
	append(st, 0, VR_LEN0);
	append(st, 1, VR_LEN1);
	OK(kvf_sync(st));
	return st;
}

/*
 * rows_ok - buf holds rows [t0, t1) of (layer, kind, head), except that
 * the byte at `flipped` (an offset into buf, or SIZE_MAX for none) is
 * the stored byte XOR FLIP
 */
static void rows_ok(const unsigned char *buf, uint32_t layer, int kind,
		    uint32_t h, uint64_t t0, uint64_t t1, size_t flipped)
{
	for (uint64_t t = t0; t < t1; t++)
		for (uint32_t i = 0; i < ROW; i++) {
			size_t o = (size_t)(t - t0) * ROW + i;
			unsigned char want = byte_of(layer, kind, t, h, i);

			if (o == flipped)
				want ^= FLIP;
			cr_assert(eq(u8, buf[o], want),
				  "layer %u %c head %u token %llu byte %u",
				  layer, kind ? 'V' : 'K', h,
				  (unsigned long long)t, i);
		}
}

/* read_ok - kvf_read of [t0, t1) of (layer, head), K and V, both right */
static void read_ok(kvf_store *st, uint32_t layer, uint32_t h, uint64_t t0,
		    uint64_t t1)
{
	size_t n = (size_t)(t1 - t0) * ROW;
	unsigned char *k = malloc(n), *v = malloc(n);

	OK(kvf_read(st, 1, layer, h, t0, t1, k, v));
	rows_ok(k, layer, 0, h, t0, t1, SIZE_MAX);
	rows_ok(v, layer, 1, h, t0, t1, SIZE_MAX);
	memset(k, 0, n);
	OK(kvf_read(st, 1, layer, h, t0, t1, k, NULL));
	rows_ok(k, layer, 0, h, t0, t1, SIZE_MAX);
	free(k);
	free(v);
}

/* ---- the page of a group, in the memory media ------------------------------ */

struct spot {
	uint32_t segid;   /* global segment id */
	uint32_t page;    /* page in the segment */
	unsigned char *p; /* the media's own bytes of the page */
};

/* spot_of - group g of K head h of layer 0 of sequence 1: committed (not
 * in an open segment or a segment write in flight) and mapped in place */
static struct spot spot_of(kvf_store *st, uint32_t h, uint64_t g)
{
	struct seq *seq = NULL;
	struct stream *s;
	struct page_ref r;
	struct spot at;

	OK(seq_get_locked(st, "test", 1, &seq));
	s = seq_kv_stream(st, seq, 0, KIND_K, h);
	cr_assert(s->n_groups > ((uint32_t)g));
	r = stream_page(s, g);
	cr_assert(ne(u32, r.addr, ADDR_NONE));
	cr_assert_null(openseg_page(st, seq, r.addr),
		       "group %llu is still in the sequence's open segment",
		       (unsigned long long)g);
	seq_unlock_put(st, seq);
	at.segid = addr_seg(r.addr, st->page_bits);
	at.page = addr_page(r.addr, st->page_bits);
	at.p = (unsigned char *)kvf_media_map(st->media,
					      seg_stripe(st, at.segid),
					      seg_in_stripe(st, at.segid),
					      at.page);
	cr_assert_not_null(at.p, "the memory media does not map segment %u",
			   at.segid);
	return at;
}

static void expect_corrupt(kvf_status rc, const struct spot *at)
{
	char seg[32], page[32];

	snprintf(seg, sizeof(seg), "segment %u ", at->segid);
	snprintf(page, sizeof(page), "page %u:", at->page);
	cr_assert(eq(int, rc, KVF_ECORRUPT), "%s", kvf_last_error());
	cr_assert(strstr(kvf_last_error(), seg) &&
			  strstr(kvf_last_error(), page) &&
			  strstr(kvf_last_error(), "checksum mismatch"),
		  "message does not name %s and %s: %s", seg, page,
		  kvf_last_error());
}

/* attend - dense kvf_attend of layer 0 with a fixed query */
static kvf_status attend(kvf_store *st, float *out)
{
	float q[QH * DIM];

	for (uint32_t i = 0; i < QH * DIM; i++)
		q[i] = (float)((int)(i % 13) - 6) / 16.0f;
	return kvf_attend(st, 1, 0, q, out, NULL);
}

/* ---- verify_reads = 1: every page checked -------------------------------- */

Test(verify_reads, memory_store_checks_every_read)
{
	kvf_store *st = open_filled(KVF_MEDIA_MEMORY, 1);
	size_t n = (size_t)VR_LEN0 * ROW;
	unsigned char *k = malloc(n), *v = malloc(n);
	float good[QH * DIM], out[QH * DIM];
	struct spot at;

	cr_assert(eq(u32, st->opts.verify_reads, 1));
	read_ok(st, 0, 0, 0, VR_LEN0);
	OK(attend(st, good));
	at = spot_of(st, 0, 1);
	at.p[FLIP_AT] ^= FLIP;

	/* K alone: the group itself, and a range through it */
	memset(k, 0xcd, n);
	expect_corrupt(kvf_read(st, 1, 0, 0, G, 2 * G, k, NULL), &at);
	for (size_t i = 0; i < (size_t)G * ROW; i++)
		cr_assert(eq(u8, k[i], 0xcd),
			  "byte %zu of the damaged page returned", i);
	memset(k, 0xcd, n);
	expect_corrupt(kvf_read(st, 1, 0, 0, 0, VR_LEN0, k, NULL), &at);
	for (size_t i = (size_t)G * ROW; i < (size_t)2 * G * ROW; i++)
		cr_assert(eq(u8, k[i], 0xcd),
			  "byte %zu of the damaged page returned", i);
	/* K and V in one pass */
	memset(k, 0xcd, n);
	expect_corrupt(kvf_read(st, 1, 0, 0, 0, VR_LEN0, k, v), &at);
	for (size_t i = (size_t)G * ROW; i < (size_t)2 * G * ROW; i++)
		cr_assert(eq(u8, k[i], 0xcd),
			  "byte %zu of the damaged page returned", i);
	/* attention near the data reads the same page */
	expect_corrupt(attend(st, out), &at);

	/* everything else still reads */
	read_ok(st, 0, 0, 0, G);
	read_ok(st, 0, 0, 2 * G, VR_LEN0);
	memset(v, 0, n);
	OK(kvf_read(st, 1, 0, 0, 0, VR_LEN0, NULL, v));
	rows_ok(v, 0, 1, 0, 0, VR_LEN0, SIZE_MAX);
	read_ok(st, 0, 1, 0, VR_LEN0);
	read_ok(st, 1, 0, 0, VR_LEN1);
	read_ok(st, 1, 1, 0, VR_LEN1);

	/* the check is no sticky state: repaired, the page reads again */
	at.p[FLIP_AT] ^= FLIP;
	read_ok(st, 0, 0, 0, VR_LEN0);
	OK(attend(st, out));
	cr_assert(eq(int, memcmp(out, good, sizeof(good)), 0));
	OK(kvf_close(st));
	free(k);
	free(v);
}

/* ---- verify_reads = 0 (the default): in-place pages are not checked ------- */

Test(verify_reads, memory_store_default_reads_in_place)
{
	kvf_store *st;
	size_t n = (size_t)VR_LEN0 * ROW;
	unsigned char *k = malloc(n), *v = malloc(n);
	float good[QH * DIM], out[QH * DIM];
	struct spot at;

	{
		kvf_model m = { LAYERS, QH, KVH, DIM, KVF_DTYPE_F16 };
		kvf_options d;

		kvf_options_init(&d, &m);
		cr_assert(eq(u32, d.verify_reads, 0), "the default is not 0");
	}
	st = open_filled(KVF_MEDIA_MEMORY, 0);
	OK(attend(st, good));
	at = spot_of(st, 0, 1);
	at.p[FLIP_AT] ^= FLIP;

	/* the flipped byte comes back, and only it differs */
	memset(k, 0xcd, n);
	OK(kvf_read(st, 1, 0, 0, G, 2 * G, k, NULL));
	rows_ok(k, 0, 0, 0, G, 2 * G, FLIP_AT);
	memset(k, 0xcd, n);
	OK(kvf_read(st, 1, 0, 0, 0, VR_LEN0, k, NULL));
	rows_ok(k, 0, 0, 0, 0, VR_LEN0, (size_t)G * ROW + FLIP_AT);
	memset(k, 0xcd, n);
	OK(kvf_read(st, 1, 0, 0, 0, VR_LEN0, k, v));
	rows_ok(k, 0, 0, 0, 0, VR_LEN0, (size_t)G * ROW + FLIP_AT);
	rows_ok(v, 0, 1, 0, 0, VR_LEN0, SIZE_MAX);
	OK(attend(st, out));
	cr_assert(ne(int, memcmp(out, good, sizeof(good)), 0),
		  "attention did not use the flipped key");

	at.p[FLIP_AT] ^= FLIP;
	read_ok(st, 0, 0, 0, VR_LEN0);
	OK(attend(st, out));
	cr_assert(eq(int, memcmp(out, good, sizeof(good)), 0));
	OK(kvf_close(st));
	free(k);
	free(v);
}

/* ---- only 0 and 1 -------------------------------------------------------- */

static void refused(const char *path, kvf_options *o, const char *text)
{
	kvf_store *h = (kvf_store *)o; /* must become NULL */

	kvf_clear_error();
	cr_assert(eq(int, kvf_open(path, o, &h), KVF_EINVAL), "%s",
		  kvf_last_error());
	cr_assert(ne(ptr, strstr(kvf_last_error(), text), NULL),
		  "message '%s' lacks '%s'", kvf_last_error(), text);
	cr_assert_null(h, "out not cleared");
}

Test(verify_reads, only_0_and_1)
{
	static const kvf_media_kind kinds[2] = { KVF_MEDIA_MEMORY,
						 KVF_MEDIA_FILE };
	char *fresh = strdup(tmp_path(fx.dir, "fresh"));
	char *empty = strdup(tmp_path(fx.dir, "empty"));
	char *store = strdup(fx.path);
	char before[4096];
	kvf_store *st = NULL;
	kvf_options o;

	cr_assert(eq(int, mkdir(empty, 0755), 0));
	for (int i = 0; i < 2; i++) {
		o = opts(kinds[i], 2);
		refused(fresh, &o, "kvf_open: verify_reads 2 must be 0 or 1");
		cr_assert(fx_path_gone(fresh), "a refused create made %s",
			  fresh);
		refused(empty, &o, "kvf_open: verify_reads 2 must be 0 or 1");
		cr_assert(fx_path_exists(empty), "a refused create removed %s",
			  empty);
		cr_assert(eq(str, (char *)fx_dir_listing(empty), ""),
			  "a refused create left %s", fx_dir_listing(empty));
		o.verify_reads = UINT32_MAX;
		refused(fresh, &o, "verify_reads 4294967295 must be 0 or 1");
		cr_assert(fx_path_gone(fresh));
	}

	/* an existing file store: refused, unchanged, and it opens with
	 * either value (the option is not part of the store) */
	st = open_filled(KVF_MEDIA_FILE, 0);
	OK(kvf_close(st));
	snprintf(before, sizeof(before), "%s", fx_dir_listing(store));
	o = opts(KVF_MEDIA_FILE, 2);
	refused(store, &o, "kvf_open: verify_reads 2 must be 0 or 1");
	cr_assert(eq(str, (char *)fx_dir_listing(store), before));
	for (uint32_t verify = 0; verify < 2; verify++) {
		o = opts(KVF_MEDIA_FILE, verify);
		OK(kvf_open(store, &o, &st));
		cr_assert(eq(u32, st->opts.verify_reads, verify));
		read_ok(st, 0, 1, 0, VR_LEN0);
		read_ok(st, 1, 0, 0, VR_LEN1);
		OK(kvf_close(st));
	}
	free(fresh);
	free(empty);
	free(store);
}
