/*
 * nand_image_int.h - what the files of the NAND image share, and nothing
 * else includes: the on-file layout (offsets, the header, slot, record and
 * trim formats), struct nand_image, the checksums (static inline), and
 * the file I/O through the sysio seam.  The image is three files:
 * nand_image.c (the I/O and the operations: program, read, erase with its
 * barrier, trim, sync), nand_image_header.c (the header: decode, the size
 * it implies, peek) and nand_image_open.c (attach: create or load and
 * scan, then detach).
 *
 * Layout of the file (all integers little-endian, as the host writes
 * them; ppn = block << page_shift | page over the whole device, glpn =
 * part * lpn_per_part + lpn):
 *
 *   OFFSET       SIZE                  FIELD
 *   0            4096                  header (struct img_header)
 *   4096         2 x 32                sync-record slots A, B
 *   8192         n_blocks x 2 x 32     block slots, two per block
 *   off_oob      n_ppn x 32            spare-area records (4 KiB-aligned)
 *   off_trim     n_lpn x 16            trim entries (4 KiB-aligned)
 *   off_data     n_ppn x page_size     page bytes (page-aligned)
 *
 * Invariants: seq >= every sequence number written to the file;
 * durable_seq <= seq, and every program and trim with a sequence number
 * up to durable_seq is durable; `dirty` is set by every program and trim
 * since the last fdatasync; hash[ppn] is the hash of the bytes the page
 * was programmed with (0 for a page without a believed record).
 *
 * Not thread-safe (see nand_image.h).
 */
#ifndef KVF_NAND_IMAGE_INT_H
#define KVF_NAND_IMAGE_INT_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <xxhash.h>

#include "api/status.h"
#include "ftl/nand_image.h"

#define IMG_MAGIC "KVFNAND\0"
#define OFF_SYNC 4096u
#define OFF_BLOCKS 8192u
#define SLOT_BYTES 32u
#define REC_BYTES 32u
#define TRIM_BYTES 16u
#define IO_CHUNK (1u << 20) /* bytes per read while loading */
#define SEQ_BITS 56u        /* sequence numbers: 2^56 of them */
#define SEQ_MASK ((1ull << SEQ_BITS) - 1)

/*
 * The header.
 * OFFSET SIZE FIELD
 * 0      8    magic "KVFNAND\0"
 * 8      4    version (NAND_IMAGE_VERSION)
 * 12     4    header_size (sizeof(struct img_header))
 * 16     44   channels, dies_per_channel, planes_per_die, blocks_per_plane,
 *             pages_per_block, page_size, oob_bytes, n_parts, cell,
 *             pe_limit, reserved (u32 each)
 * 60     4    reserved (0)
 * 64     8    lpn_per_part
 * 72     8    image id: salts every checksum of the file
 * 80     8    reserved (0)
 * 88     8    checksum: XXH3-64 of bytes 0..87
 */
struct img_header {
	char magic[8];
	uint32_t version;
	uint32_t header_size;
	uint32_t channels;
	uint32_t dies_per_channel;
	uint32_t planes_per_die;
	uint32_t blocks_per_plane;
	uint32_t pages_per_block;
	uint32_t page_size;
	uint32_t oob_bytes;
	uint32_t n_parts;
	uint32_t cell;
	uint32_t pe_limit;
	uint32_t reserved0;
	uint32_t reserved1;
	uint64_t lpn_per_part;
	uint64_t id;
	uint64_t reserved2;
	uint64_t checksum;
};
static_assert(sizeof(struct img_header) == 96, "image header layout");
static_assert(offsetof(struct img_header, lpn_per_part) == 64,
	      "image header layout");
static_assert(offsetof(struct img_header, checksum) == 88,
	      "image header layout");

/*
 * A sync-record slot (slot n_syncs & 1) and a block slot (slot
 * erase_count & 1 of its block).
 * OFFSET SIZE FIELD
 * 0      8    sync: durable_seq      block: epoch (erase sequence)
 * 8      8    sync: n_syncs          block: erase_count (low 32) | block << 32
 * 16     8    reserved (0)
 * 24     8    check: XXH3-64 of bytes 0..23 with the image id as seed
 */
struct img_slot {
	uint64_t a;
	uint64_t b;
	uint64_t reserved;
	uint64_t check;
};
static_assert(sizeof(struct img_slot) == SLOT_BYTES, "slot layout");

/*
 * A spare-area record.
 * OFFSET SIZE FIELD
 * 0      8    seq (bits 0..55) | stream << 56
 * 8      8    epoch of the block when programmed
 * 16     8    XXH3-64 of the page bytes
 * 24     4    lpn (partition-local), 0xffffffff = none (padding)
 * 28     4    check: low 32 bits of XXH3-64 of bytes 0..27 and the ppn,
 *             seeded with the image id
 */
struct img_rec {
	uint64_t seq_stream;
	uint64_t epoch;
	uint64_t hash;
	uint32_t lpn;
	uint32_t check;
};
static_assert(sizeof(struct img_rec) == REC_BYTES, "record layout");

/*
 * A trim entry; all zero = never trimmed.
 * OFFSET SIZE FIELD
 * 0      8    seq of the last TRIM
 * 8      8    check: XXH3-64 of seq and glpn, seeded with the image id
 */
struct img_trim {
	uint64_t seq;
	uint64_t check;
};
static_assert(sizeof(struct img_trim) == TRIM_BYTES, "trim layout");

struct nand_image {
	int fd;                 /* the image, flocked */
	int read_only;          /* writes and syncs are left out */
	char *path;             /* for messages */
	uint64_t id;            /* image id (checksum seed) */
	uint64_t lpn_per_part;  /* logical pages of a partition */
	uint64_t n_ppn;         /* physical page numbers (with holes) */
	uint64_t n_lpn;         /* logical pages of the device */
	uint64_t off_oob;       /* bytes: records */
	uint64_t off_trim;      /* bytes: trim entries */
	uint64_t off_data;      /* bytes: page bytes */
	uint64_t size;          /* bytes of the file */
	uint64_t seq;           /* last sequence number given */
	uint64_t durable_seq;   /* programs and trims up to it are durable */
	uint64_t n_syncs;       /* sync records written, ever */
	int dirty;              /* programs or trims since the last fdatasync */
	int loaded;             /* attach found an existing device */
	uint64_t *epoch;        /* [block] epoch of its current life */
	uint64_t *hash;         /* [ppn] hash of the programmed bytes */
	uint64_t zero_hash;     /* hash of a page of zeros */
	struct nand_image_rec *rec; /* [ppn] scan results, until scan_done */
	uint64_t *trim;         /* [glpn] trim seq, until scan_done */
	struct nand_image_stats st; /* counters */
};

static inline uint64_t align_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}

static inline uint64_t slot_check(const struct img_slot *s, uint64_t id)
{
	return XXH3_64bits_withSeed(s, 24, id);
}

static inline uint32_t rec_check(const struct img_rec *r, uint64_t ppn,
				 uint64_t id)
{
	unsigned char buf[28 + 8];

	memcpy(buf, r, 28);
	memcpy(buf + 28, &ppn, 8);
	return (uint32_t)XXH3_64bits_withSeed(buf, sizeof(buf), id);
}

static inline uint64_t trim_check(uint64_t seq, uint64_t glpn, uint64_t id)
{
	uint64_t v[2] = { seq, glpn };

	return XXH3_64bits_withSeed(v, sizeof(v), id);
}

static inline uint64_t header_checksum(const struct img_header *h)
{
	return XXH3_64bits(h, offsetof(struct img_header, checksum));
}

/* nand_img_pwrite, nand_img_pread - len bytes at off through the sysio
 * seam, a short transfer an error naming what (nand_image.c) */
kvf_status nand_img_pwrite(struct nand_image *im, const void *buf,
			   size_t len, uint64_t off, const char *what);
kvf_status nand_img_pread(struct nand_image *im, void *buf, size_t len,
			  uint64_t off, const char *what);

/* nand_img_fdatasync - make the file durable and clear `dirty`
 * (nand_image.c) */
kvf_status nand_img_fdatasync(struct nand_image *im);

/* nand_img_decode_header - check the n bytes read of a header and fill d
 * from it (nand_image_header.c) */
kvf_status nand_img_decode_header(const struct img_header *h, size_t n,
				  const char *path, struct nand_image_desc *d);

#endif /* KVF_NAND_IMAGE_INT_H */
