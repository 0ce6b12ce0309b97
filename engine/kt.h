/*
 * kt.h - embedding-indexed K^T pages (the K layout SparF reads).
 *
 * With kt_pages on, every complete block of T tokens of a K head is also
 * stored transposed: head_dim / E pages, page d holding dims
 * [d*E, (d+1)*E) of the block's T tokens as [E][T].  A sparse scorer that
 * needs only r of the head's dims reads r/E pages per block instead of
 * every token's whole row.  The block being filled lives in the K^T
 * stream's buffer (kt_groups pages); it is never written partial: after a
 * reopen or a fork it is rebuilt from the K tokens.
 *
 * Every function needs the sequence's lock.
 */
#ifndef KVF_ENGINE_KT_H
#define KVF_ENGINE_KT_H

#include <string.h>

#include "engine/store.h"

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

/*
 * kt_plan - before an append of n K tokens to layer (holding `tokens`):
 * count on pages[stripe] the K^T pages it will seal, make room in the
 * index and give empty blocks their buffers (a part-filled block's buffer
 * is in memory already: open and fork load it).  Reads nothing, changes
 * nothing visible.
 */
kvf_status kt_plan(kvf_store *st, struct seq *seq, uint32_t layer,
		   uint64_t tokens, uint32_t n, uint32_t *pages);

/*
 * kt_append - scatter n new K tokens (rows of head h at
 * k + h * row_bytes + i * stride) into the block buffers, sealing the K^T
 * pages of every block they complete.  kt_plan must have run.
 */
kvf_status kt_append(kvf_store *st, struct seq *seq, uint32_t layer,
		     uint64_t tokens, uint32_t n, const unsigned char *k,
		     size_t stride);

/*
 * kt_read - dims [dg*E, (dg+1)*E) of tokens [t0, t1) of K head `head`, as
 * [E][t1 - t0] in the store dtype, from K^T pages (and the block buffer).
 * Return: KVF_OK, KVF_ECORRUPT, KVF_EIO, KVF_ENOMEM.
 */
kvf_status kt_read(kvf_store *st, struct seq *seq, uint32_t layer,
		   uint32_t head, uint32_t dg, uint64_t t0, uint64_t t1,
		   void *out);

/*
 * kt_open_block - the buffer of K head `head`'s open block (kt_groups
 * pages of [E][T]; tokens past the layer's length are zero), rebuilt from
 * K if needed.  It changes with the next append.
 */
kvf_status kt_open_block(kvf_store *st, struct seq *seq, uint32_t layer,
			 uint32_t head, const unsigned char **buf);

/* kt_choose_dims - E for a head_dim: 8 when it divides head_dim, else the
 * largest power of two that does (at least 1) */
static inline uint32_t kt_choose_dims(uint32_t head_dim)
{
	uint32_t e = 8;

	while (e > 1 && head_dim % e != 0)
		e /= 2;
	return e;
}

#endif /* KVF_ENGINE_KT_H */
