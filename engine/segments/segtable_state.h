/*
 * segtable_state.h - the segment table's state (owned by segtable.c): segment states, the
 * per-segment record, free FIFOs, reservations and page references.
 */
#ifndef KVF_ENGINE_SEGTABLE_STATE_H
#define KVF_ENGINE_SEGTABLE_STATE_H

#include <pthread.h>
#include <stdint.h>

enum seg_state {
	SEG_FREE = 0,
	SEG_OPEN,
	SEG_SEALED,
	SEG_DYING,
	SEG_CORRUPT
};

#define SEG_NONE UINT32_MAX

/* the low bits of a page's XXH3-64 that the index keeps (page_check) */
#define PAGE_CHECK_MASK 0xffffffu

struct seg_info {
	uint8_t state;         /* enum seg_state */
	uint8_t kept;          /* FREE, reclaimed or given back without a
				* trim: its space is still allocated
				* (seg_table.n_kept) */
	uint32_t n_data;       /* data pages */
	uint32_t live;         /* pages with refs > 0 */
	uint32_t erase_count;  /* times trimmed for reuse */
	uint64_t seqno;        /* commit sequence number (sealed) */
	uint64_t write_ns;     /* when sealed, ns since the epoch */
	uint64_t owner;        /* sequence it was filled for */
	uint64_t died_epoch;   /* DYING: sync epoch of its death */
	uint64_t *live_bits;   /* bit per data page: referenced by the
				* index; further references of shared
				* (forked) pages are in the shared map.
				* NULL while free; else its slice of
				* live_words */
};

/*
 * struct seg_table - owned by segtable.c.  Invariants: a segment is in its
 * stripe's free FIFO iff it is FREE; n_free and n_dying count the FREE
 * and DYING segments; reserved[s] <= free_count[s]; a page's references
 * are its live bit plus its entry in the shared map.  Locking: lock guards
 * all of it, and is taken inside a sequence's lock, never around one.
 */
struct seg_table {
	pthread_mutex_t lock;
	struct seg_info *info;  /* [n_segments] */
	uint64_t *live_words;   /* [n_segments][words]: every live bitmap,
				 * so opening a segment allocates nothing */
	uint32_t *reclaim_ids;  /* [n_segments]: seg_reclaim's, and */
	uint32_t *wear_counts;  /* seg_wear_record's scratch (durable lock) */
	uint32_t *free_fifo;    /* per stripe ring of free segment ids */
	uint32_t *free_head, *free_count; /* [n_stripes] */
	uint32_t *reserved;     /* [n_stripes] free segments promised */
	uint32_t *promised;     /* [n_stripes] pages waiting for write-back:
				 * their room is held back from writers */
	uint32_t *shared_addr;  /* open addressing: pages with more than one
				 * reference (ADDR_NONE = empty slot) */
	uint32_t *shared_extra; /* their references beyond the first */
	uint32_t shared_cap;    /* slots, a power of two (0: none yet) */
	uint32_t shared_n;      /* pages in the map */
	uint32_t n_free;        /* free segments, all stripes */
	uint32_t n_dying;       /* DYING segments */
	uint32_t n_kept;        /* FREE segments with `kept` set */
	uint64_t n_opened;      /* segments seg_take_open gave, ever */
	uint32_t n_picked;      /* dying segments seg_reclaim_pick chose (in
				 * reclaim_ids), for seg_reclaim_apply */
	uint32_t keep_picked;   /* of them, the first to stay untrimmed */
	uint32_t trim_picked;   /* kept segments past keep_cap, for
				 * seg_reclaim_apply to trim */
	uint64_t epoch;         /* durable-point epoch, from 1; a death
				 * recorded in epoch e is reusable after the
				 * durable point that ends e; 0 = already */
	int wear_dirty;         /* erase counts changed since last sync */
};

#endif /* KVF_ENGINE_SEGTABLE_STATE_H */
