/*
 * seqfile.c - the checks and the codecs of the sequence file (seqfile.h).
 *
 * Why byte planes: lz4 finds repeated byte strings and has no entropy
 * coder, so the near-random mantissa bytes of f16/bf16 K/V leave it
 * nothing (ratio 0.996 on normal values).  A bf16's high byte (sign and 7
 * exponent bits) repeats a lot once the high bytes stand together: byte
 * planes + lz4 give about 1.16 on normal bf16 values.  A chunk takes a
 * codec only when it saves bytes, so data that does not compress costs a
 * failed lz4 pass (GB/s) and nothing on disk.
 */
#include "engine/portable/seqfile.h"

#include <lz4.h>
#include <string.h>
#include <xxhash.h>

uint64_t seqfile_header_check(const struct seqfile_header *h)
{
	return XXH3_64bits(h, offsetof(struct seqfile_header, check));
}

uint64_t seqfile_chunk_check(const struct seqfile_chunk *c)
{
	return XXH3_64bits(c, offsetof(struct seqfile_chunk, check));
}

size_t seqfile_pack_bound(size_t raw_len)
{
	return (size_t)LZ4_compressBound((int)raw_len) + raw_len;
}

static void planes(const unsigned char *src, size_t len, uint32_t elt,
		   unsigned char *dst)
{
	size_t n = len / elt;

	for (uint32_t b = 0; b < elt; b++)
		for (size_t i = 0; i < n; i++)
			dst[b * n + i] = src[i * elt + b];
}

static void unplanes(const unsigned char *src, size_t len, uint32_t elt,
		     unsigned char *dst)
{
	size_t n = len / elt;

	for (uint32_t b = 0; b < elt; b++)
		for (size_t i = 0; i < n; i++)
			dst[i * elt + b] = src[b * n + i];
}

void seqfile_pack(const void *raw, size_t raw_len, uint32_t elt, void *dst,
		  void *scratch, struct seqfile_chunk *c)
{
	unsigned char *out = dst;
	int cap = (int)raw_len - 1, n1 = 0, n2 = 0;

	c->raw_bytes = (uint32_t)raw_len;
	c->raw_check = XXH3_64bits(raw, raw_len);
	/* lz4 straight, into dst; then byte planes + lz4 after it */
	if (cap > 0)
		n1 = LZ4_compress_default(raw, (char *)out, (int)raw_len, cap);
	if (cap > 0 && elt > 1 && raw_len % elt == 0) {
		planes(raw, raw_len, elt, scratch);
		n2 = LZ4_compress_default(scratch, (char *)out + (n1 > 0 ? n1 : 0),
					  (int)raw_len, n1 > 0 ? n1 - 1 : cap);
	}
	if (n2 > 0) {
		memmove(out, out + (n1 > 0 ? n1 : 0), (size_t)n2);
		c->codec = SF_PLANES;
		c->stored_bytes = (uint32_t)n2;
	} else if (n1 > 0) {
		c->codec = SF_LZ4;
		c->stored_bytes = (uint32_t)n1;
	} else {
		memcpy(out, raw, raw_len);
		c->codec = SF_RAW;
		c->stored_bytes = (uint32_t)raw_len;
	}
}

int seqfile_unpack(const struct seqfile_chunk *c, const void *src,
		   uint32_t elt, void *raw, void *scratch)
{
	int n;

	switch (c->codec) {
	case SF_RAW:
		if (c->stored_bytes != c->raw_bytes)
			return 0;
		memcpy(raw, src, c->raw_bytes);
		break;
	case SF_LZ4:
		n = LZ4_decompress_safe(src, raw, (int)c->stored_bytes,
					(int)c->raw_bytes);
		if (n < 0 || (uint32_t)n != c->raw_bytes)
			return 0;
		break;
	case SF_PLANES:
		if (elt < 1 || c->raw_bytes % elt != 0)
			return 0;
		n = LZ4_decompress_safe(src, scratch, (int)c->stored_bytes,
					(int)c->raw_bytes);
		if (n < 0 || (uint32_t)n != c->raw_bytes)
			return 0;
		unplanes(scratch, c->raw_bytes, elt, raw);
		break;
	default:
		return 0;
	}
	return XXH3_64bits(raw, c->raw_bytes) == c->raw_check;
}
