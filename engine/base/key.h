/*
 * key.h - packed keys of stored pages, and page addresses.
 *
 * A page key is 128 bits: `hi` is the sequence id, `lo` packs
 *
 *   BITS   FIELD
 *   63..48 layer
 *   47..44 kind (K, V, X, KT, OPT)
 *   43..32 head (kv head for K/V/KT; slice of the hidden row for X)
 *   31..0  group (token group; for KT: dim_group << 24 | token_block)
 *
 * Keys sort by sequence, then layer, kind, head and group, so one head's
 * groups are adjacent.  A stream is (layer, kind, head) of a sequence: the
 * upper 32 bits of `lo`.
 *
 * A page address is 32 bits: segment id in the high bits and page inside
 * the segment in the low `page_bits` (fixed per store at create).
 */
#ifndef KVF_ENGINE_KEY_H
#define KVF_ENGINE_KEY_H

#include <stdint.h>

enum kv_kind {
	KIND_K = 0,  /* keys, token-indexed */
	KIND_V = 1,  /* values, token-indexed */
	KIND_X = 2,  /* pre-projection activations, token-indexed */
	KIND_KT = 3, /* keys transposed: dims x tokens */
	KIND_OPTIM = 4, /* optimizer state chunks: head = state * 2 + gen */
	KIND_COUNT
};

#define KV_MAX_LAYERS 65535u
#define KV_MAX_HEADS 4095u

struct page_key {
	uint64_t hi; /* sequence id */
	uint64_t lo; /* layer | kind | head | group */
};

/* stream_id - the (layer, kind, head) part of a key */
static inline uint32_t stream_id(uint32_t layer, enum kv_kind kind,
				 uint32_t head)
{
	return (layer << 16) | ((uint32_t)kind << 12) | head;
}

static inline uint32_t stream_layer(uint32_t sid)
{
	return sid >> 16;
}

static inline enum kv_kind stream_kind(uint32_t sid)
{
	return (enum kv_kind)((sid >> 12) & 0xfu);
}

static inline uint32_t stream_head(uint32_t sid)
{
	return sid & 0xfffu;
}

static inline struct page_key page_key_make(uint64_t seq, uint32_t sid,
					    uint32_t group)
{
	struct page_key k = { seq, ((uint64_t)sid << 32) | group };

	return k;
}

static inline uint32_t page_key_stream(struct page_key k)
{
	return (uint32_t)(k.lo >> 32);
}

static inline uint32_t page_key_group(struct page_key k)
{
	return (uint32_t)k.lo;
}

#define ADDR_NONE UINT32_MAX /* no page on media */

static inline uint32_t addr_make(uint32_t seg, uint32_t page,
				 unsigned page_bits)
{
	return (seg << page_bits) | page;
}

static inline uint32_t addr_seg(uint32_t addr, unsigned page_bits)
{
	return addr >> page_bits;
}

static inline uint32_t addr_page(uint32_t addr, unsigned page_bits)
{
	return addr & ((1u << page_bits) - 1);
}

#endif /* KVF_ENGINE_KEY_H */
