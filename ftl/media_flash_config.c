/*
 * media_flash_config.c - the flash media's configuration: the policy
 * names, the checks of a kvf_flash_config, and the layout derived from
 * it (geometry, FTL frontiers and GC thresholds, blocks per plane from
 * the spare factor).  A file of its own: pure arithmetic on a
 * configuration, done before any device exists (and again when an image
 * brings a device the caller's configuration must be judged against).
 */
#include "ftl/media_flash.h"

#include <math.h>
#include <string.h>

#include "api/status.h"
#include "ftl/ftl_map.h"
#include "ftl/media_flash_int.h"

#define DEFAULT_SPARE_FACTOR 0.07 /* consumer-SSD class spare */
#define DEFAULT_GC_D 10u          /* d-choices sample size */
#define MAX_CHANNELS 256u
#define MAX_DIES_PER_CHANNEL 256u
#define MAX_PLANES 16u
#define MAX_PAGES_PER_BLOCK 4096u
#define MAX_WIDTH 64u             /* open blocks per frontier */
#define MAX_GC_D 4096u

const char *kvf_flash_gc_name(enum kvf_flash_gc_policy gc)
{
	switch (gc) {
	case KVF_FLASH_GC_GREEDY:
		return "greedy";
	case KVF_FLASH_GC_COST_BENEFIT:
		return "cost-benefit";
	case KVF_FLASH_GC_FIFO:
		return "fifo";
	case KVF_FLASH_GC_DCHOICES:
		return "dchoices";
	}
	return NULL;
}

static uint32_t or_default(uint32_t v, uint32_t def)
{
	return v ? v : def;
}

static kvf_status check_enums(const struct kvf_flash_config *fc)
{
	if ((unsigned)fc->mapping > KVF_FLASH_MAP_BLOCK)
		return kvf_fail(KVF_EINVAL, "kvf_media_open: flash: unknown mapping %d",
				(int)fc->mapping);
	if (kvf_flash_gc_name(fc->gc) == NULL)
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: flash: unknown GC policy %d",
				(int)fc->gc);
	if ((unsigned)fc->backing > KVF_FLASH_BACKING_IMAGE)
		return kvf_fail(KVF_EINVAL, "kvf_media_open: flash: unknown backing %d",
				(int)fc->backing);
	if ((unsigned)fc->issue > KVF_FLASH_ISSUE_SYNC)
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: flash: unknown issue mode %d",
				(int)fc->issue);
	if ((unsigned)fc->wl_dynamic > KVF_MEDIA_OFF)
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: flash: wl_dynamic %d is not AUTO, ON or OFF",
				(int)fc->wl_dynamic);
	if ((fc->backing == KVF_FLASH_BACKING_FILE ||
	     fc->backing == KVF_FLASH_BACKING_IMAGE) &&
	    (fc->path == NULL || fc->path[0] == '\0'))
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: flash: %s backing needs a path",
				fc->backing == KVF_FLASH_BACKING_FILE ? "file" :
									"image");
	if (fc->backing == KVF_FLASH_BACKING_IMAGE &&
	    fc->mapping != KVF_FLASH_MAP_PAGE)
		return kvf_fail(KVF_ENOTSUP,
				"kvf_media_open: flash: an image keeps page-mapped devices only (mapping is block)");
	return KVF_OK;
}

/* derive_geometry - the device's shape, before the block count */
static kvf_status derive_geometry(const struct kvf_media_geometry *mg,
				  const struct kvf_flash_config *fc,
				  struct layout *lo)
{
	struct nand_geometry *g = &lo->geo;

	g->channels = or_default(fc->channels, 1);
	g->dies_per_channel = or_default(fc->dies_per_channel, 1);
	g->planes_per_die = or_default(fc->planes_per_die, 1);
	g->page_size = or_default(fc->page_size, mg->page_size);
	g->oob_bytes = or_default(fc->oob_bytes, g->page_size / 128 * 7);
	g->pages_per_block = or_default(fc->pages_per_block,
					mg->pages_per_segment);
	g->n_parts = mg->n_stripes;
	g->n_dies = g->channels * g->dies_per_channel;
	if (g->channels > MAX_CHANNELS ||
	    g->dies_per_channel > MAX_DIES_PER_CHANNEL ||
	    g->planes_per_die > MAX_PLANES)
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: flash: %u channels x %u dies x %u planes exceeds the limits (%u, %u, %u)",
				g->channels, g->dies_per_channel,
				g->planes_per_die, MAX_CHANNELS,
				MAX_DIES_PER_CHANNEL, MAX_PLANES);
	if (g->page_size != mg->page_size)
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: flash: page_size %u differs from the media page size %u",
				g->page_size, mg->page_size);
	if (g->page_size != 4096 && g->page_size != 8192 &&
	    g->page_size != 16384)
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: flash: page size %u: NAND pages are 4096, 8192 or 16384 bytes",
				g->page_size);
	if (g->oob_bytes > g->page_size / 4)
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: flash: oob_bytes %u exceeds a quarter of the %u-byte page",
				g->oob_bytes, g->page_size);
	if (g->pages_per_block < 2 || g->pages_per_block > MAX_PAGES_PER_BLOCK)
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: flash: pages_per_block %u out of range (2..%u)",
				g->pages_per_block, MAX_PAGES_PER_BLOCK);
	if (fc->mapping == KVF_FLASH_MAP_BLOCK &&
	    g->pages_per_block != mg->pages_per_segment)
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: flash: block-level mapping needs a segment of exactly one block (pages_per_segment %u, pages_per_block %u)",
				mg->pages_per_segment, g->pages_per_block);
	if (g->n_dies % g->n_parts != 0)
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: flash: %u dies (%u channels x %u) cannot be shared evenly by %u stripes",
				g->n_dies, g->channels, g->dies_per_channel,
				g->n_parts);
	while ((1u << lo->geo_shift) < g->pages_per_block)
		lo->geo_shift++;
	lo->lpn_per_part = mg->segs_per_stripe * mg->pages_per_segment;
	if (lo->lpn_per_part >= UINT32_MAX)
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: flash: %llu logical pages per stripe exceed the map's limit of %u",
				(unsigned long long)lo->lpn_per_part,
				UINT32_MAX - 1);
	return KVF_OK;
}

/* derive_ftl - frontiers, GC thresholds and the blocks GC must keep */
static kvf_status derive_ftl(const struct kvf_flash_config *fc,
			     struct layout *lo)
{
	struct ftl_params *p = &lo->prm;
	uint32_t dies_per_part = lo->geo.n_dies / lo->geo.n_parts;

	p->mapping = fc->mapping;
	p->gc = fc->gc;
	p->gc_d = or_default(fc->gc_d, DEFAULT_GC_D);
	p->seed = fc->seed;
	p->n_streams = or_default(fc->n_streams, 1);
	p->host_width = or_default(fc->frontier_width, dies_per_part);
	p->gc_width = p->host_width;
	p->wl_gap = fc->wl_static_gap;
	p->wl_width = p->wl_gap ? p->host_width : 1;
	p->least_worn = fc->wl_dynamic != KVF_MEDIA_OFF;
	if (p->n_streams > KVF_FLASH_MAX_STREAMS)
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: flash: %u streams exceed the limit of %u",
				p->n_streams, KVF_FLASH_MAX_STREAMS);
	if (p->host_width > MAX_WIDTH)
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: flash: frontier_width %u exceeds the limit of %u",
				p->host_width, MAX_WIDTH);
	if (p->gc_d > MAX_GC_D)
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: flash: gc_d %u exceeds the limit of %u",
				p->gc_d, MAX_GC_D);
	/* GC must find room for a full round of its frontiers' slots, and
	 * static WL for one of its own, while the host waits */
	p->fg_free = or_default(fc->gc_fg_free,
				(p->n_streams + 1) * p->gc_width +
					(p->wl_gap ? p->wl_width : 0));
	if (p->fg_free < p->gc_width + (p->wl_gap ? p->wl_width : 0))
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: flash: gc_fg_free %u is below what GC and wear leveling need (%u blocks)",
				p->fg_free,
				p->gc_width + (p->wl_gap ? p->wl_width : 0));
	if (p->mapping == KVF_FLASH_MAP_PAGE)
		p->reserve = p->fg_free + 1 +
			     p->n_streams * (p->host_width + p->gc_width) +
			     p->wl_width;
	else
		p->reserve = 1 + (p->wl_gap ? 1 : 0);
	return KVF_OK;
}

/* derive_blocks - blocks per plane: given, or what spare_factor needs */
static kvf_status derive_blocks(const struct kvf_flash_config *fc,
				struct layout *lo)
{
	struct nand_geometry *g = &lo->geo;
	uint32_t units = g->n_dies / g->n_parts * g->planes_per_die;
	uint64_t ppb = g->pages_per_block;
	uint64_t data_blocks = (lo->lpn_per_part + ppb - 1) / ppb;
	uint64_t need = data_blocks + lo->prm.reserve, per_part;
	double sf = fc->spare_factor != 0.0 ? fc->spare_factor :
		    DEFAULT_SPARE_FACTOR;

	g->blocks_per_plane = fc->blocks_per_plane;
	if (fc->blocks_per_plane == 0) {
		uint64_t want;

		if (!(sf > 0.0 && sf < 1.0))
			return kvf_fail(KVF_EINVAL,
					"kvf_media_open: flash: spare_factor %g is not in (0, 1)",
					sf);
		want = (uint64_t)ceil((double)lo->lpn_per_part /
				      ((1.0 - sf) * (double)ppb));
		if (want < need)
			want = need;
		g->blocks_per_plane = (uint32_t)((want + units - 1) / units);
		if ((uint64_t)g->blocks_per_plane * units != (want + units - 1) /
							      units * units)
			return kvf_fail(KVF_EINVAL,
					"kvf_media_open: flash: %llu blocks per stripe is too many",
					(unsigned long long)want);
	}
	per_part = (uint64_t)g->blocks_per_plane * units;
	if (per_part < need)
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: flash: each stripe needs at least %llu blocks (%llu logical pages in %u-page blocks, plus %u GC reserve blocks) but the geometry gives %llu",
				(unsigned long long)need,
				(unsigned long long)lo->lpn_per_part,
				g->pages_per_block, lo->prm.reserve,
				(unsigned long long)per_part);
	if ((per_part << lo->geo_shift) >= UINT32_MAX ||
	    per_part * g->n_parts >= UINT32_MAX)
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: flash: %llu blocks of %u pages per stripe exceed the map's 2^32 physical pages",
				(unsigned long long)per_part,
				g->pages_per_block);
	if (lo->prm.bg_free == 0)
		lo->prm.bg_free = lo->prm.fg_free + 1 +
				  (uint32_t)(per_part / 50);
	return KVF_OK;
}

kvf_status media_flash_derive(const struct kvf_media_config *cfg,
			      const struct kvf_flash_config *fc,
			      struct layout *lo)
{
	kvf_status rc;

	memset(lo, 0, sizeof(*lo));
	if ((rc = check_enums(fc)) != KVF_OK)
		return rc;
	if ((rc = derive_geometry(&cfg->geo, fc, lo)) != KVF_OK)
		return rc;
	if ((rc = derive_ftl(fc, lo)) != KVF_OK)
		return rc;
	lo->prm.bg_free = fc->gc_bg_free;
	if ((rc = derive_blocks(fc, lo)) != KVF_OK)
		return rc;
	lo->timing = fc->timing;
	lo->pe_limit = fc->pe_limit;
	lo->cell = ftl_cell_defaults(fc->cell, &lo->timing, &lo->pe_limit);
	if (lo->cell == NULL)
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: flash: unknown cell type %d",
				(int)fc->cell);
	return KVF_OK;
}
