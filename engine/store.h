/*
 * store.h - the store's internal state, shared by the engine's modules.
 *
 * A store is a directory: the header file KVFLASH, the catalog (RocksDB)
 * in meta/, a LOCK file, and the media (files stripe-NNN.kvf unless device
 * paths were given).
 *
 * Data flows: kvf_append copies each head's tokens into its stream's group
 * buffer; a full group is sealed into a page of the sequence's open segment
 * on the stream's next stripe; a full open segment is written with its
 * summary in one write and its catalog record is committed; kvf_sync seals
 * partial groups and segments and makes it all durable.
 *
 * Locking, in the order they may be taken:
 *   sync_lock       one durable point at a time: kvf_sync, the cleaner,
 *                   kvf_seq_free and the optimizer calls take it first;
 *   world (rwlock)  every public call holds it shared; the cleaner's
 *                   relocation commit holds it exclusive, so it sees no
 *                   call half done;
 *   seq->lock       a sequence's streams, lengths and open segments;
 *                   held for a whole call on that sequence (reads too);
 *   seq_table_lock  the id -> sequence table;
 *   seg_lock        the segment table, free lists, page references
 *                   (live bits and the shared-page map).
 * A call holds one sequence lock, except fork (the parent, then the new
 * child before it is visible) and attention batches (in id order).
 *
 * Segment states: FREE -> OPEN (a sequence is filling it) -> SEALED (on
 * media, record committed) -> DYING (no live page; reusable after the
 * next sync makes its death durable) -> FREE (trimmed).  CORRUPT: failed
 * verification at open; kept out of use.
 */
#ifndef KVF_ENGINE_STORE_H
#define KVF_ENGINE_STORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "engine/catalog.h"
#include "engine/key.h"
#include "engine/meta.h"
#include "engine/segfmt.h"
#include "ftl/media.h"
#include "api/status.h"
#include "kvflash.h"

enum seg_state {
	SEG_FREE = 0,
	SEG_OPEN,
	SEG_SEALED,
	SEG_DYING,
	SEG_CORRUPT
};

#define SEG_NONE UINT32_MAX
/* Sequences live in two namespaces with ids of their own: the caller's
 * (SEQ_NS_USER) and optimizer state (SEQ_NS_OPTIM, engine/optim_*.c),
 * which the sequence calls never see. */
#define SEQ_NS_USER 0u
#define SEQ_NS_OPTIM 1u
#define OPTIM_STREAMS 6u /* param, m, v; two generations each */
#define WRITER_THREADS 4 /* segment writes in flight at once (2 kept a
			  * file-store optimizer step waiting on its
			  * writes: 487 against 446 ms a step, means of
			  * six alternating runs) */

/* Where a group's page is, and the low 24 bits of its XXH3-64 so every
 * read from media is verified without reading the segment summary. */
struct page_ref {
	uint32_t addr;  /* page address, ADDR_NONE if none */
	uint32_t check; /* low 24 bits of the page's XXH3-64 */
};

/* In a stream's index a page_ref takes 7 bytes (address, then check,
 * little-endian): 0.17 % of the 4 KiB page it describes. */
#define PAGE_REF_BYTES 7u
#define PAGE_CHECK_MASK 0xffffffu

/* One (layer, kind, head) of one sequence. */
struct stream {
	unsigned char *pages;  /* per group, PAGE_REF_BYTES each; read and
				* written with stream_page/stream_set_page */
	uint32_t n_alloc;      /* capacity of pages (groups) */
	uint32_t n_groups;     /* groups with an entry in pages */
	unsigned char *gbuf;   /* the tail group, page_size bytes; NULL if
				* not loaded (empty, or on media only) */
	uint32_t tail_written; /* tokens of the tail group in pages[tail] */
};

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

/* A segment being filled for one sequence on one stripe. */
struct open_seg {
	uint32_t segid;        /* SEG_NONE: none open */
	uint32_t n_pages;      /* data pages placed */
	uint32_t n_superseded; /* entries in sb->superseded */
	uint32_t n_runs;       /* entries in sb->runs */
	struct segbuf *sb;     /* its buffers (engine/writer.h); NULL when
				* none is open */
};

struct segbuf;
struct flush_job;
struct batch;

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
	uint64_t capture_gen;  /* that sync (st->sync_gen) */
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
	uint64_t vbar_capture_gen; /* that sync (st->sync_gen) */
	uint64_t vbar_seen;    /* attend: a layer's vbar_n sum before a call */
	uint32_t *reserved;    /* [n_stripes] segments reserved; seg_lock */
};

struct seg_info {
	uint8_t state;         /* enum seg_state */
	uint32_t n_data;       /* data pages */
	uint32_t live;         /* pages with refs > 0 */
	uint32_t erase_count;  /* times trimmed for reuse */
	uint64_t seqno;        /* commit sequence number (sealed) */
	uint64_t write_ns;     /* when sealed, ns since the epoch */
	uint64_t owner;        /* sequence it was filled for */
	uint64_t died_epoch;   /* DYING: sync epoch of its death */
	uint64_t *live_bits;   /* bit per data page: referenced by the
				* index; further references of shared
				* (forked) pages are in store.shared.
				* NULL while free; else its slice of
				* store.live_words */
};

/* counters for kvf_stats; atomics, updated where the bytes move.  The
 * write counters are saved by every durable point ("N") and restored at
 * open, so they count since the store was created; reads count since open */
struct store_counters {
	_Atomic uint64_t user_bytes;      /* bytes handed to append */
	_Atomic uint64_t data_bytes;      /* full data pages written */
	_Atomic uint64_t padding_bytes;   /* partial pages written by sync */
	_Atomic uint64_t kt_bytes;        /* K^T pages written */
	_Atomic uint64_t optim_bytes;     /* optimizer state pages written */
	_Atomic uint64_t cleaner_bytes;   /* pages copied by the cleaner */
	_Atomic uint64_t summary_bytes;   /* summary pages written */
	_Atomic uint64_t bytes_read;      /* bytes read from media */
	_Atomic uint64_t pages_read;      /* pages read from media */
	_Atomic uint64_t segments_written; /* segment writes */
	_Atomic uint64_t segments_cleaned; /* victims the cleaner emptied */
	_Atomic uint64_t segments_reclaimed; /* trimmed for reuse */
	_Atomic uint64_t sparf_pages_read;   /* pages SparF read */
	_Atomic uint64_t sparf_pages_skipped; /* K/V pages dense would
					       * have read and SparF did not */
};

struct kvf_store {
	char *dir;              /* the store directory */
	kvf_options opts;       /* as opened; paths not kept */
	struct store_header hdr; /* the configuration on disk */
	int read_only;          /* opened read-only */
	int lock_fd;            /* flock on DIR/LOCK */
	int lock_created;       /* this open made DIR/LOCK */
	struct catalog *cat;
	struct kvf_media *media;
	int media_borrowed;     /* media is the caller's (store_open) */
	int trim;               /* trim dying segments (kvf_options.trim) */
	_Atomic int fatal;      /* sticky KVF_EFATAL */

	/* shape, derived once */
	uint32_t elt_bytes;     /* bytes per element of the dtype */
	uint32_t group_tokens;  /* G: tokens per page of one head */
	uint32_t row_bytes;     /* head_dim * elt_bytes: one token of a head */
	uint32_t pages_per_seg; /* pages per segment */
	uint32_t data_per_seg;  /* data pages per segment (summary aside) */
	uint32_t page_bits;     /* low bits of an address: page in segment */
	uint32_t n_segments;    /* n_stripes * segs_per_stripe */
	uint32_t kt_dims;       /* E: head dims per K^T page (0: no K^T) */
	uint32_t kt_tokens;     /* T: tokens per K^T page */
	uint32_t kt_groups;     /* head_dim / E: K^T pages per token block */

	pthread_rwlock_t world; /* see the file comment */

	pthread_rwlock_t seq_table_lock;
	struct seq **seq_table; /* open addressing by id; NULL = empty */
	uint32_t seq_table_cap; /* power of two */
	uint32_t n_seqs;        /* live sequences */

	pthread_mutex_t seg_lock;
	struct seg_info *segs;  /* [n_segments] */
	uint64_t *live_words;   /* [n_segments][words]: every live bitmap,
				 * so opening a segment allocates nothing */
	uint32_t *reclaim_ids;  /* [n_segments]: seg_reclaim's, and */
	uint32_t *wear_counts;  /* seg_wear_record's scratch (sync_lock) */
	struct catalog_batch *reclaim_batch; /* store_durable_point's */
	uint32_t *free_fifo;    /* per stripe ring of free segment ids */
	uint32_t *free_head, *free_count; /* [n_stripes] */
	uint32_t *reserved;     /* [n_stripes] free segments promised */
	uint32_t *shared_addr;  /* open addressing: pages with more than one
				 * reference (ADDR_NONE = empty slot) */
	uint32_t *shared_extra; /* their references beyond the first */
	uint32_t shared_cap;    /* slots, a power of two (0: none yet) */
	uint32_t shared_n;      /* pages in the map */
	uint32_t n_free;        /* free segments, all stripes */
	uint32_t n_dying;       /* DYING segments */
	uint64_t epoch;         /* durable-point epoch, from 1; a death
				 * recorded in epoch e is reusable after the
				 * durable point that ends e; 0 = already */
	int wear_dirty;         /* erase counts changed since last sync */

	_Atomic uint64_t next_seqno; /* commit sequence numbers */
	_Atomic uint64_t next_optim_id; /* next optimizer pseudo-sequence id */
	uint64_t synced_seqno;  /* from "N": durable as of the last sync */
	uint64_t n_syncs;       /* syncs since create */
	uint64_t n_points;      /* durable points since create; sync_lock */
	pthread_mutex_t optim_lock; /* guards optim_open */
	struct kvf_opt *optim_open; /* open optimizer handles (optim_handle.c) */
	int mark_fd;            /* DIR/SYNCED (engine/syncmark.h); -1: none */
	char *mark_path;        /* its path, for messages */
	uint64_t sync_gen;      /* kvf_sync calls begun; sync_lock */
	struct store_counters c;
	pthread_mutex_t sync_lock; /* one sync or cleaning pass at a time */
	struct pool *pool;      /* workers for compute near the data */

	/* the segment writer (engine/writer.c) */
	pthread_t writer_threads[WRITER_THREADS];
	pthread_mutex_t writer_lock;  /* guards the queue and counts below */
	pthread_cond_t writer_work;   /* a job was queued, or stop */
	pthread_cond_t writer_idle;   /* a job finished */
	struct flush_job *wq_head, *wq_tail; /* queued, oldest first */
	uint32_t inflight;            /* jobs queued or being written */
	uint64_t write_epoch;         /* bumped by writer_written_bound */
	uint64_t unwritten[2];        /* jobs given a seqno and not yet
				       * written, by write_epoch's parity
				       * when given */
	int writer_stop;              /* close asks it to end */
	int writer_running;           /* threads started */
	pthread_mutex_t pool_lock;    /* guards the spares below */
	struct segbuf *free_bufs;     /* segment buffers to reuse */
	uint32_t n_free_bufs;         /* on that list; pool_lock */
	struct batch *read_batches;   /* read buffers to reuse (readpath.c);
				       * pool_lock */
	uint32_t n_read_batches;      /* in read_batches; pool_lock */
	char fatal_msg[KVF_ERRMSG_CAP]; /* why the store stopped; set once */

	/* the background cleaner (engine/cleaner.c) */
	pthread_t cleaner_thread;
	pthread_mutex_t cleaner_lock; /* guards the three flags below */
	pthread_cond_t cleaner_cond;  /* kicks and stop */
	int cleaner_stop;             /* close asks it to end */
	int cleaner_kicked;           /* a writer saw free space run low */
	int cleaner_running;          /* the thread exists */
};

/* seg_stripe - the stripe of a global segment id */
static inline uint32_t seg_stripe(const struct kvf_store *st, uint32_t segid)
{
	return segid % st->hdr.n_stripes;
}

static inline uint64_t seg_in_stripe(const struct kvf_store *st,
				     uint32_t segid)
{
	return segid / st->hdr.n_stripes;
}

/*
 * store_durable_point - make every committed segment durable (media sync,
 * then b plus the sync record committed with a synced log) and reuse the
 * segments that died before it.  is_sync counts it as a kvf_sync.
 * Caller holds sync_lock.  Return: KVF_OK, or KVF_EFATAL.
 */
kvf_status store_durable_point(kvf_store *st, struct catalog_batch *b,
				int is_sync);

/* store_read_header - the header DIR/KVFLASH at path, checked: KVF_ENOENT
 * when there is none, KVF_ECORRUPT when it is damaged, KVF_EVERSION */
kvf_status store_read_header(const char *path, struct store_header *h);

/* store_header_decode - the header in buf (n bytes read from the file
 * path, named in messages), checked as store_read_header does; *h is
 * written only on KVF_OK.  No I/O: the fuzz target calls it directly.
 * Return: KVF_OK; KVF_ECORRUPT; KVF_EVERSION. */
kvf_status store_header_decode(const void *buf, size_t n, const char *path,
			       struct store_header *h);

/*
 * store_open - kvf_open, on the caller's media when media is not NULL: the
 * store then uses it as it is (no fresh start for memory or flash media),
 * and kvf_close leaves it open.  For tests and benchmarks that keep a
 * device across store handles (power cuts on the flash emulator).
 */
kvf_status store_open_media(const char *dir, const kvf_options *opts,
		      struct kvf_media *media, kvf_store **out);

/* store_check - refuse calls on a store in the fatal state */
kvf_status store_check(kvf_store *st, const char *call);
/* store_set_fatal - enter the fatal state; returns KVF_EFATAL */
kvf_status store_set_fatal(kvf_store *st, kvf_status cause, const char *call);

#endif /* KVF_ENGINE_STORE_H */
