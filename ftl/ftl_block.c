/*
 * ftl_block.c - block mapping of one partition's FTL: appends in place
 * (with padding), merges into a fresh block, and static wear leveling's
 * moves of a whole block.  A file of its own: nothing here is shared with
 * page mapping but erase (ftl_erase_block) and the page accounting.
 *
 * Not thread-safe: the flash media serializes every call.
 */
#include "ftl/ftl_map.h"

#include "api/status.h"
#include "ftl/ftl_map_int.h"

/* block_pad - program page p of b with nothing (keeps programs in order) */
static kvf_status block_pad(struct ftl *f, uint32_t b, uint32_t p)
{
	kvf_status rc = nand_program(f->nand, gblk(f, b), p, NULL);

	if (rc == KVF_OK || torn_here(f, b, p)) {
		f->erased_pages--;
		f->c.pad_programs++;
	}
	return rc;
}

static kvf_status block_append(struct ftl *f, uint64_t lbn, uint32_t b,
			       uint32_t off, uint32_t k,
			       const unsigned char *data)
{
	uint32_t ps = f->nand->geo.page_size;
	kvf_status rc;

	for (uint32_t p = wp_of(f, b); p < off; p++)
		if ((rc = block_pad(f, b, p)) != KVF_OK)
			return rc;
	for (uint32_t i = 0; i < k; i++) {
		uint32_t p = off + i;

		rc = nand_program(f->nand, gblk(f, b), p,
				  data ? data + (size_t)i * ps : NULL);
		if (rc != KVF_OK && !torn_here(f, b, p))
			return rc;
		f->erased_pages--;
		count_host(f);
		f->p2l[ppn_of(f, b, p)] = (uint32_t)(lbn * f->ppb + p);
		f->gc.valid[b]++;
		f->gc.seal_time[b] = f->clock;
		if (p + 1 == f->ppb)
			f->state[b] = BLK_SEALED;
		if (rc != KVF_OK)
			return rc;
	}
	return KVF_OK;
}

/*
 * block_fill - program pages [0, end) of the fresh block nb: new data for
 * [off, off + k) (k may be 0), the live pages of old block b (FTL_NONE:
 * none) copied at their places, padding elsewhere.  *copies counts the
 * copies.  A cut leaves nb dirty for ftl_power_restored to erase.
 */
static kvf_status block_fill(struct ftl *f, uint32_t nb, uint32_t b,
			     uint32_t end, uint32_t off, uint32_t k,
			     const unsigned char *data, uint64_t *copies)
{
	uint32_t ps = f->nand->geo.page_size;
	uint32_t old_wp = b == FTL_NONE ? 0 : wp_of(f, b);
	kvf_status rc;

	for (uint32_t p = 0; p < end; p++) {
		if (p >= off && p < off + k) {
			rc = nand_program(f->nand, gblk(f, nb), p,
					  data ? data + (size_t)(p - off) * ps :
						 NULL);
		} else if (p < old_wp && f->p2l[ppn_of(f, b, p)] != FTL_NONE) {
			rc = nand_copy(f->nand, gblk(f, b), p, gblk(f, nb), p);
			if (rc == KVF_OK || torn_here(f, nb, p))
				(*copies)++;
		} else {
			rc = block_pad(f, nb, p);
			if (rc != KVF_OK) {
				f->dirty = nb;
				return rc;
			}
			continue;
		}
		if (rc != KVF_OK) {
			if (torn_here(f, nb, p))
				f->erased_pages--;
			f->dirty = nb;
			return rc;
		}
		f->erased_pages--;
	}
	return KVF_OK;
}

/* block_switch - nb (filled by block_fill) replaces b as lbn's block */
static kvf_status block_switch(struct ftl *f, uint64_t lbn, uint32_t nb,
			       uint32_t b, uint32_t end, uint32_t off,
			       uint32_t k)
{
	uint32_t old_wp = b == FTL_NONE ? 0 : wp_of(f, b);

	for (uint32_t p = 0; p < end; p++) {
		uint32_t lpn = FTL_NONE;

		if (p >= off && p < off + k)
			lpn = (uint32_t)(lbn * f->ppb + p);
		else if (p < old_wp)
			lpn = f->p2l[ppn_of(f, b, p)];
		if (lpn != FTL_NONE) {
			f->p2l[ppn_of(f, nb, p)] = lpn;
			f->gc.valid[nb]++;
		}
	}
	f->l2p[lbn] = nb;
	f->state[nb] = end == f->ppb ? BLK_SEALED : BLK_OPEN;
	/* a move keeps the data's age; a write makes it young */
	f->gc.seal_time[nb] = k > 0 || b == FTL_NONE ? f->clock :
			      f->gc.seal_time[b];
	if (b == FTL_NONE)
		return KVF_OK;
	for (uint32_t p = 0; p < old_wp; p++)
		f->p2l[ppn_of(f, b, p)] = FTL_NONE;
	f->gc.valid[b] = 0;
	return ftl_erase_block(f, b);
}

static kvf_status block_write_run(struct ftl *f, uint64_t lbn, uint32_t off,
				  uint32_t k, const unsigned char *data)
{
	uint32_t b = f->l2p[lbn], nb, end = off + k;
	uint64_t copies = 0;
	kvf_status rc;

	if (b != FTL_NONE && off >= wp_of(f, b))
		return block_append(f, lbn, b, off, k, data);
	nb = pool_take(&f->pool, (uint32_t)(lbn % f->n_dies),
		       POOL_LEAST_WORN);
	if (nb == WEAR_NONE)
		return kvf_fail(KVF_ENOSPC,
				"flash: stripe %u: no free block to write logical block %llu into",
				f->part, (unsigned long long)lbn);
	f->state[nb] = BLK_VICTIM;
	if (b != FTL_NONE && wp_of(f, b) > end)
		end = wp_of(f, b);
	rc = block_fill(f, nb, b, end, off, k, data, &copies);
	f->c.gc_programs += copies;
	if (rc != KVF_OK)
		return rc;
	for (uint32_t i = 0; i < k; i++)
		count_host(f);
	if (b != FTL_NONE)
		f->c.merges++;
	return block_switch(f, lbn, nb, b, end, off, k);
}

/* ftl_block_move - static WL: lbn's block b moves to a most-worn free block */
kvf_status ftl_block_move(struct ftl *f, uint32_t b)
{
	uint32_t lbn = FTL_NONE, end = wp_of(f, b), nb;
	uint64_t copies = 0;
	kvf_status rc;

	for (uint32_t p = 0; p < end && lbn == FTL_NONE; p++)
		if (f->p2l[ppn_of(f, b, p)] != FTL_NONE)
			lbn = f->p2l[ppn_of(f, b, p)] / f->ppb;
	if (lbn == FTL_NONE)
		return kvf_fail(KVF_ECORRUPT,
				"flash: stripe %u: mapped block %u holds no live page",
				f->part, b);
	nb = pool_take(&f->pool, b % f->n_dies, POOL_MOST_WORN);
	if (nb == WEAR_NONE)
		return kvf_fail(KVF_ENOSPC,
				"flash: stripe %u: no free block to move block %u to",
				f->part, b);
	f->state[nb] = BLK_VICTIM;
	rc = block_fill(f, nb, b, end, 0, 0, NULL, &copies);
	f->c.wl_programs += copies;
	if (rc != KVF_OK)
		return rc;
	return block_switch(f, lbn, nb, b, end, 0, 0);
}

kvf_status ftl_block_write(struct ftl *f, uint64_t lpn, uint32_t n,
			   const unsigned char *buf)
{
	uint32_t ps = f->nand->geo.page_size;
	kvf_status rc;

	while (n > 0) {
		uint64_t lbn = lpn / f->ppb;
		uint32_t off = (uint32_t)(lpn % f->ppb);
		uint32_t k = f->ppb - off < n ? f->ppb - off : n;

		if ((rc = block_write_run(f, lbn, off, k, buf)) != KVF_OK)
			return rc;
		lpn += k;
		n -= k;
		if (buf)
			buf += (size_t)k * ps;
	}
	return KVF_OK;
}
