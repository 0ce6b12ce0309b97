/*
 * ftl_map_int.h - what the files of one partition's FTL share, and nothing
 * else includes: block and frontier arithmetic, the torn-page test and the
 * host-page count (static inline, so the write paths compile as they did
 * in one file), and the helpers that became shared when ftl_map.c was
 * split.  The FTL is six files, lowest first: ftl_map.c (set-up, erase and
 * retirement, read and trim), ftl_block.c (block mapping: appends, merges,
 * moves), ftl_page.c (page mapping: frontiers, GC, static wear leveling),
 * ftl_write.c (the writes, handed to either mapping), ftl_recover.c
 * (rebuilding the maps from an image) and ftl_check.c (the invariant
 * check).
 *
 * Not thread-safe: the flash media serializes every call.
 */
#ifndef KVF_FTL_MAP_INT_H
#define KVF_FTL_MAP_INT_H

#include <stdint.h>

#include "api/status.h"
#include "ftl/ftl_map.h"

static inline uint32_t gblk(const struct ftl *f, uint32_t b)
{
	return f->base + b;
}

static inline uint32_t wp_of(const struct ftl *f, uint32_t b)
{
	return f->nand->wp[f->base + b];
}

static inline uint32_t ppn_of(const struct ftl *f, uint32_t b, uint32_t page)
{
	return (b << f->shift) | page;
}

/* the GC frontier of stream s, and the wear-leveling frontier */
static inline uint32_t fr_gc(const struct ftl *f, uint32_t s)
{
	return f->prm.n_streams + s;
}

static inline uint32_t fr_wl(const struct ftl *f)
{
	return 2 * f->prm.n_streams;
}

static inline int fr_is_gc(const struct ftl *f, uint32_t fi)
{
	return fi >= f->prm.n_streams && fi < 2 * f->prm.n_streams;
}

/* fr_stream - the stream whose data frontier fi holds (WL: stream 0) */
static inline uint32_t fr_stream(const struct ftl *f, uint32_t fi)
{
	return fi < f->prm.n_streams ? fi :
	       fi < 2 * f->prm.n_streams ? fi - f->prm.n_streams : 0;
}

/* torn_here - did the failed program of (b, page) tear it (and so use it)? */
static inline int torn_here(const struct ftl *f, uint32_t b, uint32_t page)
{
	const struct nand *n = f->nand;

	return n->powered_off && n->cut_block == gblk(f, b) &&
	       n->cut_page == page && wp_of(f, b) == page + 1;
}

static inline void count_host(struct ftl *f)
{
	f->c.host_pages++;
	f->clock++;
	f->c.erased_sum += f->erased_pages;
	f->c.erased_samples++;
}

/* dark - an operation refused while the power is cut */
static inline kvf_status dark(const struct ftl *f, const char *op)
{
	return kvf_fail(KVF_EIO,
			"flash: %s on stripe %u refused: the power is cut (block %u page %u was torn); power the device on first",
			op, f->part, f->nand->cut_block, f->nand->cut_page);
}

/* ftl_map.c */
/* ftl_check_worn_out - set worn_out when too few blocks are left usable */
void ftl_check_worn_out(struct ftl *f);
/* ftl_erase_block - erase b (no live page left in it); FREE or RETIRED */
kvf_status ftl_erase_block(struct ftl *f, uint32_t b);
/* ftl_worn_out - KVF_ENOSPC, with the message of a worn-out stripe */
kvf_status ftl_worn_out(const struct ftl *f);

/* ftl_page.c */
/* ftl_page_write - page mapping: write one host page to stream's frontier */
kvf_status ftl_page_write(struct ftl *f, uint64_t lpn, const void *data,
			  uint32_t stream);
/* ftl_page_gc_victim - collect v (GC_NONE: there is nothing to collect) */
kvf_status ftl_page_gc_victim(struct ftl *f, uint32_t v, int background);
/* ftl_wl_run - static wear leveling, either mapping, while the gap is wide */
kvf_status ftl_wl_run(struct ftl *f);

/* ftl_block.c */
/* ftl_block_write - block mapping: write n host pages from lpn on */
kvf_status ftl_block_write(struct ftl *f, uint64_t lpn, uint32_t n,
			   const unsigned char *buf);
/* ftl_block_move - static WL: lbn's block b moves to a most-worn free block */
kvf_status ftl_block_move(struct ftl *f, uint32_t b);

#endif /* KVF_FTL_MAP_INT_H */
