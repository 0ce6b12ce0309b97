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

enum tier_pool { TIER_RECENT = 0, TIER_HOT = 1, TIER_POOLS };

struct tier_slot {
	unsigned char *data; /* page_size bytes; NULL while free */
	uint32_t addr;       /* media address cached */
	uint32_t check;      /* the index's check of its page (page_check) */
	uint32_t hnext;      /* hash chain */
	uint32_t prev, next; /* pool list (free list: next only) */
	uint16_t pins;       /* callers using data now */
	uint8_t pool;        /* enum tier_pool */
	uint8_t heat;        /* hot pool: hits not yet cooled (0..3) */
};

struct tier_list {
	uint32_t head, tail; /* head = newest (recent) or the hand (hot) */
	uint32_t n;
};

/*
 * struct tier - owned by tier.c.  Invariants: a slot below fresh is on
 * exactly one of the free list and the two pool lists, and in the hash
 * iff on a pool list; slots from fresh on are on none; fixed + (used slots * page_size) <= budget when budget != 0.
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
	uint32_t fresh;              /* slots [fresh, n_slots) were never
				      * used: free too, and not on the list */
	uint32_t used;               /* slots holding a page */
	struct tier_list pool[TIER_POOLS];
	uint32_t recent_cap;         /* slots the recent pool may hold */
	uint32_t miss_tick;          /* read misses since the hand moved */
	uint64_t hits, misses, evictions;
};

#endif /* KVF_ENGINE_TIER_STATE_H */
