/*
 * seq_stream.h - a sequence's streams (seq_stream.c): finding them, making
 * them on first use, their index and group buffers, and the catalog
 * records that describe a sequence.
 */
#ifndef KVF_ENGINE_SEQ_STREAM_H
#define KVF_ENGINE_SEQ_STREAM_H

#include <stdint.h>

#include "api/status.h"
#include "engine/base/key.h"
#include "engine/sequences/seq_state.h"
#include "kvflash.h"

struct catalog_batch;

/* streams */
struct stream *seq_kv_stream(kvf_store *st, struct seq *seq, uint32_t layer,
			     enum kv_kind kind, uint32_t head);
/* seq_x_streams - the X streams of seq, allocated on first use */
struct stream *seq_x_stream(kvf_store *st, struct seq *seq, uint32_t layer,
			    uint32_t slice);
kvf_status seq_x_alloc(kvf_store *st, struct seq *seq);
/* stream_reserve - room for n groups in s->pages */
kvf_status stream_reserve(kvf_store *st, struct stream *s, uint64_t n_groups);
/* stream_gbuf_alloc - give s a zeroed group buffer of bytes, counted
 * against the memory tier (KVF_ENOMEM: out of memory or budget): one page
 * is a page of the tier (tier_page_take; s->gbuf_page), which a group
 * that waits for write-back takes along as it is (wb_seal), else malloc'd;
 * stream_gbuf_free - free it; streams_free - n streams, all they hold */
kvf_status stream_gbuf_alloc(kvf_store *st, struct stream *s, uint32_t bytes);
void stream_gbuf_free(kvf_store *st, struct stream *s);
void streams_free(kvf_store *st, struct stream *s, uint32_t n);
/* stream_wb_free - drop s's pages waiting for write-back (the sequence
 * goes; they were never synced) */
void stream_wb_free(kvf_store *st, struct stream *s);
/* stream_wb_cut - drop s's pages waiting for write-back from index entry
 * e on (a truncation: they were never written) */
void stream_wb_cut(kvf_store *st, struct stream *s, uint64_t e);
/* stream_stripe - the stripe index entry g of stream sid goes to */
uint32_t stream_stripe(kvf_store *st, uint32_t sid, uint64_t g);
/* streams per sequence: K/V, X, K^T, and all of them */
uint32_t seq_n_kv_streams(kvf_store *st);
uint32_t seq_n_x_streams(kvf_store *st);
uint32_t seq_n_kt_streams(kvf_store *st);
uint32_t seq_n_streams(kvf_store *st);
/* seq_stream_at - stream number i (K/V, then X, then K^T; NULL for X or
 * K^T streams not allocated) and its stream id */
struct stream *seq_stream_at(kvf_store *st, struct seq *seq, uint32_t i,
			     uint32_t *sid);
/* seq_stream_placed - the same streams in the order an append places a
 * layer's pages: head by head, K then V, so that what a sync writes of a
 * head lies side by side too and reads back in one request */
struct stream *seq_stream_placed(kvf_store *st, struct seq *seq, uint32_t i,
				 uint32_t *sid);
/* seq_stream_of - the stream with id sid; NULL if out of range or not
 * allocated */
struct stream *seq_stream_of(kvf_store *st, struct seq *seq, uint32_t sid);
/* seq_stream_groups - entries stream sid must have for seq's lengths:
 * tokens_entries for K/V/X (engine/base/group.h), complete blocks *
 * kt_groups for K^T */
uint64_t seq_stream_groups(kvf_store *st, struct seq *seq, uint32_t sid);
/* seq_h2o_alloc - the H2O score arrays, on first use */
kvf_status seq_h2o_alloc(kvf_store *st, struct seq *seq);
/* seq_vbar_alloc - the running means of V (SparF), on first use */
kvf_status seq_vbar_alloc(kvf_store *st, struct seq *seq);
/* seq_vbar_record - put seq's "V" record into b if its means changed;
 * seq_vbar_load - take the record of sequence id back into seq at open
 * (after the "S" records; seq NULL: it was freed since, the record is
 * only checked) */
kvf_status seq_vbar_record(kvf_store *st, struct seq *seq,
			   struct catalog_batch *b);
kvf_status seq_vbar_load(kvf_store *st, uint64_t id, struct seq *seq,
			 const void *val, size_t vlen);
/* seq_kt_alloc - the K^T streams, on first use (no-op without kt_pages) */
kvf_status seq_kt_alloc(kvf_store *st, struct seq *seq);
/* seq_tokens - tokens of the stream kind in a layer */
uint64_t seq_tokens(struct seq *seq, enum kv_kind kind, uint32_t layer);

/* seq_record - add seq's "S" record to b; seq_record_lens - one that
 * states the lengths len and x_len ([n_layers] each) instead of seq's;
 * seq_record_done - the batch holding the last of them committed: its
 * lengths are seq->rec_len's now.  Caller holds seq->lock throughout. */
kvf_status seq_record(kvf_store *st, struct seq *seq, struct catalog_batch *b);
kvf_status seq_record_lens(kvf_store *st, struct seq *seq, const uint64_t *len,
			   const uint64_t *x_len, struct catalog_batch *b);
void seq_record_done(kvf_store *st, struct seq *seq);

/* seq_use_record - put a caller's sequence's "U" record (recency and
 * frequency) into b if it was used since the last one; counts as written
 * once the batch commits (use_capture, as vbar_capture).
 * seq_use_load - take the record of sequence id back at open (after the
 * "S" records; seq NULL: freed since), its stamp moved up by base (past
 * the stamps loading gave the sequences, so those without a record count
 * as older); *clock gets the largest stamp set, so the open can start the
 * use clock past it. */
kvf_status seq_use_record(kvf_store *st, struct seq *seq,
			  struct catalog_batch *b);
kvf_status seq_use_load(kvf_store *st, uint64_t id, struct seq *seq,
			const void *val, size_t vlen, uint64_t base,
			uint64_t *clock);

#endif /* KVF_ENGINE_SEQ_STREAM_H */
