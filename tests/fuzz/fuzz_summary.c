/*
 * fuzz_summary.c - a segment's summary on media (engine/base/segfmt.h), as
 * recovery (at open), kvf_verify and kvf_repair read it.
 *
 * Input: one flags byte, one byte that picks a sealed segment of the
 * template, then the bytes written over the segment's summary pages (from
 * the page after its last data page; at most what the segment has left).
 *   bit 0  header: the right magic, store id, segment id and seqno
 *   bit 1  header: the right page count and page size too
 *   bit 2  the right checksum (over the header and as many entries as
 *          the header's page count says, when they fit in the segment)
 *   bit 3  each entry's page hash: the hash of the data page it is for
 *   bit 4  repair: the catalog loses the segment's record and its last
 *          durable point (as a damaged log loses them), then kvf_repair
 *          runs before the open (bit 0 gives the summary a seqno that
 *          repair looks for)
 *   bit 5  open read-write too
 * The opens keep the contract of fuzz_common.h.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "api/alloc.h"
#include "engine/base/catalog.h"
#include "engine/base/meta.h"
#include "engine/base/segfmt.h"
#include "engine/segments/segtable.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned char seg[FZ_SEG];

/* lose - the catalog of dir forgets segment segid and the last durable
 * point, as if the log's tail were lost */
static void lose(const char *dir, uint32_t segid)
{
	unsigned char key[5], tag = META_TAG_SYNC;
	char path[4096];
	struct catalog *c;
	struct catalog_batch *b;
	struct meta_sync ms;
	void *val;
	size_t vlen;

	snprintf(path, sizeof(path), "%s/meta", dir);
	fz_check("catalog_open", catalog_open(path, 0, 0, CATALOG_NO_FSYNC, &c), 0);
	fz_check("catalog_get", catalog_get(c, &tag, 1, &val, &vlen), 0);
	if (vlen != sizeof(ms))
		abort();
	memcpy(&ms, val, sizeof(ms));
	kvf_free(val);
	ms.n_points--;
	ms.seqno = 1; /* every segment is after it */
	if ((b = catalog_batch_new()) == NULL)
		abort();
	catalog_batch_put(b, &tag, 1, &ms, sizeof(ms));
	meta_key_u32(key, META_TAG_SEG, segid);
	catalog_batch_delete(b, key, sizeof(key));
	fz_check("catalog_commit", catalog_commit(c, b, 1), 0);
	catalog_batch_free(b);
	catalog_close(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct fz_template *t;
	struct seg_summary_header h;
	uint32_t k, segid, n_data, room;
	char stripe[32];
	uint64_t base;
	unsigned flags;
	size_t n;
	const char *dir;

	if (size < 2)
		return 0;
	t = fz_template();
	flags = data[0];
	k = data[1] % t->n_sealed;
	segid = t->sealed[k];
	n_data = t->data_pages[k];
	room = (t->pages_per_seg - n_data) * FZ_PAGE;
	n = size - 2;
	if (n > room)
		return 0;
	dir = fz_work();
	snprintf(stripe, sizeof(stripe), "stripe-%03u.kvf", segid % FZ_STRIPES);
	base = (uint64_t)(segid / FZ_STRIPES) * FZ_SEG;
	if (fz_read(dir, stripe, seg, FZ_SEG, base) != FZ_SEG)
		abort();
	memcpy(seg + (size_t)n_data * FZ_PAGE, data + 2, n);
	if (n >= sizeof(h)) {
		unsigned char *p = seg + (size_t)n_data * FZ_PAGE;
		uint32_t hn;

		memcpy(&h, p, sizeof(h));
		if (flags & 1) {
			memcpy(h.magic, SEG_MAGIC, 8);
			h.store_id = t->store_id;
			h.segid = segid;
			h.seqno = t->seqnos[k];
		}
		if (flags & 2) {
			h.n_data_pages = n_data;
			h.page_size = FZ_PAGE;
		}
		hn = h.n_data_pages;
		if ((flags & 8) && hn <= n_data)
			for (uint32_t i = 0; i < hn; i++) {
				uint64_t ph = page_hash(seg + (size_t)i * FZ_PAGE, FZ_PAGE);

				memcpy(p + sizeof(h) + (size_t)i * 24 + 16, &ph, 8);
			}
		if ((flags & 4) &&
		    sizeof(h) + (uint64_t)hn * 24 <= room) {
			h.checksum = 0;
			memcpy(p, &h, sizeof(h));
			h.checksum = XXH3_64bits(p, sizeof(h) + (size_t)hn * 24);
		}
		memcpy(p, &h, sizeof(h));
	}
	fz_write(dir, stripe, seg, FZ_SEG, base, 0);
	if (flags & 16)
		lose(dir, segid);
	fz_exercise(dir, FZ_RO | (flags & 16 ? FZ_REPAIR : 0) |
			 (flags & 32 ? FZ_RW : 0));
	return 0;
}
