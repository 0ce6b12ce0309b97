/*
 * prefix.h - the prefix index (prefix.c): chain hashes of token chunks,
 * the longest stored prefix of a token list, publishing a sequence's
 * chunks, its "T" record, and the figures kvf_stats, kvf_seq_info and
 * eviction read.  The types are in prefix_state.h; the public calls that
 * use it (kvf_seq_create_tokens, kvf_seq_add_tokens) in prefix_calls.c.
 */
#ifndef KVF_ENGINE_PREFIX_H
#define KVF_ENGINE_PREFIX_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/catalog.h"
#include "engine/sequences/prefix_state.h"
#include "kvflash.h"

struct seq;

/* The most token ids one sequence may register: its "T" record stays a
 * few MiB and group numbers stay in 32 bits. */
#define PREFIX_MAX_TOKENS (1ull << 26)

/* tests: the chain hash is ANDed with this (default all ones), so a test
 * can make every chunk collide with others and check the token compare */
extern uint64_t prefix_hash_mask;

/* prefix_chain_hash - the chain hash of the chunk tokens[0, G) after the
 * chunk whose chain hash is prev (PREFIX_SEED for the first chunk) */
#define PREFIX_SEED 0x6b76666c61736831ull /* "kvflash1" */
uint64_t prefix_chain_hash(uint64_t prev, const uint32_t *tokens, uint32_t G);

void prefix_init(kvf_store *st);
/* prefix_free - every node and tracked sequence (at close) */
void prefix_free(kvf_store *st);

/* A match of a token list against the index. */
struct prefix_match {
	uint64_t holder;   /* a sequence holding the matched tokens */
	uint64_t n_tokens; /* tokens matched: full chunks, then part of one */
	int from_cache;    /* only cached prefixes hold the deepest chunk */
};

/* prefix_lookup - the longest prefix of tokens[0, n) that a live sequence
 * holds, and one such sequence (the most recent holder).  n_tokens 0 when
 * nothing matches.  Counts the chunks' hits and last use. */
void prefix_lookup(kvf_store *st, const uint32_t *tokens, uint64_t n,
		   struct prefix_match *out);

/* prefix_seq_new - a tracked-sequence record for id with a copy of
 * tokens[0, n), not yet attached; NULL when out of memory */
struct prefix_seq *prefix_seq_new(uint64_t id, const uint32_t *tokens,
				  uint64_t n);
void prefix_seq_free(struct prefix_seq *ps);
/* prefix_seq_grow - make room in ps for n more token ids (the caller adds
 * them after committing their record).  KVF_OK or KVF_ENOMEM. */
kvf_status prefix_seq_grow(struct prefix_seq *ps, uint64_t n);

/* prefix_attach - seq (locked, just created) takes ps and publishes what
 * it can */
void prefix_attach(kvf_store *st, struct seq *seq, struct prefix_seq *ps);
/* prefix_publish - publish seq's chunks that its token ids and every
 * layer's K/V now cover.  Caller holds seq->lock.  Out of memory only
 * leaves chunks unpublished until the next call. */
void prefix_publish(kvf_store *st, struct seq *seq);
/* prefix_forget - seq (locked, being freed) leaves the index */
void prefix_forget(kvf_store *st, struct seq *seq);
/* prefix_truncate - seq (locked) keeps its first n_tokens token ids and
 * the chunks they cover whole; the rest leave the index at once, so no
 * creation can share what seq no longer holds.  The caller writes the
 * "T" record. */
void prefix_truncate(kvf_store *st, struct seq *seq, uint64_t n_tokens);

/* prefix_record - put seq id's "T" record (its token ids) into b.
 * KVF_OK or KVF_ENOMEM. */
kvf_status prefix_record(struct catalog_batch *b, uint64_t id,
			 uint64_t create_seqno, const uint32_t *tokens,
			 uint64_t n, const uint32_t *more, uint64_t n_more);
/* prefix_record_cached - the same for a cached prefix's record (it says
 * the sequence is one, so recovery hides it again) */
kvf_status prefix_record_cached(struct catalog_batch *b, uint64_t id,
				uint64_t create_seqno, const uint32_t *tokens,
				uint64_t n);
/* prefix_record_delete - delete id's "T" record in b (absent is fine) */
void prefix_record_delete(struct catalog_batch *b, uint64_t id);

/* prefix_load - at open, after recovery: track every sequence that has a
 * "T" record and publish its chunks.  KVF_OK, KVF_ECORRUPT (a record of
 * the wrong size; message names it), KVF_ENOMEM, KVF_EIO. */
kvf_status prefix_load(kvf_store *st);

/* One sequence's part in the index (kvf_seq_info, kvtool ls). */
struct prefix_seq_figures {
	uint64_t tokens;        /* token ids registered */
	uint64_t chunks;        /* chunks published */
	uint64_t shared_chunks; /* of them, held by other sequences too */
	uint64_t own_chunks;    /* held by no other sequence: what freeing
				 * (or evicting) it takes out of the index */
	uint64_t shared_hash;   /* chain hash of its deepest shared chunk,
				 * 0 if none: sequences showing the same
				 * value share that prefix */
};
/* prefix_seq_figures - seq's figures; caller holds seq->lock */
void prefix_seq_figures(kvf_store *st, struct seq *seq,
			struct prefix_seq_figures *out);

/* prefix_stats - fill the prefix_* fields of s and add the index's
 * memory to s->index_bytes */
void prefix_stats(kvf_store *st, kvf_stats *s);

/* For eviction (engine/cleaning/evict.c): one chunk of the index. */
struct prefix_chunk_info {
	uint64_t hash;        /* chain hash */
	uint32_t depth;       /* chunk index */
	uint32_t n_holders;   /* sequences holding it */
	uint64_t holder;      /* the most recent of them */
	uint64_t hits;        /* creations that reused it */
	uint64_t last_use_ns; /* CLOCK_MONOTONIC of its last publish or use */
};
/* prefix_chunks - a kvf_malloc'd snapshot of every chunk (*out, *n).
 * KVF_OK or KVF_ENOMEM. */
kvf_status prefix_chunks(kvf_store *st, struct prefix_chunk_info **out,
			 size_t *n);

/* prefix_tokens_copy - a kvf_malloc'd copy of sequence id's registered
 * token ids (*out NULL and *n 0 when it has none).  KVF_OK, KVF_ENOENT
 * (message names `call`), KVF_ENOMEM. */
kvf_status prefix_tokens_copy(kvf_store *st, const char *call, uint64_t id,
			      uint32_t **out, uint64_t *n);

/* ---- cached prefixes (docs/prefix.md, "Cached prefixes") ----------------
 * A cached prefix is a sequence of the caller's namespace that the store
 * owns and hides from the sequence calls (seq->cached): a fork of the
 * published whole chunks of a sequence the caller freed.  Its id is the
 * store's, counted up from PREFIX_CACHED_ID_BASE. */
#define PREFIX_CACHED_ID_BASE 0x6b76630000000000ull /* "kvc" */

/* prefix_chunk_bytes - K/V bytes of one chunk, all layers and heads */
uint64_t prefix_chunk_bytes(const kvf_store *st);
/* prefix_cached_bytes - K/V bytes of the chunks only cached prefixes
 * hold (kvf_stats.prefix_cached_bytes; the budget's measure) */
uint64_t prefix_cached_bytes(kvf_store *st);

/* One cached prefix, for eviction, the budget and kvf_prefix_list. */
struct prefix_cached_info {
	uint64_t id;
	uint64_t chunks;      /* chunks it holds */
	uint64_t own_chunks;  /* of them, held by no other sequence: what
			       * dropping it gives back */
	uint64_t hits;        /* creations that reused the first of those:
			       * its worth (0 when it has none) */
	uint64_t last_use_ns; /* that chunk's last publish or reuse */
	int covered;          /* another cached prefix holds all its chunks */
};
/* prefix_cached_value - seq's figures (caller holds seq->lock) */
void prefix_cached_value(kvf_store *st, struct seq *seq,
			 struct prefix_cached_info *out);
/* prefix_cached_list - a kvf_malloc'd snapshot of every cached prefix.
 * KVF_OK or KVF_ENOMEM. */
kvf_status prefix_cached_list(kvf_store *st, struct prefix_cached_info **out,
			      size_t *n);
/* prefix_cached_count - how many cached prefixes the store holds */
uint64_t prefix_cached_count(kvf_store *st);
/* prefix_cached_id - an id for the next cached prefix (the caller checks
 * that no sequence has it) */
uint64_t prefix_cached_id(kvf_store *st);

/* prefix_count_reuse - a creation asked for n tokens and reused n_reused */
void prefix_count_reuse(kvf_store *st, uint64_t n, uint64_t n_reused);

#endif /* KVF_ENGINE_PREFIX_H */
