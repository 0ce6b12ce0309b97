/*
 * prefix_state.h - the prefix index (owned by prefix.c): which chains of
 * token chunks the store holds KV for, and which sequences hold them.
 * Types only.
 *
 * A chunk is one token group (G token ids).  Chunk c of a sequence is
 * named by its chain hash h_c = XXH3-64(tokens of chunk c, seed h_{c-1})
 * (h_{-1} a fixed seed), so equal chunks at different positions, or after
 * different prefixes, are different nodes.  A node is found by its hash,
 * then confirmed by its parent node and its own G tokens: a hash alone is
 * never trusted, and two chunks whose hashes collide are two nodes in one
 * bucket.
 *
 * Invariants: a node's holders are the sequences whose published chunks
 * include it: the caller's live sequences and the store's cached prefixes
 * (prefix_seq.cached; docs/prefix.md, "Cached prefixes"), n_cached of
 * them; a holder of a node holds its parent too, so a node
 * without holders has no children and is removed.  A sequence publishes
 * chunk c once its token ids cover the chunk (kvf_seq_create_tokens,
 * kvf_seq_add_tokens) and every layer holds its K/V (c + 1) * G tokens.
 *
 * Locking: lock is a leaf, taken inside a sequence's lock (never around
 * one).  A struct prefix_seq belongs to its sequence (seq->prefix) and is
 * changed under that sequence's lock and this lock together.
 */
#ifndef KVF_ENGINE_PREFIX_STATE_H
#define KVF_ENGINE_PREFIX_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

struct prefix_node {
	uint64_t hash;               /* chain hash through this chunk */
	uint32_t depth;              /* chunk index: tokens [depth*G, +G) */
	uint32_t n_holders;          /* entries of holders */
	uint32_t cap_holders;        /* capacity of holders */
	uint32_t n_cached;           /* of the holders, cached prefixes */
	struct prefix_node *parent;  /* chunk depth - 1; NULL at depth 0 */
	struct prefix_node *hnext;   /* next node in its hash bucket */
	struct prefix_node *child;   /* first chunk that follows it */
	struct prefix_node *sibling; /* next child of parent (or next root) */
	uint64_t *holders;           /* [n_holders] sequence ids, newest last */
	uint64_t hits;               /* creations that reused this chunk */
	uint64_t last_use_ns;        /* CLOCK_MONOTONIC of the last publish
				      * or reuse (for eviction) */
	uint32_t tokens[];           /* the chunk's G token ids */
};

/* The token ids of one sequence and the chunks it has published. */
struct prefix_seq {
	uint64_t id;                 /* its sequence */
	uint32_t *tokens;            /* [n_tokens] registered token ids */
	uint64_t n_tokens;
	uint64_t cap_tokens;
	struct prefix_node **nodes;  /* [n_pub] chunk c's node */
	uint64_t n_pub;              /* chunks published */
	uint64_t cap_nodes;
	int cached;                  /* a cached prefix of the store: a
				      * hidden sequence that holds the
				      * chunks of one whose holder was freed */
	struct prefix_seq *next;     /* in prefix_index.seqs */
	struct prefix_seq *prev;
};

struct prefix_index {
	int ready;                   /* lock initialized */
	pthread_mutex_t lock;        /* guards all below but the counters */
	struct prefix_node **bucket; /* [cap] chains by hash; NULL if none */
	uint32_t cap;                /* a power of two, or 0 */
	uint64_t n_nodes;            /* nodes in the index */
	uint64_t node_bytes;         /* memory the nodes and seqs take */
	struct prefix_node *roots;   /* depth-0 nodes, by sibling */
	struct prefix_seq *seqs;     /* every tracked sequence */
	uint64_t n_cached_seqs;      /* of them, cached prefixes */
	uint64_t cached_only;        /* nodes every holder of which is a
				      * cached prefix: what the cache alone
				      * keeps (kvf_stats.prefix_cached_bytes) */
	uint64_t next_cached_id;     /* the id the next cached prefix tries */
	/* counters since open, for kvf_stats */
	_Atomic uint64_t lookups;       /* kvf_seq_create_tokens calls */
	_Atomic uint64_t hits;          /* of them, reusing >= 1 token */
	_Atomic uint64_t tokens_asked;  /* tokens they were given */
	_Atomic uint64_t tokens_reused; /* tokens shared, not appended */
	_Atomic uint64_t bytes_saved;   /* K/V (and X) bytes not rewritten */
	_Atomic uint64_t cache_kept;    /* cached prefixes made */
	_Atomic uint64_t cache_dropped; /* cached prefixes dropped, any cause */
	_Atomic uint64_t cache_hits;    /* creations that shared from one */
};

#endif /* KVF_ENGINE_PREFIX_STATE_H */
