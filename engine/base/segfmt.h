/*
 * segfmt.h - what the engine writes to media and to the store directory.
 *
 * A segment (one erase-block-sized unit of one stripe) holds n data pages
 * from page 0, then its summary in the next summary pages:
 *
 *   segment summary header (little-endian)
 *   OFFSET SIZE FIELD
 *    0      8   magic "KVFSEG01"
 *    8      8   store_id (from the store header)
 *   16      8   seqno: commit sequence number of the segment
 *   24      4   segment id
 *   28      4   n_data_pages
 *   32      4   page_size
 *   36      4   reserved, 0
 *   40      8   checksum: XXH3-64 of the header (this field 0) and entries
 *   48     24n  entries, one per data page: key hi (8), key lo (8),
 *               XXH3-64 of the page (8)
 *
 * Unused bytes of the last summary page are zero.  The segment is durable
 * once its catalog record commits (engine/base/meta.h); a segment on media
 * without a record is garbage.
 *
 * The store header file DIR/KVFLASH identifies a store directory:
 *
 *   OFFSET SIZE FIELD
 *    0      8   magic "KVFLASH\0"
 *    8      4   format version (STORE_FORMAT_VERSION)
 *   12      4   header size (sizeof(struct store_header))
 *   16      8   store_id: random, also in every summary
 *   24     20   model: n_layers, n_q_heads, n_kv_heads, head_dim, dtype
 *   44      4   page_size
 *   48      8   segment_size (bytes per segment per stripe)
 *   56      8   segs_per_stripe
 *   64      4   n_stripes
 *   68      4   media kind
 *   72      4   kt_pages
 *   76      4   page_bits (low bits of a page address)
 *   80      4   kt_dims: head dims per K^T page (E), 0 without kt_pages
 *   84     36   reserved, 0
 *  120      8   checksum: XXH3-64 of bytes 0..119
 */
#ifndef KVF_ENGINE_SEGFMT_H
#define KVF_ENGINE_SEGFMT_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#define SEG_MAGIC "KVFSEG01"
#define STORE_MAGIC "KVFLASH"
/* 2: "G" records list runs of slots (meta.h), not one slot per page;
 * 3: the durable-point mark DIR/SYNCED, and "N" counts durable points */
#define STORE_FORMAT_VERSION 3u
#define STORE_HEADER_FILE "KVFLASH"
/* present while a store is being created; see kvf_open */
#define STORE_CREATING_FILE "CREATING"
#define FLASH_IMAGE_FILE "flash.img" /* a flash store's device (ftl/nand_image.h) */
#define CREATING_TEXT "kvflash: a store is being created here\n"

struct seg_summary_header {
	char magic[8];
	uint64_t store_id;
	uint64_t seqno;
	uint32_t segid;
	uint32_t n_data_pages;
	uint32_t page_size;
	uint32_t reserved;
	uint64_t checksum;
};

struct seg_summary_entry {
	uint64_t key_hi;
	uint64_t key_lo;
	uint64_t page_hash;
};

static_assert(sizeof(struct seg_summary_header) == 48, "summary header");
static_assert(offsetof(struct seg_summary_header, checksum) == 40, "checksum");
static_assert(sizeof(struct seg_summary_entry) == 24, "summary entry");

struct store_header {
	char magic[8];
	uint32_t format_version;
	uint32_t header_size;
	uint64_t store_id;
	uint32_t n_layers, n_q_heads, n_kv_heads, head_dim, dtype;
	uint32_t page_size;
	uint64_t segment_size;
	uint64_t segs_per_stripe;
	uint32_t n_stripes;
	uint32_t media;
	uint32_t kt_pages;
	uint32_t page_bits;
	uint32_t kt_dims;
	unsigned char reserved[36];
	uint64_t checksum;
};

static_assert(sizeof(struct store_header) == 128, "store header");
static_assert(offsetof(struct store_header, page_size) == 44, "page_size");
static_assert(offsetof(struct store_header, segment_size) == 48, "seg size");
static_assert(offsetof(struct store_header, checksum) == 120, "checksum");

/* summary_pages - pages the summary of n data pages takes */
static inline uint32_t summary_pages(uint32_t n_data, uint32_t page_size)
{
	uint64_t bytes = sizeof(struct seg_summary_header) +
			 (uint64_t)n_data * sizeof(struct seg_summary_entry);

	return (uint32_t)((bytes + page_size - 1) / page_size);
}

/* max_data_pages - the most data pages a segment of p pages holds with
 * its summary */
static inline uint32_t max_data_pages(uint32_t p, uint32_t page_size)
{
	uint32_t d = p - 1;

	while (d > 0 && d + summary_pages(d, page_size) > p)
		d--;
	return d;
}

#endif /* KVF_ENGINE_SEGFMT_H */
