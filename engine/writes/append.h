/*
 * append.h - the write path's internal entry: sealing partial groups.
 * (kvf_append and kvf_append_x are declared in kvflash.h.)
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

#endif /* KVF_ENGINE_APPEND_H */
