/*
 * ftl_map.c - one partition's flash translation layer (see ftl_map.h for
 * the mapping, the block states and the invariants).
 *
 * Every program goes through one of three paths, which keep the
 * invariants and count the program by cause: host writes (page_write,
 * block_append, block_fill), relocations (relocate for page mapping,
 * block_fill via block_move for block mapping) and padding (block_pad).  A power cut surfaces as
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
#include "ftl/nand_image.h"

static inline uint32_t gblk(const struct ftl *f, uint32_t b)
{
	return f->base + b;
}

static inline uint32_t wp_of(const struct ftl *f, uint32_t b)
{
	return f->nand->wp[f->base + b];
}

static inline uint32_t ppn_of(const struct ftl *f, uint32_t b, uint32_t page)
{
	return (b << f->shift) | page;
}

/* the GC frontier of stream s, and the wear-leveling frontier */
static inline uint32_t fr_gc(const struct ftl *f, uint32_t s)
{
	return f->prm.n_streams + s;
}

static inline uint32_t fr_wl(const struct ftl *f)
{
	return 2 * f->prm.n_streams;
}

static inline int fr_is_gc(const struct ftl *f, uint32_t fi)
{
	return fi >= f->prm.n_streams && fi < 2 * f->prm.n_streams;
}

/* fr_stream - the stream whose data frontier fi holds (WL: stream 0) */
static inline uint32_t fr_stream(const struct ftl *f, uint32_t fi)
{
	return fi < f->prm.n_streams ? fi :
	       fi < 2 * f->prm.n_streams ? fi - f->prm.n_streams : 0;
}

/* torn_here - did the failed program of (b, page) tear it (and so use it)? */
static int torn_here(const struct ftl *f, uint32_t b, uint32_t page)
{
	const struct nand *n = f->nand;

	return n->powered_off && n->cut_block == gblk(f, b) &&
	       n->cut_page == page && wp_of(f, b) == page + 1;
}

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

static void check_worn_out(struct ftl *f)
{
	uint64_t usable = f->n_blocks - f->retired;
	uint64_t need = f->prm.mapping == KVF_FLASH_MAP_PAGE ?
			(f->n_lpn + f->ppb - 1) / f->ppb : f->n_lpn / f->ppb;

	if (usable < need + f->prm.reserve)
		f->worn_out = 1;
}

/* erase_block - erase b (no live page left in it); FREE or RETIRED */
static kvf_status erase_block(struct ftl *f, uint32_t b)
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
		check_worn_out(f);
	} else {
		f->state[b] = BLK_FREE;
		pool_put(&f->pool, b);
	}
	if (f->prm.wl_gap && f->wear.n &&
	    f->wear.max_ec - f->wear.min_ec > f->prm.wl_gap)
		f->wl_pending = 1;
	return KVF_OK;
}

static kvf_status worn_out(const struct ftl *f)
{
	return kvf_fail(KVF_ENOSPC,
			"flash: stripe %u is worn out and read-only: %llu of %u blocks retired at the P/E limit of %u, %llu bytes of capacity lost",
			f->part, (unsigned long long)f->retired, f->n_blocks,
			f->nand->pe_limit,
			(unsigned long long)f->retired * f->ppb *
				f->nand->geo.page_size);
}

static kvf_status dark(const struct ftl *f, const char *op)
{
	return kvf_fail(KVF_EIO,
			"flash: %s on stripe %u refused: the power is cut (block %u page %u was torn); power the device on first",
			op, f->part, f->nand->cut_block, f->nand->cut_page);
}

/* ---- page mapping: frontiers, GC, wear leveling ---- */

static kvf_status gc_one(struct ftl *f, int background);

/* ensure_free - foreground GC until the pool holds more than fg_free */
static kvf_status ensure_free(struct ftl *f)
{
	uint32_t guard = f->n_blocks + 1;
	kvf_status rc;

	while (f->pool.n_free <= f->prm.fg_free) {
		if (f->worn_out)
			return worn_out(f);
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
		return worn_out(f);
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

static inline void count_host(struct ftl *f)
{
	f->c.host_pages++;
	f->clock++;
	f->c.erased_sum += f->erased_pages;
	f->c.erased_samples++;
}

static kvf_status page_write(struct ftl *f, uint64_t lpn, const void *data,
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

static kvf_status gc_victim(struct ftl *f, uint32_t v, int background);

static kvf_status gc_one(struct ftl *f, int background)
{
	return gc_victim(f, gc_pick(&f->gc, f->clock), background);
}

/* gc_victim - collect v (GC_NONE: there is nothing to collect) */
static kvf_status gc_victim(struct ftl *f, uint32_t v, int background)
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
		rc = erase_block(f, v);
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

static kvf_status block_move(struct ftl *f, uint32_t b);

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
 * wl_run - static wear leveling: while the erase gap passes wl_gap, move
 * the data of a least-erased block holding cold data to a most-worn free
 * block, and free it for hot data.  When no free block is worn enough it
 * waits: the hot blocks cycling through the pool will bring one.
 */
static kvf_status wl_run(struct ftl *f)
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
			if ((rc = block_move(f, b)) != KVF_OK)
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
			rc = erase_block(f, b);
		if (rc != KVF_OK) {
			give_back(f, b, sealed_at);
			return rc;
		}
		f->c.wl_moves++;
	}
	return KVF_OK;
}

/* ---- block mapping ---- */

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
	return erase_block(f, b);
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

/* block_move - static WL: lbn's block b moves to a most-worn free block */
static kvf_status block_move(struct ftl *f, uint32_t b)
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

static kvf_status block_write(struct ftl *f, uint64_t lpn, uint32_t n,
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

/* ---- recovery from an image ---- */

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
	check_worn_out(f);
	if (f->prm.wl_gap && f->wear.n &&
	    f->wear.max_ec - f->wear.min_ec > f->prm.wl_gap)
		f->wl_pending = 1;
out:
	kvf_free(newest);
	kvf_free(order);
	kvf_free(live);
	return rc;
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
	return erase_block(f, b);
}

static kvf_status write_prologue(struct ftl *f)
{
	if (f->nand->powered_off)
		return dark(f, "write");
	if (f->worn_out)
		return worn_out(f);
	/* a merge that failed for another reason than a cut left this */
	if (f->dirty != FTL_NONE)
		return ftl_power_restored(f);
	return KVF_OK;
}

kvf_status ftl_write(struct ftl *f, uint64_t lpn, uint32_t n,
		     const void *buf, uint32_t stream)
{
	const unsigned char *data = buf;
	uint32_t ps = f->nand->geo.page_size;
	kvf_status rc;

	if ((rc = write_prologue(f)) != KVF_OK)
		return rc;
	if (f->prm.mapping == KVF_FLASH_MAP_BLOCK) {
		rc = block_write(f, lpn, n, data);
	} else {
		for (uint32_t i = 0; i < n && rc == KVF_OK; i++)
			rc = page_write(f, lpn + i, data ?
					data + (size_t)i * ps : NULL, stream);
	}
	if (rc == KVF_OK && f->wl_pending)
		rc = wl_run(f);
	return rc;
}

kvf_status ftl_write_list(struct ftl *f, const uint64_t *lpns, uint32_t n,
			  uint32_t stream)
{
	kvf_status rc;

	if ((rc = write_prologue(f)) != KVF_OK)
		return rc;
	for (uint32_t i = 0; i < n; i++) {
		if (f->prm.mapping == KVF_FLASH_MAP_BLOCK)
			rc = block_write(f, lpns[i], 1, NULL);
		else
			rc = page_write(f, lpns[i], NULL, stream);
		if (rc == KVF_OK && f->wl_pending)
			rc = wl_run(f);
		if (rc != KVF_OK)
			return rc;
		if (f->worn_out)
			return worn_out(f);
	}
	return KVF_OK;
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
		if ((rc = erase_block(f, b)) != KVF_OK)
			return rc;
	}
	return KVF_OK;
}

kvf_status ftl_collect(struct ftl *f, uint32_t target, uint64_t *budget_ns)
{
	const struct ftl_time *tm = &f->nand->time;
	kvf_status rc;

	if (f->nand->powered_off)
		return dark(f, "background GC");
	if (f->prm.mapping == KVF_FLASH_MAP_BLOCK)
		return KVF_OK;
	while (f->pool.n_free < target && *budget_ns > 0 &&
	       f->gc.n_sealed > 0) {
		uint64_t before = tm->end_ns, used;
		uint32_t v = gc_pick(&f->gc, f->clock);

		if (f->gc.valid[v] >= f->ppb)
			break; /* a full victim would only move pages around */
		if ((rc = gc_victim(f, v, 1)) != KVF_OK)
			return rc;
		used = tm->end_ns - before;
		*budget_ns = used >= *budget_ns ? 0 : *budget_ns - used;
	}
	return KVF_OK;
}

/* ---- ftl_check ---- */

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
