/*
 * media_flash_int.h - what the files of the flash media backend share,
 * and nothing else includes: the media's struct, the derived layout of a
 * configuration, and the helpers called across the files.  The backend
 * is four files, lowest first: media_flash_config.c (the checked
 * configuration and what is derived from it), media_flash_ops.c (the
 * media ops, latency recording, open and close), media_flash_stats.c
 * (statistics, lifetime projection) and media_flash_calls.c (the
 * flash-only calls); media_flash.h is the face of all four.
 *
 * Locking: `lock` serializes every call on the media; the helpers below
 * run under it unless they say otherwise.
 */
#ifndef KVF_MEDIA_FLASH_INT_H
#define KVF_MEDIA_FLASH_INT_H

#include <pthread.h>
#include <stdint.h>

#include "api/status.h"
#include "ftl/ftl_map.h"
#include "ftl/media_flash.h"

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

static inline struct media_flash *to_flash(struct kvf_media *m)
{
	return (struct media_flash *)m;
}

static inline struct ftl *part_of(struct media_flash *mf, uint32_t stripe)
{
	return &mf->parts[stripe];
}

struct layout {
	struct nand_geometry geo;      /* the device */
	struct kvf_flash_timing timing; /* complete */
	uint32_t pe_limit;             /* erases */
	const char *cell;              /* name */
	uint64_t lpn_per_part;         /* logical pages per stripe */
	uint32_t geo_shift;            /* log2 of pages per block, rounded up */
	struct ftl_params prm;         /* FTL settings */
};

/* media_flash_derive - check a configuration and derive the device and
 * FTL settings from it (media_flash_config.c); no lock needed */
kvf_status media_flash_derive(const struct kvf_media_config *cfg,
			      const struct kvf_flash_config *fc,
			      struct layout *lo);

/* media_flash_request_begin/_end - the sync issue mode around one request,
 * recording its latency (media_flash_ops.c) */
uint64_t media_flash_request_begin(struct media_flash *mf);
void media_flash_request_end(struct media_flash *mf, uint64_t issued);

/* media_flash_write_locked - write n_io requests on stream, counting them
 * (media_flash_ops.c) */
kvf_status media_flash_write_locked(struct media_flash *mf,
				    const struct kvf_media_io *io,
				    uint32_t n_io, uint32_t stream);

#endif /* KVF_MEDIA_FLASH_INT_H */
