/*
 * ftl_gc.h - victim choice for device garbage collection, and the
 * analytic write-amplification models it is validated against.
 *
 * The index knows every block of one partition by its valid-page count;
 * blocks that are sealed (fully programmed, holding data) are candidates:
 *  - greedy:       fewest valid pages.  Sealed blocks sit in one list per
 *                  valid count, so a pick is O(1) amortized;
 *  - cost-benefit: largest age * (1 - u) / 2u, u = valid / pages per block
 *                  and age = clock - seal time (a walk from the oldest
 *                  block, cut short by a bound; it keeps the lists too);
 *  - FIFO:         the block sealed longest ago (a list in seal order);
 *  - d-choices:    fewest valid pages among d sealed blocks drawn
 *                  uniformly with replacement.
 * Invariants: valid[b] counts the pages of b that hold live data, open or
 * sealed; a block is in the sealed set, the FIFO list and (greedy) its
 * valid-count list exactly while it is sealed.
 *
 * Not thread-safe: the flash media serializes every call.
 */
#ifndef KVF_FTL_GC_H
#define KVF_FTL_GC_H

#include <stdint.h>

#include "ftl/nand.h"

#define GC_NONE UINT32_MAX /* no block */

struct gc_index {
	enum kvf_flash_gc_policy policy; /* how gc_pick chooses */
	uint32_t n_blocks;   /* blocks of the partition */
	uint32_t ppb;        /* pages per block */
	uint32_t d;          /* d-choices sample size */
	uint64_t rng;        /* d-choices generator state */
	uint32_t *valid;     /* [block] live pages (pages) */
	uint64_t *seal_time; /* [block] clock when sealed (host pages) */
	uint32_t *pos;       /* [block] index in `set`, GC_NONE if not sealed */
	uint32_t *set;       /* sealed blocks, in no order */
	uint32_t n_sealed;   /* entries in set */
	uint32_t *fnext;     /* [block] next in seal order (FIFO) */
	uint32_t *fprev;     /* [block] previous in seal order (FIFO) */
	uint32_t fifo_head;  /* sealed longest ago */
	uint32_t fifo_tail;  /* sealed last */
	uint32_t *bnext;     /* greedy, c-b: [block] next in its valid-count list */
	uint32_t *bprev;     /* greedy, c-b: [block] previous in that list */
	uint32_t *bhead;     /* greedy, c-b: [valid count] first block */
	uint32_t min_hint;   /* greedy, c-b: no sealed block has fewer valid */
	double *cb_weight;   /* cost-benefit: [valid] (1 - u) / 2u */
};

/*
 * gc_init - an index of n_blocks blocks of ppb pages, none sealed, for
 * policy (d and seed used by d-choices).  Return: KVF_OK, KVF_ENOMEM.
 */
kvf_status gc_init(struct gc_index *g, enum kvf_flash_gc_policy policy,
		   uint32_t n_blocks, uint32_t ppb, uint32_t d, uint64_t seed);
void gc_release(struct gc_index *g);

/* gc_seal - block b is full: it becomes a candidate, sealed at `now`. */
void gc_seal(struct gc_index *g, uint32_t b, uint64_t now);
/* gc_reseal - put back a block unsealed by a GC cut short, with its old
 * seal time (it goes to its place in seal order). */
void gc_reseal(struct gc_index *g, uint32_t b, uint64_t sealed_at);
/* gc_unseal - block b stops being a candidate (picked, or emptied). */
void gc_unseal(struct gc_index *g, uint32_t b);

static inline int gc_is_sealed(const struct gc_index *g, uint32_t b)
{
	return g->pos[b] != GC_NONE;
}

/* gc_greedy_move - greedy bookkeeping of a sealed block whose count went
 * from old to valid[b] (in gc_invalidate's fast path). */
void gc_greedy_move(struct gc_index *g, uint32_t b, uint32_t old);

/* gc_invalidate - one page of block b died. */
static inline void gc_invalidate(struct gc_index *g, uint32_t b)
{
	g->valid[b]--;
	if (g->bhead && g->pos[b] != GC_NONE)
		gc_greedy_move(g, b, g->valid[b] + 1);
}

/* gc_pick - the victim under the index's policy at clock `now`, still
 * sealed (the caller unseals it); GC_NONE when nothing is sealed. */
uint32_t gc_pick(struct gc_index *g, uint64_t now);

/* gc_check - verify every invariant; KVF_OK or KVF_ECORRUPT naming the
 * first broken one. */
kvf_status gc_check(const struct gc_index *g);

/*
 * Analytic models of device write amplification under uniform random
 * single-page writes, with spare factor sf = (physical - logical) /
 * physical in (0, 1) and b pages per block (docs/ftl.md derives them):
 *  - FIFO / LRW: the fixed point u = exp(-(1 - u) / (1 - sf)), WA =
 *    1 / (1 - u) (Desnoyers; Xiang and Kurkoski; no dependence on b);
 *  - greedy: the mean-field limit for finite b (Van Houdt);
 *  - d-choices: the mean-field fixed point for d samples (Van Houdt).
 * Each returns the predicted WA, or 0 for arguments out of range.
 */
double gc_model_fifo_wa(double sf);
double gc_model_greedy_wa(double sf, uint32_t b);
double gc_model_dchoices_wa(double sf, uint32_t b, uint32_t d);

#endif /* KVF_FTL_GC_H */
