/*
 * prefetch.h - reading a layer's pages into the memory tier ahead of its
 * attention (kvf_prefetch, and kvf_attend / kvf_attend_batch for the
 * next layer).
 *
 * The page addresses are taken under the sequence's lock; the reads run
 * in the background without it (async_detach), each page checked against
 * the index's check and cached only if no segment was dropped since the
 * addresses were taken (tier_put_prefetched), and only into the tier's
 * free room: a prefetch never evicts.  A store without a tier, or whose
 * media keeps pages in memory, has nothing to prefetch.
 */
#ifndef KVF_ENGINE_PREFETCH_H
#define KVF_ENGINE_PREFETCH_H

#include <stdint.h>

#include "api/status.h"
#include "kvflash.h"

struct seq;

/* PREFETCH_JOBS_MAX - prefetches queued or running at once in a store;
 * past it a hint is dropped (the reads it asks for would come late) */
#define PREFETCH_JOBS_MAX 4u

/*
 * prefetch_locked - queue the read of layer's K and V pages of seq (the
 * caller holds seq->lock) that are on media and not cached, up to the
 * tier's free room.  Return: KVF_OK (queued, or nothing to do);
 * KVF_ENOMEM (nothing queued).
 */
kvf_status prefetch_locked(kvf_store *st, struct seq *seq, uint32_t layer);

#endif /* KVF_ENGINE_PREFETCH_H */
