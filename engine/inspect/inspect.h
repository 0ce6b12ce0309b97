/*
 * inspect.h - reading a segment's summary back and checking it, for the
 * inspection calls (kvf_verify) and anyone else who must trust a summary.
 *
 * The public inspection calls themselves (kvf_store_info_get, kvf_seq_list,
 * kvf_seq_x_len, kvf_seq_info_get, kvf_segment_info_get, kvf_verify) are
 * declared in kvflash.h.
 */
#ifndef KVF_ENGINE_INSPECT_H
#define KVF_ENGINE_INSPECT_H

#include <string.h>

#include "engine/base/store_state.h"

/* A segment summary read from media and checked (engine/base/segfmt.h). */
struct summary_view {
	struct seg_summary_header h;    /* the header as on media */
	const unsigned char *entries;   /* h.n_data_pages packed
					 * struct seg_summary_entry */
};

/* summary_entry - entry i of a checked summary (i < h.n_data_pages) */
static inline struct seg_summary_entry summary_entry(const struct summary_view *v,
						     uint32_t i)
{
	struct seg_summary_entry e;

	memcpy(&e, v->entries + (size_t)i * sizeof(e), sizeof(e));
	return e;
}

/* summary_buf_pages - pages a buffer for any summary of the store needs */
static inline uint32_t summary_buf_pages(const kvf_store *st)
{
	return summary_pages(st->data_per_seg, st->hdr.page_size);
}

/*
 * summary_load - read the summary of segment segid, which the catalog says
 * holds n_data data pages committed as seqno, into buf (summary_buf_pages
 * pages, KVF_MEDIA_ALIGN-aligned) and check its magic, store id, segment
 * id, seqno, page count and checksum.  *out points into buf.
 * The caller keeps the segment from being reused meanwhile (a page
 * reference it holds, or a check of the state afterwards).
 * Return: KVF_OK; KVF_ECORRUPT (the message names the segment, its stripe
 * and the first field that differs, expected and found); KVF_EIO.
 */
kvf_status summary_load(kvf_store *st, uint32_t segid, uint32_t n_data,
			uint64_t seqno, unsigned char *buf,
			struct summary_view *out);

#endif /* KVF_ENGINE_INSPECT_H */
