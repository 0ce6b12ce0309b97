/*
 * media_flash.h - the emulated NAND flash device as a media backend
 * (KVF_MEDIA_FLASH), and the calls only it answers: writes with a stream
 * hint, page-granular TRIM, idle time for background GC, power-cut
 * injection, and the full flash statistics (programs by cause, erases,
 * wear, modeled time, lifetime projection).
 *
 * The media geometry is the logical space the device exports.  Each
 * stripe is one partition of the device with dies of its own (the device
 * has dies = channels x dies_per_channel, and stripe s owns the dies d
 * with d % n_stripes == s, so with n_stripes = channels each stripe is
 * one channel): an FTL per stripe maps its segs_per_stripe *
 * pages_per_segment logical pages onto its blocks.  Logical page number
 * (lpn) = segment * pages_per_segment + page.  With block-level mapping a
 * segment is exactly one erase block (pages_per_segment ==
 * pages_per_block).
 *
 * With backing image (nand_image.h) the device persists across opens:
 * data, mapping (rebuilt from the spare areas) and erase counts.
 *
 * Spare factor: Sf = (physical - logical) / physical.  Over-provisioning
 * OP = (physical - logical) / logical is reported under that name.
 *
 * Concurrency: one mutex serializes every call on a media; any call may
 * come from any thread.
 */
#ifndef KVF_FTL_MEDIA_FLASH_H
#define KVF_FTL_MEDIA_FLASH_H

#include <stdint.h>

#include "ftl/media.h"
#include "ftl/nand.h"

#define KVF_FLASH_HIST_BUCKETS 16u /* erase-count histogram buckets */

/* Projected endurance from measured figures (see kvf_flash_project). */
struct kvf_flash_lifetime {
	double host_bytes_total;     /* host bytes from new until the first
				      * block reaches the P/E limit (TBW) */
	double host_bytes_remaining; /* of those, still to write (bytes) */
	double requests_remaining;   /* write requests still to serve */
	double drive_writes;         /* TBW / logical capacity (writes) */
};

struct kvf_flash_stats {
	/* geometry */
	uint32_t channels;          /* channels */
	uint32_t dies;              /* dies in the device */
	uint32_t planes_per_die;    /* planes per die */
	uint32_t stripes;           /* partitions (media stripes) */
	uint32_t blocks;            /* blocks in the device */
	uint32_t pages_per_block;   /* pages per block */
	uint32_t page_size;         /* bytes per page */
	uint32_t oob_bytes;         /* spare-area bytes per page */
	const char *cell;           /* "SLC", "MLC", "TLC", "QLC" */
	const char *mapping;        /* "page" or "block" */
	const char *gc;             /* "greedy", "cost-benefit", ... */
	uint64_t logical_pages;     /* exported pages (all stripes) */
	uint64_t physical_pages;    /* pages of all blocks */
	uint64_t raw_bytes;         /* raw capacity: pages x (page + spare area)
				     * (bytes) */
	double spare_factor;        /* (physical - logical) / physical */
	double over_provisioning;   /* (physical - logical) / logical */
	double spare_factor_effective; /* the same over the pages that held
				    * data on average since open: erased
				    * reserve, open-block tails and retired
				    * blocks excluded */
	/* programs, erases (pages unless named) */
	uint64_t host_pages;        /* pages written by the host */
	uint64_t host_write_requests; /* write requests (kvf_media_io) */
	uint64_t nand_programs;     /* all NAND programs */
	uint64_t gc_programs;       /* GC (or block-merge) copies */
	uint64_t wl_programs;       /* static wear-leveling copies */
	uint64_t pad_programs;      /* padding (block mapping) */
	uint64_t nand_reads;        /* all NAND page reads, copies included */
	uint64_t host_reads;        /* pages read by the host */
	uint64_t erases;            /* block erases (blocks) */
	uint64_t gc_victims;        /* blocks collected (blocks) */
	uint64_t gc_victim_valid;   /* live pages in collected blocks */
	uint64_t bg_victims;        /* collected by background GC (blocks) */
	uint64_t merges;            /* block-mapping merges */
	uint64_t wl_moves;          /* blocks moved by static WL (blocks) */
	uint64_t trimmed_pages;     /* live pages dropped by TRIM */
	uint64_t torn_pages;        /* programs torn by power cuts */
	uint64_t erased_sum;        /* sum over host pages of erased pages */
	uint64_t erased_samples;    /* host pages in erased_sum */
	double device_wa;           /* nand_programs / host_pages */
	/* wear (live blocks) */
	uint32_t pe_limit;          /* erases that retire a block */
	uint32_t erase_min;         /* least erase count (erases) */
	uint32_t erase_max;         /* greatest erase count (erases) */
	double erase_mean;          /* mean erase count (erases) */
	double wear_evenness;       /* (sum e)^2 / (N sum e^2), 1 = even */
	uint32_t hist_lo;           /* erase count of bucket 0's start */
	uint32_t hist_width;        /* erase counts per bucket */
	uint64_t erase_hist[KVF_FLASH_HIST_BUCKETS]; /* blocks per bucket */
	uint64_t retired_blocks;    /* blocks at the P/E limit (blocks) */
	uint64_t lost_bytes;        /* capacity retired blocks took (bytes) */
	uint32_t worn_out;          /* 1: a stripe is read-only */
	/* modeled time (ns) */
	uint64_t device_time_ns;    /* latest completion of any operation */
	uint64_t die_busy_ns;       /* busy time summed over dies */
	uint64_t die_busy_max_ns;   /* busiest die */
	uint64_t channel_busy_ns;   /* busy time summed over channels */
	uint64_t channel_busy_max_ns; /* busiest channel */
	uint64_t latency_requests;  /* requests timed (sync issue) */
	uint64_t latency_sum_ns;    /* their summed latency */
	uint64_t latency_max_ns;    /* the slowest */
	uint64_t latency_p50_ns;    /* median (log buckets, +-6%) */
	uint64_t latency_p99_ns;    /* 99th percentile (same) */
	/* endurance at the WA and wear seen since open */
	struct kvf_flash_lifetime life; /* projection (bytes, requests) */
	/* the persistent image (backing image; all 0 otherwise) */
	uint32_t image;             /* 1: the device is an image */
	uint32_t image_created;     /* 1: this open created it */
	uint64_t image_fdatasyncs;  /* fdatasyncs of the image */
	uint64_t image_barriers;    /* of those, forced by erases */
	uint64_t image_scan_records; /* spare-area records found at open */
	uint64_t image_scan_verified; /* pages read at open (newer than the
				     * durable point) */
	uint64_t image_scan_dropped; /* records not believed (other life,
				     * torn program) */
	uint64_t image_open_ns;     /* wall time to load the image (ns) */
};

/* kvf_media_is_flash - is m the flash backend? */
int kvf_media_is_flash(const struct kvf_media *m);

/*
 * kvf_flash_stats - everything above, since open.  m may be closed.
 * Return: KVF_OK; KVF_EINVAL (m NULL or not a flash media).
 */
kvf_status kvf_flash_stats(struct kvf_media *m, struct kvf_flash_stats *out);

/*
 * kvf_flash_project - endurance from figures measured over a window:
 * host_bytes written and erases done in it, with the wear in s (erase
 * counts now) and bytes_per_request for the request count.  The most
 * worn block is taken to keep wearing erase_max / erase_mean times faster
 * than the mean.
 */
void kvf_flash_project(const struct kvf_flash_stats *s, double host_bytes,
		       double erases, double bytes_per_request,
		       struct kvf_flash_lifetime *out);

/*
 * kvf_flash_write - kvf_media_write with a stream hint: data of one
 * stream (a lifetime class: data expected to die together) shares open
 * blocks only with its own stream.  stream < n_streams.
 * Return: as kvf_media_write; KVF_ENOSPC (worn out), KVF_EIO (power cut).
 */
kvf_status kvf_flash_write(struct kvf_media *m, const struct kvf_media_io *io,
			   uint32_t n_io, uint32_t stream);
/*
 * kvf_flash_write_lpns - n single-page writes without data (zeros if the
 * device keeps bytes) at logical pages lpns[] of stripe: the fast path
 * for synthetic workloads.  Counts as one request per page.
 */
kvf_status kvf_flash_write_lpns(struct kvf_media *m, uint32_t stripe,
				const uint64_t *lpns, uint32_t n,
				uint32_t stream);
/* kvf_flash_read_lpns - n single-page reads, timed only (no data). */
kvf_status kvf_flash_read_lpns(struct kvf_media *m, uint32_t stripe,
			       const uint64_t *lpns, uint32_t n);
/* kvf_flash_trim_pages - TRIM n logical pages from lpn of stripe. */
kvf_status kvf_flash_trim_pages(struct kvf_media *m, uint32_t stripe,
				uint64_t lpn, uint64_t n);
/*
 * kvf_flash_idle - the host waits for the device to finish everything
 * issued, then stays idle for idle_ns of modeled time, which background
 * GC uses to refill each stripe's pool to gc_bg_free blocks.
 */
kvf_status kvf_flash_idle(struct kvf_media *m, uint64_t idle_ns);
/* kvf_flash_power_cut - tear the after-th NAND program from now (>= 1);
 * the device then refuses everything with KVF_EIO until power on. */
kvf_status kvf_flash_power_cut(struct kvf_media *m, uint64_t after);
/* kvf_flash_power_on - restore power; torn pages stay torn. */
kvf_status kvf_flash_power_on(struct kvf_media *m);
/* kvf_flash_locate - device block and page of (stripe, lpn); UINT32_MAX
 * in both when the page is not mapped. */
kvf_status kvf_flash_locate(struct kvf_media *m, uint32_t stripe,
			    uint64_t lpn, uint32_t *block, uint32_t *page);
/* kvf_flash_check - verify every FTL invariant; KVF_OK or KVF_ECORRUPT. */
kvf_status kvf_flash_check(struct kvf_media *m);
/* kvf_flash_nand - the raw device, for tests and instrumentation only:
 * the caller must hold no expectation of locking. */
struct nand *kvf_flash_nand(struct kvf_media *m);

/* kvf_flash_gc_name - "greedy", ...; NULL for an unknown policy. */
const char *kvf_flash_gc_name(enum kvf_flash_gc_policy gc);

#endif /* KVF_FTL_MEDIA_FLASH_H */
