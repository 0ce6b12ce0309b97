/*
 * make_seeds.c - write the seed corpora of the fuzz targets from the
 * template store (fuzz_common.h): `fuzz_make_seeds OUT` fills
 * OUT/<target>/ with small valid and near-valid inputs, each named for what
 * it is.  tests/fuzz/make-seeds.sh runs it into tests/fuzz/corpus/.
 *
 * The template's store id is random, so seeds that hold it (a header, a
 * configuration record) differ from run to run; the flags the targets
 * take put the right id back where it matters.  The flash_image seeds
 * are edits of that target's own template image, described without it.
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/base/catalog.h"
#include "engine/base/meta.h"
#include "engine/base/segfmt.h"
#include "engine/base/syncmark.h"
#include "fuzz_common.h"

static const char *out_root;

static void put(const char *target, const char *name, const void *a,
		size_t an, const void *b, size_t bn)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", out_root, target);
	if (mkdir(path, 0755) != 0 && errno != EEXIST) {
		perror(path);
		exit(1);
	}
	snprintf(path, sizeof(path), "%s/%s/%s", out_root, target, name);
	f = fopen(path, "wb");
	if (f == NULL || fwrite(a, 1, an, f) != an ||
	    (bn && fwrite(b, 1, bn, f) != bn) || fclose(f) != 0) {
		perror(path);
		exit(1);
	}
}

static void header_seeds(const char *dir)
{
	static const unsigned flags[] = { 0x00, 0x01, 0x03, 0x07, 0x0b, 0x0f };
	unsigned char h[sizeof(struct store_header)], x[sizeof(h)];
	char name[64];
	unsigned char f;

	if (fz_read(dir, STORE_HEADER_FILE, h, sizeof(h), 0) != sizeof(h))
		exit(1);
	for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
		f = (unsigned char)flags[i];
		snprintf(name, sizeof(name), "valid-flags%02x", f);
		put("store_header", name, &f, 1, h, sizeof(h));
	}
	f = 0x03;
	put("store_header", "short-64", &f, 1, h, 64);
	put("store_header", "short-12", &f, 1, h, 12);
	memcpy(x, h, sizeof(x));
	x[8] = 4; /* format version 4 */
	put("store_header", "format4", &f, 1, x, sizeof(x));
	memcpy(x, h, sizeof(x));
	x[8] = 2;
	put("store_header", "format2", &f, 1, x, sizeof(x));
	memcpy(x, h, sizeof(x));
	x[12] = 120; /* header_size */
	put("store_header", "size120", &f, 1, x, sizeof(x));
	memcpy(x, h, sizeof(x));
	x[45] ^= 0x20; /* page_size 4096 -> 12288 */
	f = 0x0b;
	put("store_header", "pagesize-odd-config", &f, 1, x, sizeof(x));
	memcpy(x, h, sizeof(x));
	x[68] = 1; /* media: memory */
	put("store_header", "media-memory-config", &f, 1, x, sizeof(x));
	/* codec headers (format 5, and 6 with its layout version): the
	 * template's group is a plain one, so these reach check_group */
	f = 0x0b;
	memcpy(x, h, sizeof(x));
	x[8] = 5;
	x[96] = 2; /* codec int8 */
	put("store_header", "codec-format5", &f, 1, x, sizeof(x));
	x[8] = 6;
	x[100] = 2; /* codec_layout: K's scales of a byte */
	put("store_header", "codec-format6-layout2", &f, 1, x, sizeof(x));
	f = 0x00;
	memcpy(x, h, sizeof(x));
	x[104] ^= 1; /* reserved byte, checksum left stale */
	put("store_header", "stale-checksum", &f, 1, x, sizeof(x));
}

static void syncmark_seeds(const char *dir)
{
	static unsigned char m[4096 + 64];
	size_t n = fz_read(dir, SYNCMARK_FILE, m, sizeof(m), 0);
	unsigned char f;

	f = 0x00;
	put("syncmark", "valid", &f, 1, m, n);
	f = 0x04;
	put("syncmark", "valid-open", &f, 1, m, n);
	f = 0x0c;
	put("syncmark", "valid-open-rw", &f, 1, m, n);
	f = 0x07;
	put("syncmark", "fixed-open", &f, 1, m, n);
	f = 0x03;
	put("syncmark", "slot0-only", &f, 1, m, 64);
	m[16] ^= 1; /* slot 0's point count, checksum stale */
	f = 0x00;
	put("syncmark", "slot0-stale", &f, 1, m, n);
	f = 0x06;
	put("syncmark", "slot0-stale-open", &f, 1, m, n);
}

static void summary_seeds(const struct fz_template *t, const char *dir)
{
	static unsigned char buf[FZ_SEG];
	static const unsigned flags[] = { 0x00, 0x20, 0x0f, 0x1d, 0x3f };

	for (uint32_t k = 0; k < t->n_sealed && k < 3; k++) {
		uint32_t segid = t->sealed[k], n = t->data_pages[k];
		size_t len = sizeof(struct seg_summary_header) + (size_t)n * 24;
		char stripe[32], name[64];
		unsigned char pre[2];

		snprintf(stripe, sizeof(stripe), "stripe-%03u.kvf", segid % FZ_STRIPES);
		fz_read(dir, stripe, buf, len,
			(uint64_t)(segid / FZ_STRIPES) * FZ_SEG +
				(uint64_t)n * FZ_PAGE);
		for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
			pre[0] = (unsigned char)flags[i];
			pre[1] = (unsigned char)k;
			snprintf(name, sizeof(name), "seg%u-flags%02x", k, pre[0]);
			put("summary", name, pre, 2, buf, len);
		}
		pre[0] = 0x00;
		snprintf(name, sizeof(name), "seg%u-header-only", k);
		put("summary", name, pre, 2, buf, sizeof(struct seg_summary_header));
	}
}

/* catalog seeds: one input per record of the template (put as it is),
 * its deletion, and one with every record */
struct cat_ctx {
	unsigned char *all;
	size_t n_all, cap_all;
	unsigned count;
};

static void record(struct cat_ctx *c, const void *key, size_t klen,
		   const void *val, size_t vlen, unsigned op)
{
	size_t need = c->n_all + 4 + klen + vlen;

	if (need > c->cap_all) {
		c->cap_all = need * 2;
		if ((c->all = realloc(c->all, c->cap_all)) == NULL)
			exit(1);
	}
	c->all[c->n_all++] = (unsigned char)op;
	c->all[c->n_all++] = (unsigned char)klen;
	memcpy(c->all + c->n_all, key, klen);
	c->n_all += klen;
	if (op & 1)
		return;
	c->all[c->n_all++] = (unsigned char)vlen;
	c->all[c->n_all++] = (unsigned char)(vlen >> 8);
	memcpy(c->all + c->n_all, val, vlen);
	c->n_all += vlen;
}

static int visit(void *arg, const void *key, size_t klen, const void *val,
		 size_t vlen)
{
	struct cat_ctx *all = arg, one = { 0 };
	unsigned char f;
	char name[64];

	if (klen > 255 || vlen > 65535)
		return 0;
	record(all, key, klen, val, vlen, 0);
	record(&one, key, klen, val, vlen, 0);
	f = 0x01;
	snprintf(name, sizeof(name), "put-%c-%u", *(const char *)key, all->count);
	put("catalog", name, &f, 1, one.all, one.n_all);
	one.n_all = 0;
	record(&one, key, klen, NULL, 0, 1);
	f = 0x00;
	snprintf(name, sizeof(name), "delete-%c-%u", *(const char *)key, all->count);
	put("catalog", name, &f, 1, one.all, one.n_all);
	free(one.all);
	all->count++;
	return 0;
}

static void catalog_seeds(const char *dir)
{
	static const char tags[] = "CNWSGROPV";
	struct cat_ctx all = { 0 };
	struct catalog *c;
	char path[4096];
	unsigned char f = 0x00, key[9];
	static unsigned char vbar[FZ_LAYERS * FZ_KVH * (8 + FZ_DIM * 4)];
	struct cat_ctx one = { 0 };

	snprintf(path, sizeof(path), "%s/meta", dir);
	if (catalog_open(path, 0, 1, CATALOG_NO_FSYNC, &c) != KVF_OK)
		exit(1);
	for (const char *t = tags; *t; t++)
		catalog_scan(c, t, 1, visit, &all);
	catalog_close(c);
	put("catalog", "nothing", &f, 1, NULL, 0);
	put("catalog", "all-records", &f, 1, all.all, all.n_all);
	/* a means-of-V record for sequence 1 (the template has none) */
	meta_key_u64(key, META_TAG_VBAR, 1);
	for (size_t i = 0; i < sizeof(vbar); i++)
		vbar[i] = (unsigned char)(i % 7);
	record(&one, key, sizeof(key), vbar, sizeof(vbar), 0);
	put("catalog", "put-V-seq1", &f, 1, one.all, one.n_all);
	free(one.all);
	free(all.all);
}

static void kvtool_seeds(void)
{
	static const struct {
		const char *name, *args;
		size_t len;
	} s[] = {
#define ARGS(n, a) { n, a, sizeof(a) - 1 }
		ARGS("info", "info\0@"),
		ARGS("info-json", "info\0--json\0@"),
		ARGS("ls", "ls\0@"),
		ARGS("ls-json", "ls\0@\0--json"),
		ARGS("segments", "segments\0@"),
		ARGS("verify", "verify\0@"),
		ARGS("dump", "dump\0@\0--seq\0" "1\0--layer\0" "0\0--head\0" "0\0--tokens\0" "0:40"),
		ARGS("dump-x", "dump\0--json\0--seq=3\0--layer=1\0--head=1\0--tokens=:\0--kind\0x\0@"),
		ARGS("repair-dry", "repair\0--dry-run\0@"),
		ARGS("help", "help\0dump"),
		ARGS("version", "--version"),
		ARGS("bad-option", "ls\0--bogus\0@"),
#undef ARGS
	};

	for (size_t i = 0; i < sizeof(s) / sizeof(s[0]); i++)
		put("kvtool", s[i].name, s[i].args, s[i].len, NULL, 0);
}

/* flash_image seeds: flags, region, a 4-byte offset in the region, the
 * bytes written there (fuzz_flash_image.c); they hold no byte of the
 * template image, so they need none of it */
static void image_seed(const char *name, unsigned flags, unsigned region,
		       uint32_t off, const void *bytes, size_t n)
{
	unsigned char pre[6] = { (unsigned char)flags, (unsigned char)region,
				 (unsigned char)off, (unsigned char)(off >> 8),
				 (unsigned char)(off >> 16),
				 (unsigned char)(off >> 24) };

	put("flash_image", name, pre, sizeof(pre), bytes, n);
}

static void image_u32(const char *name, unsigned flags, unsigned region,
		      uint32_t off, uint32_t v)
{
	image_seed(name, flags, region, off, &v, sizeof(v));
}

static void image_u64(const char *name, unsigned flags, unsigned region,
		      uint32_t off, uint64_t v)
{
	image_seed(name, flags, region, off, &v, sizeof(v));
}

static void flash_image_seeds(void)
{
	enum { HDR, SYNC, BLOCKS, RECS, TRIMS, DATA, ALL };
	static const unsigned char flip = 0x5a;
	/* block 3's slot 1 (erase count 1), record 21 (block 2 page 5) */
	const uint32_t slot = (3 * 2 + 1) * 32, rec = 21 * 32;

	image_seed("as-is", 0x00, HDR, 0, NULL, 0);
	image_seed("as-is-reopen", 0x20, HDR, 0, NULL, 0);
	image_seed("as-is-write", 0x80, HDR, 0, NULL, 0);
	image_seed("as-is-reopen-write", 0xa0, HDR, 0, NULL, 0);
	image_seed("empty-file", 0x40, ALL, 0, NULL, 0);
	image_seed("cut-in-records", 0x60, ALL, 20000, NULL, 0);
	image_seed("cut-in-data", 0x40, ALL, 200000, NULL, 0);
	image_seed("header-stale", 0x00, HDR, 84, &flip, 1);
	image_seed("magic", 0x01, HDR, 3, &flip, 1);
	image_u32("header-version2", 0x01, HDR, 8, 2);
	image_u32("header-size", 0x01, HDR, 12, 128);
	image_u32("header-channels3", 0x01, HDR, 16, 3);
	image_u32("header-dies-huge", 0x01, HDR, 20, 1u << 20);
	image_u32("header-blocks-huge", 0x01, HDR, 28, 0x7fffffffu);
	image_u32("header-blocks-more", 0x21, HDR, 28, 40);
	image_u32("header-ppb16", 0x01, HDR, 32, 16);
	image_u32("header-ppb3", 0x01, HDR, 32, 3);
	image_u32("header-page8k", 0x01, HDR, 36, 8192);
	image_u32("header-page12k", 0x01, HDR, 36, 12288);
	image_u32("header-oob-huge", 0x01, HDR, 40, 4096);
	image_u32("header-parts1", 0x01, HDR, 44, 1);
	image_u32("header-cell9", 0x01, HDR, 48, 9);
	image_u32("header-pe1", 0x81, HDR, 52, 1);
	image_u64("header-lpn64", 0x01, HDR, 64, 64);
	image_u64("header-id", 0x0f, HDR, 72, 0x1234);
	image_u64("sync-zero", 0x22, SYNC, 0, 0);
	image_u64("sync-huge", 0x22, SYNC, 32, ~0ull);
	image_u64("sync-stale", 0x00, SYNC, 8, 7);
	image_u64("slot-ec-pe", 0x82, BLOCKS, slot + 8, 3ull << 32 | 100000);
	image_u64("slot-other-block", 0x02, BLOCKS, slot + 8, 4ull << 32 | 1);
	image_u64("slot-epoch-new", 0x22, BLOCKS, slot, 1ull << 40);
	image_u64("slot-epoch-zero", 0x02, BLOCKS, slot, 0);
	image_u64("slot-stale", 0x00, BLOCKS, slot, 99);
	image_u32("rec-lpn-dup", 0x24, RECS, rec + 24, 0);
	image_u32("rec-lpn-huge", 0x04, RECS, rec + 24, 1000000);
	image_u32("rec-lpn-none", 0xa4, RECS, rec + 24, 0xffffffffu);
	image_u64("rec-seq-max", 0x24, RECS, rec, (1ull << 56) - 1);
	image_u64("rec-stream-255", 0xa4, RECS, rec, 255ull << 56 | 5);
	image_u64("rec-epoch", 0x04, RECS, rec + 8, 12345);
	image_u64("rec-hash", 0x04, RECS, rec + 16, 42);
	image_u64("rec-stale", 0x00, RECS, rec + 16, 42);
	image_u64("trim-seq", 0x28, TRIMS, 5 * 16, 1ull << 50);
	image_u64("trim-seq-low", 0x28, TRIMS, 130 * 16, 1);
	image_u64("trim-torn", 0x20, TRIMS, 7 * 16, 3);
	image_seed("data-flip", 0x20, DATA, 5 * 4096 + 17, &flip, 1);
	image_seed("data-flip-rehash", 0x34, DATA, 21 * 4096 + 9, &flip, 1);
}

/* seqfile_seeds - exports of the work copy's sequences (1: K/V; 3: X;
 * 10: made from token ids), and broken ones with their checksums fixed
 * by the target's flags so they reach the checks behind them */
static void seqfile_seeds(void)
{
	const char *w = fz_work();
	char path[4096];
	static unsigned char buf[1u << 20];
	uint32_t ids[80];
	uint64_t got;
	kvf_options o;
	kvf_store *st;
	unsigned char flags;
	size_t n;

	fz_options(&o);
	snprintf(path, sizeof(path), "%s/x.kvx", w);
	for (uint32_t i = 0; i < 80; i++)
		ids[i] = 7 * i + 3;
	if (kvf_open(w, &o, &st) != KVF_OK ||
	    kvf_seq_create_tokens(st, 10, ids, 80, &got) != KVF_OK ||
	    kvf_seq_fork(st, 1, 11, 80) != KVF_OK ||
	    kvf_seq_add_tokens(st, 11, ids, 80) != KVF_OK) {
		fprintf(stderr, "seqfile seeds: %s\n", kvf_last_error());
		exit(1);
	}
	for (int s = 0; s < 3; s++) {
		static const uint64_t seqs[3] = { 1, 3, 11 };
		static const char *const names[3] = { "seq1", "seq3-x", "tokens" };
		char name[64];
		FILE *f;

		if (kvf_seq_export(st, seqs[s], path) != KVF_OK ||
		    (f = fopen(path, "rb")) == NULL) {
			fprintf(stderr, "seqfile seeds: %s\n", kvf_last_error());
			exit(1);
		}
		n = fread(buf, 1, sizeof(buf), f);
		fclose(f);
		flags = 0;
		put("seqfile", names[s], &flags, 1, buf, n);
		snprintf(name, sizeof(name), "%s-cut", names[s]);
		put("seqfile", name, &flags, 1, buf, n / 2);
		flags = 3;
		buf[n - 100] ^= 0x40; /* a payload byte, checks fixed */
		snprintf(name, sizeof(name), "%s-flip", names[s]);
		put("seqfile", name, &flags, 1, buf, n);
		buf[n - 100] ^= 0x40;
		buf[8] = 2; /* version 2 */
		snprintf(name, sizeof(name), "%s-v2", names[s]);
		put("seqfile", name, &flags, 1, buf, n);
		buf[8] = 1;
		buf[16] = 3; /* three layers */
		snprintf(name, sizeof(name), "%s-layers", names[s]);
		put("seqfile", name, &flags, 1, buf, n);
	}
	flags = 0;
	put("seqfile", "empty", &flags, 1, NULL, 0);
	kvf_close(st);
}

int main(int argc, char **argv)
{
	const struct fz_template *t;

	if (argc != 2) {
		fputs("usage: fuzz_make_seeds OUT\n", stderr);
		return 2;
	}
	out_root = argv[1];
	t = fz_template();
	header_seeds(t->dir);
	syncmark_seeds(t->dir);
	summary_seeds(t, t->dir);
	catalog_seeds(t->dir);
	kvtool_seeds();
	flash_image_seeds();
	seqfile_seeds();
	return 0;
}
