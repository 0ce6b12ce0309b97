/*
 * seq.h - sequences: the id -> sequence table, their streams, and the
 * catalog records that describe them.
 *
 * A struct seq is reference counted: the table holds one reference and
 * every call that looks it up holds another until seq_put, so a sequence
 * freed by one thread stays valid memory for a call in flight on another
 * (which then sees seq->dead and answers KVF_ENOENT).
 */
#ifndef KVF_ENGINE_SEQ_H
#define KVF_ENGINE_SEQ_H

#include "engine/store.h"

#define SEQ_NO_PARENT UINT64_MAX

kvf_status seq_table_init(kvf_store *st);
/* seq_table_free - destroy every sequence (no I/O) and the table */
void seq_table_free(kvf_store *st);

/* seq_get - the live caller's sequence with this id, with a reference;
 * NULL if none.  seq_get_ns - the same in namespace ns. */
struct seq *seq_get(kvf_store *st, uint64_t id);
struct seq *seq_get_ns(kvf_store *st, uint32_t ns, uint64_t id);
void seq_put(kvf_store *st, struct seq *seq);

/* seq_get_locked - seq_get, then lock it; KVF_ENOENT (message names call
 * and id) when absent or freed meanwhile */
kvf_status seq_get_locked(kvf_store *st, const char *call, uint64_t id,
			  struct seq **out);
void seq_unlock_put(kvf_store *st, struct seq *seq);

/* seq_alloc - a new, empty sequence not yet in the table */
struct seq *seq_alloc(kvf_store *st, uint64_t id);
/* seq_insert - add to the table (which takes the reference of seq_alloc);
 * KVF_EEXIST if the id is taken, KVF_ENOMEM */
kvf_status seq_insert(kvf_store *st, struct seq *seq);
/* seq_remove - take seq out of the table and drop the table's reference */
void seq_remove(kvf_store *st, struct seq *seq);
/* seq_drop_all - wait for seq's segment writes, then give up every page
 * reference of its index and its open segments (its pages become garbage).
 * Caller holds seq->lock and has committed the sequence's deletion. */
void seq_drop_all(kvf_store *st, struct seq *seq);
/* seq_destroy - free a sequence's memory (not its pages) */
void seq_destroy(kvf_store *st, struct seq *seq);

/* seq_foreach - call fn on every live sequence (with a reference held).
 * Return: KVF_OK, or KVF_ENOMEM having called fn on none. */
kvf_status seq_foreach(kvf_store *st,
		       void (*fn)(kvf_store *, struct seq *, void *), void *arg);
/* seq_count - the caller's live sequences (not optimizers) */
uint32_t seq_count(kvf_store *st);

/* streams */
struct stream *seq_kv_stream(kvf_store *st, struct seq *seq, uint32_t layer,
			     enum kv_kind kind, uint32_t head);
/* seq_x_streams - the X streams of seq, allocated on first use */
struct stream *seq_x_stream(kvf_store *st, struct seq *seq, uint32_t layer,
			    uint32_t slice);
kvf_status seq_x_alloc(kvf_store *st, struct seq *seq);
/* stream_reserve - room for n groups in s->pages */
kvf_status stream_reserve(struct stream *s, uint64_t n_groups);
/* stream_stripe - the stripe group g of stream sid goes to */
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
/* seq_stream_of - the stream with id sid; NULL if out of range or not
 * allocated */
struct stream *seq_stream_of(kvf_store *st, struct seq *seq, uint32_t sid);
/* seq_stream_groups - entries stream sid must have for seq's lengths:
 * token groups for K/V/X, complete blocks * kt_groups for K^T */
uint64_t seq_stream_groups(kvf_store *st, struct seq *seq, uint32_t sid);
/* seq_h2o_alloc - the H2O score arrays, on first use */
kvf_status seq_h2o_alloc(kvf_store *st, struct seq *seq);
/* seq_vbar_alloc - the running means of V (SparF), on first use */
kvf_status seq_vbar_alloc(kvf_store *st, struct seq *seq);
/* seq_vbar_record - put seq's "V" record into b if its means changed;
 * seq_vbar_load - take one back at open (after the "S" records) */
kvf_status seq_vbar_record(kvf_store *st, struct seq *seq,
			   struct catalog_batch *b);
kvf_status seq_vbar_load(kvf_store *st, uint64_t id, const void *val,
			 size_t vlen);
/* seq_kt_alloc - the K^T streams, on first use (no-op without kt_pages) */
kvf_status seq_kt_alloc(kvf_store *st, struct seq *seq);
/* seq_tokens - tokens of the stream kind in a layer */
uint64_t seq_tokens(struct seq *seq, enum kv_kind kind, uint32_t layer);

/* seq_record - add seq's "S" record to b */
kvf_status seq_record(kvf_store *st, struct seq *seq, struct catalog_batch *b);

#endif /* KVF_ENGINE_SEQ_H */
