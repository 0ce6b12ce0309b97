/*
 * openseg.h - the segments a sequence is filling, one per stripe.
 *
 * Pages are placed into the open segment's buffer; when it is full (or at
 * sync) the writer (engine/segments/writer.h) writes data and summary in one media
 * write and commits the segment's catalog record.
 */
#ifndef KVF_ENGINE_OPENSEG_H
#define KVF_ENGINE_OPENSEG_H

#include <stdint.h>

#include "api/status.h"
#include "engine/base/key.h"
#include "engine/segments/openseg_state.h"
#include "kvflash.h"

struct seq;
struct page_ref;

/* openseg_reserve - reserve what placing pages[s] more pages on each
 * stripe s needs, given what seq's open segments still hold; own[s] of
 * them (NULL: none) wait for write-back now, their room promised (the
 * message starts with call) */
kvf_status openseg_reserve(kvf_store *st, struct seq *seq,
			   const uint32_t *pages, const uint32_t *own,
			   const char *call);

/*
 * openseg_stash - take now the buffers of the segments that placing
 * pages[s] more pages on each stripe may open, so that the placing cannot
 * fail for memory once it has begun (an append whose groups wait for
 * write-back hands its group buffers over as it goes: engine/writes/
 * writeback.h); openseg_unstash gives back the ones not used.
 * Return: KVF_OK; KVF_ENOMEM (message starts with call; none kept).
 */
kvf_status openseg_stash(kvf_store *st, struct seq *seq,
			 const uint32_t *pages, const char *call);
void openseg_unstash(kvf_store *st, struct seq *seq);

/*
 * openseg_place - put one sealed page of seq (key) into its open segment
 * on stripe, opening a segment if needed, and flush the segment when it is
 * full.  `replaces` is the address of the page this one supersedes (or
 * ADDR_NONE).  *out receives the new page's reference.
 * Return: KVF_OK; KVF_ENOSPC (no free segment; nothing changed); KVF_EFATAL
 * when a flush failed.  Caller holds seq->lock.
 */
kvf_status openseg_place(kvf_store *st, struct seq *seq, uint32_t stripe,
			 const void *page, struct page_key key,
			 uint32_t replaces, struct page_ref *out);

/*
 * openseg_adopt - openseg_place of a page of the memory tier (one
 * tier_page_take gave) without a copy: from here the page is the open
 * segment's, which its writer copies into the segment's buffer before the
 * write; once written the cache takes it as it is (seg_cache_written) or
 * it goes back to the tier (segbuf_put).  When the tier can hold no more
 * pages that way (tier_may_place), the segment takes a copy and the page
 * goes back to the tier at once.  Same returns.  The page is the
 * segment's once out->addr is set (the caller sets it to ADDR_NONE), even
 * if the flush of the segment it filled failed; else still the caller's.
 */
kvf_status openseg_adopt(kvf_store *st, struct seq *seq, uint32_t stripe,
			 unsigned char *page, struct page_key key,
			 uint32_t replaces, struct page_ref *out);

/*
 * openseg_slot / openseg_fill - openseg_place in two steps, for a caller
 * that builds the page in place: openseg_slot gives the next page of the
 * open segment on stripe (opening one if needed; KVF_ENOSPC), the caller
 * writes page_size bytes there, then openseg_fill records it as
 * openseg_place would.  Nothing else may run on seq in between.
 */
kvf_status openseg_slot(kvf_store *st, struct seq *seq, uint32_t stripe,
			unsigned char **page);
kvf_status openseg_fill(kvf_store *st, struct seq *seq, uint32_t stripe,
			struct page_key key, uint32_t replaces,
			struct page_ref *out);

/*
 * openseg_room / openseg_fill_hashed - for a caller that builds several
 * pages in place at once, perhaps on other threads: after openseg_slot,
 * the `openseg_room` pages from the slot on are free in the open segment;
 * the caller writes them, then records each in order with
 * openseg_fill_hashed, giving the page_hash it computed.  The fill of the
 * last page flushes the segment.  Nothing else may place pages on seq in
 * between.
 */
uint32_t openseg_room(kvf_store *st, struct seq *seq, uint32_t stripe);
kvf_status openseg_fill_hashed(kvf_store *st, struct seq *seq, uint32_t stripe,
			       struct page_key key, uint32_t replaces,
			       uint64_t hash, struct page_ref *out);

/* openseg_flush_all - write and commit every open segment of seq, and
 * wait for its segments in flight, the packs its pages went into at a
 * sync still under way included.  Caller holds seq->lock (and, if it is
 * the sync packing, has ended it: openseg_pack_end).  KVF_EFATAL on
 * failure. */
kvf_status openseg_flush_all(kvf_store *st, struct seq *seq);

/* openseg_flush_stripe - hand seq's open segment on stripe to the writer
 * (without waiting for it).  Caller holds seq->lock. */
kvf_status openseg_flush_stripe(kvf_store *st, struct seq *seq,
				uint32_t stripe);

/*
 * Packs (openseg.c explains them): at a durable point, small open segments
 * of many sequences share a segment.  Callers hold dur.lock from the first
 * openseg_pack_move to openseg_pack_end, and seq->lock for each move.
 *
 * openseg_pack_init - no packs (at open).
 * openseg_pack_where - where page 0 of seq's open segment on stripe would
 * go in the pack: its own address if the segment would become the pack,
 * ADDR_NONE if it is too big for one (flush it as ever).
 * openseg_pack_move - move it there: its pages are written to the media
 * now; if they went into another segment, the caller has already pointed
 * their index entries at their new addresses (openseg_pack_where's,
 * page by page).  KVF_EFATAL if the write failed.
 * openseg_pack_end - write every pack's summary and record, and wait for
 * them (before the durable point's media sync).
 */
void openseg_pack_init(kvf_store *st);
uint32_t openseg_pack_where(kvf_store *st, struct seq *seq, uint32_t stripe);
kvf_status openseg_pack_move(kvf_store *st, struct seq *seq, uint32_t stripe);
kvf_status openseg_pack_end(kvf_store *st);

/* openseg_page - the bytes of addr if it lies in one of seq's open
 * segments or segments still being written, else NULL (it is on media).
 * Caller holds seq->lock. */
const unsigned char *openseg_page(kvf_store *st, struct seq *seq,
				  uint32_t addr);

/* openseg_release - give back seq's open segments without writing them
 * (at free: their pages are garbage); their buffers go back to the pool */
void openseg_release(kvf_store *st, struct seq *seq);

#endif /* KVF_ENGINE_OPENSEG_H */
