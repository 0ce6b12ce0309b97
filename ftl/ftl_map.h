/*
 * ftl_map.h - the flash translation layer of one partition (one media
 * stripe): logical pages to physical pages, write frontiers, garbage
 * collection, static wear leveling, TRIM and the accounting of every
 * program and erase by cause.
 *
 * Page-level mapping (an SSD): l2p[lpn] is the physical page holding the
 * logical page, p2l[ppn] the logical page a physical page holds (or
 * FTL_NONE: stale, trimmed, torn copy, never written).  Host writes append
 * to the open blocks of their stream's frontier, round robin over dies;
 * GC copies append to a GC frontier of the victim's stream, and
 * wear-leveling moves to a frontier of their own, so host data and
 * relocated data never share a block, nor do two streams.  When a host
 * frontier needs a block and the pool holds fg_free blocks or fewer, GC
 * first collects victims until it holds more (foreground GC); ftl_idle
 * collects up to bg_free blocks while the device is idle (background GC).
 *
 * Block-level mapping (sequential and zoned use): logical block n
 * (pages [n * ppb, (n + 1) * ppb)) lives in one physical block with page
 * i at page i.  Appending at or past the block's write pointer programs in
 * place (pages skipped over are programmed as padding); any other write
 * merges: a fresh block receives the old pages, copied, and the new ones,
 * in page order, and the old block is erased.  Blocks with no live page
 * left are erased at once, so there is nothing to collect.
 *
 * Block states: FREE (erased, in the pool), OPEN (being filled), SEALED
 * (full, or under page mapping closed early by wear leveling; a GC
 * candidate under page mapping), VICTIM (being emptied), RETIRED (reached
 * the P/E limit).  Invariants, checked by ftl_check:
 * l2p and p2l are inverse on live pages; valid[b] counts the live pages of
 * b; FREE blocks are erased and in the pool; OPEN blocks sit in exactly
 * one frontier slot (page mapping) or are mapped (block mapping);
 * erased_pages = sum over blocks not retired of (ppb - wp).
 *
 * Not thread-safe: the flash media serializes every call.
 */
#ifndef KVF_FTL_MAP_H
#define KVF_FTL_MAP_H

#include <stdint.h>

#include "ftl/ftl_gc.h"
#include "ftl/ftl_wear.h"
#include "ftl/nand.h"

#define FTL_NONE UINT32_MAX /* no page, block or logical page */

enum ftl_block_state {
	BLK_FREE = 0,
	BLK_OPEN = 1,
	BLK_SEALED = 2,
	BLK_VICTIM = 3,
	BLK_RETIRED = 4
};

/* Settings of one partition, derived and checked by the flash media. */
struct ftl_params {
	enum kvf_flash_mapping mapping; /* page- or block-level */
	enum kvf_flash_gc_policy gc;    /* victim choice */
	uint32_t gc_d;       /* d-choices sample size */
	uint64_t seed;       /* d-choices generator seed */
	uint32_t n_streams;  /* host frontiers */
	uint32_t host_width; /* open blocks per host frontier */
	uint32_t gc_width;   /* open blocks of the GC frontier */
	uint32_t wl_width;   /* open blocks of the wear-leveling frontier */
	uint32_t fg_free;    /* foreground GC at or below this (blocks) */
	uint32_t bg_free;    /* background GC up to this (blocks) */
	uint32_t wl_gap;     /* static WL erase gap; 0 = off (erases) */
	int least_worn;      /* dynamic WL: least-worn free block first */
	uint32_t reserve;    /* blocks beyond the logical size the FTL
			      * needs to keep working (blocks) */
};

/* Counters of one partition since open; all in pages unless named. */
struct ftl_counters {
	uint64_t host_pages;     /* pages written by the host */
	uint64_t gc_programs;    /* GC copies (page) or merge copies (block) */
	uint64_t wl_programs;    /* static wear-leveling copies */
	uint64_t pad_programs;   /* padding programs (block mapping) */
	uint64_t erases;         /* block erases (blocks) */
	uint64_t gc_victims;     /* blocks collected by GC (blocks) */
	uint64_t gc_victim_valid; /* live pages found in GC victims */
	uint64_t bg_victims;     /* of gc_victims, in background (blocks) */
	uint64_t merges;         /* block-mapping merges (merges) */
	uint64_t wl_moves;       /* blocks moved by static WL (blocks) */
	uint64_t trimmed_pages;  /* live pages dropped by TRIM */
	uint64_t host_reads;     /* pages read by the host */
	uint64_t erased_sum;     /* sum over host pages of erased_pages */
	uint64_t erased_samples; /* host pages sampled into erased_sum */
};

struct ftl_frontier {
	uint32_t width; /* open-block slots */
	uint32_t next;  /* slot the next page goes to */
	uint32_t *blk;  /* [slot] open local block, or FTL_NONE */
};

struct ftl {
	struct nand *nand;      /* the device (shared by partitions) */
	uint32_t part;          /* partition number (for messages) */
	uint32_t base;          /* device block of local block 0 */
	uint32_t n_blocks;      /* blocks of the partition */
	uint32_t ppb;           /* pages per block */
	uint32_t shift;         /* local ppn = block << shift | page */
	uint32_t n_dies;        /* dies of the partition */
	uint64_t n_lpn;         /* logical pages */
	struct ftl_params prm;  /* settings */
	uint32_t *l2p;          /* page: [lpn] ppn; block: [lbn] block */
	uint32_t *p2l;          /* [ppn] lpn or FTL_NONE */
	uint8_t *state;         /* [block] enum ftl_block_state */
	uint8_t *bstream;       /* [block] stream of the data it was opened for */
	struct gc_index gc;     /* valid counts and victim choice */
	struct free_pool pool;  /* free blocks */
	struct wear_hist wear;  /* erase counts of live blocks */
	struct ftl_frontier *front; /* [2 n_streams + 1]: host per stream,
				     * GC per stream, WL */
	uint32_t dirty;         /* block mapping: block left programmed by
				 * a merge cut short, erased on next write */
	uint32_t wl_cursor;     /* static WL: where the cold-block scan goes on */
	int wl_pending;         /* the erase gap passed wl_gap */
	int worn_out;           /* too many blocks retired: read-only */
	uint64_t clock;         /* host pages written: the GC age clock */
	uint64_t erased_pages;  /* erased pages in live blocks (pages) */
	uint64_t retired;       /* retired blocks (blocks) */
	struct ftl_counters c;  /* counters */
};

/*
 * ftl_init - partition `part` of nand: n_blocks blocks from device block
 * `base`, n_lpn logical pages, settings prm (checked by the caller).
 * Return: KVF_OK, KVF_ENOMEM.
 */
kvf_status ftl_init(struct ftl *f, struct nand *nand, uint32_t part,
		    uint32_t base, uint32_t n_blocks, uint64_t n_lpn,
		    const struct ftl_params *prm);
void ftl_release(struct ftl *f);

/*
 * ftl_write - write n logical pages from lpn (lpn + n <= n_lpn), the data
 * n consecutive pages at buf (NULL: zeros), as stream `stream`.
 * Return: KVF_OK; KVF_ENOSPC (worn out, or no block to collect);
 * KVF_EIO (power cut: pages before the cut are written, the one in flight
 * is torn, the rest untouched); KVF_ENOMEM; file errors.
 */
kvf_status ftl_write(struct ftl *f, uint64_t lpn, uint32_t n,
		     const void *buf, uint32_t stream);
/* ftl_write_list - single pages at lpns[0..n), no data (speed runs). */
kvf_status ftl_write_list(struct ftl *f, const uint64_t *lpns, uint32_t n,
			  uint32_t stream);
/*
 * ftl_read - read n logical pages from lpn into buf (NULL: time only);
 * pages never written or trimmed read as zeros.
 * Return: KVF_OK; KVF_ECORRUPT (a torn page; message names block and
 * page); KVF_ENOTSUP (backing none, buf set); KVF_EIO.
 */
kvf_status ftl_read(struct ftl *f, uint64_t lpn, uint32_t n, void *buf);
/* ftl_trim - drop n logical pages from lpn: they read as zeros and GC
 * never copies them.  Return: KVF_OK, KVF_EIO (power cut). */
kvf_status ftl_trim(struct ftl *f, uint64_t lpn, uint64_t n);
/*
 * ftl_collect - background GC: collect victims while the pool holds fewer
 * than `target` free blocks and *budget_ns of modeled device time lasts
 * (the time used is subtracted).  Returns KVF_OK or the first error.
 */
kvf_status ftl_collect(struct ftl *f, uint32_t target, uint64_t *budget_ns);
/*
 * ftl_recover - after ftl_init, on a device loaded from an image: rebuild
 * the mapping from the spare-area records the scan found (per logical
 * page the newest record wins, unless its last TRIM is newer), then the
 * valid counts, block states (programmed blocks are sealed, partly
 * programmed ones too, in the order they were written), the free pool
 * and the erase histogram.  No frontier holds a block afterwards.
 * Return: KVF_OK, KVF_ENOMEM.
 */
kvf_status ftl_recover(struct ftl *f);
/* ftl_power_restored - finish what a power cut left undone. */
kvf_status ftl_power_restored(struct ftl *f);
/* ftl_locate - where lpn lives: device block and page, or FTL_NONE. */
void ftl_locate(const struct ftl *f, uint64_t lpn, uint32_t *block,
		uint32_t *page);
/* ftl_check - verify every invariant in the file comment; KVF_OK or
 * KVF_ECORRUPT with the first one broken. */
kvf_status ftl_check(const struct ftl *f);

#endif /* KVF_FTL_MAP_H */
