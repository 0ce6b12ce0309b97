/*
 * media_flash.c - the flash emulator as a media backend: the checked
 * configuration, the stripes-to-partitions layout, the media ops, the
 * flash-only calls and the statistics (see media_flash.h).
 *
 * A media holds one NAND device (nand.c, with its timing model) and one
 * FTL per stripe (ftl_map.c).  With memory, file or no backing the
 * device's state lives as long as the media is open: like the memory
 * backend it does not survive close, and the file backing only holds the
 * page bytes (for devices larger than memory).  With the image backing
 * (nand_image.c) the device persists: an existing image brings its
 * geometry, cell and P/E limit (the caller's are ignored, as a drive's
 * are fixed), its logical size must be the media's, and each FTL is
 * rebuilt from the image's spare areas; sync is an fdatasync of the
 * image.
 *
 * Timing: with issue "queued" every request may start as soon as its
 * dies and channels are free (a deep queue: throughput); with "sync"
 * each request waits for everything before it to finish, and its latency
 * (completion - issue) is recorded.  kvf_flash_idle lets the device drain
 * and then run background GC in the idle time.
 *
 * Locking: `lock` serializes every call on the media.
 */
#include "ftl/media_flash.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "ftl/ftl_map.h"
#include "ftl/nand_image.h"

#define DEFAULT_SPARE_FACTOR 0.07 /* consumer-SSD class spare */
#define DEFAULT_GC_D 10u          /* d-choices sample size */
#define MAX_CHANNELS 256u
#define MAX_DIES_PER_CHANNEL 256u
#define MAX_PLANES 16u
#define MAX_PAGES_PER_BLOCK 4096u
#define MAX_WIDTH 64u             /* open blocks per frontier */
#define MAX_GC_D 4096u
#define LAT_SUB 16u               /* latency buckets per power of two */
#define LAT_BUCKETS (64u * LAT_SUB)

struct media_flash {
	struct kvf_media base;      /* the media head: ops, geometry */
	pthread_mutex_t lock;       /* serializes every call */
	struct kvf_flash_config cfg; /* as opened (path not kept) */
	const char *cell;           /* cell type name */
	struct nand nand;           /* the device */
	uint32_t n_parts;           /* stripes */
	struct ftl *parts;          /* [stripe] FTL */
	uint64_t bytes_read;        /* payload bytes returned (bytes) */
	uint64_t write_ios;         /* write requests */
	uint64_t read_ios;          /* read requests */
	uint64_t trims;             /* trimmed segments */
	uint64_t syncs;             /* syncs */
	uint64_t lat_n;             /* timed requests */
	uint64_t lat_sum_ns;        /* their latency (ns) */
	uint64_t lat_max_ns;        /* the slowest (ns) */
	uint64_t lat_hist[LAT_BUCKETS]; /* log buckets of latency */
};

static struct media_flash *to_flash(struct kvf_media *m)
{
	return (struct media_flash *)m;
}

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

/* ---- configuration ---- */

struct layout {
	struct nand_geometry geo;      /* the device */
	struct kvf_flash_timing timing; /* complete */
	uint32_t pe_limit;             /* erases */
	const char *cell;              /* name */
	uint64_t lpn_per_part;         /* logical pages per stripe */
	uint32_t geo_shift;            /* log2 of pages per block, rounded up */
	struct ftl_params prm;         /* FTL settings */
};

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

static kvf_status derive(const struct kvf_media_config *cfg,
			 const struct kvf_flash_config *fc, struct layout *lo)
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

/* ---- media ops ---- */

static struct ftl *part_of(struct media_flash *mf, uint32_t stripe)
{
	return &mf->parts[stripe];
}

static uint64_t lpn_of(const struct kvf_media *m, const struct kvf_media_io *io)
{
	return io->seg * m->geo.pages_per_segment + io->page;
}

static void lat_record(struct media_flash *mf, uint64_t ns)
{
	uint32_t idx = 0;

	if (ns >= LAT_SUB) {
		uint32_t e = 63u - (uint32_t)__builtin_clzll(ns);

		idx = (e - 3) * LAT_SUB +
		      (uint32_t)((ns >> (e - 4)) & (LAT_SUB - 1));
	} else {
		idx = (uint32_t)ns;
	}
	if (idx >= LAT_BUCKETS)
		idx = LAT_BUCKETS - 1;
	mf->lat_hist[idx]++;
	mf->lat_n++;
	mf->lat_sum_ns += ns;
	if (ns > mf->lat_max_ns)
		mf->lat_max_ns = ns;
}

/* lat_value - the lower bound of latency bucket idx (ns) */
static uint64_t lat_value(uint32_t idx)
{
	uint32_t e;

	if (idx < LAT_SUB)
		return idx;
	e = idx / LAT_SUB + 3;
	return ((uint64_t)LAT_SUB + idx % LAT_SUB) << (e - 4);
}

static uint64_t lat_quantile(const struct media_flash *mf, double q)
{
	uint64_t want = (uint64_t)ceil(q * (double)mf->lat_n), seen = 0;

	if (mf->lat_n == 0)
		return 0;
	for (uint32_t i = 0; i < LAT_BUCKETS; i++) {
		seen += mf->lat_hist[i];
		if (seen >= want)
			return lat_value(i);
	}
	return mf->lat_max_ns;
}

/* request_begin/_end - the sync issue mode around one request */
static uint64_t request_begin(struct media_flash *mf)
{
	struct ftl_time *tm = &mf->nand.time;

	if (mf->cfg.issue == KVF_FLASH_ISSUE_SYNC)
		tm->issue_ns = time_max(tm->issue_ns, tm->end_ns);
	return tm->issue_ns;
}

static void request_end(struct media_flash *mf, uint64_t issued)
{
	if (mf->cfg.issue == KVF_FLASH_ISSUE_SYNC)
		lat_record(mf, mf->nand.time.end_ns - issued);
}

static kvf_status check_stream(const struct media_flash *mf, uint32_t stream)
{
	if (stream >= mf->parts[0].prm.n_streams)
		return kvf_fail(KVF_EINVAL,
				"kvf_flash_write: stream %u out of range (the device has %u streams)",
				stream, mf->parts[0].prm.n_streams);
	return KVF_OK;
}

static kvf_status write_locked(struct media_flash *mf,
			       const struct kvf_media_io *io, uint32_t n_io,
			       uint32_t stream)
{
	kvf_status rc = KVF_OK;

	for (uint32_t i = 0; i < n_io && rc == KVF_OK; i++) {
		uint64_t t0 = request_begin(mf);

		rc = ftl_write(part_of(mf, io[i].stripe), lpn_of(&mf->base, &io[i]),
			       io[i].n_pages, io[i].buf, stream);
		request_end(mf, t0);
		mf->write_ios++;
	}
	return rc;
}

static kvf_status flash_write(struct kvf_media *m,
			      const struct kvf_media_io *io, uint32_t n_io)
{
	struct media_flash *mf = to_flash(m);
	kvf_status rc;

	pthread_mutex_lock(&mf->lock);
	rc = write_locked(mf, io, n_io, 0);
	pthread_mutex_unlock(&mf->lock);
	return rc;
}

static kvf_status flash_read(struct kvf_media *m, const struct kvf_media_io *io,
			     uint32_t n_io)
{
	struct media_flash *mf = to_flash(m);
	kvf_status rc = KVF_OK;

	pthread_mutex_lock(&mf->lock);
	for (uint32_t i = 0; i < n_io && rc == KVF_OK; i++) {
		uint64_t t0 = request_begin(mf);

		rc = ftl_read(part_of(mf, io[i].stripe), lpn_of(m, &io[i]),
			      io[i].n_pages, io[i].buf);
		request_end(mf, t0);
		mf->read_ios++;
		if (rc == KVF_OK)
			mf->bytes_read += (uint64_t)io[i].n_pages *
					  m->geo.page_size;
	}
	pthread_mutex_unlock(&mf->lock);
	return rc;
}

static kvf_status flash_trim(struct kvf_media *m, uint32_t stripe,
			     uint64_t seg)
{
	struct media_flash *mf = to_flash(m);
	kvf_status rc;

	pthread_mutex_lock(&mf->lock);
	rc = ftl_trim(part_of(mf, stripe), seg * m->geo.pages_per_segment,
		      m->geo.pages_per_segment);
	if (rc == KVF_OK)
		mf->trims++;
	pthread_mutex_unlock(&mf->lock);
	return rc;
}

static kvf_status flash_sync(struct kvf_media *m)
{
	struct media_flash *mf = to_flash(m);
	kvf_status rc = KVF_OK;

	pthread_mutex_lock(&mf->lock);
	if (mf->nand.img != NULL) {
		rc = mf->nand.powered_off ?
			     kvf_fail(KVF_EIO,
				      "flash: sync refused: the power is cut (block %u page %u was torn); power the device on first",
				      mf->nand.cut_block, mf->nand.cut_page) :
			     nand_image_sync(&mf->nand);
	}
	if (rc == KVF_OK)
		mf->syncs++;
	pthread_mutex_unlock(&mf->lock);
	return rc;
}

static uint64_t host_pages(const struct media_flash *mf)
{
	uint64_t n = 0;

	for (uint32_t p = 0; p < mf->n_parts; p++)
		n += mf->parts[p].c.host_pages;
	return n;
}

static void flash_media_stats(struct kvf_media *m, struct kvf_media_stats *out)
{
	struct media_flash *mf = to_flash(m);

	pthread_mutex_lock(&mf->lock);
	out->host_pages_written = host_pages(mf);
	out->nand_pages_programmed = mf->nand.programs;
	out->bytes_written = out->host_pages_written * m->geo.page_size;
	out->bytes_read = mf->bytes_read;
	out->write_ios = mf->write_ios;
	out->read_ios = mf->read_ios;
	out->trims = mf->trims;
	out->syncs = mf->syncs;
	pthread_mutex_unlock(&mf->lock);
}

static void flash_close(struct kvf_media *m)
{
	struct media_flash *mf = to_flash(m);

	for (uint32_t p = 0; p < mf->n_parts && mf->parts; p++)
		ftl_release(&mf->parts[p]);
	kvf_free(mf->parts);
	mf->parts = NULL;
	nand_release(&mf->nand);
	pthread_mutex_destroy(&mf->lock);
}

static const struct kvf_media_ops flash_ops = {
	.version = KVF_MEDIA_OPS_VERSION,
	.name = "flash",
	.write = flash_write,
	.read = flash_read,
	.trim_segment = flash_trim,
	.sync = flash_sync,
	.stats = flash_media_stats,
	.close = flash_close,
};

int kvf_media_is_flash(const struct kvf_media *m)
{
	return m != NULL && m->ops == &flash_ops;
}

/* adopt_image - an existing image brings its device: geometry, cell
 * and P/E limit replace the caller's */
static kvf_status adopt_image(struct kvf_flash_config *fc,
			      struct nand_image_desc *d, int *exists)
{
	kvf_status rc;

	*exists = 0;
	if (fc->backing != KVF_FLASH_BACKING_IMAGE || fc->path == NULL ||
	    fc->path[0] == '\0')
		return KVF_OK; /* check_enums says what is wrong */
	if ((rc = nand_image_peek(fc->path, d, exists)) != KVF_OK || !*exists)
		return rc;
	if (d->n_parts == 0 || d->channels * d->dies_per_channel %
				       d->n_parts != 0)
		return kvf_fail(KVF_ECORRUPT,
				"flash image %s is damaged: %u x %u dies cannot hold %u stripes",
				fc->path, d->channels, d->dies_per_channel,
				d->n_parts);
	fc->channels = d->channels;
	fc->dies_per_channel = d->dies_per_channel;
	fc->planes_per_die = d->planes_per_die;
	fc->blocks_per_plane = d->blocks_per_plane;
	fc->pages_per_block = d->pages_per_block;
	fc->page_size = d->page_size;
	fc->oob_bytes = d->oob_bytes;
	fc->cell = (enum kvf_flash_cell)d->cell;
	fc->pe_limit = d->pe_limit;
	return KVF_OK;
}

/* describe - the device an image is created with */
static void describe(const struct layout *lo, const struct kvf_flash_config *fc,
		     struct nand_image_desc *d)
{
	d->channels = lo->geo.channels;
	d->dies_per_channel = lo->geo.dies_per_channel;
	d->planes_per_die = lo->geo.planes_per_die;
	d->blocks_per_plane = lo->geo.blocks_per_plane;
	d->pages_per_block = lo->geo.pages_per_block;
	d->page_size = lo->geo.page_size;
	d->oob_bytes = lo->geo.oob_bytes;
	d->n_parts = lo->geo.n_parts;
	d->cell = (uint32_t)fc->cell;
	d->pe_limit = lo->pe_limit;
	d->lpn_per_part = lo->lpn_per_part;
}

/* image_misfit - derive refused the device an image brought (rc, with
 * its message): KVF_EINVAL if the caller's own config is at fault, else
 * KVF_EMISMATCH naming the image (a header whose checksum holds is a
 * device this media cannot run, not a bad argument) */
static kvf_status image_misfit(const struct kvf_media_config *cfg,
			       const struct kvf_flash_config *own,
			       const char *path)
{
	char why[256];
	struct layout lo;
	kvf_status rc;

	snprintf(why, sizeof(why), "%s", kvf_last_error());
	if ((rc = derive(cfg, own, &lo)) != KVF_OK)
		return rc;
	return kvf_fail(KVF_EMISMATCH,
			"kvf_media_open: flash: image %s holds a device this media cannot run (%s)",
			path, why);
}

kvf_status kvf_media_flash_open(const struct kvf_media_config *cfg,
				struct kvf_media **out)
{
	struct kvf_flash_config fc, own;
	struct nand_image_desc img;
	struct media_flash *mf = NULL;
	struct layout lo;
	int has_img = 0;
	kvf_status rc;

	if (cfg->flash)
		fc = *cfg->flash;
	else
		kvf_flash_config_init(&fc);
	own = fc;
	if ((rc = adopt_image(&fc, &img, &has_img)) != KVF_OK)
		return rc;
	if ((rc = derive(cfg, &fc, &lo)) != KVF_OK)
		return has_img && rc == KVF_EINVAL ?
			       image_misfit(cfg, &own, fc.path) : rc;
	if (has_img && (img.n_parts != lo.geo.n_parts ||
			img.lpn_per_part != lo.lpn_per_part))
		return kvf_fail(KVF_EMISMATCH,
				"kvf_media_open: flash: image %s holds %u stripes of %llu logical pages; the media has %u of %llu",
				fc.path, img.n_parts,
				(unsigned long long)img.lpn_per_part,
				lo.geo.n_parts,
				(unsigned long long)lo.lpn_per_part);
	mf = kvf_calloc(1, sizeof(*mf));
	if (mf == NULL)
		return kvf_fail(KVF_ENOMEM,
				"kvf_media_open: flash: out of memory");
	mf->cfg = fc;
	mf->cfg.path = NULL;
	mf->cell = lo.cell;
	mf->n_parts = lo.geo.n_parts;
	if ((rc = nand_init(&mf->nand, &lo.geo, &lo.timing, lo.pe_limit,
			    fc.backing, fc.path)) != KVF_OK)
		goto out_free;
	if (fc.backing == KVF_FLASH_BACKING_IMAGE) {
		describe(&lo, &fc, &img);
		if ((rc = nand_image_attach(&mf->nand, fc.path, &img)) != KVF_OK)
			goto out_nand;
	}
	mf->parts = kvf_calloc(mf->n_parts, sizeof(*mf->parts));
	if (mf->parts == NULL) {
		rc = kvf_fail(KVF_ENOMEM, "kvf_media_open: flash: out of memory");
		goto out_nand;
	}
	for (uint32_t p = 0; p < mf->n_parts; p++) {
		rc = ftl_init(&mf->parts[p], &mf->nand, p,
			      p * mf->nand.geo.blocks_per_part,
			      mf->nand.geo.blocks_per_part, lo.lpn_per_part,
			      &lo.prm);
		if (rc != KVF_OK)
			goto out_parts;
		if (nand_image_loaded(&mf->nand) &&
		    (rc = ftl_recover(&mf->parts[p])) != KVF_OK)
			goto out_parts;
	}
	nand_image_scan_done(&mf->nand);
	if (pthread_mutex_init(&mf->lock, NULL) != 0) {
		rc = kvf_fail(KVF_ENOMEM, "kvf_media_open: flash: cannot create a lock");
		goto out_parts;
	}
	if (fc.power_cut_after)
		nand_power_cut_arm(&mf->nand, fc.power_cut_after);
	mf->base.ops = &flash_ops;
	mf->base.geo = cfg->geo;
	*out = &mf->base;
	return KVF_OK;

out_parts:
	for (uint32_t p = 0; p < mf->n_parts; p++)
		ftl_release(&mf->parts[p]);
	kvf_free(mf->parts);
out_nand:
	nand_release(&mf->nand);
out_free:
	kvf_free(mf);
	return rc;
}

/* ---- flash-only calls ---- */

static kvf_status get_flash(struct kvf_media *m, const char *call,
			    struct media_flash **out)
{
	if (m == NULL)
		return kvf_fail(KVF_EINVAL, "%s: media is NULL", call);
	if (!kvf_media_is_flash(m))
		return kvf_fail(KVF_EINVAL,
				"%s: the media is the %s backend, not the flash emulator",
				call, m->ops->name);
	if (m->closed)
		return kvf_fail(KVF_ECLOSED, "%s: media is closed", call);
	*out = to_flash(m);
	return KVF_OK;
}

static kvf_status check_range(const struct media_flash *mf, const char *call,
			      uint32_t stripe, uint64_t lpn, uint64_t n)
{
	uint64_t n_lpn;

	if (stripe >= mf->n_parts)
		return kvf_fail(KVF_ERANGE,
				"%s: stripe %u out of range (media has %u)", call,
				stripe, mf->n_parts);
	n_lpn = mf->parts[stripe].n_lpn;
	if (lpn >= n_lpn || n > n_lpn - lpn)
		return kvf_fail(KVF_ERANGE,
				"%s: logical pages %llu..%llu past the end of stripe %u (%llu pages)",
				call, (unsigned long long)lpn,
				(unsigned long long)(lpn + n - 1), stripe,
				(unsigned long long)n_lpn);
	return KVF_OK;
}

kvf_status kvf_flash_write(struct kvf_media *m, const struct kvf_media_io *io,
			   uint32_t n_io, uint32_t stream)
{
	struct media_flash *mf = NULL;
	kvf_status rc;

	if ((rc = get_flash(m, "kvf_flash_write", &mf)) != KVF_OK)
		return rc;
	if ((rc = check_stream(mf, stream)) != KVF_OK)
		return rc;
	if ((rc = kvf_media_check_io("kvf_flash_write", m, io, n_io)) != KVF_OK)
		return rc;
	pthread_mutex_lock(&mf->lock);
	rc = write_locked(mf, io, n_io, stream);
	pthread_mutex_unlock(&mf->lock);
	return rc;
}

kvf_status kvf_flash_write_lpns(struct kvf_media *m, uint32_t stripe,
				const uint64_t *lpns, uint32_t n,
				uint32_t stream)
{
	struct media_flash *mf = NULL;
	kvf_status rc;

	if ((rc = get_flash(m, "kvf_flash_write_lpns", &mf)) != KVF_OK)
		return rc;
	if ((rc = check_stream(mf, stream)) != KVF_OK)
		return rc;
	if ((rc = check_range(mf, "kvf_flash_write_lpns", stripe, 0, 1)) != KVF_OK)
		return rc;
	if (lpns == NULL && n != 0)
		return kvf_fail(KVF_EINVAL, "kvf_flash_write_lpns: lpns is NULL");
	for (uint32_t i = 0; i < n; i++)
		if (lpns[i] >= mf->parts[stripe].n_lpn)
			return check_range(mf, "kvf_flash_write_lpns", stripe,
					   lpns[i], 1);
	pthread_mutex_lock(&mf->lock);
	if (mf->cfg.issue == KVF_FLASH_ISSUE_SYNC) {
		rc = KVF_OK;
		for (uint32_t i = 0; i < n && rc == KVF_OK; i++) {
			uint64_t t0 = request_begin(mf);

			rc = ftl_write_list(part_of(mf, stripe), &lpns[i], 1,
					    stream);
			request_end(mf, t0);
		}
	} else {
		rc = ftl_write_list(part_of(mf, stripe), lpns, n, stream);
	}
	mf->write_ios += n;
	pthread_mutex_unlock(&mf->lock);
	return rc;
}

kvf_status kvf_flash_read_lpns(struct kvf_media *m, uint32_t stripe,
			       const uint64_t *lpns, uint32_t n)
{
	struct media_flash *mf = NULL;
	kvf_status rc;

	if ((rc = get_flash(m, "kvf_flash_read_lpns", &mf)) != KVF_OK)
		return rc;
	if ((rc = check_range(mf, "kvf_flash_read_lpns", stripe, 0, 1)) != KVF_OK)
		return rc;
	if (lpns == NULL && n != 0)
		return kvf_fail(KVF_EINVAL, "kvf_flash_read_lpns: lpns is NULL");
	for (uint32_t i = 0; i < n; i++)
		if (lpns[i] >= mf->parts[stripe].n_lpn)
			return check_range(mf, "kvf_flash_read_lpns", stripe,
					   lpns[i], 1);
	pthread_mutex_lock(&mf->lock);
	rc = KVF_OK;
	for (uint32_t i = 0; i < n && rc == KVF_OK; i++) {
		uint64_t t0 = request_begin(mf);

		rc = ftl_read(part_of(mf, stripe), lpns[i], 1, NULL);
		request_end(mf, t0);
	}
	mf->read_ios += n;
	pthread_mutex_unlock(&mf->lock);
	return rc;
}

kvf_status kvf_flash_trim_pages(struct kvf_media *m, uint32_t stripe,
				uint64_t lpn, uint64_t n)
{
	struct media_flash *mf = NULL;
	kvf_status rc;

	if ((rc = get_flash(m, "kvf_flash_trim_pages", &mf)) != KVF_OK)
		return rc;
	if (n == 0)
		return KVF_OK;
	if ((rc = check_range(mf, "kvf_flash_trim_pages", stripe, lpn, n)) !=
	    KVF_OK)
		return rc;
	pthread_mutex_lock(&mf->lock);
	rc = ftl_trim(part_of(mf, stripe), lpn, n);
	pthread_mutex_unlock(&mf->lock);
	return rc;
}

kvf_status kvf_flash_idle(struct kvf_media *m, uint64_t idle_ns)
{
	struct ftl_time *tm;
	struct media_flash *mf = NULL;
	uint64_t start;
	kvf_status rc;

	if ((rc = get_flash(m, "kvf_flash_idle", &mf)) != KVF_OK)
		return rc;
	pthread_mutex_lock(&mf->lock);
	tm = &mf->nand.time;
	start = time_max(tm->issue_ns, tm->end_ns);
	tm->issue_ns = start;
	for (uint32_t p = 0; p < mf->n_parts && rc == KVF_OK; p++) {
		uint64_t budget = idle_ns;

		/* stripes own separate dies: each gets the whole idle time */
		rc = ftl_collect(&mf->parts[p], mf->parts[p].prm.bg_free,
				 &budget);
	}
	tm->issue_ns = start + idle_ns;
	pthread_mutex_unlock(&mf->lock);
	return rc;
}

kvf_status kvf_flash_power_cut(struct kvf_media *m, uint64_t after)
{
	struct media_flash *mf = NULL;
	kvf_status rc;

	if ((rc = get_flash(m, "kvf_flash_power_cut", &mf)) != KVF_OK)
		return rc;
	if (after == 0)
		return kvf_fail(KVF_EINVAL,
				"kvf_flash_power_cut: after must be at least 1 program");
	pthread_mutex_lock(&mf->lock);
	nand_power_cut_arm(&mf->nand, after);
	pthread_mutex_unlock(&mf->lock);
	return KVF_OK;
}

kvf_status kvf_flash_power_on(struct kvf_media *m)
{
	struct media_flash *mf = NULL;
	kvf_status rc;

	if ((rc = get_flash(m, "kvf_flash_power_on", &mf)) != KVF_OK)
		return rc;
	pthread_mutex_lock(&mf->lock);
	nand_power_on(&mf->nand);
	for (uint32_t p = 0; p < mf->n_parts && rc == KVF_OK; p++)
		rc = ftl_power_restored(&mf->parts[p]);
	pthread_mutex_unlock(&mf->lock);
	return rc;
}

kvf_status kvf_flash_locate(struct kvf_media *m, uint32_t stripe,
			    uint64_t lpn, uint32_t *block, uint32_t *page)
{
	struct media_flash *mf = NULL;
	kvf_status rc;

	if ((rc = get_flash(m, "kvf_flash_locate", &mf)) != KVF_OK)
		return rc;
	if ((rc = check_range(mf, "kvf_flash_locate", stripe, lpn, 1)) != KVF_OK)
		return rc;
	pthread_mutex_lock(&mf->lock);
	ftl_locate(&mf->parts[stripe], lpn, block, page);
	pthread_mutex_unlock(&mf->lock);
	return KVF_OK;
}

kvf_status kvf_flash_check(struct kvf_media *m)
{
	struct media_flash *mf = NULL;
	kvf_status rc;

	if ((rc = get_flash(m, "kvf_flash_check", &mf)) != KVF_OK)
		return rc;
	pthread_mutex_lock(&mf->lock);
	for (uint32_t p = 0; p < mf->n_parts && rc == KVF_OK; p++)
		rc = ftl_check(&mf->parts[p]);
	pthread_mutex_unlock(&mf->lock);
	return rc;
}

struct nand *kvf_flash_nand(struct kvf_media *m)
{
	return kvf_media_is_flash(m) ? &to_flash(m)->nand : NULL;
}

/* ---- statistics ---- */

void kvf_flash_project(const struct kvf_flash_stats *s, double host_bytes,
		       double erases, double bytes_per_request,
		       struct kvf_flash_lifetime *out)
{
	double live = (double)s->blocks - (double)s->retired_blocks;
	double uneven = s->erase_mean > 0.0 ?
			(double)s->erase_max / s->erase_mean : 1.0;
	double rate, left = (double)s->pe_limit - (double)s->erase_max;
	double logical = (double)s->logical_pages * s->page_size;

	memset(out, 0, sizeof(*out));
	if (host_bytes <= 0.0 || erases <= 0.0 || live <= 0.0)
		return;
	/* erases of the most worn block per host byte */
	rate = erases / host_bytes / live * uneven;
	out->host_bytes_remaining = left > 0.0 ? left / rate : 0.0;
	out->host_bytes_total = (double)s->host_pages * s->page_size +
				out->host_bytes_remaining;
	if (bytes_per_request > 0.0)
		out->requests_remaining = out->host_bytes_remaining /
					  bytes_per_request;
	if (logical > 0.0)
		out->drive_writes = out->host_bytes_total / logical;
}

static void sum_counters(const struct media_flash *mf, struct kvf_flash_stats *s)
{
	double erased_avg = 0.0, live_pages, used;

	for (uint32_t p = 0; p < mf->n_parts; p++) {
		const struct ftl *f = &mf->parts[p];

		s->host_pages += f->c.host_pages;
		s->gc_programs += f->c.gc_programs;
		s->wl_programs += f->c.wl_programs;
		s->pad_programs += f->c.pad_programs;
		s->host_reads += f->c.host_reads;
		s->gc_victims += f->c.gc_victims;
		s->gc_victim_valid += f->c.gc_victim_valid;
		s->bg_victims += f->c.bg_victims;
		s->merges += f->c.merges;
		s->wl_moves += f->c.wl_moves;
		s->trimmed_pages += f->c.trimmed_pages;
		s->erased_sum += f->c.erased_sum;
		s->erased_samples += f->c.erased_samples;
		s->retired_blocks += f->retired;
		s->worn_out |= (uint32_t)f->worn_out;
		s->logical_pages += f->n_lpn;
		erased_avg += f->c.erased_samples ?
			      (double)f->c.erased_sum / f->c.erased_samples :
			      (double)f->erased_pages;
	}
	s->nand_programs = mf->nand.programs;
	s->nand_reads = mf->nand.reads;
	s->erases = mf->nand.erases;
	s->torn_pages = mf->nand.torn_pages;
	s->device_wa = s->host_pages ? (double)s->nand_programs / s->host_pages :
				       0.0;
	s->physical_pages = (uint64_t)s->blocks * s->pages_per_block;
	s->raw_bytes = s->physical_pages * ((uint64_t)s->page_size + s->oob_bytes);
	s->spare_factor = 1.0 - (double)s->logical_pages / s->physical_pages;
	s->over_provisioning = (double)(s->physical_pages - s->logical_pages) /
			       (double)s->logical_pages;
	live_pages = (double)(s->blocks - s->retired_blocks) * s->pages_per_block;
	used = live_pages - erased_avg;
	s->spare_factor_effective = used > 0.0 ?
				    1.0 - (double)s->logical_pages / used : 0.0;
	s->lost_bytes = s->retired_blocks * s->pages_per_block *
			(uint64_t)s->page_size;
}

static void sum_wear(const struct media_flash *mf, struct kvf_flash_stats *s)
{
	uint64_t n = 0, sum = 0, sum_sq = 0;
	uint32_t min = UINT32_MAX, max = 0;

	for (uint32_t p = 0; p < mf->n_parts; p++) {
		const struct wear_hist *h = &mf->parts[p].wear;

		if (h->n == 0)
			continue;
		n += h->n;
		sum += h->sum;
		sum_sq += h->sum_sq;
		min = h->min_ec < min ? h->min_ec : min;
		max = h->max_ec > max ? h->max_ec : max;
	}
	if (n == 0)
		min = 0;
	s->erase_min = min;
	s->erase_max = max;
	s->erase_mean = n ? (double)sum / n : 0.0;
	s->wear_evenness = wear_evenness(n, sum, sum_sq);
	s->hist_lo = min;
	s->hist_width = (max - min) / KVF_FLASH_HIST_BUCKETS + 1;
	for (uint32_t p = 0; p < mf->n_parts; p++) {
		const struct wear_hist *h = &mf->parts[p].wear;

		for (uint32_t ec = h->min_ec; h->n && ec <= h->max_ec; ec++)
			s->erase_hist[(ec - min) / s->hist_width] += h->count[ec];
	}
}

kvf_status kvf_flash_stats(struct kvf_media *m, struct kvf_flash_stats *out)
{
	struct kvf_flash_stats s;
	struct media_flash *mf = NULL;
	const struct nand_geometry *g;

	if (m == NULL || out == NULL)
		return kvf_fail(KVF_EINVAL, "kvf_flash_stats: %s is NULL",
				m == NULL ? "media" : "out");
	if (!kvf_media_is_flash(m))
		return kvf_fail(KVF_EINVAL,
				"kvf_flash_stats: the media is the %s backend, not the flash emulator",
				m->ops->name);
	mf = to_flash(m);
	if (m->closed)
		return kvf_fail(KVF_ECLOSED, "kvf_flash_stats: media is closed");
	memset(&s, 0, sizeof(s));
	pthread_mutex_lock(&mf->lock);
	g = &mf->nand.geo;
	s.channels = g->channels;
	s.dies = g->n_dies;
	s.planes_per_die = g->planes_per_die;
	s.stripes = g->n_parts;
	s.blocks = g->n_blocks;
	s.pages_per_block = g->pages_per_block;
	s.page_size = g->page_size;
	s.oob_bytes = g->oob_bytes;
	s.cell = mf->cell;
	s.mapping = mf->cfg.mapping == KVF_FLASH_MAP_PAGE ? "page" : "block";
	s.gc = kvf_flash_gc_name(mf->cfg.gc);
	s.pe_limit = mf->nand.pe_limit;
	s.host_write_requests = mf->write_ios;
	sum_counters(mf, &s);
	sum_wear(mf, &s);
	s.device_time_ns = mf->nand.time.end_ns;
	ftl_time_sum_busy(&mf->nand.time, &s.die_busy_ns, &s.die_busy_max_ns,
			  &s.channel_busy_ns, &s.channel_busy_max_ns);
	s.latency_requests = mf->lat_n;
	s.latency_sum_ns = mf->lat_sum_ns;
	s.latency_max_ns = mf->lat_max_ns;
	s.latency_p50_ns = lat_quantile(mf, 0.50);
	s.latency_p99_ns = lat_quantile(mf, 0.99);
	if (mf->nand.img != NULL) {
		struct nand_image_stats is;

		nand_image_stats(&mf->nand, &is);
		s.image = 1;
		s.image_created = (uint32_t)is.created;
		s.image_fdatasyncs = is.fdatasyncs;
		s.image_barriers = is.barriers;
		s.image_scan_records = is.scan_pages;
		s.image_scan_verified = is.scan_verified;
		s.image_scan_dropped = is.scan_dropped;
		s.image_open_ns = is.scan_ns;
	}
	pthread_mutex_unlock(&mf->lock);
	kvf_flash_project(&s, (double)s.host_pages * s.page_size,
			  (double)s.erases,
			  s.host_write_requests ?
				  (double)s.host_pages * s.page_size /
					  s.host_write_requests : 0.0,
			  &s.life);
	*out = s;
	return KVF_OK;
}
