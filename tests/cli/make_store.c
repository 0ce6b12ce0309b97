/*
 * make_store.c - build a small store for the kvtool tests, through the
 * public API only: `make_store DIR [f16|bf16|f32 [prefix|CODEC]]` (CODEC
 * fp8, int8 or int4: kvf_options.codec).
 *
 * The store (3 layers, 4 query heads, 2 KV heads, head_dim 64, segments
 * of 64 KiB, 2 stripes, 4 MiB) holds:
 *   sequence 1   100 tokens on every layer;
 *   sequence 2   a fork of 1 at 70 tokens, then 30 tokens more per layer;
 *   sequence 3   40 tokens on layer 0 only, X: 40 tokens on layer 0 and
 *                20 on layer 2;
 *   sequence 10  empty;
 * and sequence 4 was created, filled and freed.  It is synced and closed.
 *
 * Values are exact in every dtype, so the tests can expect them:
 *   K[layer][token][head][d] = token + head / 4 + d / 8 + layer / 2
 *   V = -K
 *   X[layer][token][slice][d] = token + slice / 4 + d / 8
 *
 * Exit status: 0 done, 1 a call failed (message on stderr), 2 bad usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvflash.h"

#define LAYERS 3
#define QH 4
#define KVH 2
#define DIM 64

static kvf_dtype dtype;

/* f16_bits - IEEE half of f (normal values and zero; round to nearest) */
static uint16_t f16_bits(float f)
{
	uint32_t x, sign, mant;
	int exp;

	memcpy(&x, &f, 4);
	sign = (x >> 16) & 0x8000u;
	exp = (int)((x >> 23) & 0xff) - 127 + 15;
	mant = x & 0x7fffffu;
	if ((x & 0x7fffffffu) == 0)
		return (uint16_t)sign;
	if (exp <= 0 || exp >= 31)
		return (uint16_t)(sign | 0x7c00u); /* not needed here */
	mant += 0x1000u; /* round half up at bit 13 */
	if (mant & 0x800000u) {
		mant = 0;
		exp++;
	}
	return (uint16_t)(sign | ((uint32_t)exp << 10) | (mant >> 13));
}

/* bf16_bits - the upper half of f, rounded to nearest even */
static uint16_t bf16_bits(float f)
{
	uint32_t x;

	memcpy(&x, &f, 4);
	x += 0x7fffu + ((x >> 16) & 1u);
	return (uint16_t)(x >> 16);
}

static size_t elt_size(void)
{
	return dtype == KVF_DTYPE_F32 ? 4 : 2;
}

static void put(unsigned char *buf, size_t i, float f)
{
	uint16_t h;

	if (dtype == KVF_DTYPE_F32) {
		memcpy(buf + i * 4, &f, 4);
		return;
	}
	h = dtype == KVF_DTYPE_F16 ? f16_bits(f) : bf16_bits(f);
	memcpy(buf + i * 2, &h, 2);
}

static int fail(const char *what, kvf_status rc)
{
	fprintf(stderr, "make_store: %s: %s (%s)\n", what, kvf_last_error(),
		kvf_strerror(rc));
	return 1;
}

/* append - tokens [t0, t0 + n) of one layer of seq */
static int append(kvf_store *st, uint64_t seq, uint32_t layer, uint32_t t0,
		  uint32_t n)
{
	size_t row = (size_t)KVH * DIM;
	unsigned char *k = malloc(n * row * elt_size());
	unsigned char *v = malloc(n * row * elt_size());
	kvf_status rc;

	if (k == NULL || v == NULL)
		return fail("malloc", KVF_ENOMEM);
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t h = 0; h < KVH; h++)
			for (uint32_t d = 0; d < DIM; d++) {
				float x = (float)(t0 + i) + h / 4.0f + d / 8.0f +
					  layer / 2.0f;

				put(k, (i * KVH + h) * DIM + d, x);
				put(v, (i * KVH + h) * DIM + d, -x);
			}
	rc = kvf_append(st, seq, layer, n, k, v);
	free(k);
	free(v);
	return rc == KVF_OK ? 0 : fail("kvf_append", rc);
}

static int append_x(kvf_store *st, uint64_t seq, uint32_t layer, uint32_t n)
{
	size_t row = (size_t)QH * DIM;
	unsigned char *x = malloc(n * row * elt_size());
	kvf_status rc;

	if (x == NULL)
		return fail("malloc", KVF_ENOMEM);
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t q = 0; q < QH; q++)
			for (uint32_t d = 0; d < DIM; d++)
				put(x, (i * QH + q) * DIM + d,
				    (float)i + q / 4.0f + d / 8.0f);
	rc = kvf_append_x(st, seq, layer, n, x);
	free(x);
	return rc == KVF_OK ? 0 : fail("kvf_append_x", rc);
}

static int build(kvf_store *st)
{
	kvf_status rc;

	if ((rc = kvf_seq_create(st, 1)) != KVF_OK)
		return fail("kvf_seq_create 1", rc);
	for (uint32_t l = 0; l < LAYERS; l++)
		if (append(st, 1, l, 0, 100))
			return 1;
	if ((rc = kvf_seq_fork(st, 1, 2, 70)) != KVF_OK)
		return fail("kvf_seq_fork", rc);
	for (uint32_t l = 0; l < LAYERS; l++)
		if (append(st, 2, l, 70, 30))
			return 1;
	if ((rc = kvf_seq_create(st, 3)) != KVF_OK)
		return fail("kvf_seq_create 3", rc);
	if (append(st, 3, 0, 0, 40) || append_x(st, 3, 0, 40) ||
	    append_x(st, 3, 2, 20))
		return 1;
	if ((rc = kvf_seq_create(st, 4)) != KVF_OK)
		return fail("kvf_seq_create 4", rc);
	for (uint32_t l = 0; l < LAYERS; l++)
		if (append(st, 4, l, 0, 64))
			return 1;
	if ((rc = kvf_sync(st)) != KVF_OK)
		return fail("kvf_sync", rc);
	if ((rc = kvf_seq_free(st, 4)) != KVF_OK)
		return fail("kvf_seq_free", rc);
	if ((rc = kvf_seq_create(st, 10)) != KVF_OK)
		return fail("kvf_seq_create 10", rc);
	return 0;
}

/* build_prefix - sequences made from token ids: 1 (ids 0..99), 2 sharing
 * its first 70 (two whole chunks and 6 tokens of the third), 3 with 40
 * ids of its own, and 4 (100 ids of its own) freed: its three whole
 * chunks stay as a cached prefix */
static int build_prefix(kvf_store *st)
{
	uint32_t ids[100];
	uint64_t got;
	kvf_status rc;

	for (uint32_t i = 0; i < 100; i++)
		ids[i] = i;
	if ((rc = kvf_seq_create_tokens(st, 1, ids, 100, &got)) != KVF_OK)
		return fail("kvf_seq_create_tokens 1", rc);
	for (uint32_t l = 0; l < LAYERS; l++)
		if (append(st, 1, l, 0, 100))
			return 1;
	for (uint32_t i = 70; i < 100; i++)
		ids[i] = 1000 + i;
	if ((rc = kvf_seq_create_tokens(st, 2, ids, 100, &got)) != KVF_OK)
		return fail("kvf_seq_create_tokens 2", rc);
	if (got != 70)
		return fail("kvf_seq_create_tokens 2 reused other than 70", KVF_EINVAL);
	for (uint32_t l = 0; l < LAYERS; l++)
		if (append(st, 2, l, 70, 30))
			return 1;
	for (uint32_t i = 0; i < 40; i++)
		ids[i] = 5000 + i;
	if ((rc = kvf_seq_create_tokens(st, 3, ids, 40, &got)) != KVF_OK)
		return fail("kvf_seq_create_tokens 3", rc);
	for (uint32_t l = 0; l < LAYERS; l++)
		if (append(st, 3, l, 0, 40))
			return 1;
	for (uint32_t i = 0; i < 100; i++)
		ids[i] = 7000 + i;
	if ((rc = kvf_seq_create_tokens(st, 4, ids, 100, &got)) != KVF_OK)
		return fail("kvf_seq_create_tokens 4", rc);
	for (uint32_t l = 0; l < LAYERS; l++)
		if (append(st, 4, l, 0, 100))
			return 1;
	if ((rc = kvf_seq_free(st, 4)) != KVF_OK)
		return fail("kvf_seq_free 4", rc);
	return 0;
}

int main(int argc, char **argv)
{
	kvf_model m = { LAYERS, QH, KVH, DIM, KVF_DTYPE_F16 };
	kvf_options o;
	kvf_store *st;
	kvf_status rc;
	int bad;

	static const char *const codecs[] = { "fp8", "int8", "int4" };
	uint32_t codec = KVF_CODEC_NONE;

	for (uint32_t i = 0; argc == 4 && i < 3; i++)
		if (strcmp(argv[3], codecs[i]) == 0)
			codec = KVF_CODEC_FP8 + i;
	if (argc < 2 || argc > 4 ||
	    (argc == 4 && strcmp(argv[3], "prefix") && codec == KVF_CODEC_NONE)) {
		fputs("usage: make_store DIR [f16|bf16|f32 [prefix|fp8|int8|int4]]\n",
		      stderr);
		return 2;
	}
	if (argc >= 3 && strcmp(argv[2], "bf16") == 0)
		m.dtype = KVF_DTYPE_BF16;
	else if (argc >= 3 && strcmp(argv[2], "f32") == 0)
		m.dtype = KVF_DTYPE_F32;
	else if (argc >= 3 && strcmp(argv[2], "f16") != 0) {
		fprintf(stderr, "make_store: unknown dtype '%s'\n", argv[2]);
		return 2;
	}
	dtype = m.dtype;
	kvf_options_init(&o, &m);
	o.segment_size = 64 * 1024;
	o.capacity_bytes = 4u << 20;
	o.n_stripes = 2;
	o.codec = codec;
	if ((rc = kvf_open(argv[1], &o, &st)) != KVF_OK)
		return fail("kvf_open", rc);
	bad = argc == 4 && codec == KVF_CODEC_NONE ? build_prefix(st) : build(st);
	rc = kvf_close(st);
	if (rc != KVF_OK && !bad)
		return fail("kvf_close", rc);
	return bad;
}
