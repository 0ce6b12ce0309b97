/*
 * ftl_page.c - page mapping of one partition's FTL: the write frontiers
 * of the streams, host page writes, garbage collection (foreground and,
 * through ftl_collect, background) and static wear leveling, which also
 * drives block mapping's moves (ftl_block_move).  A file of its own: the
 * page-mapped write path, apart from block mapping and the entry points
 * of ftl_map.c.
 *
 * Not thread-safe: the flash media serializes every call.
 */
#include "ftl/ftl_map.h"

#include "api/status.h"
#include "ftl/ftl_map_int.h"

static kvf_status gc_one(struct ftl *f, int background);

/* ensure_free - foreground GC until the pool holds more than fg_free */
static kvf_status ensure_free(struct ftl *f)
{
	uint32_t guard = f->n_blocks + 1;
	kvf_status rc;

	while (f->pool.n_free <= f->prm.fg_free) {
		if (f->worn_out)
			return ftl_worn_out(f);
		if (guard-- == 0)
			return kvf_fail(KVF_ENOSPC,
					"flash: stripe %u: GC cannot free a block: every candidate is full of live data",
					f->part);
		if ((rc = gc_one(f, 0)) != KVF_OK)
			return rc;
	}
	return KVF_OK;
}

static const char *fr_name(const struct ftl *f, uint32_t fi)
{
	return fi < f->prm.n_streams ? "host" : fr_is_gc(f, fi) ? "GC" :
	       "wear-leveling";
}

/* frontier_block - the open block of frontier fi's next slot, opening one
 * (after foreground GC, for host frontiers) if the slot has none */
static kvf_status frontier_block(struct ftl *f, uint32_t fi, uint32_t *out)
{
	struct ftl_frontier *fr = &f->front[fi];
	uint32_t slot = fr->next, b = fr->blk[slot];
	kvf_status rc;

	if (b != FTL_NONE) {
		*out = b;
		return KVF_OK;
	}
	if (fi < f->prm.n_streams && (rc = ensure_free(f)) != KVF_OK)
		return rc;
	b = pool_take(&f->pool, slot,
		      fi == fr_wl(f) ? POOL_MOST_WORN : POOL_LEAST_WORN);
	if (b == WEAR_NONE && f->retired > 0) {
		/* retired victims gave nothing back: GC has no room left */
		f->worn_out = 1;
		return ftl_worn_out(f);
	}
	if (b == WEAR_NONE)
		return kvf_fail(KVF_ENOSPC,
				"flash: stripe %u: no free block for the %s frontier (%u blocks, %llu retired)",
				f->part, fr_name(f, fi), f->n_blocks,
				(unsigned long long)f->retired);
	f->state[b] = BLK_OPEN;
	f->bstream[b] = (uint8_t)fr_stream(f, fi);
	f->gc.seal_time[b] = f->clock; /* opened at; sealing sets it again */
	fr->blk[slot] = b;
	*out = b;
	return KVF_OK;
}

/* frontier_advance - page `page` of b went into fi's next slot */
static inline void frontier_advance(struct ftl *f, uint32_t fi, uint32_t b,
				    uint32_t page)
{
	struct ftl_frontier *fr = &f->front[fi];

	f->erased_pages--;
	if (page + 1 == f->ppb) {
		fr->blk[fr->next] = FTL_NONE;
		f->state[b] = BLK_SEALED;
		gc_seal(&f->gc, b, f->clock);
	}
	fr->next = fr->next + 1 == fr->width ? 0 : fr->next + 1;
}

/* map_host - lpn now lives at (b, page); its old page dies */
static inline void map_host(struct ftl *f, uint64_t lpn, uint32_t b,
			    uint32_t page)
{
	uint32_t old = f->l2p[lpn], dst = ppn_of(f, b, page);

	if (old != FTL_NONE) {
		f->p2l[old] = FTL_NONE;
		gc_invalidate(&f->gc, old >> f->shift);
	}
	f->l2p[lpn] = dst;
	f->p2l[dst] = (uint32_t)lpn;
	f->gc.valid[b]++;
}

kvf_status ftl_page_write(struct ftl *f, uint64_t lpn, const void *data,
			  uint32_t stream)
{
	uint32_t b, page;
	kvf_status rc;

	if ((rc = frontier_block(f, stream, &b)) != KVF_OK)
		return rc;
	page = wp_of(f, b);
	nand_spare(f->nand, (uint32_t)lpn, stream);
	rc = nand_program(f->nand, gblk(f, b), page, data);
	if (rc != KVF_OK && !torn_here(f, b, page))
		return rc;
	map_host(f, lpn, b, page);
	frontier_advance(f, stream, b, page);
	count_host(f);
	return rc;
}

/*
 * relocate - copy the live pages of victim v (unsealed by the caller) to
 * frontier fi; on success v holds no live page
 */
static kvf_status relocate(struct ftl *f, uint32_t v, uint32_t fi)
{
	uint64_t *counter = fr_is_gc(f, fi) ? &f->c.gc_programs :
			    &f->c.wl_programs;
	uint32_t wp = wp_of(f, v);
	kvf_status rc;

	for (uint32_t p = 0; p < wp && f->gc.valid[v] > 0; p++) {
		uint32_t src = ppn_of(f, v, p), lpn = f->p2l[src], b, page, dst;

		if (lpn == FTL_NONE)
			continue;
		/* GC stays on the victim's die where it can: copy-back, and
		 * no die waits for another's read */
		if (fr_is_gc(f, fi))
			f->front[fi].next = (v % f->n_dies) % f->front[fi].width;
		if ((rc = frontier_block(f, fi, &b)) != KVF_OK)
			return rc;
		page = wp_of(f, b);
		nand_spare(f->nand, lpn, fr_stream(f, fi));
		rc = nand_copy(f->nand, gblk(f, v), p, gblk(f, b), page);
		if (rc != KVF_OK) {
			if (torn_here(f, b, page)) {
				(*counter)++;
				frontier_advance(f, fi, b, page);
			}
			return rc;
		}
		(*counter)++;
		dst = ppn_of(f, b, page);
		f->p2l[src] = FTL_NONE;
		f->gc.valid[v]--;
		f->l2p[lpn] = dst;
		f->p2l[dst] = lpn;
		f->gc.valid[b]++;
		frontier_advance(f, fi, b, page);
	}
	return KVF_OK;
}

/* take_victim - unseal b for relocation; returns its seal time */
static uint64_t take_victim(struct ftl *f, uint32_t b)
{
	uint64_t sealed_at = f->gc.seal_time[b];

	gc_unseal(&f->gc, b);
	f->state[b] = BLK_VICTIM;
	return sealed_at;
}

static void give_back(struct ftl *f, uint32_t b, uint64_t sealed_at)
{
	f->state[b] = BLK_SEALED;
	gc_reseal(&f->gc, b, sealed_at);
}

static kvf_status gc_one(struct ftl *f, int background)
{
	return ftl_page_gc_victim(f, gc_pick(&f->gc, f->clock), background);
}

/* ftl_page_gc_victim - collect v (GC_NONE: there is nothing to collect) */
kvf_status ftl_page_gc_victim(struct ftl *f, uint32_t v, int background)
{
	uint64_t sealed_at;
	uint32_t live;
	kvf_status rc;

	if (v == GC_NONE)
		return kvf_fail(KVF_ENOSPC,
				"flash: stripe %u: no sealed block to collect (%u free of %u blocks)",
				f->part, f->pool.n_free, f->n_blocks);
	live = f->gc.valid[v];
	sealed_at = take_victim(f, v);
	rc = relocate(f, v, fr_gc(f, f->bstream[v]));
	if (rc == KVF_OK)
		rc = ftl_erase_block(f, v);
	if (rc != KVF_OK) {
		give_back(f, v, sealed_at);
		return rc;
	}
	f->c.gc_victims++;
	f->c.gc_victim_valid += live;
	if (background)
		f->c.bg_victims++;
	return KVF_OK;
}

/*
 * find_cold - a block holding cold data that lags the most worn block by
 * more than wl_gap erases, or FTL_NONE.  Cold: not written for a whole
 * drive write (n_lpn host pages).  A young block at the minimum was just
 * taken from the pool and is cycling; moving it would put hot data on a
 * worn block.  The scan resumes where the last one stopped.
 */
static uint32_t find_cold(struct ftl *f)
{
	uint32_t below = f->wear.max_ec - f->prm.wl_gap;

	for (uint32_t i = 0; i < f->n_blocks; i++) {
		uint32_t b = f->wl_cursor;

		f->wl_cursor = b + 1 == f->n_blocks ? 0 : b + 1;
		if (f->nand->erase_count[gblk(f, b)] >= below ||
		    f->clock - f->gc.seal_time[b] < f->n_lpn)
			continue;
		if (f->state[b] == BLK_SEALED || f->state[b] == BLK_OPEN)
			return b;
	}
	return FTL_NONE;
}

/*
 * close_open - page mapping: a stale open block (a frontier that fills
 * slowly) leaves its frontier slot and is sealed as it is, partly
 * programmed, so that it can be moved like any sealed block.
 */
static void close_open(struct ftl *f, uint32_t b)
{
	for (uint32_t i = 0; i < 2 * f->prm.n_streams + 1; i++)
		for (uint32_t s = 0; s < f->front[i].width; s++)
			if (f->front[i].blk[s] == b)
				f->front[i].blk[s] = FTL_NONE;
	f->state[b] = BLK_SEALED;
	gc_reseal(&f->gc, b, f->gc.seal_time[b]);
}

/*
 * worth_moving - is there a free block worn enough to take cold data?
 * Cold data parked on a block at least half the gap ahead of the least
 * worn rests there while the others catch up; parked on a block about as
 * young as itself it would be at the minimum again a level later, and
 * moved again, and again.
 */
static int worth_moving(const struct ftl *f)
{
	uint32_t ahead = f->prm.wl_gap / 2 ? f->prm.wl_gap / 2 : 1;
	const struct ftl_frontier *fr = &f->front[fr_wl(f)];

	if (f->prm.mapping == KVF_FLASH_MAP_PAGE && fr->blk[fr->next] != FTL_NONE)
		return 1; /* the open block was worn enough when opened */
	return pool_max_ec(&f->pool) >= f->wear.min_ec + ahead;
}

/*
 * ftl_wl_run - static wear leveling: while the erase gap passes wl_gap, move
 * the data of a least-erased block holding cold data to a most-worn free
 * block, and free it for hot data.  When no free block is worn enough it
 * waits: the hot blocks cycling through the pool will bring one.
 */
kvf_status ftl_wl_run(struct ftl *f)
{
	uint32_t guard = f->n_blocks;
	kvf_status rc;

	f->wl_pending = 0;
	while (f->wear.max_ec - f->wear.min_ec > f->prm.wl_gap && guard-- > 0) {
		uint32_t b;
		uint64_t sealed_at;

		if (!worth_moving(f))
			break;
		b = find_cold(f);
		if (b == FTL_NONE)
			break;
		if (f->prm.mapping == KVF_FLASH_MAP_BLOCK) {
			if ((rc = ftl_block_move(f, b)) != KVF_OK)
				return rc;
			f->c.wl_moves++;
			continue;
		}
		if ((rc = ensure_free(f)) != KVF_OK)
			return rc;
		if (f->state[b] == BLK_OPEN)
			close_open(f, b);
		if (f->state[b] != BLK_SEALED)
			continue; /* GC took it meanwhile */
		sealed_at = take_victim(f, b);
		rc = relocate(f, b, fr_wl(f));
		if (rc == KVF_OK)
			rc = ftl_erase_block(f, b);
		if (rc != KVF_OK) {
			give_back(f, b, sealed_at);
			return rc;
		}
		f->c.wl_moves++;
	}
	return KVF_OK;
}
