/*
 * writeback.h - HILOS's delayed write-back: a decode loop's sealed token
 * groups wait in DRAM (counted in the memory tier) and go to the media as
 * runs of WB_RUN pages of one head, contiguous in a segment, so a head
 * written a token at a time reads back in long sequential runs.
 *
 * A stream's waiting pages are the sealed pages of consecutive groups
 * (struct wb_run: all the entries of a plain store's groups, the encoded
 * or plain entries of a codec store's, engine/base/group.h); readers find
 * them before the index (stream_waiting, seq_state.h).  A
 * run goes out when it is full, when the tier has no room for another
 * page, and at every kvf_sync (and a fork, of the parent), which keeps the
 * durability contract: what a sync returned OK for is on media.  Only the
 * caller's K, V and X streams of a store with a tier on file or flash
 * media wait; K^T blocks and optimizer state are written as they fill.
 *
 * Every function needs the sequence's lock.
 */
#ifndef KVF_ENGINE_WRITEBACK_H
#define KVF_ENGINE_WRITEBACK_H

#include <stdint.h>

#include "engine/base/store_state.h"

/* wb_enabled - whether stream sid of seq may wait for write-back */
int wb_enabled(kvf_store *st, const struct seq *seq, uint32_t sid);

/* wb_long - an append sealing k groups writes them itself (after the
 * waiting ones), as a run of its own */
int wb_long(uint64_t k);

/*
 * wb_prepare - before an append seals k index entries (pages) of s: *waits says whether
 * they wait for write-back (the stream may, the append is short and the
 * tier has room); if so their pages are made and counted now, so that
 * wb_seal cannot fail for memory.  wb_unprepare gives back what an
 * append did not use.  Return: KVF_OK; KVF_ENOMEM.
 */
kvf_status wb_prepare(kvf_store *st, struct seq *seq, struct stream *s,
		      uint32_t sid, uint64_t k, int *waits);
void wb_unprepare(kvf_store *st, struct stream *s);

/*
 * wb_plan - count on pages[stripe] what sealing groups [g0, g0 + k) of
 * seq's stream s needs of the media: with waits, the runs that fill (an
 * admitted sequence's: one not admitted keeps them waiting) and the new
 * pages that go on waiting (so that an append is refused KVF_ENOSPC as it
 * would be without the tier); else the waiting run and every group.  On
 * own[stripe], the pages among them that waited before, whose room is
 * promised (openseg_reserve); on stay[stripe], the new pages among them
 * that go on waiting (not placed by the append).  Changes nothing.
 */
void wb_plan(kvf_store *st, const struct seq *seq, const struct stream *s,
	     uint32_t sid, uint64_t g0, uint64_t k, int waits, uint32_t *pages,
	     uint32_t *own, uint32_t *stay);

/*
 * wb_seal - s's index entry g, the page at src (a sealed page of a full
 * group: its rows, or its encoded form; engine/base/group.h), waits for
 * write-back
 * (wb_prepare said so); a run that fills is placed.  A page placed
 * supersedes what the index has for its entry then.
 * Return: KVF_OK; the placement's error (KVF_ENOSPC, KVF_EFATAL).
 */
kvf_status wb_seal(kvf_store *st, struct seq *seq, struct stream *s,
		   uint32_t sid, uint64_t g, const unsigned char *src);

/*
 * Admission (kvf_options.admit_tokens): a sequence kvf_seq_create made
 * with admission on starts not admitted: its sealed pages all wait (long
 * appends too, past WB_RUN), kvf_sync leaves it alone, and kvf_seq_free
 * drops its pages unwritten.  It is admitted, for good, when it reaches
 * admit_tokens (wb_admit: everything waiting goes out), when the tier
 * has no room for its pages (wb_prepare: they are written as they fill),
 * at a fork and at kvf_close.
 *
 * wb_admit - before an append that leaves seq holding tokens tokens: if
 * that reaches admit_tokens, seq is admitted and its waiting pages are
 * placed.  Return: KVF_OK; the placement's error (then seq stays as it
 * was, its pages still waiting).
 */
kvf_status wb_admit(kvf_store *st, struct seq *seq, uint64_t tokens,
		    const char *call);

/* wb_flush - place s's waiting run now (s may be NULL: a stream not made
 * yet), in room reserved with wb_flush_plan's count on pages and own */
kvf_status wb_flush(kvf_store *st, struct seq *seq, struct stream *s,
		    uint32_t sid);
void wb_flush_plan(const struct stream *s, uint32_t *pages, uint32_t *own);
/* wb_flush_seq - place every waiting run of seq (room reserved first; the
 * message of a KVF_ENOSPC starts with call) */
kvf_status wb_flush_seq(kvf_store *st, struct seq *seq, const char *call);

#endif /* KVF_ENGINE_WRITEBACK_H */
