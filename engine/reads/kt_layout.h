/*
 * kt_layout.h - where K^T lives (engine/writes/kt.h describes the pages): a K
 * head's K^T stream, how a K row scatters into the block buffer, and E,
 * the dims a page holds.  Shared by the write side (kt.c), the read side
 * (kt_read.c) and the store header (store_header.c).
 */
#ifndef KVF_ENGINE_KT_LAYOUT_H
#define KVF_ENGINE_KT_LAYOUT_H

#include <string.h>

#include "engine/base/store_state.h"

static inline struct stream *kt_stream(kvf_store *st, struct seq *seq,
				       uint32_t layer, uint32_t head)
{
	return &seq->kt[(size_t)layer * st->hdr.n_kv_heads + head];
}

/* scatter - put one K row (token at position p of the block) into the
 * block buffer: dim d goes to page d / E, element (d % E) * T + p */
static inline void kt_scatter(kvf_store *st, unsigned char *buf,
			      const unsigned char *row, uint32_t p)
{
	uint32_t E = st->kt_dims, T = st->kt_tokens, eb = st->elt_bytes;
	uint32_t ps = st->hdr.page_size;

	for (uint32_t d = 0; d < st->hdr.head_dim; d++)
		memcpy(buf + (size_t)(d / E) * ps +
			       ((size_t)(d % E) * T + p) * eb,
		       row + (size_t)d * eb, eb);
}

/* kt_choose_dims - E for a head_dim: 8 when it divides head_dim, else the
 * largest power of two that does (at least 1) */
static inline uint32_t kt_choose_dims(uint32_t head_dim)
{
	uint32_t e = 8;

	while (e > 1 && head_dim % e != 0)
		e /= 2;
	return e;
}

#endif /* KVF_ENGINE_KT_LAYOUT_H */
