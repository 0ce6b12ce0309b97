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

#include "engine/reads/kt_layout.h"
#include "engine/base/store_state.h"

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

#endif /* KVF_ENGINE_KT_H */
