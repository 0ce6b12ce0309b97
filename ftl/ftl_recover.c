/*
 * ftl_recover.c - rebuilding one partition's FTL from a persistent image
 * at open: the maps from the per-page records (newest program wins, trims
 * respected), the free pool, GC candidates in the order they were written,
 * and the erase histogram.  A file of its own: it runs once, at open, and
 * reads the image records that nothing else in the FTL reads.
 *
 * Not thread-safe: the flash media serializes every call.
 */
#include "ftl/ftl_map.h"

#include <stdlib.h>

#include "api/alloc.h"
#include "api/status.h"
#include "ftl/ftl_map_int.h"
#include "ftl/nand_image.h"

struct sealed_at {
	uint64_t seq; /* newest program of the block */
	uint32_t b;   /* local block */
};

static int by_seq(const void *a, const void *b)
{
	const struct sealed_at *x = a, *y = b;

	return x->seq < y->seq ? -1 : x->seq > y->seq ? 1 :
	       x->b < y->b ? -1 : x->b > y->b;
}

/* recover_map - l2p/p2l from the records; newest[b] = newest program */
static kvf_status recover_map(struct ftl *f, uint64_t *newest)
{
	struct nand *n = f->nand;
	uint64_t n_ppn = (uint64_t)f->n_blocks << f->shift;
	uint64_t *best = kvf_calloc(f->n_lpn, sizeof(uint64_t));

	if (best == NULL)
		return kvf_fail(KVF_ENOMEM,
				"kvf_media_open: flash: out of memory to rebuild stripe %u",
				f->part);
	for (uint64_t q = 0; q < n_ppn; q++) {
		uint32_t b = (uint32_t)(q >> f->shift);
		uint32_t page = (uint32_t)(q & ((1u << f->shift) - 1));
		const struct nand_image_rec *r;

		if (page >= wp_of(f, b))
			continue;
		r = nand_image_rec(n, ((uint64_t)gblk(f, b) << f->shift) | page);
		if (r->seq > newest[b]) {
			newest[b] = r->seq;
			f->bstream[b] = (uint8_t)(r->stream < f->prm.n_streams ?
						  r->stream : 0);
		}
		if (r->lpn == NAND_IMAGE_NO_LPN || r->lpn >= f->n_lpn ||
		    r->seq <= nand_image_trim_seq(n, f->part, r->lpn) ||
		    r->seq <= best[r->lpn])
			continue;
		if (f->l2p[r->lpn] != FTL_NONE)
			f->p2l[f->l2p[r->lpn]] = FTL_NONE;
		f->l2p[r->lpn] = (uint32_t)q;
		f->p2l[q] = r->lpn;
		best[r->lpn] = r->seq;
	}
	kvf_free(best);
	for (uint64_t q = 0; q < n_ppn; q++)
		if (f->p2l[q] != FTL_NONE)
			f->gc.valid[q >> f->shift]++;
	return KVF_OK;
}

kvf_status ftl_recover(struct ftl *f)
{
	uint64_t *newest = kvf_calloc(f->n_blocks, sizeof(uint64_t));
	struct sealed_at *order = kvf_calloc(f->n_blocks, sizeof(*order));
	uint8_t *live = kvf_calloc(f->n_blocks, 1);
	uint32_t n_order = 0;
	kvf_status rc;

	if (!newest || !order || !live) {
		rc = kvf_fail(KVF_ENOMEM,
			      "kvf_media_open: flash: out of memory to rebuild stripe %u",
			      f->part);
		goto out;
	}
	if ((rc = recover_map(f, newest)) != KVF_OK)
		goto out;
	pool_release(&f->pool);
	if ((rc = pool_init(&f->pool, f->n_blocks, f->n_dies,
			    &f->nand->erase_count[f->base],
			    f->prm.least_worn)) != KVF_OK)
		goto out;
	f->erased_pages = 0;
	for (uint32_t b = 0; b < f->n_blocks; b++) {
		if (nand_is_retired(f->nand, gblk(f, b))) {
			f->state[b] = BLK_RETIRED;
			f->retired++;
			continue;
		}
		live[b] = 1;
		f->erased_pages += f->ppb - wp_of(f, b);
		if (wp_of(f, b) == 0) {
			f->state[b] = BLK_FREE;
			pool_put(&f->pool, b);
			continue;
		}
		/* programmed, whole or in part: a GC candidate */
		order[n_order].seq = newest[b];
		order[n_order++].b = b;
	}
	qsort(order, n_order, sizeof(*order), by_seq);
	for (uint32_t i = 0; i < n_order; i++) {
		f->state[order[i].b] = BLK_SEALED;
		gc_seal(&f->gc, order[i].b, 0);
	}
	if ((rc = wear_hist_load(&f->wear, &f->nand->erase_count[f->base],
				 live, f->n_blocks)) != KVF_OK)
		goto out;
	ftl_check_worn_out(f);
	if (f->prm.wl_gap && f->wear.n &&
	    f->wear.max_ec - f->wear.min_ec > f->prm.wl_gap)
		f->wl_pending = 1;
out:
	kvf_free(newest);
	kvf_free(order);
	kvf_free(live);
	return rc;
}
