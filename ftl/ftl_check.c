/*
 * ftl_check.c - ftl_check: every invariant of ftl_map.h checked by a full
 * walk of one partition's FTL (maps inverse on live pages, valid counts,
 * block states, frontier slots, erased pages, the pool and the erase
 * histogram).  A file of its own: tests and kvbench call it, the write
 * paths never do.
 *
 * Not thread-safe: the flash media serializes every call.
 */
#include "ftl/ftl_map.h"

#include <stdint.h>

#include "api/alloc.h"
#include "api/status.h"
#include "ftl/ftl_map_int.h"

static kvf_status bad(const struct ftl *f, const char *what, uint64_t a,
		      uint64_t b)
{
	return kvf_fail(KVF_ECORRUPT,
			"flash: stripe %u check: %s (%llu, %llu)", f->part, what,
			(unsigned long long)a, (unsigned long long)b);
}

static kvf_status check_mapping(const struct ftl *f, uint32_t *live)
{
	uint64_t n_ppn = (uint64_t)f->n_blocks << f->shift;

	for (uint64_t q = 0; q < n_ppn; q++) {
		uint32_t lpn = f->p2l[q], b = (uint32_t)(q >> f->shift);
		uint32_t p = (uint32_t)(q & ((1u << f->shift) - 1)), blk, pg;

		if (lpn == FTL_NONE)
			continue;
		if (p >= wp_of(f, b))
			return bad(f, "a live page is not programmed", b, p);
		if (lpn >= f->n_lpn)
			return bad(f, "a page maps past the logical size", q, lpn);
		ftl_locate(f, lpn, &blk, &pg);
		if (blk != gblk(f, b) || pg != p)
			return bad(f, "l2p does not point back at the page", q,
				   lpn);
		live[b]++;
	}
	if (f->prm.mapping == KVF_FLASH_MAP_PAGE) {
		for (uint64_t l = 0; l < f->n_lpn; l++) {
			uint32_t q = f->l2p[l];

			if (q != FTL_NONE && f->p2l[q] != l)
				return bad(f, "p2l does not point back at the logical page",
					   l, q);
		}
	} else {
		for (uint64_t n = 0; n < f->n_lpn / f->ppb; n++) {
			uint32_t b = f->l2p[n];

			if (b != FTL_NONE && (f->state[b] == BLK_FREE ||
					      f->state[b] == BLK_RETIRED))
				return bad(f, "a logical block maps to an unused block",
					   n, b);
		}
	}
	return KVF_OK;
}

static kvf_status check_block(const struct ftl *f, uint32_t b, uint32_t live,
			      uint32_t in_frontier)
{
	uint32_t wp = wp_of(f, b);
	int page = f->prm.mapping == KVF_FLASH_MAP_PAGE;

	if (live != f->gc.valid[b])
		return bad(f, "valid count is wrong", b, f->gc.valid[b]);
	switch (f->state[b]) {
	case BLK_FREE:
		if (wp != 0 || nand_is_retired(f->nand, gblk(f, b)))
			return bad(f, "a free block is not erased", b, wp);
		break;
	case BLK_OPEN:
		if (wp >= f->ppb || (page && in_frontier != 1))
			return bad(f, "an open block is full or not in one frontier slot",
				   b, in_frontier);
		break;
	case BLK_SEALED:
		/* page mapping may close a stale open block early */
		if (wp == 0 || (!page && wp != f->ppb) ||
		    (page && !gc_is_sealed(&f->gc, b)))
			return bad(f, "a sealed block is empty, not full or not a candidate",
				   b, wp);
		break;
	case BLK_VICTIM:
		if (b != f->dirty)
			return bad(f, "a victim block outlived its collection", b,
				   wp);
		break;
	case BLK_RETIRED:
		if (!nand_is_retired(f->nand, gblk(f, b)))
			return bad(f, "a retired block is not retired on NAND", b,
				   f->nand->erase_count[gblk(f, b)]);
		break;
	default:
		return bad(f, "a block has an unknown state", b, f->state[b]);
	}
	if (f->state[b] != BLK_SEALED && gc_is_sealed(&f->gc, b))
		return bad(f, "a block that is not sealed is a GC candidate", b,
			   f->state[b]);
	if (in_frontier && f->state[b] != BLK_OPEN)
		return bad(f, "a frontier slot holds a block that is not open", b,
			   f->state[b]);
	return KVF_OK;
}

static kvf_status check_counts(const struct ftl *f)
{
	uint64_t erased = 0, n_free = 0, n = 0, sum = 0, sum_sq = 0;
	uint32_t min = UINT32_MAX, max = 0;

	for (uint32_t b = 0; b < f->n_blocks; b++) {
		uint32_t ec = f->nand->erase_count[gblk(f, b)];

		if (f->state[b] == BLK_RETIRED)
			continue;
		erased += f->ppb - wp_of(f, b);
		n_free += f->state[b] == BLK_FREE;
		n++;
		sum += ec;
		sum_sq += (uint64_t)ec * ec;
		min = ec < min ? ec : min;
		max = ec > max ? ec : max;
	}
	if (erased != f->erased_pages)
		return bad(f, "erased page count is wrong", erased,
			   f->erased_pages);
	if (n_free != f->pool.n_free)
		return bad(f, "free block count is wrong", n_free,
			   f->pool.n_free);
	if (n != f->wear.n || sum != f->wear.sum || sum_sq != f->wear.sum_sq)
		return bad(f, "erase histogram sums are wrong", sum, f->wear.sum);
	if (n > 0 && (min != f->wear.min_ec || max != f->wear.max_ec))
		return bad(f, "erase histogram bounds are wrong", min,
			   f->wear.min_ec);
	return KVF_OK;
}

kvf_status ftl_check(const struct ftl *f)
{
	uint32_t *live = kvf_calloc(f->n_blocks, sizeof(uint32_t));
	uint32_t *slots = kvf_calloc(f->n_blocks, sizeof(uint32_t));
	kvf_status rc;

	if (live == NULL || slots == NULL) {
		rc = kvf_fail(KVF_ENOMEM, "flash: check: out of memory");
		goto out_free;
	}
	for (uint32_t i = 0; i < 2 * f->prm.n_streams + 1; i++)
		for (uint32_t s = 0; s < f->front[i].width; s++)
			if (f->front[i].blk[s] != FTL_NONE)
				slots[f->front[i].blk[s]]++;
	if ((rc = check_mapping(f, live)) != KVF_OK)
		goto out_free;
	for (uint32_t b = 0; b < f->n_blocks; b++)
		if ((rc = check_block(f, b, live[b], slots[b])) != KVF_OK)
			goto out_free;
	if ((rc = check_counts(f)) != KVF_OK)
		goto out_free;
	rc = gc_check(&f->gc);
out_free:
	kvf_free(live);
	kvf_free(slots);
	return rc;
}
