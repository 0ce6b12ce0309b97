/*
 * tier.h - the memory tier: the DRAM a store holds for KV, bounded by
 * kvf_options.dram_budget, and the page cache inside it.
 *
 * The budget covers what the store must hold (group buffers, the index,
 * the cache's own tables: tier_hold / tier_release) and what it chooses to
 * hold (cached pages).  The cache gets what the first leaves; a hold that
 * the budget cannot cover even with the cache emptied is refused.
 *
 * The cache follows HillInfer's hierarchy, store-wide (docs/store.md, "The
 * memory tier"): a recent pool of the pages just written or read, first in
 * first out, and a hot pool of the pages attention keeps selecting, kept by
 * CLOCK with a small heat per page.  A page hit in the recent pool moves to
 * the hot pool.  A page read from media is admitted only into free room,
 * so a sequence larger than the cache keeps a steady part of itself in
 * DRAM and reads the rest from media once a step, instead of evicting what
 * the next step needs; written pages always enter, pushing the recent
 * pool's oldest into the hot pool's CLOCK.  Idle hot pages cool as the
 * hand passes and give way.
 *
 * A cached page is the verified content of a media address: a page at an
 * address never changes until its segment is reused, so the segment table
 * drops a segment's pages when it frees the segment (tier_drop_segment).
 * Hits are pinned while the caller uses them.
 *
 * Locking: tier.lock is a leaf: taken inside any other lock, never around
 * one.  fixed and peak are atomic.
 */
#ifndef KVF_ENGINE_TIER_H
#define KVF_ENGINE_TIER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "api/status.h"
#include "engine/base/segfmt.h"
#include "engine/base/tier_state.h"
#include "kvflash.h"

/* tier_init - the tier for opts (first thing at open; no allocation);
 * tier_start - its tables, once the page size is known (KVF_ENOMEM);
 * tier_free - everything (last at close) */
void tier_init(kvf_store *st);
kvf_status tier_start(kvf_store *st);
void tier_free(kvf_store *st);

/* tier_hold - count bytes the store must hold (a group buffer, index
 * growth) against the budget, evicting cached pages for room.  Return:
 * KVF_OK; KVF_ENOMEM (message names the budget; nothing counted) when the
 * budget cannot cover it.  tier_release - give them back. */
kvf_status tier_hold(kvf_store *st, uint64_t bytes, const char *what);
void tier_release(kvf_store *st, uint64_t bytes);
/* tier_fixed - what the store must hold now (not the cache) */
uint64_t tier_fixed(kvf_store *st);

/* tier_get - the cached bytes of addr, pinned, with *slot to unpin them,
 * if they are the page the index knows by check; NULL (a miss, counted)
 * otherwise.  tier_unpin - done. */
const unsigned char *tier_get(kvf_store *st, uint32_t addr, uint32_t check,
			      uint32_t *slot);
void tier_unpin(kvf_store *st, uint32_t slot);
/* tier_get_many / tier_unpin_many - the same for n pages under one taking
 * of the lock (p[i] NULL: a miss; slot[i] TIER_NONE: nothing to unpin) */
void tier_get_many(kvf_store *st, const uint32_t *addr, const uint32_t *check,
		   uint32_t n, const unsigned char **p, uint32_t *slot);
void tier_unpin_many(kvf_store *st, const uint32_t *slot, uint32_t n);

/* tier_put_read - a verified page read from media: cached if there is free
 * room (or a cold hot-pool page to replace now and then) */
void tier_put_read(kvf_store *st, uint32_t addr, uint32_t check,
		   const void *page);
/*
 * The prefetch (engine/reads/prefetch.c) reads pages without the sequence
 * lock, so a page's segment may be freed and reused between the index
 * lookup and the read.  tier_missing, called with the lookups (under the
 * sequence's lock), marks in miss[i] the pages not cached (no hit or miss
 * counted) and gives in gen[i] (NULL: not wanted) the drop count of each
 * page's segment; tier_put_prefetched caches a page (with the check it
 * was verified against) only if its segment was not dropped since, and
 * only into free room: a hint never evicts.  Return 1 if cached.
 * tier_room_pages - pages the free room holds now (0 without a tier).
 */
void tier_missing(kvf_store *st, const uint32_t *addr, const uint32_t *check,
		  uint32_t n, uint8_t *miss, uint64_t *gen);
int tier_put_prefetched(kvf_store *st, uint32_t addr, uint32_t check,
			const void *page, uint64_t gen);
uint32_t tier_room_pages(kvf_store *st);
/*
 * tier_put_segment - the n data pages of segment segid, just written from
 * *buf for a sequence (e[i].hash the hash of page i): into the recent
 * pool, which pushes its oldest into the hot pool (a page's check is its
 * hash & check_mask).  The pages are not
 * copied: the cache takes *buf over as it is (a chunk, freed when its last
 * page leaves) and gives the caller a buffer of the same size from its
 * stock in exchange (*buf changed, return 1).  The stock is made ahead by
 * a background thread at idle priority, so fresh memory is faulted off the
 * write path; with none ready the pages are not cached (return 0, *buf
 * kept), except while the cache is small (TIER_SYNC_GROW), where a buffer
 * is made on the spot.  A budget under TIER_MIN_CHUNKS segments copies
 * each page instead (return 0).  Caller: the segment's owner, under its
 * sequence's lock, once the write is done (no reader left on *buf).
 */
int tier_put_segment(kvf_store *st, uint32_t segid, unsigned char **buf,
		     uint32_t n, const struct seg_summary_entry *e,
		     uint32_t check_mask);

/*
 * tier_put_held - tier_put_segment for a segment some of whose pages were
 * placed by pointer (openseg_adopt: held[i], a page tier_page_take gave
 * and tier_page_placed counted): those the cache keeps as they are, and
 * held[i] becomes NULL (the page is the tier's from here; *n_held counts
 * it off); the others are
 * copied from buf.  No buffer is exchanged, so caching a decode loop's
 * writes faults no memory beyond the pages that waited.  Caller as
 * tier_put_segment's.
 */
void tier_put_held(kvf_store *st, uint32_t segid, const unsigned char *buf,
		   unsigned char **held, uint32_t *n_held, uint32_t n,
		   const struct seg_summary_entry *e, uint32_t check_mask);

/*
 * tier_page_take - a page of memory for a page waiting for write-back,
 * held against the budget as tier_hold(page_size) would: memory the cache
 * has faulted in already (a loose page, or a buffer of its stock carved
 * into pages) before fresh memory, which the kernel zeroes page by page
 * at first touch.  Return: KVF_OK; KVF_ENOMEM (message set) when the
 * budget cannot cover it.  Give it back with tier_page_give, never
 * kvf_free.
 */
kvf_status tier_page_take(kvf_store *st, unsigned char **page);
void tier_page_give(kvf_store *st, unsigned char *page);
/* tier_page_placed - a page tier_page_take gave now lies in a segment by
 * pointer (openseg_adopt): from here its memory counts as the cache's, as
 * a page given back would, since the cache takes it once it is written
 * (tier_put_held); one the cache does not take goes back with
 * tier_page_return, not tier_page_give */
void tier_page_placed(kvf_store *st);
void tier_page_return(kvf_store *st, unsigned char *page);
/* tier_may_place - whether one more page may lie in a segment by pointer:
 * such pages stay until their segment is written (a part-filled one at
 * the next sync), and nothing can evict them meanwhile, so they may take
 * a quarter of the budget, and none of a small budget's (which copies
 * pages: chunk_bytes 0).  Else the open segment takes a copy and the page
 * goes back at once. */
int tier_may_place(kvf_store *st);

/* tier_drop_segment - forget every cached page of segment segid (it is
 * being reused, or was never written) */
void tier_drop_segment(kvf_store *st, uint32_t segid);

/* tier_drop_all - forget every cached page (kvf_profile_run's cold
 * reads); pinned pages go when their users unpin them */
void tier_drop_all(kvf_store *st);

/* tier_figures - the kvf_stats figures of the tier */
void tier_figures(kvf_store *st, kvf_stats *s);

#endif /* KVF_ENGINE_TIER_H */
