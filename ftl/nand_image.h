/*
 * nand_image.h - the persistent image of the emulated NAND device
 * (KVF_FLASH_BACKING_IMAGE): the device outlives its media handle, a
 * kill and a power cut, and comes back with its data, its FTL mapping
 * and its wear, as an SSD does.
 *
 * What is kept, in one file:
 *  - a header written once at creation (magic, version, geometry, cell,
 *    P/E limit, logical pages, image id, checksum);
 *  - two sync-record slots, written alternately after each fdatasync:
 *    the program sequence number up to which everything is durable;
 *  - per block two slots, written alternately at each erase: the erase
 *    count and the erase sequence ("epoch") of the block's current life;
 *  - per physical page a spare-area (OOB) record: logical page, program
 *    sequence number, stream, the block's epoch, the XXH3-64 of the page
 *    bytes, and a checksum of the record;
 *  - per logical page the sequence number of its last TRIM;
 *  - the page bytes.
 * Nothing else: the FTL's maps, block states, valid counts and free
 * lists are rebuilt at open by scanning the spare areas, as an SSD
 * rebuilds its map after power loss: per logical page the record with
 * the newest sequence wins, unless the page's last TRIM is newer.
 *
 * Sequence numbers (programs, trims and erase epochs share one counter)
 * only grow: at open the counter resumes past every one found, valid
 * epoch or not, so a record of a block's earlier life can never be taken
 * for one of a later life.
 *
 * Crash rules (every write goes through the kvf_sysio seam, and any
 * subset of the writes since the last fdatasync may be lost, torn ones
 * included):
 *  - a record whose checksum fails, or whose epoch is not its block's, is
 *    an unwritten page; a record newer than the durable sequence is
 *    believed only once the page bytes match its hash (read at open), so
 *    a program torn either way (bytes without record, record without
 *    bytes) is an unwritten page, and the logical page keeps its older
 *    version;
 *  - an erase first makes every earlier program and trim durable (an
 *    fdatasync when there is any, counted as a barrier): whatever the
 *    erase destroyed is then superseded durably, so an erase that is
 *    lost brings back only pages that lose to newer ones;
 *  - a block slot or a trim entry that is torn fails its checksum: the
 *    block keeps its other slot (the erase is lost), and a logical page
 *    whose trim entry is torn is taken as trimmed (rewritten so at open);
 *  - a damaged header is KVF_ECORRUPT, a newer version KVF_EVERSION.
 * Reads verify the page bytes against the hash of their record (the ECC
 * of the model): a mismatch is KVF_ECORRUPT, never data.
 *
 * Page mapping only: a block-mapped device cannot be an image.
 *
 * Not thread-safe: the flash media serializes every call.
 */
#ifndef KVF_FTL_NAND_IMAGE_H
#define KVF_FTL_NAND_IMAGE_H

#include <stdint.h>

#include "ftl/nand_types.h"

#define NAND_IMAGE_VERSION 1u
#define NAND_IMAGE_NO_LPN UINT32_MAX /* a record of no logical page */

/* The device an image holds (its header, decoded). */
struct nand_image_desc {
	uint32_t channels;         /* channels */
	uint32_t dies_per_channel; /* dies on each channel */
	uint32_t planes_per_die;   /* planes in each die */
	uint32_t blocks_per_plane; /* blocks in each plane */
	uint32_t pages_per_block;  /* pages in each block */
	uint32_t page_size;        /* bytes per page */
	uint32_t oob_bytes;        /* modeled spare bytes per page */
	uint32_t n_parts;          /* partitions (media stripes) */
	uint32_t cell;             /* enum kvf_flash_cell */
	uint32_t pe_limit;         /* erases that retire a block */
	uint64_t lpn_per_part;     /* logical pages of each partition */
};

/* What the scan found for one physical page (until nand_image_scan_done). */
struct nand_image_rec {
	uint64_t seq;    /* program sequence number */
	uint32_t lpn;    /* partition-local logical page, or NO_LPN: no
			  * valid record, or one of another life, or a torn
			  * program */
	uint32_t stream; /* stream of the data */
};

/* Counters of the image since open. */
struct nand_image_stats {
	uint64_t fdatasyncs;     /* fdatasyncs of the image */
	uint64_t barriers;       /* of those, forced by an erase */
	uint64_t scan_pages;     /* records scanned at open */
	uint64_t scan_verified;  /* page bytes read at open (newer than the
				  * durable point) */
	uint64_t scan_dropped;   /* records not believed (checksum, epoch,
				  * torn bytes) */
	uint64_t scan_ns;        /* wall time of the open's load (ns) */
	int created;             /* 1: this open created the image */
};

/*
 * nand_image_peek - read the header of the image at path, if there is one.
 * Return: KVF_OK with *exists 0 (no file, or an empty one) or 1 and *d;
 * KVF_ECORRUPT (damaged header: message names file and field);
 * KVF_EVERSION (newer image); KVF_EIO.
 */
kvf_status nand_image_peek(const char *path, struct nand_image_desc *d,
			   int *exists);
/*
 * nand_image_attach - open (creating when absent or empty) the image at
 * path for n, built by nand_init with backing IMAGE and the geometry of
 * d; load erase counts, write pointers, hashes and the scan results.
 * The file is locked (flock) while attached.  read_only: opened for
 * reading and locked shared, never created nor written: what the load
 * would mend (a torn slot) is mended in memory only, and the detach
 * syncs nothing, so the file stays as it was.
 * Return: KVF_OK; KVF_EMISMATCH (the image holds another device);
 * KVF_ECORRUPT; KVF_EVERSION; KVF_EBUSY (attached elsewhere, or for
 * writing); KVF_EIO (read_only and no image); KVF_ENOMEM.  On failure
 * n->img is NULL.
 */
kvf_status nand_image_attach(struct nand *n, const char *path,
			     const struct nand_image_desc *d, int read_only);
/* nand_image_detach - sync (unless the power is cut) and close. */
void nand_image_detach(struct nand *n);

/* nand_image_loaded - did the attach find an existing device? */
int nand_image_loaded(const struct nand *n);
/* nand_image_rec - the scan's record of ppn (device-wide). */
const struct nand_image_rec *nand_image_rec(const struct nand *n,
					    uint64_t ppn);
/* nand_image_trim_seq - sequence of the last TRIM of (part, lpn), 0 none. */
uint64_t nand_image_trim_seq(const struct nand *n, uint32_t part,
			     uint64_t lpn);
/* nand_image_scan_done - free the scan results (after the FTLs rebuilt). */
void nand_image_scan_done(struct nand *n);

/*
 * nand_image_program - the image side of a program of (block, page):
 * `landed` of the page's bytes reach the file (page_size, or less for a
 * torn program), then its spare record with n->spare_lpn/_stream.  The
 * record's hash is *hash when given (a copy keeps its source's), else
 * that of the whole page of data (NULL: zeros).
 * Return: KVF_OK; KVF_EIO.
 */
kvf_status nand_image_program(struct nand *n, uint32_t block, uint32_t page,
			      const void *data, size_t landed,
			      const uint64_t *hash);
/* nand_image_read - page bytes into buf, verified against the record's
 * hash (verify 0: raw, for copies).  KVF_OK; KVF_ECORRUPT; KVF_EIO. */
kvf_status nand_image_read(struct nand *n, uint32_t block, uint32_t page,
			   void *buf, int verify);
/* nand_image_hash - the hash recorded for (block, page). */
uint64_t nand_image_hash(const struct nand *n, uint32_t block, uint32_t page);
/*
 * nand_image_erase - the image side of an erase of block (before the
 * chip's state changes): the barrier, then the block's next slot with
 * erase count new_ec and a fresh epoch.  KVF_OK; KVF_EIO.
 */
kvf_status nand_image_erase(struct nand *n, uint32_t block, uint32_t new_ec);
/* nand_image_trim - TRIM count logical pages from lpn of part. */
kvf_status nand_image_trim(struct nand *n, uint32_t part, uint64_t lpn,
			   uint64_t count);
/* nand_image_sync - fdatasync, then the sync record.  KVF_OK; KVF_EIO. */
kvf_status nand_image_sync(struct nand *n);
/* nand_image_stats - counters since attach. */
void nand_image_stats(const struct nand *n, struct nand_image_stats *out);

#endif /* KVF_FTL_NAND_IMAGE_H */
