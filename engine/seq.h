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

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "api/status.h"
#include "engine/key.h"
#include "kvflash.h"

/* Sequences live in two namespaces with ids of their own: the caller's
 * (SEQ_NS_USER) and optimizer state (SEQ_NS_OPTIM, engine/optim_*.c),
 * which the sequence calls never see. */
#define SEQ_NS_USER 0u
#define SEQ_NS_OPTIM 1u
#define OPTIM_STREAMS 6u /* param, m, v; two generations each */
/* Where a group's page is, and the low 24 bits of its XXH3-64 so every
 * read from media is verified without reading the segment summary. */
struct page_ref {
	uint32_t addr;  /* page address, ADDR_NONE if none */
	uint32_t check; /* low 24 bits of the page's XXH3-64 */
};

/* In a stream's index a page_ref takes 7 bytes (address, then check,
 * little-endian): 0.17 % of the 4 KiB page it describes. */
#define PAGE_REF_BYTES 7u

/* One (layer, kind, head) of one sequence. */
struct stream {
	unsigned char *pages;  /* per group, PAGE_REF_BYTES each; read and
				* written with stream_page/stream_set_page */
	uint32_t n_alloc;      /* capacity of pages (groups) */
	uint32_t n_groups;     /* groups with an entry in pages */
	unsigned char *gbuf;   /* the tail group, page_size bytes; NULL if
				* not loaded (empty, or on media only) */
	uint32_t gbuf_bytes;   /* its size, counted in the memory tier */
	struct wb_run *wb;     /* groups waiting for write-back (engine/
				* writeback.h); NULL before the first */
	uint32_t tail_written; /* tokens of the tail group in pages[tail] */
};

#define WB_RUN 32u /* pages of one head written back together: 128 KiB
		    * of 4 KiB pages, one request to read back */

/* Sealed groups of one stream waiting in DRAM for write-back. */
struct wb_run {
	uint64_t first;               /* group of page[0] */
	uint32_t n;                   /* pages waiting */
	uint32_t stripe;              /* where they go; their room there is
				       * promised (segtab.promised) */
	uint32_t n_spare;             /* pages made ahead (wb_prepare) */
	unsigned char *page[WB_RUN];  /* page_size bytes each */
	unsigned char *spare[WB_RUN];
};

/* stream_waiting - group g's page if it waits for write-back, else NULL */
static inline const unsigned char *stream_waiting(const struct stream *s,
						  uint64_t g)
{
	if (s->wb == NULL || g < s->wb->first || g - s->wb->first >= s->wb->n)
		return NULL;
	return s->wb->page[g - s->wb->first];
}

static inline struct page_ref stream_page(const struct stream *s, uint64_t g)
{
	const unsigned char *b = s->pages + g * PAGE_REF_BYTES;
	struct page_ref r;

	r.addr = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
		 (uint32_t)b[3] << 24;
	r.check = (uint32_t)b[4] | (uint32_t)b[5] << 8 | (uint32_t)b[6] << 16;
	return r;
}

static inline void stream_set_page(struct stream *s, uint64_t g,
				   struct page_ref r)
{
	unsigned char *b = s->pages + g * PAGE_REF_BYTES;

	b[0] = (unsigned char)r.addr;
	b[1] = (unsigned char)(r.addr >> 8);
	b[2] = (unsigned char)(r.addr >> 16);
	b[3] = (unsigned char)(r.addr >> 24);
	b[4] = (unsigned char)r.check;
	b[5] = (unsigned char)(r.check >> 8);
	b[6] = (unsigned char)(r.check >> 16);
}

struct open_seg;
struct flush_job;
struct catalog_batch;

/* H2O heavy-hitter scores of one (layer, KV head): accumulated attention
 * probability per token (kept in memory only; not persisted or forked). */
struct h2o {
	float *score; /* [cap] per token */
	uint64_t len; /* tokens with a score */
	uint64_t cap; /* entries allocated */
};

struct seq {
	uint64_t id;
	uint32_t ns;           /* SEQ_NS_USER or SEQ_NS_OPTIM */
	uint64_t family;       /* root of its fork tree */
	uint64_t parent;       /* UINT64_MAX if not forked */
	uint64_t create_seqno; /* seqno of its creation */
	pthread_mutex_t lock;  /* guards everything below */
	_Atomic int refs;      /* the table's one, plus each user's */
	int dead;              /* freed; calls answer KVF_ENOENT */
	uint64_t changes;      /* length changes since open */
	uint64_t synced_changes; /* of them, in the last committed record */
	uint64_t capture;      /* changes in the record a sync is writing */
	uint64_t capture_gen;  /* that sync (st->dur.gen) */
	int has_ref_record;    /* an "R" record exists (forked) */
	uint64_t *len;         /* K/V tokens per layer */
	uint64_t *x_len;       /* X tokens per layer */
	struct stream *kv;     /* [layer][kind K,V][kv_head] */
	struct stream *x;      /* [layer][q_head], NULL before the first X */
	struct stream *kt;     /* [layer][kv_head] K^T pages, NULL without
				* kt_pages; pages[block * kt_groups + dim
				* group]; gbuf holds kt_groups pages of the
				* block being filled */
	struct open_seg *open; /* [n_stripes] */
	struct flush_job *jobs; /* segments being written, newest first */
	struct h2o *h2o;       /* [layer][kv_head], NULL before first use */
	struct stream *optim;  /* SEQ_NS_OPTIM only: [state * 2 + gen] */
	uint64_t optim_chunks; /* their chunks (pages) per state */
	uint32_t optim_gen;    /* the committed generation, 0 or 1 */
	uint64_t optim_steps;  /* steps done, as committed */
	int optim_handles;     /* kvf_opt handles open on it */
	float *vbar;           /* [layer][kv_head][head_dim] mean of V, for
				* SparF; NULL before first use */
	uint64_t *vbar_n;      /* [layer][kv_head] tokens in that mean */
	uint64_t vbar_changes; /* changes to the means, as changes for "S": */
	uint64_t vbar_synced;  /* of them, in the last committed "V" record */
	uint64_t vbar_capture; /* in the record a sync is writing */
	uint64_t vbar_capture_gen; /* that sync (st->dur.gen) */
	uint64_t vbar_seen;    /* attend: a layer's vbar_n sum before a call */
	uint32_t *reserved;    /* [n_stripes] segments reserved; segtab.lock */
	_Atomic uint64_t bytes_read; /* read from media for it since open */
};

/*
 * struct seq_table - the id -> sequence table, owned by seq.c: open
 * addressing by id, NULL = empty slot.  Invariant: n counts the live
 * sequences in it.  Locking: lock (read for lookups, write to insert or
 * remove); taken inside a sequence's lock, never around one.
 */
struct seq_table {
	pthread_rwlock_t lock;
	struct seq **slot;  /* [cap] */
	uint32_t cap;       /* a power of two */
	uint32_t n;         /* live sequences */
};

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
kvf_status stream_reserve(kvf_store *st, struct stream *s, uint64_t n_groups);
/* stream_gbuf_alloc - give s a zeroed group buffer of bytes, counted
 * against the memory tier (KVF_ENOMEM: out of memory or budget);
 * stream_gbuf_free - free it; stream_free_all - n streams, all they hold */
kvf_status stream_gbuf_alloc(kvf_store *st, struct stream *s, uint32_t bytes);
void stream_gbuf_free(kvf_store *st, struct stream *s);
void streams_free(kvf_store *st, struct stream *s, uint32_t n);
/* stream_wb_free - drop s's pages waiting for write-back (the sequence
 * goes; they were never synced) */
void stream_wb_free(kvf_store *st, struct stream *s);
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

/* seq_record - add seq's "S" record to b */
kvf_status seq_record(kvf_store *st, struct seq *seq, struct catalog_batch *b);

#endif /* KVF_ENGINE_SEQ_H */
