/*
 * media_flash_ops.c - the flash emulator as a media backend: the media
 * ops, the recording of request latency, open (the stripes-to-partitions
 * layout, an image's device adopted) and close (see media_flash.h, the
 * face of the backend's four files).  The checked configuration is in
 * media_flash_config.c, below; the statistics in media_flash_stats.c and
 * the flash-only calls in media_flash_calls.c, above; what they share is
 * in media_flash_int.h.
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

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "ftl/ftl_map.h"
#include "ftl/media_flash_int.h"
#include "ftl/nand_image.h"

/* ---- latency ---- */

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

/* media_flash_request_begin/_end - the sync issue mode around one request */
uint64_t media_flash_request_begin(struct media_flash *mf)
{
	struct ftl_time *tm = &mf->nand.time;

	if (mf->cfg.issue == KVF_FLASH_ISSUE_SYNC)
		tm->issue_ns = time_max(tm->issue_ns, tm->end_ns);
	return tm->issue_ns;
}

void media_flash_request_end(struct media_flash *mf, uint64_t issued)
{
	if (mf->cfg.issue == KVF_FLASH_ISSUE_SYNC)
		lat_record(mf, mf->nand.time.end_ns - issued);
}

/* ---- media ops ---- */

static uint64_t lpn_of(const struct kvf_media *m, const struct kvf_media_io *io)
{
	return io->seg * m->geo.pages_per_segment + io->page;
}

kvf_status media_flash_write_locked(struct media_flash *mf,
				    const struct kvf_media_io *io,
				    uint32_t n_io, uint32_t stream)
{
	kvf_status rc = KVF_OK;

	for (uint32_t i = 0; i < n_io && rc == KVF_OK; i++) {
		uint64_t t0 = media_flash_request_begin(mf);

		rc = ftl_write(part_of(mf, io[i].stripe), lpn_of(&mf->base, &io[i]),
			       io[i].n_pages, io[i].buf, stream);
		media_flash_request_end(mf, t0);
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
	rc = media_flash_write_locked(mf, io, n_io, 0);
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
		uint64_t t0 = media_flash_request_begin(mf);

		rc = ftl_read(part_of(mf, io[i].stripe), lpn_of(m, &io[i]),
			      io[i].n_pages, io[i].buf);
		media_flash_request_end(mf, t0);
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
	if ((rc = media_flash_derive(cfg, own, &lo)) != KVF_OK)
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
	if ((rc = media_flash_derive(cfg, &fc, &lo)) != KVF_OK)
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
		if ((rc = nand_image_attach(&mf->nand, fc.path, &img,
					    cfg->read_only != 0)) != KVF_OK)
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
