/*
 * seqfile.h - the file of kvf_seq_export / kvf_seq_import: one sequence's
 * K, V and X in token order (not the store's page layout, so any store of
 * the same model shape reads it), and its registered token ids.
 * Little-endian throughout.
 *
 * File header (64 bytes):
 *   OFFSET SIZE FIELD
 *   0      8    magic "KVFSEQX\n"
 *   8      4    version (SEQFILE_VERSION)
 *   12     4    header bytes (64)
 *   16     4    n_layers
 *   20     4    n_q_heads
 *   24     4    n_kv_heads
 *   28     4    head_dim
 *   32     4    dtype (kvf_dtype)
 *   36     4    chunk_tokens: tokens per K, V or X chunk (the last fewer)
 *   40     8    the sequence's id when exported
 *   48     4    kv_codec: the kvf_codec of the store it came from (its K
 *               and V of sealed groups are that codec's decoded values;
 *               0 = exact; files of older libraries have 0 here)
 *   52     4    reserved, 0
 *   56     8    XXH3-64 of bytes [0, 56)
 *
 * Then chunks, each a 48-byte header and its payload:
 *   0      4    type (enum seqfile_type)
 *   4      4    layer (0 for LENGTHS, TOKENS, END)
 *   8      8    first token (TOKENS: first id; END: chunks before it)
 *   16     4    tokens (or ids) in it
 *   20     4    codec (enum seqfile_codec)
 *   24     4    raw bytes
 *   28     4    stored bytes (the payload that follows)
 *   32     8    XXH3-64 of the raw bytes
 *   40     8    XXH3-64 of bytes [0, 40) of this header
 *
 * In this order: LENGTHS (u64 len[n_layers], u64 x_len[n_layers], u64
 * ids), TOKENS (u32 ids, at most SEQFILE_IDS a chunk), then for each
 * layer its K and V chunks in turns ([n][n_kv_heads][head_dim], as
 * kvf_append takes them) and its X chunks ([n][n_q_heads * head_dim]),
 * then END.  A reader checks every field against what must come next.
 */
#ifndef KVF_ENGINE_SEQFILE_H
#define KVF_ENGINE_SEQFILE_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include "kvflash.h"

#define SEQFILE_MAGIC "KVFSEQX\n"
#define SEQFILE_VERSION 1u
#define SEQFILE_CHUNK_TOKENS 256u  /* what export writes */
#define SEQFILE_MAX_CHUNK_TOKENS 4096u
#define SEQFILE_IDS (1u << 20)    /* token ids a TOKENS chunk holds */
#define SEQFILE_MAX_RAW (256u << 20) /* bytes a chunk may expand to */

enum seqfile_type {
	SF_LENGTHS = 1,
	SF_TOKENS = 2,
	SF_K = 3,
	SF_V = 4,
	SF_X = 5,
	SF_END = 15
};

enum seqfile_codec {
	SF_RAW = 0,    /* stored as is */
	SF_LZ4 = 1,    /* lz4 block */
	SF_PLANES = 2  /* split into byte planes (byte 0 of every element,
			* then byte 1, ...), then lz4 block */
};

struct seqfile_header {
	char magic[8];
	uint32_t version;
	uint32_t header_bytes;
	uint32_t n_layers;
	uint32_t n_q_heads;
	uint32_t n_kv_heads;
	uint32_t head_dim;
	uint32_t dtype;
	uint32_t chunk_tokens;
	uint64_t seq;
	uint32_t kv_codec;
	uint32_t reserved;
	uint64_t check;
};

struct seqfile_chunk {
	uint32_t type;
	uint32_t layer;
	uint64_t first;
	uint32_t n;
	uint32_t codec;
	uint32_t raw_bytes;
	uint32_t stored_bytes;
	uint64_t raw_check;
	uint64_t check;
};

static_assert(sizeof(struct seqfile_header) == 64, "seqfile_header");
static_assert(sizeof(struct seqfile_chunk) == 48, "seqfile_chunk");

/* seqfile_header_check, seqfile_chunk_check - the XXH3-64 the check
 * field must hold */
uint64_t seqfile_header_check(const struct seqfile_header *h);
uint64_t seqfile_chunk_check(const struct seqfile_chunk *c);

/*
 * seqfile_pack - the payload of raw[0, raw_len) of elements of elt bytes,
 * in the smallest of the codecs (lz4 and byte planes + lz4 only when they
 * save bytes) into dst (room: seqfile_pack_bound(raw_len)), with scratch
 * of raw_len bytes.  Fills c's codec, raw_bytes, stored_bytes, raw_check.
 */
size_t seqfile_pack_bound(size_t raw_len);
void seqfile_pack(const void *raw, size_t raw_len, uint32_t elt, void *dst,
		  void *scratch, struct seqfile_chunk *c);

/* seqfile_unpack - c's payload src back into raw (c->raw_bytes), with
 * scratch of c->raw_bytes; 0 if it does not decode to exactly raw_bytes
 * that match raw_check */
int seqfile_unpack(const struct seqfile_chunk *c, const void *src,
		   uint32_t elt, void *raw, void *scratch);

#endif /* KVF_ENGINE_SEQFILE_H */
