/*
 * media_file.c - the file/device backend: one file or block device per
 * stripe, O_DIRECT, transfers over io_uring.
 *
 * Stripe s is paths[s]; segment g of it lives at byte g * segment_bytes.
 * At open each stripe is opened with O_DIRECT where the file system allows
 * it (else buffered, reported in stats), locked (flock, so two opens of the
 * same file fail with KVF_EBUSY), and a regular file is given the size of
 * the full geometry with ftruncate, sparse: nothing is preallocated.  The
 * file's blocks are allocated segment by segment (fallocate) when the
 * engine is about to use a segment (kvf_media_allocate_segment), so a full
 * file system is reported as KVF_ENOSPC before anything is written, and a
 * store takes the space its live data needs: nothing is allocated when
 * the file is made (a 64 MiB first stretch used to be, which made a new
 * store of a few MiB take 64 MiB of disk).  A block device must be at
 * least the geometry's size.  Trim punches a hole in a file and discards on
 * a device.  Sync is fdatasync per stripe.
 *
 * I/O runs through a pool of io_uring rings, one per concurrent caller up
 * to max_rings; without io_uring it runs through pread/pwrite.
 *
 * Locking: `pool_lock` guards the ring pool (rings, n_rings, free_mask);
 * callers wait on `pool_cond` when every ring is busy.  Counters are
 * atomics.  fds and flags are fixed after open.
 */
#include "ftl/media.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>

#include "api/alloc.h"
#include "api/status.h"
#include "ftl/sysio.h"
#include "ftl/uring.h"

#define MAX_RINGS 16u
#define XFER_BATCH 256u /* transfers built on the stack per round */

struct file_stripe {
	int fd;        /* open file or device, for I/O */
	int lock_fd;   /* the same file opened apart, holding the flock: the
			* kernel tears down a dead process's io_uring
			* requests after the process is gone, and they hold
			* fd's open file description (and a lock on it) a
			* moment longer; lock_fd's is released at exit */
	int is_blkdev; /* 1: block device (discard), 0: regular file */
	int direct;    /* opened with O_DIRECT */
	int created;   /* this open created the file */
	char *path;    /* for messages */
	_Atomic uint64_t *allocated; /* [segs/64] bit per segment: its blocks
				      * were allocated by this handle (set
				      * by allocate, cleared by trim) */
	_Atomic uint64_t n_allocated; /* bits set in allocated */
	_Atomic uint64_t frontier;    /* 1 + the highest segment allocated */
};

struct media_file {
	struct kvf_media base;
	struct file_stripe stripes[KVF_MEDIA_MAX_STRIPES];
	unsigned queue_depth;     /* ring entries */
	int use_uring;            /* 1: rings, 0: pread/pwrite */
	pthread_mutex_t pool_lock;
	pthread_cond_t pool_cond;
	struct kvf_ring *rings[MAX_RINGS]; /* guarded by pool_lock */
	unsigned n_rings;         /* rings created; guarded by pool_lock */
	unsigned max_rings;       /* limit of n_rings */
	uint32_t free_mask;       /* bit i: rings[i] idle; pool_lock */
	unsigned n_started;       /* rings held by started reads; pool_lock */
	_Atomic uint64_t bytes_written; /* payload bytes written */
	_Atomic uint64_t bytes_read;    /* payload bytes read */
	_Atomic uint64_t write_ios;     /* write requests */
	_Atomic uint64_t read_ios;      /* read requests */
	_Atomic uint64_t trims;         /* trimmed segments */
	_Atomic uint64_t trims_unsupported; /* trims refused by the fs */
	_Atomic uint64_t syncs;         /* successful syncs */
};

static struct media_file *to_file(struct kvf_media *m)
{
	return (struct media_file *)m;
}

/* ring_get - an idle ring, creating one if below max_rings, else wait.
 * Returns -1 (message set) if creating a ring failed. */
static int ring_get(struct media_file *mf)
{
	int idx = -1;

	pthread_mutex_lock(&mf->pool_lock);
	for (;;) {
		if (mf->free_mask) {
			idx = __builtin_ctz(mf->free_mask);
			mf->free_mask &= ~(1u << idx);
			break;
		}
		if (mf->n_rings < mf->max_rings) {
			if (kvf_ring_create(mf->queue_depth,
					    &mf->rings[mf->n_rings]) == KVF_OK)
				idx = (int)mf->n_rings++;
			break;
		}
		pthread_cond_wait(&mf->pool_cond, &mf->pool_lock);
	}
	pthread_mutex_unlock(&mf->pool_lock);
	return idx;
}

static void ring_put(struct media_file *mf, int idx)
{
	pthread_mutex_lock(&mf->pool_lock);
	mf->free_mask |= 1u << idx;
	pthread_cond_signal(&mf->pool_cond);
	pthread_mutex_unlock(&mf->pool_lock);
}

/* ring_try_start - an idle ring for a started read, or -1: at most half
 * the rings (a caller holding a started read may make a synchronous one,
 * which must find a ring, and writes must not wait behind reads held
 * open while their pages are used) and never a wait */
static int ring_try_start(struct media_file *mf)
{
	int idx = -1;

	pthread_mutex_lock(&mf->pool_lock);
	if (mf->n_started < mf->max_rings / 2) {
		if (mf->free_mask) {
			idx = __builtin_ctz(mf->free_mask);
			mf->free_mask &= ~(1u << idx);
		} else if (mf->n_rings < mf->max_rings &&
			   kvf_ring_create(mf->queue_depth,
					   &mf->rings[mf->n_rings]) == KVF_OK) {
			idx = (int)mf->n_rings++;
		}
		if (idx >= 0)
			mf->n_started++;
	}
	pthread_mutex_unlock(&mf->pool_lock);
	return idx;
}

static void ring_end_start(struct media_file *mf, int idx)
{
	pthread_mutex_lock(&mf->pool_lock);
	mf->n_started--;
	mf->free_mask |= 1u << idx;
	pthread_cond_signal(&mf->pool_cond);
	pthread_mutex_unlock(&mf->pool_lock);
}

/* run - move a batch of transfers on a ring, or synchronously */
static kvf_status run(struct media_file *mf, struct kvf_xfer *x, size_t n,
		      const char *call)
{
	kvf_status rc;
	int idx;

	if (!mf->use_uring)
		return kvf_xfer_run_sync(x, n, call);
	idx = ring_get(mf);
	if (idx < 0)
		return kvf_xfer_run_sync(x, n, call); /* ring creation failed */
	rc = kvf_ring_run(mf->rings[idx], x, n, call);
	ring_put(mf, idx);
	return rc;
}

/* build - the transfers of io[0..n) */
static uint64_t build(struct media_file *mf, enum kvf_sysio_op op,
		      const struct kvf_media_io *io, uint32_t n,
		      struct kvf_xfer *x)
{
	const struct kvf_media_geometry *g = &mf->base.geo;
	uint64_t seg_bytes = kvf_media_segment_bytes(g), bytes = 0;

	for (uint32_t i = 0; i < n; i++) {
		const struct kvf_media_io *r = &io[i];
		const struct file_stripe *s = &mf->stripes[r->stripe];

		x[i].op = op;
		x[i].fd = s->fd;
		x[i].buf = r->buf;
		x[i].len = (size_t)r->n_pages * g->page_size;
		x[i].off = (off_t)(r->seg * seg_bytes +
				   (uint64_t)r->page * g->page_size);
		x[i].path = s->path;
		bytes += x[i].len;
	}
	return bytes;
}

static void count(struct media_file *mf, enum kvf_sysio_op op, uint64_t bytes,
		  uint32_t n_io)
{
	if (op == KVF_SYSIO_READ) {
		atomic_fetch_add(&mf->bytes_read, bytes);
		atomic_fetch_add(&mf->read_ios, n_io);
	} else {
		atomic_fetch_add(&mf->bytes_written, bytes);
		atomic_fetch_add(&mf->write_ios, n_io);
	}
}

/* transfer - the shared body of read and write: build transfers in
 * batches and run them */
static kvf_status transfer(struct media_file *mf, enum kvf_sysio_op op,
			   const struct kvf_media_io *io, uint32_t n_io,
			   const char *call)
{
	struct kvf_xfer x[XFER_BATCH];
	uint64_t bytes = 0;

	for (uint32_t done = 0; done < n_io;) {
		uint32_t n = n_io - done < XFER_BATCH ? n_io - done : XFER_BATCH;
		kvf_status rc;

		bytes += build(mf, op, io + done, n, x);
		rc = run(mf, x, n, call);
		if (rc != KVF_OK)
			return rc;
		done += n;
	}
	count(mf, op, bytes, n_io);
	return KVF_OK;
}

static kvf_status file_write(struct kvf_media *m, const struct kvf_media_io *io,
			     uint32_t n_io)
{
	return transfer(to_file(m), KVF_SYSIO_WRITE, io, n_io,
			"kvf_media_write");
}

static kvf_status file_read(struct kvf_media *m, const struct kvf_media_io *io,
			    uint32_t n_io)
{
	return transfer(to_file(m), KVF_SYSIO_READ, io, n_io,
			"kvf_media_read");
}

static kvf_status file_read_start(struct kvf_media *m,
				  const struct kvf_media_io *io, uint32_t n_io,
				  struct kvf_media_read_op *op)
{
	struct media_file *mf = to_file(m);
	int idx = mf->use_uring ? ring_try_start(mf) : -1;
	kvf_status rc;

	op->ring = -1;
	if (idx < 0)
		return transfer(mf, KVF_SYSIO_READ, io, n_io, "kvf_media_read");
	op->bytes = build(mf, KVF_SYSIO_READ, io, n_io, op->x);
	op->n_io = n_io;
	rc = kvf_ring_start(mf->rings[idx], op->x, n_io, "kvf_media_read",
			    &op->flight);
	if (rc != KVF_OK) {
		ring_end_start(mf, idx);
		return rc;
	}
	op->ring = idx;
	return KVF_OK;
}

static kvf_status file_read_finish(struct kvf_media *m,
				   struct kvf_media_read_op *op)
{
	struct media_file *mf = to_file(m);
	kvf_status rc = kvf_ring_finish(mf->rings[op->ring], &op->flight);

	ring_end_start(mf, op->ring);
	op->ring = -1;
	if (rc == KVF_OK) /* counted as transfer() counts: what was read */
		count(mf, KVF_SYSIO_READ, op->bytes, op->n_io);
	return rc;
}

/* mark_allocated / mark_trimmed - segment seg's bit, and the count */
static void mark_allocated(struct file_stripe *s, uint64_t seg)
{
	uint64_t bit = 1ull << (seg % 64), f = atomic_load(&s->frontier);

	if (!(atomic_fetch_or(&s->allocated[seg / 64], bit) & bit))
		atomic_fetch_add(&s->n_allocated, 1);
	while (seg + 1 > f && !atomic_compare_exchange_weak(&s->frontier, &f, seg + 1))
		;
}

static void mark_trimmed(struct file_stripe *s, uint64_t seg)
{
	uint64_t bit = 1ull << (seg % 64);

	if (atomic_fetch_and(&s->allocated[seg / 64], ~bit) & bit)
		atomic_fetch_sub(&s->n_allocated, 1);
}

static int is_allocated(struct file_stripe *s, uint64_t seg)
{
	return (atomic_load(&s->allocated[seg / 64]) >> (seg % 64)) & 1;
}

static kvf_status file_trim(struct kvf_media *m, uint32_t stripe, uint64_t seg)
{
	struct media_file *mf = to_file(m);
	struct file_stripe *s = &mf->stripes[stripe];
	uint64_t len = kvf_media_segment_bytes(&m->geo);
	uint64_t off = seg * len;
	int ret, err;

	if (s->is_blkdev) {
		uint64_t range[2] = { off, len };

		ret = kvf_sysio->ioctl(s->fd, BLKDISCARD, range);
	} else {
		ret = kvf_sysio->fallocate(s->fd,
					   FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
					   (off_t)off, (off_t)len);
	}
	if (ret == 0) {
		if (s->allocated)
			mark_trimmed(s, seg);
		atomic_fetch_add(&mf->trims, 1);
		return KVF_OK;
	}
	err = errno;
	if (err == EOPNOTSUPP || err == ENOTTY) {
		/* trim is a hint; a file system without it keeps the bytes,
		 * so zero them to keep "trimmed reads as zeros" */
		struct kvf_xfer x;
		void *zeros = kvf_aligned_alloc(KVF_MEDIA_ALIGN, (size_t)len);
		kvf_status rc;

		if (zeros == NULL)
			return kvf_fail(KVF_ENOMEM,
					"kvf_media_trim_segment: out of memory for %llu bytes of zeros",
					(unsigned long long)len);
		memset(zeros, 0, (size_t)len);
		x = (struct kvf_xfer){ .op = KVF_SYSIO_WRITE, .fd = s->fd,
				       .buf = zeros, .len = (size_t)len,
				       .off = (off_t)off, .path = s->path };
		rc = run(mf, &x, 1, "kvf_media_trim_segment");
		kvf_free(zeros);
		if (rc == KVF_OK) {
			atomic_fetch_add(&mf->trims, 1);
			atomic_fetch_add(&mf->trims_unsupported, 1);
		}
		return rc;
	}
	return kvf_fail_errno(KVF_EIO, err,
			      "kvf_media_trim_segment: %s of segment %llu (%llu bytes at offset %llu) of %s",
			      s->is_blkdev ? "discard" : "punch hole",
			      (unsigned long long)seg, (unsigned long long)len,
			      (unsigned long long)off, s->path);
}

static kvf_status file_sync(struct kvf_media *m)
{
	struct media_file *mf = to_file(m);

	for (uint32_t i = 0; i < m->geo.n_stripes; i++)
		if (kvf_sysio->fdatasync(mf->stripes[i].fd) != 0)
			return kvf_fail_errno(KVF_EIO, errno,
					      "kvf_media_sync: fdatasync of %s",
					      mf->stripes[i].path);
	atomic_fetch_add(&mf->syncs, 1);
	return KVF_OK;
}

static void file_stats(struct kvf_media *m, struct kvf_media_stats *out)
{
	struct media_file *mf = to_file(m);
	int direct = 1;

	for (uint32_t i = 0; i < m->geo.n_stripes; i++)
		direct &= mf->stripes[i].direct;
	out->bytes_written = atomic_load(&mf->bytes_written);
	out->bytes_read = atomic_load(&mf->bytes_read);
	out->write_ios = atomic_load(&mf->write_ios);
	out->read_ios = atomic_load(&mf->read_ios);
	out->trims = atomic_load(&mf->trims);
	out->trims_unsupported = atomic_load(&mf->trims_unsupported);
	out->syncs = atomic_load(&mf->syncs);
	out->host_pages_written = out->bytes_written / m->geo.page_size;
	out->nand_pages_programmed = out->host_pages_written;
	out->direct_io = (uint32_t)direct;
	out->uring = (uint32_t)mf->use_uring;
	out->queue_depth = mf->use_uring ? mf->queue_depth : 1;
	pthread_mutex_lock(&mf->pool_lock);
	out->rings = mf->n_rings;
	pthread_mutex_unlock(&mf->pool_lock);
	for (uint32_t i = 0; i < m->geo.n_stripes; i++)
		out->blkdev_stripes += (uint32_t)mf->stripes[i].is_blkdev;
}

/* close_stripes - close the first n stripes; remove files this open made
 * when `unlink_created` (a failed open leaves nothing behind) */
static void close_stripes(struct media_file *mf, uint32_t n,
			  int unlink_created)
{
	for (uint32_t i = 0; i < n; i++) {
		struct file_stripe *s = &mf->stripes[i];

		if (s->fd >= 0)
			kvf_sysio->close(s->fd);
		if (s->lock_fd >= 0)
			kvf_sysio->close(s->lock_fd);
		if (unlink_created && s->created)
			kvf_sysio->unlink(s->path);
		kvf_free(s->path);
		kvf_free((void *)s->allocated);
		s->allocated = NULL;
		s->fd = -1;
		s->lock_fd = -1;
		s->path = NULL;
	}
}

static void file_close(struct kvf_media *m)
{
	struct media_file *mf = to_file(m);

	for (unsigned i = 0; i < mf->n_rings; i++)
		kvf_ring_destroy(mf->rings[i]);
	mf->n_rings = 0;
	close_stripes(mf, m->geo.n_stripes, 0);
	pthread_cond_destroy(&mf->pool_cond);
	pthread_mutex_destroy(&mf->pool_lock);
}

/* RUN_MAX, RUN_FROM - a file growing past what it ever held allocates
 * up to RUN_MAX segments in one call, a sixteenth of what it holds, once
 * it holds RUN_FROM: each call waits for the direct I/O in flight on the
 * file (ext4 drains it first).  With a call per segment, a prefill of 2
 * GiB took 1.98-2.09 s against 1.54-1.87 s with its file allocated
 * beforehand (three runs of each, one binary, alternating). */
#define RUN_MAX 16u
#define RUN_FROM 64u

/* grow_run - segments from seg one call allocates: more than one only
 * where the file grows (seg at its frontier or past it), and none that
 * is allocated already */
static uint64_t grow_run(const struct kvf_media *m, struct file_stripe *s,
			 uint64_t seg)
{
	uint64_t held = atomic_load(&s->n_allocated), want, k = 1;

	if (held < RUN_FROM || seg < atomic_load(&s->frontier))
		return 1;
	want = held / 16 < RUN_MAX ? held / 16 : RUN_MAX;
	while (k < want && seg + k < m->geo.segs_per_stripe &&
	       !is_allocated(s, seg + k))
		k++;
	return k;
}

/* file_allocate - fallocate the blocks of one segment of a stripe file
 * (once per handle until the segment is trimmed), and where the file
 * grows, of the next few (grow_run): the segments a growing store takes
 * next, as its free lists hand out new segments in order */
static kvf_status file_allocate(struct kvf_media *m, uint32_t stripe,
				uint64_t seg)
{
	struct file_stripe *s = &to_file(m)->stripes[stripe];
	uint64_t len = kvf_media_segment_bytes(&m->geo), k;
	int err;

	if (s->is_blkdev || s->allocated == NULL || is_allocated(s, seg))
		return KVF_OK;
	k = grow_run(m, s, seg);
	/* a run may not fit where the segment alone does */
	if (k > 1 && kvf_sysio->fallocate(s->fd, 0, (off_t)(seg * len),
					  (off_t)(k * len)) != 0)
		k = 1;
	if (k > 1 ||
	    kvf_sysio->fallocate(s->fd, 0, (off_t)(seg * len), (off_t)len) == 0 ||
	    (err = errno) == EOPNOTSUPP) {
		for (uint64_t i = 0; i < k; i++)
			mark_allocated(s, seg + i);
		return KVF_OK;
	}
	if (err == ENOSPC || err == EDQUOT)
		return kvf_fail_errno(KVF_ENOSPC, err,
				      "the file system holding %s is full: segment %llu (%llu bytes at offset %llu) cannot be allocated",
				      s->path, (unsigned long long)seg,
				      (unsigned long long)len,
				      (unsigned long long)(seg * len));
	return kvf_fail_errno(KVF_EIO, err,
			      "kvf_media_allocate_segment: fallocate %llu bytes at offset %llu of %s",
			      (unsigned long long)len,
			      (unsigned long long)(seg * len), s->path);
}

/* file_release_tail - punch out the pages of a stripe file's segment from
 * page on (a segment written part full at a sync keeps only what it
 * holds); the segment counts as not allocated again, so its next use
 * fallocates it whole.  A device keeps its blocks (the discard at trim
 * covers them). */
static kvf_status file_release_tail(struct kvf_media *m, uint32_t stripe,
				    uint64_t seg, uint32_t page)
{
	struct file_stripe *s = &to_file(m)->stripes[stripe];
	uint64_t len = kvf_media_segment_bytes(&m->geo);
	uint64_t from = (uint64_t)page * m->geo.page_size;

	if (s->is_blkdev)
		return KVF_OK;
	if (s->allocated)
		mark_trimmed(s, seg);
	if (kvf_sysio->fallocate(s->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				 (off_t)(seg * len + from), (off_t)(len - from)) == 0 ||
	    errno == EOPNOTSUPP)
		return KVF_OK;
	return kvf_fail_errno(KVF_EIO, errno,
			      "kvf_media_release_tail: punch hole of %llu bytes at offset %llu of %s",
			      (unsigned long long)(len - from),
			      (unsigned long long)(seg * len + from), s->path);
}

static const struct kvf_media_ops file_ops = {
	.version = KVF_MEDIA_OPS_VERSION,
	.name = "file",
	.write = file_write,
	.read = file_read,
	.read_start = file_read_start,
	.read_finish = file_read_finish,
	.trim_segment = file_trim,
	.sync = file_sync,
	.stats = file_stats,
	.close = file_close,
	.allocate_segment = file_allocate,
	.release_tail = file_release_tail,
};

/* open_fd - open path with O_DIRECT if wanted, falling back to buffered
 * I/O where the file system refuses it (EINVAL) and direct_io is AUTO */
static kvf_status open_fd(struct file_stripe *s, enum kvf_media_switch direct_io,
			  int read_only, int existing)
{
	struct stat st;
	int existed = stat(s->path, &st) == 0, stat_errno = existed ? 0 : errno;
	int flags = read_only ? O_RDONLY | O_CLOEXEC : O_RDWR | O_CLOEXEC | O_CREAT;
	int fd = -1;

	if ((read_only || existing) && !existed)
		return stat_errno == ENOENT
			? kvf_fail(KVF_ECORRUPT,
				   "kvf_media_open: %s is missing: the data of that stripe is gone",
				   s->path)
			: kvf_fail_errno(KVF_EIO, stat_errno,
					 "kvf_media_open: open %s", s->path);

	if (direct_io != KVF_MEDIA_OFF) {
		int err;

		fd = kvf_sysio->open(s->path, flags | O_DIRECT, 0644);
		err = errno;
		/* on refusal O_CREAT may already have made the file */
		s->created = !existed && stat(s->path, &st) == 0;
		if (fd < 0 && err != EINVAL)
			return kvf_fail_errno(KVF_EIO, err,
					      "kvf_media_open: open %s", s->path);
		if (fd < 0 && direct_io == KVF_MEDIA_ON)
			return kvf_fail(KVF_ENOTSUP,
					"kvf_media_open: %s: the file system refuses O_DIRECT and direct_io is forced on",
					s->path);
		s->direct = fd >= 0;
	}
	if (fd < 0) {
		fd = kvf_sysio->open(s->path, flags, 0644);
		if (fd < 0)
			return kvf_fail_errno(KVF_EIO, errno,
					      "kvf_media_open: open %s", s->path);
		s->created = !existed;
	}
	s->fd = fd;
	return KVF_OK;
}

/* prepare_stripe - lock the file and size it to hold the geometry (a
 * read-only open takes a shared lock and must find it sized already) */
static kvf_status prepare_stripe(struct file_stripe *s, uint64_t need,
				 int read_only, int existing)
{
	struct stat st;

	s->lock_fd = kvf_sysio->open(s->path, O_RDONLY | O_CLOEXEC, 0);
	if (s->lock_fd < 0)
		return kvf_fail_errno(KVF_EIO, errno, "kvf_media_open: open %s",
				      s->path);
	if (kvf_sysio->flock(s->lock_fd, (read_only ? LOCK_SH : LOCK_EX) | LOCK_NB) != 0) {
		if (errno == EWOULDBLOCK)
			return kvf_fail(KVF_EBUSY,
					"kvf_media_open: %s is in use by another open media (locked)",
					s->path);
		return kvf_fail_errno(KVF_EIO, errno, "kvf_media_open: flock %s",
				      s->path);
	}
	if (kvf_sysio->fstat(s->fd, &st) != 0)
		return kvf_fail_errno(KVF_EIO, errno, "kvf_media_open: fstat %s",
				      s->path);
	if (S_ISBLK(st.st_mode)) {
		uint64_t size = 0;

		s->is_blkdev = 1;
		if (kvf_sysio->ioctl(s->fd, BLKGETSIZE64, &size) != 0)
			return kvf_fail_errno(KVF_EIO, errno,
					      "kvf_media_open: size of device %s",
					      s->path);
		if (size < need)
			return kvf_fail(KVF_ERANGE,
					"kvf_media_open: device %s holds %llu bytes, the geometry needs %llu",
					s->path, (unsigned long long)size,
					(unsigned long long)need);
		return KVF_OK;
	}
	if (!S_ISREG(st.st_mode))
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: %s is neither a regular file nor a block device",
				s->path);
	if ((uint64_t)st.st_size >= need)
		return KVF_OK;
	/* an existing store's stripe was made whole (sparse): one shorter
	 * was cut, and the segments past its end are gone */
	if (read_only || existing)
		return kvf_fail(KVF_ECORRUPT,
				"kvf_media_open: %s holds %llu bytes, the geometry needs %llu: the file was cut short",
				s->path, (unsigned long long)st.st_size,
				(unsigned long long)need);
	/* sparse: the blocks come segment by segment (file_allocate), so a
	 * new store allocates nothing for its stripes */
	if (kvf_sysio->ftruncate(s->fd, (off_t)need) != 0)
		return kvf_fail_errno(KVF_EIO, errno,
				      "kvf_media_open: ftruncate %s to %llu bytes",
				      s->path, (unsigned long long)need);
	return KVF_OK;
}

static kvf_status check_file_config(const struct kvf_media_config *cfg)
{
	const struct kvf_media_geometry *g = &cfg->geo;

	if (cfg->paths == NULL)
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: file backend needs paths (one per stripe)");
	for (uint32_t i = 0; i < g->n_stripes; i++) {
		if (cfg->paths[i] == NULL || cfg->paths[i][0] == '\0')
			return kvf_fail(KVF_EINVAL,
					"kvf_media_open: path of stripe %u is %s",
					i, cfg->paths[i] ? "empty" : "NULL");
		for (uint32_t j = 0; j < i; j++)
			if (strcmp(cfg->paths[i], cfg->paths[j]) == 0)
				return kvf_fail(KVF_EINVAL,
						"kvf_media_open: stripes %u and %u have the same path %s",
						j, i, cfg->paths[i]);
	}
	if (g->page_size < KVF_MEDIA_ALIGN)
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: file backend needs page_size >= %u (O_DIRECT alignment), got %u",
				KVF_MEDIA_ALIGN, g->page_size);
	if (cfg->queue_depth > 4096)
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: queue_depth %u out of range (1..4096, 0 = default)",
				cfg->queue_depth);
	if (cfg->max_rings > MAX_RINGS)
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: max_rings %u out of range (1..%u, 0 = default)",
				cfg->max_rings, MAX_RINGS);
	if ((unsigned)cfg->direct_io > KVF_MEDIA_OFF ||
	    (unsigned)cfg->uring > KVF_MEDIA_OFF)
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: direct_io/uring must be AUTO, ON or OFF");
	return KVF_OK;
}

kvf_status kvf_media_file_open(const struct kvf_media_config *cfg,
			       struct kvf_media **out)
{
	const struct kvf_media_geometry *g = &cfg->geo;
	uint64_t need = g->segs_per_stripe * kvf_media_segment_bytes(g);
	struct media_file *mf;
	uint32_t i, n_touched;
	kvf_status rc;

	if ((rc = check_file_config(cfg)) != KVF_OK)
		return rc;
	mf = kvf_calloc(1, sizeof(*mf));
	if (mf == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_media_open: out of memory");
	mf->base.ops = &file_ops;
	mf->base.geo = *g;
	mf->queue_depth = cfg->queue_depth ? cfg->queue_depth
					   : KVF_MEDIA_DEFAULT_QD;
	mf->max_rings = cfg->max_rings ? cfg->max_rings : 8;
	for (i = 0; i < KVF_MEDIA_MAX_STRIPES; i++) {
		mf->stripes[i].fd = -1;
		mf->stripes[i].lock_fd = -1;
	}
	for (n_touched = 0; n_touched < g->n_stripes; n_touched++) {
		struct file_stripe *s = &mf->stripes[n_touched];

		s->path = kvf_strdup(cfg->paths[n_touched]);
		if (s->path == NULL) {
			rc = kvf_fail(KVF_ENOMEM, "kvf_media_open: out of memory");
			n_touched++;
			goto out_close;
		}
		s->allocated = kvf_calloc((size_t)((g->segs_per_stripe + 63) / 64),
					  sizeof(uint64_t));
		if (s->allocated == NULL) {
			rc = kvf_fail(KVF_ENOMEM, "kvf_media_open: out of memory");
			n_touched++;
			goto out_close;
		}
		if ((rc = open_fd(s, cfg->direct_io, cfg->read_only != 0,
				     cfg->existing != 0)) != KVF_OK ||
		    (rc = prepare_stripe(s, need, cfg->read_only != 0,
					 cfg->existing != 0)) != KVF_OK) {
			n_touched++;
			goto out_close;
		}
	}
	if (cfg->uring != KVF_MEDIA_OFF) {
		rc = kvf_ring_create(mf->queue_depth, &mf->rings[0]);
		if (rc == KVF_OK) {
			mf->n_rings = 1;
			mf->free_mask = 1;
			mf->use_uring = 1;
		} else if (cfg->uring == KVF_MEDIA_ON || rc != KVF_ENOTSUP) {
			goto out_close;
		}
	}
	pthread_mutex_init(&mf->pool_lock, NULL);
	pthread_cond_init(&mf->pool_cond, NULL);
	*out = &mf->base;
	return KVF_OK;

out_close:
	close_stripes(mf, n_touched, 1);
	kvf_free(mf);
	return rc;
}
