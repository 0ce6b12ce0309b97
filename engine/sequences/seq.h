/*
 * seq.h - the id -> sequence table (seq.c): lookups with references,
 * insertion, removal, iteration.  The types are in seq_state.h, the
 * streams in seq_stream.h.
 *
 * A struct seq is reference counted: the table holds one reference and
 * every call that looks it up holds another until seq_put, so a sequence
 * freed by one thread stays valid memory for a call in flight on another
 * (which then sees seq->dead and answers KVF_ENOENT).
 */
#ifndef KVF_ENGINE_SEQ_H
#define KVF_ENGINE_SEQ_H

#include <stdint.h>

#include "api/status.h"
#include "engine/sequences/seq_state.h"
#include "kvflash.h"

#define SEQ_NO_PARENT UINT64_MAX

kvf_status seq_table_init(kvf_store *st);
/* seq_table_free - destroy every sequence (no I/O) and the table */
void seq_table_free(kvf_store *st);

/* seq_get - the live caller's sequence with this id, with a reference;
 * NULL if none; no use is counted (seq_note_use).  seq_get_ns - the same in namespace ns. */
struct seq *seq_get(kvf_store *st, uint64_t id);
struct seq *seq_get_ns(kvf_store *st, uint32_t ns, uint64_t id);
void seq_put(kvf_store *st, struct seq *seq);

/* seq_get_locked - seq_get, then lock it, counting a use of it (recency
 * and frequency for eviction): the lookup of a public call, once per call.
 * KVF_ENOENT (message names call and id) when absent or freed meanwhile.
 * seq_find_locked - the same without counting a use: the engine's own
 * lookups, and a call's second try after waiting for room. */
kvf_status seq_get_locked(kvf_store *st, const char *call, uint64_t id,
			  struct seq **out);
kvf_status seq_find_locked(kvf_store *st, const char *call, uint64_t id,
			   struct seq **out);
/* seq_find_any_locked - seq_find_locked that finds the store's cached
 * prefixes too (the others answer KVF_ENOENT for them: the caller's calls
 * never see one) */
kvf_status seq_find_any_locked(kvf_store *st, const char *call, uint64_t id,
			       struct seq **out);
/* seq_note_use - count a use of a caller's sequence (seq_get_locked; a
 * call that looks up with seq_get counts its own) */
void seq_note_use(kvf_store *st, struct seq *seq);
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
/*
 * seq_free_id - delete sequence id (its records, then its page
 * references), as kvf_seq_free does for call.  how: 0, or SEQ_FREE_*;
 * SEQ_FREE_EVICT: only if it is not pinned (else KVF_EBUSY, nothing
 * changed), and remember the id so KVF_ENOENT can say it was evicted (a
 * cached prefix may be evicted too).  A call running on the sequence
 * finishes first (it holds the sequence's lock).
 */
#define SEQ_FREE_EVICT 1u  /* eviction: not if pinned; remember the id */
#define SEQ_FREE_CACHED 2u /* id must be a cached prefix (which the
			    * others refuse with KVF_ENOENT) */
kvf_status seq_free_id(kvf_store *st, const char *call, uint64_t id,
		       unsigned how);
/* seq_note_evicted - remember id among the latest evicted (seq.c) */
void seq_note_evicted(kvf_store *st, uint64_t id);
/* seq_create_with, seq_fork_with - kvf_seq_create and kvf_seq_fork
 * (seq_calls.c) for `call`, the new sequence taking the token ids ps (a
 * prefix_seq_new of its id; NULL for none): their "T" record commits with
 * the sequence, and on KVF_OK the sequence owns ps; on failure the caller
 * still does. */
struct prefix_seq;
kvf_status seq_create_with(kvf_store *st, const char *call, uint64_t id,
			   struct prefix_seq *ps);
kvf_status seq_fork_with(kvf_store *st, const char *call, uint64_t parent,
			 uint64_t child, uint64_t n_tokens,
			 struct prefix_seq *ps);
/* seq_id_take - before creating id for call: if one of the store's cached
 * prefixes has it, drop that one (seq_calls.c).  KVF_OK, or what the
 * drop answered (KVF_EFATAL, KVF_ENOMEM). */
kvf_status seq_id_take(kvf_store *st, const char *call, uint64_t id);
/* seq_destroy - free a sequence's memory (not its pages) */
void seq_destroy(kvf_store *st, struct seq *seq);

/* seq_foreach - call fn on every live sequence (with a reference held).
 * Return: KVF_OK, or KVF_ENOMEM having called fn on none. */
kvf_status seq_foreach(kvf_store *st,
		       void (*fn)(kvf_store *, struct seq *, void *), void *arg);
/* seq_foreach_created - seq_foreach, oldest creation first (a sync packs
 * tails of sequences made together, which tend to go together) */
kvf_status seq_foreach_created(kvf_store *st,
			       void (*fn)(kvf_store *, struct seq *, void *),
			       void *arg);
/* seq_count - the caller's live sequences (not optimizers, nor cached
 * prefixes) */
uint32_t seq_count(kvf_store *st);

#endif /* KVF_ENGINE_SEQ_H */
