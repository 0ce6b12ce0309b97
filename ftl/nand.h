/*
 * nand.h - the emulated NAND flash device: its configuration, and the raw
 * chip operations (program, read, erase) with the rules NAND imposes.
 *
 * Geometry: channels x dies per channel x planes per die x blocks per
 * plane x pages per block, pages of 4, 8 or 16 KiB.  Blocks are numbered
 * 0..n_blocks-1 over the whole device; the physical page number of page p
 * of block b is (b << page_shift) | p.
 *
 * Rules, enforced here and refused with KVF_EINVAL and a message naming
 * the block and page:
 *  - the pages of a block are programmed in order, each exactly once
 *    between two erases (the next programmable page is the block's write
 *    pointer `wp`; pages at or past it are erased and read as 0xff);
 *  - an erase covers a whole block, and raises its erase count;
 *  - a block whose erase count reaches the P/E limit is retired at that
 *    erase and refuses every later program and erase.
 * Power-cut injection: when armed, the Nth program from then is torn (its
 * page reads back as KVF_ECORRUPT, naming block and page), the device goes
 * dark (every operation answers KVF_EIO) until nand_power_on, and nothing
 * else changes.
 *
 * Each page also has a spare (out-of-band) area of oob_bytes for ECC and
 * the FTL's per-page metadata; the emulator keeps that metadata in the
 * FTL's maps, so the spare area counts in raw capacity and in the bytes a
 * transfer moves, and holds no emulated bytes.
 *
 * Bytes are kept in memory (one buffer per block, allocated at its first
 * program), in a sparse file (page p of block b at byte offset
 * ppn * page_size; erased blocks are punched out), not at all (backing
 * "none": metadata only, for speed runs; reads then return no data), or
 * in a persistent image (backing "image", nand_image.h): page bytes, a
 * spare-area record per page (logical page, program sequence number,
 * checksums) and the erase counts, so the device survives close, a kill
 * and a power cut, and its FTL is rebuilt from the spare areas at open.
 * The FTL says what a program carries in its spare area with nand_spare
 * before the program; only the image keeps it.
 *
 * The device's configuration and state (struct kvf_flash_config, struct
 * nand) are in nand_types.h, below both this model (nand.c) and the image
 * (nand_image*.c) that the model calls.
 *
 * Not thread-safe: the flash media serializes every call.
 */
#ifndef KVF_FTL_NAND_H
#define KVF_FTL_NAND_H

#include <stddef.h>
#include <stdint.h>

#include "ftl/nand_types.h"

/* kvf_flash_config_init - every field to its default (all zero). */
void kvf_flash_config_init(struct kvf_flash_config *c);

/*
 * nand_init - build the device: geometry g (n_dies, n_blocks, page_shift
 * and blocks_per_part are computed here), timings t (complete), bytes in
 * backing (file: `path`, created sparse or reused).  Partition p owns the
 * dies d with d % n_parts == p and the blocks
 * [p * blocks_per_part, (p + 1) * blocks_per_part), its consecutive blocks
 * going round robin over its dies; die d sits on channel d % channels.
 * Return: KVF_OK; KVF_EINVAL (geometry), KVF_EIO (file), KVF_ENOMEM.
 */
kvf_status nand_init(struct nand *n, const struct nand_geometry *g,
		     const struct kvf_flash_timing *t, uint32_t pe_limit,
		     enum kvf_flash_backing backing, const char *path);
/* nand_release - free everything (and close the file); n may be zeroed. */
void nand_release(struct nand *n);

/*
 * nand_program - program page `page` of `block` with page_size bytes of
 * data (NULL: zeros; ignored without backing).
 * Return: KVF_OK; KVF_EINVAL (rule broken or block retired), KVF_ERANGE,
 * KVF_EIO (power cut now or before), file errors.
 */
kvf_status nand_program(struct nand *n, uint32_t block, uint32_t page,
			const void *data);
/*
 * nand_read - read page `page` of `block` into buf (NULL: time it only).
 * Return: KVF_OK (an erased page reads as 0xff); KVF_ECORRUPT (torn page);
 * KVF_ENOTSUP (no backing and buf != NULL); KVF_ERANGE; KVF_EIO.
 */
kvf_status nand_read(struct nand *n, uint32_t block, uint32_t page,
		     void *buf);
/*
 * nand_copy - move one page inside the device (GC, wear leveling): read
 * src_block/src_page, program it at dst_block/dst_page.  A torn source
 * stays torn at the destination.  Return: as nand_program.
 */
kvf_status nand_copy(struct nand *n, uint32_t src_block, uint32_t src_page,
		     uint32_t dst_block, uint32_t dst_page);
/*
 * nand_erase - erase a whole block; its erase count rises by one and, at
 * the P/E limit, it retires (nand_is_retired tells).
 * Return: KVF_OK; KVF_EINVAL (retired); KVF_ERANGE; KVF_EIO.
 */
kvf_status nand_erase(struct nand *n, uint32_t block);
/*
 * nand_erase_pages - the raw erase command on n_pages pages from
 * `page` of `block`: anything but the whole block is refused (KVF_EINVAL).
 */
kvf_status nand_erase_pages(struct nand *n, uint32_t block, uint32_t page,
			    uint32_t n_pages);

/*
 * nand_spare - what the next program (or copy) carries in its spare
 * area: logical page lpn (UINT32_MAX: none, as padding) of stream.  The
 * program consumes it.  Only the image backing stores it.
 */
static inline void nand_spare(struct nand *n, uint32_t lpn, uint32_t stream)
{
	n->spare_lpn = lpn;
	n->spare_stream = stream;
}

/* nand_power_cut_arm - tear the after-th program from now (>= 1). */
void nand_power_cut_arm(struct nand *n, uint64_t after);
/* nand_power_on - restore power after a cut; torn pages stay torn. */
void nand_power_on(struct nand *n);

static inline int nand_is_retired(const struct nand *n, uint32_t block)
{
	return (n->flags[block] & NAND_RETIRED) != 0;
}

static inline int nand_page_torn(const struct nand *n, uint64_t ppn)
{
	return (n->torn[ppn >> 6] >> (ppn & 63)) & 1;
}

static inline uint32_t nand_channel_of(const struct nand *n, uint32_t block)
{
	return n->die_channel[n->block_die[block]];
}

#endif /* KVF_FTL_NAND_H */
