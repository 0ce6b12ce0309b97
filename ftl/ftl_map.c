/*
 * ftl_map.c - one partition's flash translation layer (see ftl_map.h for
 * the mapping, the block states and the invariants): setting it up,
 * erasing and retiring blocks, and the entry points that need no mapping
 * policy (read, trim, locate, power restored).  The writes, which go to
 * page mapping (ftl_page.c) or block mapping (ftl_block.c), are in
 * ftl_write.c, above both; rebuilding the maps from an image is in
 * ftl_recover.c, ftl_check in ftl_check.c; what they share is in
 * ftl_map_int.h.
 *
 * Every program goes through one of three paths, which keep the
 * invariants and count the program by cause: host writes
 * (ftl_page_write; block_append, block_fill in ftl_block.c), relocations
 * (relocate in ftl_page.c for page mapping, block_fill via ftl_block_move
 * for block mapping) and padding (block_pad).  A power cut surfaces as
 * KVF_EIO from the NAND layer; a program it tore still took its page, so
 * the torn page is accounted like any other and, for host data, mapped:
 * the logical page then reads back as KVF_ECORRUPT until rewritten.  A
 * relocation cut short leaves its source mapped (the copy is garbage in
 * an open block) and puts the victim back among the candidates.
 *
 * Not thread-safe: the flash media serializes every call.
 */
#include "ftl/ftl_map.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "api/alloc.h"
#include "api/status.h"
#include "ftl/ftl_map_int.h"
#include "ftl/nand_image.h"

#define HUGE_BYTES (2u << 20) /* a transparent huge page (bytes) */

/*
 * map_alloc - memory for a map array.  Arrays of 2 MiB or more are
 * rounded up to whole huge pages and the kernel is asked to back them
 * with such (best effort): the maps are walked at random, one TLB miss
 * per write on 4 KiB pages once they outgrow the caches.
 */
static void *map_alloc(size_t bytes)
{
	size_t round = (bytes + HUGE_BYTES - 1) & ~(size_t)(HUGE_BYTES - 1);
	void *p;

	if (bytes < HUGE_BYTES)
		return kvf_malloc(bytes);
	p = kvf_aligned_alloc(HUGE_BYTES, round);
	if (p)
		(void)madvise(p, round, MADV_HUGEPAGE);
	return p;
}

kvf_status ftl_init(struct ftl *f, struct nand *nand, uint32_t part,
		    uint32_t base, uint32_t n_blocks, uint64_t n_lpn,
		    const struct ftl_params *prm)
{
	uint32_t n_fr = 2 * prm->n_streams + 1;
	uint64_t n_l2p, n_ppn;
	kvf_status rc;

	memset(f, 0, sizeof(*f));
	f->nand = nand;
	f->part = part;
	f->base = base;
	f->n_blocks = n_blocks;
	f->ppb = nand->geo.pages_per_block;
	f->shift = nand->geo.page_shift;
	f->n_dies = nand->geo.n_dies / nand->geo.n_parts;
	f->n_lpn = n_lpn;
	f->prm = *prm;
	f->dirty = FTL_NONE;
	n_l2p = prm->mapping == KVF_FLASH_MAP_PAGE ? n_lpn : n_lpn / f->ppb;
	n_ppn = (uint64_t)n_blocks << f->shift;
	f->l2p = map_alloc(n_l2p * sizeof(uint32_t));
	f->p2l = map_alloc(n_ppn * sizeof(uint32_t));
	f->state = kvf_calloc(n_blocks, sizeof(uint8_t));
	f->bstream = kvf_calloc(n_blocks, sizeof(uint8_t));
	f->front = kvf_calloc(n_fr, sizeof(*f->front));
	if (!f->l2p || !f->p2l || !f->state || !f->bstream || !f->front) {
		rc = kvf_fail(KVF_ENOMEM,
			      "kvf_media_open: flash: cannot allocate the map of stripe %u (%llu logical pages)",
			      part, (unsigned long long)n_lpn);
		goto out_release;
	}
	memset(f->l2p, 0xff, n_l2p * sizeof(uint32_t));
	memset(f->p2l, 0xff, n_ppn * sizeof(uint32_t));
	for (uint32_t i = 0; i < n_fr; i++) {
		struct ftl_frontier *fr = &f->front[i];

		fr->width = i < prm->n_streams ? prm->host_width :
			    i < 2 * prm->n_streams ? prm->gc_width :
						     prm->wl_width;
		fr->blk = kvf_malloc((size_t)fr->width * sizeof(uint32_t));
		if (fr->blk == NULL) {
			rc = kvf_fail(KVF_ENOMEM,
				      "kvf_media_open: flash: cannot allocate the write frontiers");
			goto out_release;
		}
		for (uint32_t s = 0; s < fr->width; s++)
			fr->blk[s] = FTL_NONE;
	}
	if ((rc = gc_init(&f->gc, prm->gc, n_blocks, f->ppb, prm->gc_d,
			  prm->seed + part)) != KVF_OK)
		goto out_release;
	if ((rc = pool_init(&f->pool, n_blocks, f->n_dies,
			    &nand->erase_count[base], prm->least_worn)) != KVF_OK)
		goto out_release;
	if ((rc = wear_hist_init(&f->wear, n_blocks)) != KVF_OK)
		goto out_release;
	for (uint32_t b = 0; b < n_blocks; b++)
		pool_put(&f->pool, b);
	f->erased_pages = (uint64_t)n_blocks * f->ppb;
	return KVF_OK;

out_release:
	ftl_release(f);
	return rc;
}

void ftl_release(struct ftl *f)
{
	if (f->front) {
		for (uint32_t i = 0; i < 2 * f->prm.n_streams + 1; i++)
			kvf_free(f->front[i].blk);
		kvf_free(f->front);
	}
	kvf_free(f->l2p);
	kvf_free(f->p2l);
	kvf_free(f->state);
	kvf_free(f->bstream);
	gc_release(&f->gc);
	pool_release(&f->pool);
	wear_hist_release(&f->wear);
	memset(f, 0, sizeof(*f));
}

/* ---- blocks: erase, retirement, the worn-out state ---- */

void ftl_check_worn_out(struct ftl *f)
{
	uint64_t usable = f->n_blocks - f->retired;
	uint64_t need = f->prm.mapping == KVF_FLASH_MAP_PAGE ?
			(f->n_lpn + f->ppb - 1) / f->ppb : f->n_lpn / f->ppb;

	if (usable < need + f->prm.reserve)
		f->worn_out = 1;
}

/* ftl_erase_block - erase b (no live page left in it); FREE or RETIRED */
kvf_status ftl_erase_block(struct ftl *f, uint32_t b)
{
	uint32_t g = gblk(f, b), ec = f->nand->erase_count[g];
	uint32_t wp = f->nand->wp[g];
	kvf_status rc;

	if ((rc = wear_hist_reserve(&f->wear, ec + 1)) != KVF_OK)
		return rc;
	if ((rc = nand_erase(f->nand, g)) != KVF_OK)
		return rc;
	f->c.erases++;
	f->erased_pages += wp;
	wear_hist_erased(&f->wear, ec);
	if (nand_is_retired(f->nand, g)) {
		f->state[b] = BLK_RETIRED;
		wear_hist_retire(&f->wear, ec + 1);
		f->retired++;
		f->erased_pages -= f->ppb;
		ftl_check_worn_out(f);
	} else {
		f->state[b] = BLK_FREE;
		pool_put(&f->pool, b);
	}
	if (f->prm.wl_gap && f->wear.n &&
	    f->wear.max_ec - f->wear.min_ec > f->prm.wl_gap)
		f->wl_pending = 1;
	return KVF_OK;
}

kvf_status ftl_worn_out(const struct ftl *f)
{
	return kvf_fail(KVF_ENOSPC,
			"flash: stripe %u is worn out and read-only: %llu of %u blocks retired at the P/E limit of %u, %llu bytes of capacity lost",
			f->part, (unsigned long long)f->retired, f->n_blocks,
			f->nand->pe_limit,
			(unsigned long long)f->retired * f->ppb *
				f->nand->geo.page_size);
}

/* ---- the partition's entry points ---- */

kvf_status ftl_power_restored(struct ftl *f)
{
	uint32_t b = f->dirty;

	if (b == FTL_NONE)
		return KVF_OK;
	f->dirty = FTL_NONE;
	for (uint32_t p = 0; p < wp_of(f, b); p++)
		f->p2l[ppn_of(f, b, p)] = FTL_NONE;
	f->gc.valid[b] = 0;
	return ftl_erase_block(f, b);
}

void ftl_locate(const struct ftl *f, uint64_t lpn, uint32_t *block,
		uint32_t *page)
{
	*block = *page = FTL_NONE;
	if (f->prm.mapping == KVF_FLASH_MAP_PAGE) {
		uint32_t ppn = f->l2p[lpn];

		if (ppn != FTL_NONE) {
			*block = gblk(f, ppn >> f->shift);
			*page = ppn & ((1u << f->shift) - 1);
		}
	} else {
		uint32_t b = f->l2p[lpn / f->ppb], p = (uint32_t)(lpn % f->ppb);

		if (b != FTL_NONE && p < wp_of(f, b) &&
		    f->p2l[ppn_of(f, b, p)] != FTL_NONE) {
			*block = gblk(f, b);
			*page = p;
		}
	}
}

kvf_status ftl_read(struct ftl *f, uint64_t lpn, uint32_t n, void *buf)
{
	uint32_t ps = f->nand->geo.page_size;
	unsigned char *out = buf;
	kvf_status rc;

	if (f->nand->powered_off)
		return dark(f, "read");
	for (uint32_t i = 0; i < n; i++) {
		uint32_t block, page;
		unsigned char *dst = out ? out + (size_t)i * ps : NULL;

		ftl_locate(f, lpn + i, &block, &page);
		f->c.host_reads++;
		if (block == FTL_NONE) {
			if (dst)
				memset(dst, 0, ps);
			continue;
		}
		if ((rc = nand_read(f->nand, block, page, dst)) != KVF_OK)
			return rc;
	}
	return KVF_OK;
}

kvf_status ftl_trim(struct ftl *f, uint64_t lpn, uint64_t n)
{
	kvf_status rc;

	if (f->nand->powered_off)
		return dark(f, "trim");
	if (f->nand->img != NULL &&
	    (rc = nand_image_trim(f->nand, f->part, lpn, n)) != KVF_OK)
		return rc;
	for (uint64_t l = lpn; l < lpn + n; l++) {
		uint32_t b, p, q;

		if (f->prm.mapping == KVF_FLASH_MAP_PAGE) {
			q = f->l2p[l];
			if (q == FTL_NONE)
				continue;
			f->l2p[l] = FTL_NONE;
			f->p2l[q] = FTL_NONE;
			gc_invalidate(&f->gc, q >> f->shift);
			f->c.trimmed_pages++;
			continue;
		}
		b = f->l2p[l / f->ppb];
		p = (uint32_t)(l % f->ppb);
		if (b == FTL_NONE || p >= wp_of(f, b) ||
		    f->p2l[ppn_of(f, b, p)] == FTL_NONE)
			continue;
		f->p2l[ppn_of(f, b, p)] = FTL_NONE;
		f->c.trimmed_pages++;
		if (--f->gc.valid[b] > 0)
			continue;
		/* nothing live is left: the block is erased, as a zone reset */
		f->l2p[l / f->ppb] = FTL_NONE;
		if ((rc = ftl_erase_block(f, b)) != KVF_OK)
			return rc;
	}
	return KVF_OK;
}
