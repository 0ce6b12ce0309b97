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
 * Not thread-safe: the flash media serializes every call.
 */
#ifndef KVF_FTL_NAND_H
#define KVF_FTL_NAND_H

#include <stddef.h>
#include <stdint.h>

#include "ftl/ftl_time.h"
#include "ftl/media.h"

enum kvf_flash_backing {
	KVF_FLASH_BACKING_MEMORY = 0, /* one buffer per block, in memory */
	KVF_FLASH_BACKING_FILE = 1,   /* a sparse file at `path` */
	KVF_FLASH_BACKING_NONE = 2,   /* metadata only: no bytes kept */
	KVF_FLASH_BACKING_IMAGE = 3   /* a persistent image at `path`: the
				       * device outlives the media handle */
};

enum kvf_flash_mapping {
	KVF_FLASH_MAP_PAGE = 0,  /* page-level: any page anywhere (an SSD) */
	KVF_FLASH_MAP_BLOCK = 1  /* block-level: segment n -> one block */
};

enum kvf_flash_gc_policy {
	KVF_FLASH_GC_GREEDY = 0,       /* fewest valid pages */
	KVF_FLASH_GC_COST_BENEFIT = 1, /* max age * (1 - u) / 2u */
	KVF_FLASH_GC_FIFO = 2,         /* oldest sealed block (LRW) */
	KVF_FLASH_GC_DCHOICES = 3      /* fewest valid of d random blocks */
};

enum kvf_flash_issue {
	KVF_FLASH_ISSUE_QUEUED = 0, /* requests queue up: throughput */
	KVF_FLASH_ISSUE_SYNC = 1    /* each request waits for the last: latency */
};

#define KVF_FLASH_MAX_STREAMS 16u /* host write frontiers (stream hints) */

/*
 * The emulated device.  Zero in any field means its default; see
 * kvf_flash_config_init.  The logical size is the media geometry's.
 */
struct kvf_flash_config {
	uint32_t channels;         /* channels; 0 = 1 */
	uint32_t dies_per_channel; /* dies on each channel; 0 = 1 */
	uint32_t planes_per_die;   /* planes in each die; 0 = 1 */
	uint32_t blocks_per_plane; /* 0 = as many as spare_factor needs */
	uint32_t pages_per_block;  /* 0 = the media's pages_per_segment */
	uint32_t page_size;        /* bytes: 4096, 8192 or 16384; 0 = media's */
	uint32_t oob_bytes;        /* spare (out-of-band) bytes per page, for
				    * ECC and FTL metadata; 0 = 7/128 of the
				    * page (224 for 4 KiB) */
	double spare_factor;       /* (physical - logical) / physical, used
				    * when blocks_per_plane is 0; 0 = 0.07 */
	enum kvf_flash_cell cell;  /* timings and P/E rating; 0 = TLC */
	struct kvf_flash_timing timing; /* zero fields = the cell's */
	uint32_t pe_limit;         /* erases before a block retires;
				    * 0 = the cell's rating */
	enum kvf_flash_issue issue; /* how requests meet the timing model */
	enum kvf_flash_backing backing; /* where page bytes live */
	const char *path;          /* file backing: the sparse file; image
				    * backing: the image (created if absent or
				    * empty; an existing one brings its
				    * geometry, cell and P/E limit, and
				    * the caller's are ignored) */
	enum kvf_flash_mapping mapping; /* page- or block-level */
	enum kvf_flash_gc_policy gc; /* victim choice */
	uint32_t gc_d;             /* d-choices: blocks sampled; 0 = 10 */
	uint32_t gc_fg_free;       /* free blocks at or below which host
				    * writes first collect; 0 = default */
	uint32_t gc_bg_free;       /* free blocks kvf_flash_idle collects up
				    * to; 0 = default */
	uint32_t n_streams;        /* host write frontiers; 0 = 1, at most
				    * KVF_FLASH_MAX_STREAMS */
	uint32_t frontier_width;   /* open blocks per frontier, written round
				    * robin over dies; 0 = dies per stripe */
	enum kvf_media_switch wl_dynamic; /* AUTO/ON: least-worn free block
				    * first; OFF: oldest freed block first */
	uint32_t wl_static_gap;    /* move cold data once max - min erase
				    * count exceeds this (erases); 0 = off */
	uint64_t seed;             /* d-choices sampling; 0 = a fixed seed */
	uint64_t power_cut_after;  /* tear the Nth program after open; 0 = no */
};

/* kvf_flash_config_init - every field to its default (all zero). */
void kvf_flash_config_init(struct kvf_flash_config *c);

/* The physical layout the device is built with (all fields non-zero). */
struct nand_geometry {
	uint32_t channels;         /* channels */
	uint32_t dies_per_channel; /* dies on each channel */
	uint32_t planes_per_die;   /* planes in each die */
	uint32_t blocks_per_plane; /* blocks in each plane */
	uint32_t pages_per_block;  /* pages in each block */
	uint32_t page_size;        /* bytes per page */
	uint32_t oob_bytes;        /* spare-area bytes per page (counted in raw
				    * capacity and transfers, not stored) */
	uint32_t n_dies;           /* channels * dies_per_channel */
	uint32_t n_blocks;         /* blocks in the device */
	uint32_t page_shift;       /* ppn = block << page_shift | page */
	uint32_t n_parts;          /* partitions (media stripes) */
	uint32_t blocks_per_part;  /* n_blocks / n_parts */
};

enum nand_block_flag {
	NAND_RETIRED = 1u << 0, /* reached the P/E limit; never used again */
	NAND_HAS_TORN = 1u << 1 /* some page of the block is torn */
};

struct nand_image; /* ftl/nand_image.h */

struct nand {
	struct nand_geometry geo;   /* layout */
	uint32_t pe_limit;          /* erases that retire a block */
	enum kvf_flash_backing backing; /* where bytes live */
	uint32_t *erase_count;      /* [block] erases so far */
	uint32_t *wp;               /* [block] next page to program */
	uint8_t *flags;             /* [block] enum nand_block_flag */
	uint32_t *block_die;        /* [block] die holding it */
	uint32_t *die_channel;      /* [die] channel connecting it */
	uint64_t *torn;             /* bitmap over ppn: torn pages */
	unsigned char **mem;        /* memory backing: [block] its pages */
	int fd;                     /* file backing: descriptor, else -1 */
	char *path;                 /* file backing: path (for messages) */
	unsigned char *bounce;      /* one page, for file-backed copies */
	struct ftl_time time;       /* the timing model */
	uint64_t cut_countdown;     /* programs until the power cut; 0 = off */
	int powered_off;            /* the power is cut */
	uint32_t cut_block;         /* block of the torn page */
	uint32_t cut_page;          /* page of the torn page */
	uint64_t programs;          /* pages programmed */
	uint64_t reads;             /* pages read */
	uint64_t erases;            /* block erases */
	uint64_t torn_pages;        /* programs torn by power cuts */
	uint64_t retired;           /* blocks retired */
	struct nand_image *img;     /* image backing: the image, else NULL */
	uint32_t spare_lpn;         /* spare area of the next program: its
				     * logical page (UINT32_MAX: none) */
	uint32_t spare_stream;      /* ... and the stream it was written for */
};

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
