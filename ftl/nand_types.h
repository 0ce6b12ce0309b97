/*
 * nand_types.h - the emulated NAND device's configuration (struct
 * kvf_flash_config and its enums), geometry and state (struct nand):
 * types only.  nand.h says what they mean and holds the device's calls;
 * this file sits below both the model (nand.c) and its persistent image
 * (nand_image*.c), which the model calls and which takes these types.
 */
#ifndef KVF_FTL_NAND_TYPES_H
#define KVF_FTL_NAND_TYPES_H

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

#endif /* KVF_FTL_NAND_TYPES_H */
