/*
 * seq_state.h - what a sequence is made of (owned by seq.c and
 * seq_stream.c): its streams and their index, the groups waiting for
 * write-back, and the id -> sequence table.  Types only, so that every
 * module can hold a sequence without depending on the sequence calls.
 *
 * A struct seq is reference counted: the table holds one reference and
 * every call that looks it up holds another until seq_put, so a sequence
 * freed by one thread stays valid memory for a call in flight on another
 * (which then sees seq->dead and answers KVF_ENOENT).
 */
#ifndef KVF_ENGINE_SEQ_STATE_H
#define KVF_ENGINE_SEQ_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "engine/base/key.h"

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
	/* pointers first, then the 32-bit fields, then the bytes: 48 bytes,
	 * one of these per (layer, head, kind) of every sequence */
	unsigned char *pages;  /* per group, PAGE_REF_BYTES each; read and
				* written with stream_page/stream_set_page */
	unsigned char *gbuf;   /* the tail group, page_size bytes; NULL if
				* not loaded (empty, or on media only) */
	struct wb_run *wb;     /* groups waiting for write-back (engine/
				* writeback.h); NULL before the first */
	uint32_t n_alloc;      /* capacity of pages (groups) */
	uint32_t n_groups;     /* groups with an entry in pages */
	uint32_t gbuf_bytes;   /* its size, counted in the memory tier */
	uint32_t tail_written; /* tokens of the tail group in pages[tail] */
	uint32_t plain_lo;     /* encoded streams: groups below it keep no
				* plain pages of a tail they were once
				* (seq_record_done drops them) */
	uint8_t gbuf_page;     /* gbuf is a page of the memory tier
				* (tier_page_take, stream_gbuf_alloc): a
				* sealed group waiting for write-back takes
				* it as it is, no copy (wb_seal) */
	uint8_t enc;           /* 0: plain rows; 1 + kvf_kind (K or V): its
				* sealed groups are encoded (a codec
				* store's K/V streams; engine/base/group.h) */
};

_Static_assert(sizeof(struct stream) <= 48, "a stream record stays small");

#define WB_RUN 32u /* pages of one head written back together: 128 KiB
		    * of 4 KiB pages, one request to read back */

/* Sealed groups of one stream waiting in DRAM for write-back.  Their
 * index entries are `per` consecutive ones of every `stride` (a group's
 * sealed pages: all of them in a plain store, a codec store's encoded
 * or plain ones; engine/base/group.h); page[i] is entry
 * wb_entry(w, i). */
struct wb_run {
	uint64_t first;               /* first entry of the group of page[0] */
	uint32_t lead;                /* pages of that group before page[0] */
	uint32_t per, stride;         /* as above; set with the run */
	uint32_t n;                   /* pages waiting */
	uint32_t stripe;              /* where they go; their room there is
				       * promised (segtab.promised) */
	uint32_t n_spare;             /* pages made ahead (wb_prepare) */
	uint32_t cap;                 /* entries of page and of spare: WB_RUN,
				       * more for a sequence not admitted */
	unsigned char **page;         /* [cap], n of them page_size bytes */
	unsigned char **spare;        /* [cap], n_spare of them */
};

/* wb_entry - the index entry of w's i-th waiting page (i <= w->n: the
 * entry the run's next page takes) */
static inline uint64_t wb_entry(const struct wb_run *w, uint64_t i)
{
	i += w->lead;
	return w->first + i / w->per * w->stride + i % w->per;
}

/* wb_below - how many of w's waiting pages have an entry below e */
static inline uint32_t wb_below(const struct wb_run *w, uint64_t e)
{
	uint64_t d, i;

	if (e <= w->first)
		return 0;
	d = e - w->first;
	i = d / w->stride * w->per +
	    (d % w->stride < w->per ? d % w->stride : w->per);
	if (i <= w->lead)
		return 0;
	return i - w->lead < w->n ? (uint32_t)(i - w->lead) : w->n;
}

/* stream_waiting - entry e's page if it waits for write-back, else NULL */
static inline const unsigned char *stream_waiting(const struct stream *s,
						  uint64_t e)
{
	const struct wb_run *w = s->wb;
	uint64_t d;

	if (w == NULL || e < w->first)
		return NULL;
	d = e - w->first;
	if (w->per != w->stride) { /* a codec store's */
		if (d % w->stride >= w->per)
			return NULL;
		d = d / w->stride * w->per + d % w->stride;
	}
	d -= w->lead; /* below lead: wraps past n */
	return d < w->n ? w->page[d] : NULL;
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

/* stream_set_group - group g of s is the page at r now */
static inline void stream_set_group(struct stream *s, uint64_t g,
				    struct page_ref r)
{
	stream_set_page(s, g, r);
	if (g >= s->n_groups)
		s->n_groups = (uint32_t)g + 1;
}

struct open_seg;
struct flush_job;
struct catalog_batch;
struct prefix_seq;

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
	uint64_t *rec_len;     /* [4][n_layers]: the K/V, then X, lengths
				* of its last committed "S" record, then
				* those of the record being committed
				* (seq_record); kvf_seq_truncate never
				* commits a length past them */
	struct stream *kv;     /* [layer][kind K,V][kv_head] */
	struct stream *x;      /* [layer][q_head], NULL before the first X */
	struct stream *kt;     /* [layer][kv_head] K^T pages, NULL without
				* kt_pages; pages[block * kt_groups + dim
				* group]; gbuf holds kt_groups pages of the
				* block being filled */
	struct open_seg *open; /* [n_stripes] */
	struct flush_job *jobs; /* segments being written, newest first */
	uint64_t pack_epoch;   /* the durable point whose packs took its
				* pages last (engine/segments/openseg.c);
				* 0: none */
	struct h2o *h2o;       /* [layer][kv_head], NULL before first use */
	uint64_t *drop;        /* [lane][drop_words], a lane being a KV head
				* of a layer (layer * n_kv_heads + head): bit g:
				* token group g of the lane's K and V is dropped
				* (kvf_h2o_evict, engine/sequences/dropmark.h);
				* NULL: none ever */
	uint32_t drop_words;   /* 64-bit words per lane in drop */
	struct stream *optim;  /* SEQ_NS_OPTIM only: [state * 2 + gen] */
	uint64_t optim_chunks; /* their chunks (pages) per state */
	uint32_t optim_kept;   /* bit s: the rule keeps state s (param, m,
				* v), so its streams hold chunks */
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
	struct segbuf *stash;  /* buffers of the segments an append may open
				* (openseg_stash), taken before it copies */
	uint32_t n_stash;
	int admitted;          /* its pages may go to the media (kvf_options.
				* admit_tokens; engine/writes/writeback.h); 1 unless
				* created by kvf_seq_create with admission on */
	_Atomic uint64_t bytes_read; /* read from media for it since open */
	int attend_missed;     /* its last kvf_attend_batch read from media:
				* the next one reads the layer after ahead
				* (engine/reads/prefetch.h) */
	uint32_t ahead;        /* layer + 1 of its last read-ahead; 0: none
				* (a layer read ahead keeps the chain going) */
	uint32_t pins;         /* kvf_seq_pin count: never evicted while > 0 */
	_Atomic uint64_t last_use; /* seqtab.use_clock at its last use */
	_Atomic uint64_t uses;     /* public calls on it (seq_note_use), as
				    * recorded ("U") plus since open */
	uint64_t use_synced;   /* last_use in the last committed "U" record */
	uint64_t use_capture;  /* last_use in the record a sync is writing */
	uint64_t use_capture_gen; /* that sync (st->dur.gen) */
	int cached;            /* one of the store's cached prefixes
				* (docs/prefix.md): hidden from the
				* caller's calls; set before it enters the
				* table and never changed */
	struct prefix_seq *prefix; /* its token ids and published chunks
				    * (engine/sequences/prefix_state.h); NULL if it
				    * registered none */
};

/*
 * struct seq_table - the id -> sequence table, owned by seq.c: open
 * addressing by id, NULL = empty slot.  Invariant: n counts the live
 * sequences in it.  Locking: lock (read for lookups, write to insert or
 * remove); taken inside a sequence's lock, never around one.
 */
#define SEQ_EVICTED_MEMORY 256u /* evicted ids remembered for messages */

struct seq_table {
	pthread_rwlock_t lock;
	struct seq **slot;  /* [cap] */
	uint32_t cap;       /* a power of two */
	uint32_t n;         /* live sequences */
	_Atomic uint64_t use_clock; /* ticks at each lookup of a caller's
				     * sequence: eviction's notion of time */
	uint64_t evicted[SEQ_EVICTED_MEMORY]; /* latest evicted ids, a ring,
				     * so that KVF_ENOENT can say "evicted";
				     * only the first evicted_n are ids, and
				     * KVF_SEQ_NONE is one created again */
	uint32_t evicted_next;
	uint32_t evicted_n;  /* ids in the ring, up to SEQ_EVICTED_MEMORY */
};

#endif /* KVF_ENGINE_SEQ_STATE_H */
