/*
 * prefetch.h - reading a layer's pages into the memory tier ahead of its
 * attention (kvf_prefetch, and kvf_attend_batch for the next layer).
 *
 * The page addresses are taken under the sequence's lock, each with its
 * segment's drop count; the reads run in the background without the lock
 * (async_detach), each page checked against the index's check and cached
 * only if its segment was not dropped since (tier_put_prefetched), and
 * only into the tier's free room: a prefetch never evicts.  A store
 * without a tier, or whose media keeps pages in memory, has nothing to
 * prefetch.
 */
#ifndef KVF_ENGINE_PREFETCH_H
#define KVF_ENGINE_PREFETCH_H

#include <stdint.h>

#include "api/status.h"
#include "kvflash.h"

struct seq;

/* prefetch_init / prefetch_free - the store's list of prefetches queued
 * or running (readpath_state.h); prefetch_close - kvf_close, before it
 * waits for the store's jobs: queued prefetches read nothing, running
 * ones stop after the batch in flight, no new one is queued */
void prefetch_init(kvf_store *st);
void prefetch_free(kvf_store *st);
void prefetch_close(kvf_store *st);

/*
 * prefetch_wait - until no prefetch of seq's layer is queued or running:
 * a queued one is taken off, a running one stops after its batch in
 * flight (an attention of that layer then reads the rest itself rather
 * than the same pages beside it).  Any lock may be held: a prefetch takes
 * none of the engine's but the tier's, the media's and this list's.
 */
void prefetch_wait(kvf_store *st, uint64_t seq_id, uint32_t layer);

/*
 * prefetch_locked - queue the read of layer's K and V pages of seq (the
 * caller holds seq->lock) from the group holding token `first` on, that
 * are on media and not cached, up to the tier's free room; *queued (may
 * be NULL) says whether there were any.  Return: KVF_OK (queued, or
 * nothing to do); KVF_ENOMEM (nothing queued).
 */
kvf_status prefetch_locked(kvf_store *st, struct seq *seq, uint32_t layer,
			   uint64_t first, int *queued);

/* prefetch_test_hook - tests only: called by a prefetch on its thread
 * between taking its addresses and reading them (done 0) and when it has
 * read and cached all it will (done 1); NULL: none */
extern void (*_Atomic prefetch_test_hook)(kvf_store *st, int done);

#endif /* KVF_ENGINE_PREFETCH_H */
