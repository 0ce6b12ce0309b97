/*
 * segment.h - the segment table and the segment writer.
 *
 * The table tracks every segment's state, live pages and page references
 * (engine/store.h lists the states).  The writer fills a sequence's open
 * segment on one stripe page by page and, when it is full (or at sync),
 * writes data and summary in one media write and commits the segment's
 * catalog record.  A page a new one replaces loses its reference only once
 * the replacement's record has committed, and a segment that dies becomes
 * reusable only after the next sync: so the state as of the last sync
 * stays readable whatever happens in between.
 */
#ifndef KVF_ENGINE_SEGMENT_H
#define KVF_ENGINE_SEGMENT_H

#include "engine/store.h"

kvf_status seg_table_init(kvf_store *st);
void seg_table_free(kvf_store *st);

/* seg_mark_sealed - at open: segid holds n_data pages committed as rec */
kvf_status seg_mark_sealed(kvf_store *st, uint32_t segid,
			   const struct meta_seg *rec);
/* seg_finish_load - at open, after all references are counted: every
 * segment not sealed is free, sealed ones without live pages are dying */
void seg_finish_load(kvf_store *st);

/*
 * seg_reserve - set aside need[s] free segments of each stripe s for seq's
 * coming placements, all or none.  seg_unreserve returns what is left.
 * Return: KVF_OK or KVF_ENOSPC (message names the stripe).
 */
kvf_status seg_reserve(kvf_store *st, struct seq *seq, const uint32_t *need);
void seg_unreserve(kvf_store *st, struct seq *seq);
/* openseg_reserve - reserve what placing pages[s] more pages on each
 * stripe s needs, given what seq's open segments still hold (the message
 * starts with call) */
kvf_status openseg_reserve(kvf_store *st, struct seq *seq,
			   const uint32_t *pages, const char *call);

/* seg_free_count - free segments now (all stripes) */
uint32_t seg_free_count(kvf_store *st);

/*
 * Page references (seg_lock taken inside): how many index slots point at
 * a page.  A page holds at most UINT16_MAX (seg_ref_full says when it has
 * them).  seg_ref_inc fails only for memory (KVF_ENOMEM, nothing changed).
 */
uint32_t seg_page_refs(kvf_store *st, uint32_t addr);
int seg_ref_full(kvf_store *st, uint32_t addr);
kvf_status seg_ref_inc(kvf_store *st, uint32_t addr);
void seg_ref_dec(kvf_store *st, uint32_t addr);
/* seg_refs_dec - seg_ref_dec of addrs[0..n), under one taking of seg_lock */
void seg_refs_dec(kvf_store *st, const uint32_t *addrs, uint32_t n);
/* seg_refs_drop_locked - forget every reference into segid (its pages
 * moved); caller holds seg_lock */
void seg_refs_drop_locked(kvf_store *st, uint32_t segid);
/* seg_bits_take - segment segid's live bitmap, zeroed */
uint64_t *seg_bits_take(kvf_store *st, uint32_t segid);

/*
 * seg_reclaim - trim every DYING segment that died in an epoch <= upto,
 * mark it FREE and add the deletion of its record to b.
 * Return: KVF_OK or the media's error (the segment then stays DYING).
 */
kvf_status seg_reclaim(kvf_store *st, uint64_t upto, struct catalog_batch *b);

/* seg_wear_record - add the erase-count array to b ("W") */
void seg_wear_record(kvf_store *st, struct catalog_batch *b);

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
 * wait for its segments in flight.  Caller holds seq->lock.  KVF_EFATAL on
 * failure. */
kvf_status openseg_flush_all(kvf_store *st, struct seq *seq);

/* openseg_page - the bytes of addr if it lies in one of seq's open
 * segments or segments still being written, else NULL (it is on media).
 * Caller holds seq->lock. */
const unsigned char *openseg_page(kvf_store *st, struct seq *seq,
				  uint32_t addr);

/* openseg_release - give back seq's open segments without writing them
 * (at free: their pages are garbage); their buffers go back to the pool */
void openseg_release(kvf_store *st, struct seq *seq);

/* seg_sealed - the writer committed segid: it is sealed (or dying, if
 * its pages were all replaced meanwhile) */
void seg_sealed(kvf_store *st, uint32_t segid, uint32_t n_data,
		uint64_t seqno, uint64_t write_ns);

/* page_check - the check stored in the index for page bytes (the low
 * PAGE_CHECK_MASK bits of page_hash) */
uint32_t page_check(const void *page, uint32_t page_size);
uint64_t page_hash(const void *page, uint32_t page_size);

/* seg_fs_full_take - whether this thread's last KVF_ENOSPC came from a
 * full file system (the stripe files could not grow) rather than from the
 * store's capacity; reading it resets it.  Cleaning does not help then. */
int seg_fs_full_take(void);

#endif /* KVF_ENGINE_SEGMENT_H */
