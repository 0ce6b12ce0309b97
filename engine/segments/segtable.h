/*
 * segtable.h - the segment table: each segment's state, its live pages,
 * the references into them, and the free segments of each stripe.
 *
 * Segment states: FREE -> OPEN (a sequence is filling it) -> SEALED (on
 * media, record committed) -> DYING (no live page; reusable after the
 * next sync makes its death durable) -> FREE (trimmed).  CORRUPT: failed
 * verification at open; kept out of use.  A page a new one replaces loses
 * its reference only once the replacement's record has committed, and a
 * segment that dies becomes reusable only after the next sync: so the
 * state as of the last sync stays readable whatever happens in between.
 */
#ifndef KVF_ENGINE_SEGTABLE_H
#define KVF_ENGINE_SEGTABLE_H

#include <pthread.h>
#include <stdint.h>

#include "api/status.h"
#include "engine/base/meta.h"
#include "engine/segments/segtable_state.h"
#include "kvflash.h"

struct seq;
struct seg_summary_entry;
struct catalog_batch;

/* seg_table_begin - the lock and the first epoch (first thing at open);
 * seg_table_init - the table for the store's shape (after the header);
 * seg_table_free - the table; seg_table_end - the table and the lock
 * (last at close) */
void seg_table_begin(kvf_store *st);
kvf_status seg_table_init(kvf_store *st);
void seg_table_free(kvf_store *st);
void seg_table_end(kvf_store *st);

/* seg_mark_sealed - at open: segid holds n_data pages committed as rec */
kvf_status seg_mark_sealed(kvf_store *st, uint32_t segid,
			   const struct meta_seg *rec);
/* seg_finish_load - at open, after all references are counted: every
 * segment not sealed is free, sealed ones without live pages are dying */
void seg_finish_load(kvf_store *st);

/* seg_free_count - free segments now (all stripes) */
uint32_t seg_free_count(kvf_store *st);

/*
 * Page references (segtab.lock taken inside): how many index slots point at
 * a page.  A page holds at most UINT16_MAX (seg_ref_full says when it has
 * them).  seg_ref_inc fails only for memory (KVF_ENOMEM, nothing changed).
 */
uint32_t seg_page_refs(kvf_store *st, uint32_t addr);
int seg_ref_full(kvf_store *st, uint32_t addr);
kvf_status seg_ref_inc(kvf_store *st, uint32_t addr);
void seg_ref_dec(kvf_store *st, uint32_t addr);
/* seg_refs_dec - seg_ref_dec of addrs[0..n), under one taking of segtab.lock */
void seg_refs_dec(kvf_store *st, const uint32_t *addrs, uint32_t n);
/* seg_refs_drop_locked - forget every reference into segid (its pages
 * moved); caller holds segtab.lock */
void seg_refs_drop_locked(kvf_store *st, uint32_t segid);
/* seg_pop_free_locked - the free segment of stripe s taken next, out of
 * the free list (its kept mark cleared); SEG_NONE when none.  Caller
 * holds segtab.lock. */
uint32_t seg_pop_free_locked(kvf_store *st, uint32_t s);
/* seg_bits_take - segment segid's live bitmap, zeroed */
uint64_t *seg_bits_take(kvf_store *st, uint32_t segid);

/*
 * seg_reclaim_pick - choose every DYING segment that died in an epoch <=
 * upto and add the deletion of its record to b; the caller commits b,
 * durably, before seg_reclaim_apply trims them (a trim before the
 * deletion is durable would leave, after a crash, a record whose summary
 * reads as zeros: damage).  Returns how many.
 * seg_reclaim_apply - trim the chosen segments (but a few kept for reuse
 * on stripe files) and mark them FREE.  KVF_OK or the media's error (a
 * segment not trimmed stays DYING; its record is gone, so a reopen finds
 * it free).
 * seg_reclaim - both, committing b (synced) in between.
 */
uint32_t seg_reclaim_pick(kvf_store *st, uint64_t upto, struct catalog_batch *b);
kvf_status seg_reclaim_apply(kvf_store *st);
kvf_status seg_reclaim(kvf_store *st, uint64_t upto, struct catalog_batch *b);

/* seg_wear_record - add the erase-count array to b ("W") */
void seg_wear_record(kvf_store *st, struct catalog_batch *b);

/* seg_sealed - the writer committed segid: it is sealed (or dying, if
 * its pages were all replaced meanwhile) */
void seg_sealed(kvf_store *st, uint32_t segid, uint32_t n_data,
		uint64_t seqno, uint64_t write_ns);

/* page_check - the check stored in the index for page bytes (the low
 * PAGE_CHECK_MASK bits of page_hash) */
uint32_t page_check(const void *page, uint32_t page_size);
uint64_t page_hash(const void *page, uint32_t page_size);

/*
 * seg_reserve - set aside need[s] free segments of each stripe s for seq's
 * coming placements, all or none; own (NULL: none) are pages of seq
 * waiting for write-back among them, whose promised room (seg_promise)
 * the reservation takes over.  seg_unreserve returns what is left.
 * Return: KVF_OK or KVF_ENOSPC (message names the stripe).
 */
kvf_status seg_reserve(kvf_store *st, struct seq *seq, const uint32_t *need,
		       const uint32_t *own);
/* seg_fs_full_take - whether this thread's last KVF_ENOSPC came from a
 * full file system (the stripe files could not grow) rather than from the
 * store's capacity; reading it resets it.  Cleaning does not help then. */
int seg_fs_full_take(void);
void seg_unreserve(kvf_store *st, struct seq *seq);

/* seg_allocate_next - allocate on the media, with no lock held while it
 * does, the free segments of stripe s that writers take next (those
 * reserved or promised, the cleaner's, and `ahead` more; at most
 * SEG_AHEAD_MAX), so that an append's own allocation (seg_reserve) finds
 * them done: a stripe file's fallocate waits behind the segment writes
 * in flight, and it waited on the appending thread with the segment
 * table locked.  The segment writers call it after each write. */
#define SEG_AHEAD_MAX 64u
void seg_allocate_next(kvf_store *st, uint32_t s, uint32_t ahead);

/* seg_cache_written - segid, just written as seqno from *buf (n data
 * pages, their summary entries e), goes to the memory tier
 * (tier_put_segment: *buf may be swapped; with *n_held of its pages held
 * by pointer, tier_put_held, which takes those, NULLs their entries and
 * counts them off *n_held)
 * if the segment still holds that write; whether *buf was taken */
int seg_cache_written(kvf_store *st, uint32_t segid, uint64_t seqno,
		      unsigned char **buf, unsigned char **held,
		      uint32_t *n_held, uint32_t n,
		      const struct seg_summary_entry *e);
/*
 * seg_take_open - a free segment of stripe for seq to fill (one it
 * reserved, else one not promised to anyone), marked OPEN; SEG_NONE if
 * there is none.  *low says free space on the stripe runs low.
 */
uint32_t seg_take_open(kvf_store *st, struct seq *seq, uint32_t stripe,
		       int *low);
/* seg_page_born - page n of the open segment segid is referenced */
void seg_page_born(kvf_store *st, uint32_t segid, uint32_t n);
/* seg_plenty - every stripe has more than a quarter of its segments free
 * for writers (write-back waits only then: near full, pages go out as
 * they fill, as without it) */
int seg_plenty(kvf_store *st);
/* seg_promise - pages (negative: placed or dropped) waiting for
 * write-back on stripe */
void seg_promise(kvf_store *st, uint32_t stripe, int32_t pages);
/* seg_give_back - an open segment that is never written goes back to the
 * free FIFO */
void seg_give_back(kvf_store *st, uint32_t segid);

#endif /* KVF_ENGINE_SEGTABLE_H */
