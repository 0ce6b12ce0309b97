/*
 * media_flash_stats.c - what the flash media reports: the quantiles of
 * the request latency that media_flash_ops.c records in the sync issue
 * mode (a log histogram), the counters and wear of all stripes summed
 * into kvf_flash_stats, and the lifetime projection.  A file of its own:
 * reporting, which reads the device and its FTLs but never changes what
 * they do; above the ops it reports on.
 *
 * Locking: kvf_flash_stats takes the media's lock.
 */
#include "ftl/media_flash.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "api/status.h"
#include "ftl/ftl_map.h"
#include "ftl/media_flash_int.h"
#include "ftl/nand_image.h"

/* ---- latency ---- */

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
