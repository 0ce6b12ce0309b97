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

#endif /* KVF_ENGINE_APPEND_H */
