/*
 * test_export.c - kvf_seq_export and kvf_seq_import: a round trip into
 * another store is bit-exact (K, V, X, token ids, which make the imported
 * sequence a prefix source), each codec is taken where it pays and
 * decodes exactly, and damaged, truncated, foreign, newer-version and
 * other-model files are refused with their status, a precise message and
 * no sequence left behind, as is an import that runs out of space half
 * way.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/portable/seqfile.h"
#include "prefix_fixture.h"
#include "store_fixture.h"

TestSuite(export, .init = fx_setup_dir, .fini = fx_teardown, .timeout = 60);

static char *in_dir(const char *name)
{
	char *p = malloc(strlen(fx.dir) + strlen(name) + 2);

	sprintf(p, "%s/%s", fx.dir, name);
	return p;
}

static kvf_store *open_at(const char *path, kvf_options o)
{
	kvf_store *st;

	OK(kvf_open(path, &o, &st));
	return st;
}

/* same_seq - every K, V and X byte of a's sequence ia equals b's ib */
static void same_seq(kvf_store *a, uint64_t ia, kvf_store *b, uint64_t ib)
{
	for (uint32_t l = 0; l < LAYERS; l++) {
		uint64_t la, lb, xa, xb;

		OK(kvf_seq_len(a, ia, l, &la));
		OK(kvf_seq_len(b, ib, l, &lb));
		OK(kvf_seq_x_len(a, ia, l, &xa));
		OK(kvf_seq_x_len(b, ib, l, &xb));
		cr_assert(eq(u64, la, lb));
		cr_assert(eq(u64, xa, xb));
		for (uint32_t h = 0; h < KVH && la; h++) {
			unsigned char *k1 = malloc(la * ROW), *v1 = malloc(la * ROW);
			unsigned char *k2 = malloc(la * ROW), *v2 = malloc(la * ROW);

			OK(kvf_read(a, ia, l, h, 0, la, k1, v1));
			OK(kvf_read(b, ib, l, h, 0, la, k2, v2));
			cr_assert(memcmp(k1, k2, la * ROW) == 0 &&
				  memcmp(v1, v2, la * ROW) == 0,
				  "layer %u head %u differs", l, h);
			free(k1), free(v1), free(k2), free(v2);
		}
		if (xa) {
			unsigned char *x1 = malloc(xa * QH * ROW);
			unsigned char *x2 = malloc(xa * QH * ROW);

			OK(kvf_read_x(a, ia, l, 0, xa, x1));
			OK(kvf_read_x(b, ib, l, 0, xa, x2));
			cr_assert(memcmp(x1, x2, xa * QH * ROW) == 0);
			free(x1), free(x2);
		}
	}
}

/* source - a store at fx.dir/a with sequence 7: 600 tokens of ids (so
 * three K/V chunks a layer), 70 of X on layer 1; synced */
static kvf_store *source(uint32_t *ids)
{
	char *p = in_dir("a");
	kvf_store *st = open_at(p, fx_small_opts());
	uint64_t got;

	free(p);
	px_tokens(ids, 600, 7);
	OK(kvf_seq_create_tokens(st, 7, ids, 600, &got));
	OK(px_append(st, 7, ids, 0, 600));
	OK(px_append_x(st, 7, 1, ids, 0, 70));
	OK(kvf_sync(st));
	return st;
}

Test(export, round_trip)
{
	uint32_t ids[600];
	kvf_store *a = source(ids), *b;
	char *file = in_dir("seq7.kvx"), *pb = in_dir("b");
	kvf_seq_info si = { .struct_size = sizeof(si) };
	uint64_t id = 0, got;

	OK(kvf_seq_export(a, 7, file));
	b = open_at(pb, fx_small_opts());
	OK(kvf_seq_import(b, file, KVF_SEQ_NONE, &id));
	cr_assert(eq(u64, id, 7));
	same_seq(a, 7, b, 7);
	cr_assert(px_check(b, 7, ids, 600));
	OK(kvf_seq_import(b, file, 9, &id));
	cr_assert(eq(u64, id, 9));
	same_seq(a, 7, b, 9);
	/* the ids came along: the import is a prefix source */
	OK(kvf_seq_info_get(b, 9, &si));
	cr_assert(eq(u64, si.prefix_tokens, 600));
	cr_assert(eq(u64, si.prefix_chunks, 600 / G));
	OK(kvf_seq_create_tokens(b, 10, ids, 300, &got));
	cr_assert(eq(u64, got, 300));
	cr_assert(px_check(b, 10, ids, 300));
	/* and it survives a reopen */
	OK(kvf_close(b));
	OK(kvf_open(pb, NULL, &b));
	same_seq(a, 7, b, 9);
	/* an empty sequence travels too */
	OK(kvf_seq_create(a, 8));
	OK(kvf_seq_export(a, 8, file));
	OK(kvf_seq_import(b, file, KVF_SEQ_NONE, NULL));
	same_seq(a, 8, b, 8);
	OK(kvf_close(a));
	OK(kvf_close(b));
	free(file);
	free(pb);
}

/* codecs - zeros compress (lz4), token values do not (raw), values with
 * repeated high bytes compress best as byte planes; all decode exactly */
Test(export, codecs)
{
	char *pa = in_dir("a"), *pb = in_dir("b"), *file = in_dir("f.kvx");
	kvf_store *a = open_at(pa, fx_small_opts()), *b;
	size_t row = (size_t)KVH * ROW, n = 512;
	unsigned char *k = malloc(n * row), *v = malloc(n * row);
	struct stat sb;
	uint64_t raw = (uint64_t)n * row * 2 * LAYERS;

	b = open_at(pb, fx_small_opts());
	for (int kind = 0; kind < 3; kind++) {
		uint64_t x = 88172645463325252ull;

		for (size_t i = 0; i < n * row; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			k[i] = kind == 0 ? 0 : kind == 1 ? (unsigned char)x
				: (i & 1 ? (unsigned char)0x3c : (unsigned char)x);
			v[i] = k[i] ^ (kind == 0 ? 0 : 0x5a) ;
			if (kind == 2 && (i & 1))
				v[i] = k[i];
		}
		OK(kvf_seq_create(a, 20 + kind));
		for (uint32_t l = 0; l < LAYERS; l++)
			OK(kvf_append(a, 20 + kind, l, (uint32_t)n, k, v));
		OK(kvf_seq_export(a, 20 + kind, file));
		cr_assert(stat(file, &sb) == 0);
		if (kind == 0)
			cr_assert(lt(u64, (uint64_t)sb.st_size, raw / 20));
		else if (kind == 1)
			cr_assert(raw < (uint64_t)sb.st_size);
		else
			cr_assert(lt(u64, (uint64_t)sb.st_size, raw * 6 / 10));
		OK(kvf_seq_import(b, file, KVF_SEQ_NONE, NULL));
		same_seq(a, 20 + kind, b, 20 + kind);
	}
	OK(kvf_close(a));
	OK(kvf_close(b));
	free(k), free(v), free(pa), free(pb), free(file);
}

/* patch - copy src to dst with len bytes at off replaced by bytes */
static void patch(const char *src, const char *dst, long off,
		  const void *bytes, size_t len, long truncate_to)
{
	FILE *f = fopen(src, "rb"), *g = fopen(dst, "wb");
	long size;
	unsigned char *buf;

	fseek(f, 0, SEEK_END);
	size = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)size);
	cr_assert(fread(buf, 1, (size_t)size, f) == (size_t)size);
	if (bytes)
		memcpy(buf + off, bytes, len);
	fwrite(buf, 1, (size_t)(truncate_to >= 0 ? truncate_to : size), g);
	fclose(f);
	fclose(g);
	free(buf);
}

/* refused - the import of file must fail with code and sub, leaving b's
 * sequence count as it was and sequence 7 absent */
static void refused(kvf_store *b, const char *file, kvf_status code,
		    const char *sub)
{
	kvf_stats s0 = { .struct_size = sizeof(s0) }, s1 = s0;
	uint64_t id = 55, len;

	OK(kvf_stats_get(b, &s0));
	cr_assert(eq(int, kvf_seq_import(b, file, KVF_SEQ_NONE, &id), code),
		  "%s: %s", sub, kvf_last_error());
	cr_assert(strstr(kvf_last_error(), sub) != NULL, "message \"%s\" lacks \"%s\"",
		  kvf_last_error(), sub);
	cr_assert(eq(u64, id, 55));
	OK(kvf_stats_get(b, &s1));
	cr_assert(eq(u64, s1.n_sequences, s0.n_sequences));
	cr_assert(eq(int, kvf_seq_len(b, 7, 0, &len), KVF_ENOENT));
}

Test(export, refusals)
{
	uint32_t ids[600];
	kvf_store *a = source(ids), *b, *c;
	char *file = in_dir("seq7.kvx"), *bad = in_dir("bad.kvx");
	char *pb = in_dir("b"), *pc = in_dir("c");
	struct seqfile_header h;
	unsigned char flip;
	kvf_model m = { LAYERS + 1, QH, KVH, DIM, KVF_DTYPE_F16 };
	kvf_options oc = fx_options_for(&m, 64 * 1024, 8ull << 20, 0);
	FILE *f;

	OK(kvf_seq_export(a, 7, file));
	b = open_at(pb, fx_small_opts());
	f = fopen(file, "rb");
	cr_assert(fread(&h, sizeof(h), 1, f) == 1);
	fclose(f);
	/* a byte flipped in a payload, in a chunk header, in the header */
	flip = 0xff;
	patch(file, bad, 4000, &flip, 1, -1);
	refused(b, bad, KVF_ECORRUPT, "fails its checksum");
	patch(file, bad, 64 + 48 + 5 * 8 + 48 + 3, &flip, 1, -1);
	refused(b, bad, KVF_ECORRUPT, "fails its checksum");
	patch(file, bad, 20, &flip, 1, -1);
	refused(b, bad, KVF_ECORRUPT, "header (offset 0, 64 bytes) fails its checksum");
	/* cut short, anywhere; and bytes past the end */
	patch(file, bad, 0, NULL, 0, 10);
	refused(b, bad, KVF_ECORRUPT, "ends at offset 10 inside the header");
	patch(file, bad, 0, NULL, 0, 9000);
	refused(b, bad, KVF_ECORRUPT, "ends at offset");
	{
		struct stat sb;

		cr_assert(stat(file, &sb) == 0);
		patch(file, bad, 0, NULL, 0, sb.st_size - 48);
		refused(b, bad, KVF_ECORRUPT, "inside the end chunk");
		f = fopen(bad, "ab");
		fputs("tail", f);
		fclose(f);
		patch(file, bad, 0, NULL, 0, -1);
		f = fopen(bad, "ab");
		fputs("tail", f);
		fclose(f);
		refused(b, bad, KVF_ECORRUPT, "bytes after the end chunk");
	}
	/* not an export at all; an empty file */
	patch(file, bad, 0, "NOTKVFX!", 8, -1);
	refused(b, bad, KVF_ECORRUPT, "is not a kvflash sequence export");
	fx_put_file(bad, 0, 0);
	refused(b, bad, KVF_ECORRUPT, "ends at offset 0 inside the header");
	/* a newer format (a well-formed header saying version 2) */
	{
		struct seqfile_header h2 = h;

		h2.version = 2;
		h2.check = seqfile_header_check(&h2);
		patch(file, bad, 0, &h2, sizeof(h2), -1);
		refused(b, bad, KVF_ENOTSUP, "is export format version 2; this library reads version 1");
	}
	/* another model: a store with one layer more; another dtype */
	c = open_at(pc, oc);
	refused(c, file, KVF_EMISMATCH, "holds a model with n_layers 2; this store has 3");
	OK(kvf_close(c));
	{
		struct seqfile_header h2 = h;

		h2.dtype = KVF_DTYPE_BF16;
		h2.check = seqfile_header_check(&h2);
		patch(file, bad, 0, &h2, sizeof(h2), -1);
		refused(b, bad, KVF_EMISMATCH, "holds bf16 values; this store keeps f16");
	}
	/* a missing file; an id taken; NULLs */
	refused(b, "/nonexistent/x.kvx", KVF_ENOENT, "opening /nonexistent/x.kvx");
	OK(kvf_seq_create(b, 3));
	cr_assert(eq(int, kvf_seq_import(b, file, 3, NULL), KVF_EEXIST));
	fx_has("sequence 3 exists already");
	cr_assert(eq(int, kvf_seq_import(b, NULL, 3, NULL), KVF_EINVAL));
	cr_assert(eq(int, kvf_seq_export(a, 7, NULL), KVF_EINVAL));
	cr_assert(eq(int, kvf_seq_export(a, 99, bad), KVF_ENOENT));
	fx_has("sequence 99 does not exist");
	/* an export that fails leaves no file */
	cr_assert(eq(int, kvf_seq_export(a, 7, "/nonexistent/dir/x.kvx"), KVF_EIO));
	fx_has("creating /nonexistent/dir/x.kvx.tmp");
	OK(kvf_close(a));
	OK(kvf_close(b));
	free(file), free(bad), free(pb), free(pc);
}

/* a value a codec store cannot encode (an infinity a plain store holds)
 * is refused while the file is checked, naming its layer and its token in
 * the sequence, before the id is taken: a cached prefix under that id
 * stays */
Test(export, values_a_codec_store_cannot_encode_refused_first)
{
	char *pa = in_dir("plain"), *pb = in_dir("int8"), *file = in_dir("inf.kvx");
	kvf_options oc = fx_small_opts();
	uint16_t *k = calloc(300 * KVH * DIM, 2), *v = calloc(300 * KVH * DIM, 2);
	uint32_t ids[2 * G];
	uint64_t got, cached[4], hold;
	size_t n;
	kvf_store *a = open_at(pa, fx_small_opts()), *b;

	for (size_t i = 0; i < 300 * KVH * DIM; i++)
		k[i] = v[i] = 0x3c00; /* 1.0 */
	v[(290 * KVH + 1) * DIM + 3] = 0x7c00; /* +inf: token 290, head 1 */
	OK(kvf_seq_create(a, 1));
	for (uint32_t l = 0; l < LAYERS; l++)
		OK(kvf_append(a, 1, l, 300, k, v));
	OK(kvf_seq_export(a, 1, file));
	oc.codec = KVF_CODEC_INT8;
	b = open_at(pb, oc);
	px_tokens(ids, 2 * G, 5);
	OK(kvf_seq_create_tokens(b, 5, ids, 2 * G, &got));
	OK(px_append(b, 5, ids, 0, 2 * G));
	OK(kvf_seq_free(b, 5)); /* its chunks stay, a cached prefix */
	OK(kvf_prefix_list(b, cached, 4, &n));
	cr_assert(eq(sz, n, 1));
	hold = cached[0];
	cr_assert(eq(int, kvf_seq_import(b, file, hold, &got), KVF_ERANGE));
	fx_has("kvf_seq_import: layer 0: v of token 290, head 1, dim 3 is inf");
	OK(kvf_prefix_list(b, cached, 4, &n));
	cr_assert(eq(sz, n, 1), "the refused import dropped the cached prefix");
	cr_assert(eq(u64, cached[0], hold));
	cr_assert(eq(int, kvf_seq_import(b, file, 6, NULL), KVF_ERANGE));
	cr_assert(eq(int, kvf_seq_len(b, 6, 0, &got), KVF_ENOENT));
	OK(kvf_close(a));
	OK(kvf_close(b));
	free(k), free(v), free(pa), free(pb), free(file);
}

/* an import that runs out of space half way frees what it made */
Test(export, no_space_leaves_nothing)
{
	uint32_t ids[1024];
	char *pa = in_dir("a"), *pb = in_dir("b"), *file = in_dir("f.kvx");
	kvf_store *a = open_at(pa, fx_small_opts());
	kvf_store *b = open_at(pb, fx_options(640 * 1024, 0));
	kvf_stats s = { .struct_size = sizeof(s) };
	uint64_t got, len;

	px_tokens(ids, 1024, 3);
	OK(kvf_seq_create_tokens(a, 1, ids, 1024, &got));
	OK(px_append(a, 1, ids, 0, 1024));
	OK(kvf_seq_export(a, 1, file));
	cr_assert(eq(int, kvf_seq_import(b, file, KVF_SEQ_NONE, NULL), KVF_ENOSPC),
		  "%s", kvf_last_error());
	cr_assert(eq(int, kvf_seq_len(b, 1, 0, &len), KVF_ENOENT));
	OK(kvf_stats_get(b, &s));
	cr_assert(eq(u64, s.n_sequences, 0));
	cr_assert(eq(u64, s.prefix_chunks, 0));
	/* and the space came back: a smaller sequence fits */
	OK(kvf_sync(b));
	OK(kvf_seq_create_tokens(b, 2, ids, 256, &got));
	OK(px_append(b, 2, ids, 0, 256));
	OK(kvf_close(a));
	OK(kvf_close(b));
	free(pa), free(pb), free(file);
}
