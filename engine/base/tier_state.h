/*
 * tier_state.h - the memory tier's state (owned by tier.c; engine/base/tier.h says how it
 * works).
 */
#ifndef KVF_ENGINE_TIER_STATE_H
#define KVF_ENGINE_TIER_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define TIER_NONE UINT32_MAX
#define TIER_LOOSE (UINT32_MAX - 1) /* tier_slot.chunk: a loose page */

enum tier_pool { TIER_RECENT = 0, TIER_HOT = 1, TIER_POOLS };

struct tier_slot {
	unsigned char *data; /* page_size bytes; NULL while free */
	uint32_t chunk;      /* the chunk data lies in; TIER_NONE: a page
			      * of its own; TIER_LOOSE: a loose page */
	uint32_t addr;       /* media address cached */
	uint32_t check;      /* the index's check of its page (page_check) */
	uint32_t hnext;      /* hash chain */
	uint32_t prev, next; /* pool list (free list: next only) */
	uint16_t pins;       /* callers using data now */
	uint8_t pool;        /* enum tier_pool */
	uint8_t heat;        /* hot pool: hits not yet cooled (0..3) */
};

/* A segment buffer the cache took over whole once its write was done
 * (tier_put_segment): its data pages are cached where they were written. */
struct tier_chunk {
	unsigned char *buf; /* the buffer; NULL while the record is free */
	uint32_t live;      /* slots still pointing into it */
	uint32_t next;      /* free records, via next */
};

struct tier_list {
	uint32_t head, tail; /* head = newest (recent) or the hand (hot) */
	uint32_t n;
};

/*
 * struct tier - owned by tier.c.  Invariants: a slot below fresh is on
 * exactly one of the free list and the two pool lists, and in the hash
 * iff on a pool list; slots from fresh on are on none, and untouched;
 * bytes = pages of their own * page_size + (chunks holding a buffer
 * + stock + growing + carved) * chunk_bytes - loose pages taken *
 * page_size (tier_page_take counts them in fixed); fixed + bytes <=
 * budget when budget != 0.  The grower thread touches only stock, bytes,
 * growing, hits_grown and wb_grown, under lock.
 */
struct tier {
	uint64_t budget;             /* bytes; 0 = no tier */
	_Atomic uint64_t fixed;      /* group buffers, index, tables */
	_Atomic uint64_t peak;       /* most held since open */
	pthread_mutex_t lock;        /* everything below */
	struct tier_slot *slot;      /* [n_slots] */
	uint32_t *bucket;            /* [n_buckets] chain heads */
	uint32_t n_slots, n_buckets;
	uint32_t hash_shift;         /* 32 - log2(n_buckets) */
	uint32_t free_head;          /* free slots, via next */
	uint32_t fresh;              /* slots from here on never used */
	uint32_t used;               /* slots holding a page */
	struct tier_list pool[TIER_POOLS];
	uint32_t recent_cap;         /* slots the recent pool may hold */
	uint32_t miss_tick;          /* read misses since the hand moved */
	uint64_t hits, misses, evictions;
	uint32_t *seg_drops;         /* [n_segments] times each segment's
				      * pages were dropped (tier_drop_segment),
				      * and drops_all of tier_drop_all: a
				      * prefetch's page read before a drop of
				      * its segment may be stale */
	uint32_t drops_all;
	uint64_t bytes;              /* cache memory (see above) */
	_Atomic uint64_t placed;     /* of it, pages lying in segments by
				      * pointer, not written yet (tier_page_placed) */
	uint32_t page_size;
	/* written segments cached in place (tier.h) */
	uint64_t chunk_bytes;        /* a segment buffer; 0 = pages copied */
	struct tier_chunk *chunk;    /* [n_chunks] */
	uint32_t n_chunks, chunk_free;
	uint32_t chunks_live;        /* records holding a buffer */
	unsigned char **stock;       /* [stock_cap] buffers ready to swap */
	uint32_t n_stock, stock_cap;
	uint32_t growing;            /* buffers the grower is making */
	uint64_t read_puts;          /* pages read from media and cached */
	uint64_t hits_grown;         /* hits + read_puts when the grower
				      * last made one */
	uint64_t wb_carves;          /* buffers carved for pages waiting
				      * for write-back */
	uint64_t wb_grown;           /* of them, those the grower made (or
				      * began) one for; it owes at most
				      * WB_AHEAD (carve) */
	pthread_t grower;            /* makes stock in the background */
	int grower_on, grower_stop;
	pthread_cond_t grow;         /* the grower's doorbell */
	uint64_t adopted, not_adopted; /* segments cached in place, or not
					* (no buffer to swap) */
	/* loose pages: buffers carved into pages (tier_page_take) for pages
	 * waiting for write-back and pages read from media, so that those
	 * reuse memory already faulted in; carved buffers are freed at
	 * close only */
	unsigned char **loose;       /* [loose_cap] free loose pages */
	uint32_t n_loose, loose_cap;
	unsigned char **carved;      /* [n_chunks] buffers carved */
	uint32_t n_carved;
};

#endif /* KVF_ENGINE_TIER_STATE_H */
