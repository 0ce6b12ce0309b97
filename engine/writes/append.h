/*
 * append.h - the write path's internal entries: appends on behalf of a
 * named call, sealing partial groups.  (kvf_append, kvf_append_at and
 * kvf_append_x are declared in kvflash.h.)
 */
#ifndef KVF_ENGINE_APPEND_H
#define KVF_ENGINE_APPEND_H

#include "engine/base/store_state.h"

/*
 * seq_seal_partials - write each stream's partial tail group that has
 * tokens not yet on media as a (padded) page; kvf_sync calls it.  Caller
 * holds seq->lock.  Return: KVF_OK, KVF_ENOSPC (nothing written), or
 * KVF_EFATAL.
 */
kvf_status seq_seal_partials(kvf_store *st, struct seq *seq);

/*
 * append_kv_as / append_x_as - kvf_append_at and kvf_append_x for another
 * public call (the typed appends): the same, every message naming call.
 */
kvf_status append_kv_as(kvf_store *st, const char *call, uint64_t seq_id,
			uint32_t layer, uint64_t pos, uint32_t n_tokens,
			const void *k, const void *v);
kvf_status append_x_as(kvf_store *st, const char *call, uint64_t seq_id,
		       uint32_t layer, uint32_t n_tokens, const void *x);

/*
 * append_codec_check - on a codec store, every K and V value of n tokens
 * ([n][n_kv_heads][head_dim] each) must be one the encoder takes when its
 * group seals (finite, within the f16 range): an append is refused before
 * anything changes, not a later one that seals the group.  The message
 * counts tokens from first.  Return: KVF_OK; KVF_ERANGE.
 */
kvf_status append_codec_check(kvf_store *st, const char *call,
			      uint64_t first, uint32_t n, const void *k,
			      const void *v);

#endif /* KVF_ENGINE_APPEND_H */
