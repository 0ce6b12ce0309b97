/*
 * media.h - the interface the engine writes segments to, and its backends.
 *
 * A media stores pages, grouped into segments, on one or more stripes.  An
 * address is (stripe, segment, page within the segment); a stripe is one
 * file or device (file backend), one slice of memory (memory backend) or a
 * set of channels of the emulated NAND device (flash backend).  The media
 * knows nothing of KV caches.
 *
 * Rules every backend keeps, and kvf_media_* checks before calling it:
 *  - I/O is in whole pages; buffers are KVF_MEDIA_ALIGN-aligned;
 *  - an I/O stays inside one segment of one stripe;
 *  - pages never written, or trimmed since, read back as zeros;
 *  - after kvf_media_close every call returns KVF_ECLOSED.
 * A write is durable once a later kvf_media_sync returns KVF_OK.
 *
 * Concurrency: every call may run from many threads at once on one media;
 * concurrent writes to the same page leave one of the two contents.
 * kvf_media_close and kvf_media_free must not overlap any other call.
 */
#ifndef KVF_FTL_MEDIA_H
#define KVF_FTL_MEDIA_H

#include <stddef.h>
#include <stdint.h>

#include "ftl/uring.h"
#include "kvflash.h"

#define KVF_MEDIA_OPS_VERSION 5 /* bump when kvf_media_ops changes */
#define KVF_MEDIA_ALIGN 4096u   /* buffer alignment for every I/O (bytes) */
#define KVF_MEDIA_MAX_STRIPES 64u
#define KVF_MEDIA_DEFAULT_QD 32u

struct kvf_media_geometry {
	uint32_t n_stripes;         /* stripes, 1..KVF_MEDIA_MAX_STRIPES */
	uint32_t page_size;         /* bytes per page: power of two, 512..64K */
	uint32_t pages_per_segment; /* pages in one segment of one stripe */
	uint64_t segs_per_stripe;   /* segments each stripe holds */
};

/* One request: n_pages whole pages at (stripe, seg, page). */
struct kvf_media_io {
	uint32_t stripe;  /* 0..n_stripes-1 */
	uint32_t page;    /* first page inside the segment */
	uint64_t seg;     /* 0..segs_per_stripe-1 */
	uint32_t n_pages; /* >= 1; page + n_pages <= pages_per_segment */
	void *buf;        /* n_pages * page_size bytes, KVF_MEDIA_ALIGN-aligned;
			   * writes never modify it */
};

/*
 * A read between kvf_media_read_start and kvf_media_read_finish: the
 * caller's storage, owned by the backend in between.  ring < 0: nothing
 * in flight (the backend read at start).
 */
#define KVF_MEDIA_ASYNC_IO 256u /* requests one started read may hold */
struct kvf_media_read_op {
	int ring;
	uint32_t n_io;   /* requests, and their bytes: counted at finish */
	uint64_t bytes;
	struct kvf_ring_flight flight;
	struct kvf_xfer x[KVF_MEDIA_ASYNC_IO];
};

/* Counters since open.  A backend fills what it has; the rest stay 0. */
struct kvf_media_stats {
	const char *backend;        /* "file", "memory", "flash" */
	uint64_t bytes_written;     /* payload bytes accepted by writes */
	uint64_t bytes_read;        /* payload bytes returned by reads */
	uint64_t write_ios;         /* write requests */
	uint64_t read_ios;          /* read requests */
	uint64_t trims;             /* trimmed segments */
	uint64_t trims_unsupported; /* trims the file system or device refused */
	uint64_t syncs;             /* successful syncs */
	uint64_t host_pages_written; /* pages the host wrote */
	uint64_t nand_pages_programmed; /* pages programmed on NAND (flash);
					 * equal to host pages elsewhere */
	uint32_t direct_io;         /* file: 1 if every stripe uses O_DIRECT */
	uint32_t uring;             /* file: 1 if io_uring carries the I/O */
	uint32_t queue_depth;       /* file: requests in flight per ring */
	uint32_t rings;             /* file: io_uring rings created so far */
	uint32_t blkdev_stripes;    /* file: stripes that are block devices */
};

struct kvf_media;

/*
 * The table one backend implements.  Arguments reach it already checked
 * (see the rules at the top).  Every call returns a kvf_status and sets
 * the thread's message on failure.
 */
struct kvf_media_ops {
	uint32_t version; /* KVF_MEDIA_OPS_VERSION */
	const char *name; /* backend name for messages and stats */
	kvf_status (*write)(struct kvf_media *m, const struct kvf_media_io *io,
			    uint32_t n_io);
	kvf_status (*read)(struct kvf_media *m, const struct kvf_media_io *io,
			   uint32_t n_io);
	/* optional (NULL: kvf_media_read_start reads at once): a read left
	 * in flight until read_finish (kvf_media_read_start) */
	kvf_status (*read_start)(struct kvf_media *m,
				 const struct kvf_media_io *io, uint32_t n_io,
				 struct kvf_media_read_op *op);
	kvf_status (*read_finish)(struct kvf_media *m,
				  struct kvf_media_read_op *op);
	kvf_status (*trim_segment)(struct kvf_media *m, uint32_t stripe,
				   uint64_t seg);
	kvf_status (*sync)(struct kvf_media *m);
	void (*stats)(struct kvf_media *m, struct kvf_media_stats *out);
	/* release every resource; the handle itself is freed by the caller */
	void (*close)(struct kvf_media *m);
	/* optional (NULL): the bytes of a page in place, for media that
	 * keep pages in memory; NULL when it has none.  Valid until the
	 * segment is trimmed or given again, or the media closed. */
	const unsigned char *(*map)(struct kvf_media *m, uint32_t stripe,
				    uint64_t seg, uint32_t page);
	/* optional (NULL): kvf_media_give_segment without a copy, for
	 * media that keep segments in memory */
	kvf_status (*give_segment)(struct kvf_media *m, uint32_t stripe,
				   uint64_t seg, unsigned char **buf, size_t len);
	/* optional (NULL: space never runs out below the geometry): make
	 * sure the space of a segment exists, so that writing it cannot
	 * fail for lack of room (stripe files grow as they are used) */
	kvf_status (*allocate_segment)(struct kvf_media *m, uint32_t stripe,
				       uint64_t seg);
	/* optional (NULL: nothing to give back): the pages of seg from
	 * page on stay unwritten until the segment is trimmed; give their
	 * space back (a stripe file punches them out) */
	kvf_status (*release_tail)(struct kvf_media *m, uint32_t stripe,
				   uint64_t seg, uint32_t page);
};

/* The head of every backend's handle (backends embed it first). */
struct kvf_media {
	const struct kvf_media_ops *ops;
	struct kvf_media_geometry geo;
	int closed;    /* set by kvf_media_close */
	int read_only; /* set at open from the config */
};

enum kvf_media_switch {
	KVF_MEDIA_AUTO = 0, /* use it where the system allows, else fall back */
	KVF_MEDIA_ON = 1,   /* use it or fail at open with KVF_ENOTSUP */
	KVF_MEDIA_OFF = 2   /* do not use it */
};

struct kvf_flash_config; /* ftl/nand.h; for KVF_MEDIA_FLASH */

struct kvf_media_config {
	kvf_media_kind kind;
	struct kvf_media_geometry geo;
	const char *const *paths; /* file: n_stripes paths, files or devices */
	uint32_t queue_depth;     /* file: ring entries; 0 = default (32) */
	enum kvf_media_switch direct_io; /* file: O_DIRECT */
	enum kvf_media_switch uring;     /* file: io_uring */
	uint32_t max_rings;       /* file: rings for concurrent callers; 0 = 8 */
	uint32_t read_only;       /* 1: open existing stripes for reading
				   * only (shared lock); writes and trims
				   * answer KVF_ENOTSUP */
	uint32_t existing;        /* 1: the files (stripes, the flash
				   * image) are an existing store's: one
				   * that is missing is KVF_ECORRUPT, not
				   * made anew (a read-only open implies
				   * it) */
	const struct kvf_flash_config *flash; /* flash: NULL = defaults */
};

/*
 * kvf_media_open - open (creating files as needed) a media (media_open.c).
 * Return: KVF_OK and *out; KVF_EINVAL for a bad config (message names the
 * field), KVF_ENOTSUP when a forced feature is unavailable, KVF_ERANGE
 * when a device is smaller than the geometry, KVF_ECORRUPT when an
 * existing file is missing or shorter than the geometry (read-only or
 * `existing`), KVF_EBUSY when a file is
 * locked by another open, KVF_EIO, KVF_ENOMEM.  On failure *out is NULL
 * and files created by this call are removed.
 */
kvf_status kvf_media_open(const struct kvf_media_config *cfg,
			  struct kvf_media **out);

/* kvf_media_check_io - the checks every read and write passes (the rules
 * at the top of this file); call names the caller in the message.  For
 * backends' own entry points that take requests. */
kvf_status kvf_media_check_io(const char *call, struct kvf_media *m,
			      const struct kvf_media_io *io, uint32_t n_io);

/* kvf_media_write - write n_io requests; all of them, or KVF_EIO naming the
 * file and errno (then some may have been written). */
kvf_status kvf_media_write(struct kvf_media *m, const struct kvf_media_io *io,
			   uint32_t n_io);
/* kvf_media_read - read n_io requests; io_uring backends keep up to
 * queue_depth of them in flight. */
kvf_status kvf_media_read(struct kvf_media *m, const struct kvf_media_io *io,
			  uint32_t n_io);
/*
 * kvf_media_read_start / kvf_media_read_finish - kvf_media_read in two
 * halves, so the caller computes while the requests are in flight: start
 * checks and issues them (at most KVF_MEDIA_ASYNC_IO), finish waits for
 * them.  io and the buffers must stay until finish.  A backend that
 * cannot leave a read in flight now (no async path, or no ring to spare:
 * started reads take at most half the file backend's rings, so
 * synchronous reads and writes always find one) reads at start.  The
 * media's read counters count a started read at finish, if it
 * succeeded.  Return: start: KVF_OK (then call finish) or
 * kvf_media_read's errors (nothing in flight, no finish); finish: KVF_OK
 * or KVF_EIO.
 */
kvf_status kvf_media_read_start(struct kvf_media *m,
				const struct kvf_media_io *io, uint32_t n_io,
				struct kvf_media_read_op *op);
kvf_status kvf_media_read_finish(struct kvf_media *m,
				 struct kvf_media_read_op *op);
/* kvf_media_write_segment - write len bytes (whole pages) from page 0. */
kvf_status kvf_media_write_segment(struct kvf_media *m, uint32_t stripe,
				   uint64_t seg, const void *buf, size_t len);
/*
 * kvf_media_give_segment - kvf_media_write_segment from a buffer the
 * caller is done with: *buf holds kvf_media_segment_bytes, allocated with
 * kvf_aligned_alloc(KVF_MEDIA_ALIGN, ...).  A backend that keeps segments
 * in memory takes *buf as the segment itself (no copy) and puts in *buf
 * another such buffer for the caller, its bytes undefined; the others
 * write len bytes and leave *buf alone.  The caller must not change the
 * bytes it gave until it reads them no more.
 */
kvf_status kvf_media_give_segment(struct kvf_media *m, uint32_t stripe,
				  uint64_t seg, unsigned char **buf, size_t len);
/* kvf_media_read_pages - read n pages starting at page. */
kvf_status kvf_media_read_pages(struct kvf_media *m, uint32_t stripe,
				uint64_t seg, uint32_t page, uint32_t n,
				void *buf);
/* kvf_media_allocate_segment - make sure the space of segment seg of
 * stripe exists before it is written: a stripe file is not preallocated,
 * it grows segment by segment (and shrinks again where segments are
 * trimmed).  Return: KVF_OK; KVF_ENOSPC (the file system is full: the
 * message names the file); KVF_EIO; KVF_ERANGE; KVF_EINVAL. */
kvf_status kvf_media_allocate_segment(struct kvf_media *m, uint32_t stripe,
				      uint64_t seg);

/* kvf_media_release_tail - segment seg of stripe was written only below
 * page, and stays so until it is trimmed: where the backend allocated
 * space for the rest (a stripe file grows a whole segment at a time),
 * that space goes back.  The next kvf_media_allocate_segment of seg
 * allocates it again.  Best effort for the caller: KVF_OK, or KVF_EIO
 * (nothing read or written changes either way); KVF_ERANGE, KVF_EINVAL. */
kvf_status kvf_media_release_tail(struct kvf_media *m, uint32_t stripe,
				  uint64_t seg, uint32_t page);

/* kvf_media_trim_segment - the segment's contents are no longer needed;
 * it reads back as zeros. */
kvf_status kvf_media_trim_segment(struct kvf_media *m, uint32_t stripe,
				  uint64_t seg);
/* kvf_media_sync - make every completed write durable. */
kvf_status kvf_media_sync(struct kvf_media *m);
/* kvf_media_map - a page's bytes in place when the backend keeps them in
 * memory (no copy), else NULL: read it instead.  Arguments must be in
 * range. */
const unsigned char *kvf_media_map(struct kvf_media *m, uint32_t stripe,
				   uint64_t seg, uint32_t page);
/* kvf_media_stats - counters since open; m may be closed. */
void kvf_media_stats(struct kvf_media *m, struct kvf_media_stats *out);
/* kvf_media_close - release files, rings and memory; the handle stays
 * valid for kvf_media_free and answers KVF_ECLOSED.  NULL is ignored. */
void kvf_media_close(struct kvf_media *m);
/* kvf_media_free - close if needed and free the handle.  NULL is ignored. */
void kvf_media_free(struct kvf_media *m);

/*
 * kvf_media_trace_hook - instrumentation: when not NULL, called after
 * every successful write (each request: op KVF_MEDIA_TRACE_WRITE, its
 * first page and page count) and trim (op KVF_MEDIA_TRACE_TRIM, page 0
 * and the segment's pages) of any media, from the thread that made it.
 * kvbench endurance takes the block trace of a store from it.  Set it
 * only while no media is open; the hook must be thread-safe.
 */
enum kvf_media_trace_op { KVF_MEDIA_TRACE_WRITE, KVF_MEDIA_TRACE_TRIM };
extern void (*kvf_media_trace_hook)(const struct kvf_media *m,
				    enum kvf_media_trace_op op,
				    uint32_t stripe, uint64_t seg,
				    uint32_t page, uint32_t n_pages);

/* kvf_media_segment_bytes - bytes of one segment of one stripe. */
static inline uint64_t kvf_media_segment_bytes(const struct kvf_media_geometry *g)
{
	return (uint64_t)g->page_size * g->pages_per_segment;
}

/* Backends, called by kvf_media_open (media_open.c) with a checked
 * config. */
kvf_status kvf_media_mem_open(const struct kvf_media_config *cfg,
			      struct kvf_media **out);
kvf_status kvf_media_file_open(const struct kvf_media_config *cfg,
			       struct kvf_media **out);
kvf_status kvf_media_flash_open(const struct kvf_media_config *cfg,
				struct kvf_media **out);

#endif /* KVF_FTL_MEDIA_H */
