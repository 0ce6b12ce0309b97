/*
 * ftl_wear.h - wear accounting and wear leveling for one partition: the
 * erase-count histogram (min, max, mean, wear-evenness index) and the pool
 * of free blocks, which hands out the least-worn block first (dynamic wear
 * leveling) or the most-worn one (for cold data moved by static wear
 * leveling).
 *
 * Invariants: the histogram counts every block of the partition that is
 * not retired, by erase count; min_ec and max_ec are the smallest and
 * largest counts with a non-zero entry (both 0 when no block is left).  A
 * block in the pool is erased and not retired, and its erase count does
 * not change while it is there.
 *
 * Not thread-safe: the flash media serializes every call.
 */
#ifndef KVF_FTL_WEAR_H
#define KVF_FTL_WEAR_H

#include <stdint.h>

#include "kvflash.h"

#define WEAR_NONE UINT32_MAX /* no block */

struct wear_hist {
	uint64_t *count;  /* [ec] live blocks erased ec times */
	uint32_t cap;     /* entries allocated in count */
	uint32_t min_ec;  /* least erase count of a live block (erases) */
	uint32_t max_ec;  /* greatest erase count of a live block (erases) */
	uint64_t n;       /* live (not retired) blocks */
	uint64_t sum;     /* sum of live erase counts (erases) */
	uint64_t sum_sq;  /* sum of squared live erase counts (erases^2) */
};

/* wear_hist_init - n_blocks blocks, all never erased.  KVF_OK/KVF_ENOMEM. */
kvf_status wear_hist_init(struct wear_hist *h, uint64_t n_blocks);
void wear_hist_release(struct wear_hist *h);
/* wear_hist_load - after init: the live blocks (live[b] != 0) among n
 * have erase counts ec[b], the others retired.  KVF_OK/KVF_ENOMEM. */
kvf_status wear_hist_load(struct wear_hist *h, const uint32_t *ec,
			  const uint8_t *live, uint32_t n);
/* wear_hist_reserve - make room for erase count ec, so that the erase
 * that reaches it cannot fail.  Return: KVF_OK, KVF_ENOMEM (unchanged). */
kvf_status wear_hist_reserve(struct wear_hist *h, uint32_t ec);
/* wear_hist_erased - a block went from old_ec to old_ec + 1 erases (room
 * for old_ec + 1 reserved first). */
void wear_hist_erased(struct wear_hist *h, uint32_t old_ec);
/* wear_hist_retire - a block with ec erases retired: it leaves the count. */
void wear_hist_retire(struct wear_hist *h, uint32_t ec);
/* wear_evenness - (sum e)^2 / (n sum e^2): 1 = perfectly even wear, 1/n =
 * one block takes it all; 1 when nothing was erased yet. */
double wear_evenness(uint64_t n, uint64_t sum, uint64_t sum_sq);

enum pool_pick {
	POOL_LEAST_WORN = 0, /* dynamic wear leveling: fewest erases first */
	POOL_MOST_WORN = 1   /* for cold data: the most erased block */
};

/*
 * The free blocks of one partition, kept per die (die-in-partition =
 * local block % n_dies).  With least_worn set each die's blocks form a
 * min-heap on (erase count, block); otherwise a ring in the order they
 * were freed.
 */
struct free_pool {
	uint32_t n_dies;        /* dies of the partition */
	uint32_t cap;           /* slots per die */
	uint32_t *slot;         /* [die * cap + i] local block ids */
	uint32_t *size;         /* [die] free blocks in the die */
	uint32_t *head;         /* [die] ring start (least_worn off) */
	const uint32_t *ec;     /* erase counts indexed by local block */
	int least_worn;         /* 1: heap by erase count; 0: ring */
	uint32_t n_free;        /* free blocks in all dies */
};

/*
 * pool_init - an empty pool for n_blocks local blocks over n_dies dies;
 * ec points at the erase count of local block 0 (it must stay valid).
 * Return: KVF_OK, KVF_ENOMEM.
 */
kvf_status pool_init(struct free_pool *p, uint32_t n_blocks, uint32_t n_dies,
		     const uint32_t *ec, int least_worn);
void pool_release(struct free_pool *p);
/* pool_put - block (local, erased, not retired) joins its die's pool. */
void pool_put(struct free_pool *p, uint32_t block);
/*
 * pool_take - a free block: the least worn of die `die` (of the die with
 * the most free blocks when that one has none), or the most worn of all
 * dies.  Returns WEAR_NONE when the pool is empty.
 */
uint32_t pool_take(struct free_pool *p, uint32_t die, enum pool_pick pick);

/* pool_max_ec - the erase count of the most worn free block (0 if none). */
uint32_t pool_max_ec(const struct free_pool *p);

#endif /* KVF_FTL_WEAR_H */
