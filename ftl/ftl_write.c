/*
 * ftl_write.c - one partition's writes: host writes, which go to page
 * mapping (ftl_page.c) or block mapping (ftl_block.c) and then to static
 * wear leveling, and background GC.  Above both mappings, which sit above
 * ftl_map.c (set-up, erase, read, trim); ftl_map.h documents the calls.
 *
 * Not thread-safe: the flash media serializes every call.
 */
#include "ftl/ftl_map.h"

#include "api/status.h"
#include "ftl/ftl_map_int.h"

static kvf_status write_prologue(struct ftl *f)
{
	if (f->nand->powered_off)
		return dark(f, "write");
	if (f->worn_out)
		return ftl_worn_out(f);
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
		rc = ftl_block_write(f, lpn, n, data);
	} else {
		for (uint32_t i = 0; i < n && rc == KVF_OK; i++)
			rc = ftl_page_write(f, lpn + i, data ?
					    data + (size_t)i * ps : NULL,
					    stream);
	}
	if (rc == KVF_OK && f->wl_pending)
		rc = ftl_wl_run(f);
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
			rc = ftl_block_write(f, lpns[i], 1, NULL);
		else
			rc = ftl_page_write(f, lpns[i], NULL, stream);
		if (rc == KVF_OK && f->wl_pending)
			rc = ftl_wl_run(f);
		if (rc != KVF_OK)
			return rc;
		if (f->worn_out)
			return ftl_worn_out(f);
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
		if ((rc = ftl_page_gc_victim(f, v, 1)) != KVF_OK)
			return rc;
		used = tm->end_ns - before;
		*budget_ns = used >= *budget_ns ? 0 : *budget_ns - used;
	}
	return KVF_OK;
}
