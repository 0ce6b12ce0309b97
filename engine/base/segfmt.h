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
 *   84      4   group_tokens: G, tokens of one head in a token group    (4)
 *   88      4   group_pages: P, pages one token group takes             (4)
 *   92      4   group_bytes: bytes of a group's P pages that hold data  (4)
 *   96      4   codec: how a group is encoded, 0 = plain rows       (4, 5)
 *  100      4   codec_layout: the encoded group's layout version       (6)
 *  104     16   reserved, 0
 *  120      8   checksum: XXH3-64 of bytes 0..119
 *
 * (4): format 4, whose codec is 0; (5): format 5, a codec store's, whose
 * groups are in layout version 1 (compute/codec.h; codec_layout 0);
 * (6): format 6, a codec store's whose groups are in the version its
 * codec_layout states (2: K's scales of a byte).  A
 * format-3 header has zeros there, and its geometry is
 * the one format 3 allowed: G = page_size / row, P = 1, no padding
 * (store_group_of).  Format 4 states it, so a group need not divide the
 * page and may span several pages; docs/store.md, "Token groups".
 */
#ifndef KVF_ENGINE_SEGFMT_H
#define KVF_ENGINE_SEGFMT_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#define SEG_MAGIC "KVFSEG01"
#define STORE_MAGIC "KVFLASH"
/* 2: "G" records list runs of slots (meta.h), not one slot per page;
 * 3: the durable-point mark DIR/SYNCED, and "N" counts durable points;
 * 4: the header states the token group's geometry (any head size);
 * 5: the groups are encoded (the header's codec is not 0).  A store
 *    without a codec is still made as format 4, which libraries of format
 *    4 open; they refuse a codec store with KVF_EVERSION instead of
 *    reading its encoded pages as rows;
 * 6: the header states the encoded groups' layout version.  A codec
 *    store whose groups keep version 1 is still made as format 5 */
#define STORE_FORMAT_VERSION 6u
#define STORE_FORMAT_CODEC 5u  /* a codec store in layout version 1 */
#define STORE_FORMAT_PLAIN 4u  /* what a store without a codec is made as */
#define STORE_FORMAT_OLDEST 3u /* the oldest format this library opens */
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
	uint32_t group_tokens;
	uint32_t group_pages;
	uint32_t group_bytes;
	uint32_t codec;
	uint32_t codec_layout;
	unsigned char reserved[16];
	uint64_t checksum;
};

static_assert(sizeof(struct store_header) == 128, "store header");
static_assert(offsetof(struct store_header, page_size) == 44, "page_size");
static_assert(offsetof(struct store_header, segment_size) == 48, "seg size");
static_assert(offsetof(struct store_header, group_tokens) == 84, "group");
static_assert(offsetof(struct store_header, codec) == 96, "codec");
static_assert(offsetof(struct store_header, codec_layout) == 100, "layout");
static_assert(offsetof(struct store_header, checksum) == 120, "checksum");

/*
 * Token groups.  A stream's tokens are kept in groups of G tokens; a group
 * takes P consecutive entries of the stream's index (pages, each placed and
 * checked on its own), its rows packed from the first byte of the first
 * page, a row crossing from one page to the next where it must.  G and P
 * are the smallest P whose pages hold G = floor(P * page / row) rows with
 * at most GROUP_WASTE_PCT percent of the P pages unused.
 */
#define GROUP_WASTE_PCT 3u
#define GROUP_MAX_PAGES 64u /* 33 is the most any head size needs */
#define CODEC_NONE 0u       /* plain rows in the store's dtype */

/* struct group_geom - the token group of a store (store_group_of) */
struct group_geom {
	uint32_t tokens;   /* G: tokens of one head in a group */
	uint32_t pages;    /* P: pages (index entries) a group takes */
	uint32_t bytes;    /* bytes of the P pages that rows fill: G * row */
};

/* group_layout - the group a new store of rows of row_bytes gets on pages
 * of page_size (row_bytes <= 64 KiB), by the rule above */
static inline struct group_geom group_layout(uint32_t page_size,
					     uint32_t row_bytes)
{
	struct group_geom g = { 0, 0, 0 };

	for (uint32_t p = 1; p <= GROUP_MAX_PAGES; p++) {
		uint64_t room = (uint64_t)p * page_size, n = room / row_bytes;

		if (n == 0)
			continue;
		g = (struct group_geom){ (uint32_t)n, p,
					 (uint32_t)(n * row_bytes) };
		if ((room - g.bytes) * 100 <= room * GROUP_WASTE_PCT)
			break;
	}
	return g;
}

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
