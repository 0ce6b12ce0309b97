/*
 * media_mem.c - the memory backend: segments in process memory.
 *
 * Each segment's bytes are allocated at its first write and given up by
 * trim, so a large geometry costs only what is written.  Unwritten and
 * trimmed pages read as zeros.  A store trims every segment it reuses, so
 * trimmed buffers are kept as spares (up to half the geometry) for
 * the next first write: freeing and faulting them in again cost more than
 * the data's own copy; so a memory store's footprint does not fall back
 * after frees below what it last held plus the spares.
 * kvf_media_give_segment swaps the caller's buffer in as the segment, so
 * a store's segment writes copy nothing.
 *
 * kvf_media_map hands out a segment's bytes in place (the store reads
 * pages it holds references to, so their segments are not trimmed
 * meanwhile).
 *
 * Locking: `lock` is a reader-writer lock.  Reads, writes and the give of
 * a new segment hold it shared (a first write installs the segment with a
 * compare-and-swap); trim, and a give that replaces a segment's bytes,
 * hold it exclusive, so no I/O can see bytes while they are handed away.
 * `spare_lock` guards the spare list.
 */
#include "ftl/media.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"

struct media_mem {
	struct kvf_media base;
	pthread_rwlock_t lock;      /* see the file comment */
	_Atomic(unsigned char *) *segs; /* [stripe * segs_per_stripe + seg] */
	pthread_mutex_t spare_lock;     /* guards the three below */
	unsigned char *spare;           /* trimmed buffers, linked through
					 * their first bytes */
	uint64_t n_spare;               /* buffers on the spare list */
	uint64_t spare_cap;             /* at most this many (half the
					 * segments of the geometry) */
	_Atomic uint64_t bytes_written; /* payload bytes written */
	_Atomic uint64_t bytes_read;    /* payload bytes read */
	_Atomic uint64_t write_ios;     /* write requests */
	_Atomic uint64_t read_ios;      /* read requests */
	_Atomic uint64_t trims;         /* trimmed segments */
	_Atomic uint64_t syncs;         /* syncs */
};

static struct media_mem *to_mem(struct kvf_media *m)
{
	return (struct media_mem *)m;
}

static _Atomic(unsigned char *) *slot(struct media_mem *mm, uint32_t stripe,
				       uint64_t seg)
{
	return &mm->segs[(uint64_t)stripe * mm->base.geo.segs_per_stripe + seg];
}

static unsigned char *spare_take(struct media_mem *mm)
{
	unsigned char *b;

	pthread_mutex_lock(&mm->spare_lock);
	b = mm->spare;
	if (b) {
		memcpy(&mm->spare, b, sizeof(b));
		mm->n_spare--;
	}
	pthread_mutex_unlock(&mm->spare_lock);
	return b;
}

/* spare_give - keep b for a later first write, or free it past the cap */
static void spare_give(struct media_mem *mm, unsigned char *b)
{
	pthread_mutex_lock(&mm->spare_lock);
	if (mm->n_spare < mm->spare_cap) {
		memcpy(b, &mm->spare, sizeof(b));
		mm->spare = b;
		mm->n_spare++;
		b = NULL;
	}
	pthread_mutex_unlock(&mm->spare_lock);
	kvf_free(b);
}

/* segment_write - write len bytes of src at byte off of the segment.  A
 * first write builds the segment whole (a spare or a new buffer, zero
 * outside the write) before it is installed, so no reader sees a spare's
 * old bytes.  0, or -1 when out of memory. */
static int segment_write(struct media_mem *mm, uint32_t stripe, uint64_t seg,
			 size_t off, const void *src, size_t len)
{
	_Atomic(unsigned char *) *s = slot(mm, stripe, seg);
	unsigned char *cur = atomic_load(s);
	size_t bytes = kvf_media_segment_bytes(&mm->base.geo);
	unsigned char *fresh;

	if (cur == NULL) {
		fresh = spare_take(mm);
		if (fresh == NULL &&
		    (fresh = kvf_aligned_alloc(KVF_MEDIA_ALIGN, bytes)) == NULL)
			return -1;
		memset(fresh, 0, off);
		memcpy(fresh + off, src, len);
		memset(fresh + off + len, 0, bytes - off - len);
		if (atomic_compare_exchange_strong(s, &cur, fresh))
			return 0;
		spare_give(mm, fresh); /* another writer installed it first */
	}
	memcpy(cur + off, src, len);
	return 0;
}

static kvf_status mem_write(struct kvf_media *m, const struct kvf_media_io *io,
			    uint32_t n_io)
{
	struct media_mem *mm = to_mem(m);
	uint32_t ps = m->geo.page_size;
	kvf_status rc = KVF_OK;

	pthread_rwlock_rdlock(&mm->lock);
	for (uint32_t i = 0; i < n_io; i++) {
		size_t len = (size_t)io[i].n_pages * ps;

		if (segment_write(mm, io[i].stripe, io[i].seg,
				  (size_t)io[i].page * ps, io[i].buf, len) != 0) {
			rc = kvf_fail(KVF_ENOMEM,
				      "kvf_media_write: memory backend: cannot allocate segment %llu of stripe %u (%llu bytes)",
				      (unsigned long long)io[i].seg,
				      io[i].stripe,
				      (unsigned long long)kvf_media_segment_bytes(&m->geo));
			break;
		}
		atomic_fetch_add(&mm->bytes_written, len);
		atomic_fetch_add(&mm->write_ios, 1);
	}
	pthread_rwlock_unlock(&mm->lock);
	return rc;
}

/* mem_give - *buf becomes the segment; the caller gets a spare or a new
 * buffer back, or the segment's old bytes when it had some (a store that
 * does not trim rewrites segments in place) */
static kvf_status mem_give(struct kvf_media *m, uint32_t stripe, uint64_t seg,
			   unsigned char **buf, size_t len)
{
	struct media_mem *mm = to_mem(m);
	_Atomic(unsigned char *) *s = slot(mm, stripe, seg);
	size_t bytes = kvf_media_segment_bytes(&m->geo);
	unsigned char *old = atomic_load(s), *back;
	int installed;

	if (old == NULL) {
		if ((back = spare_take(mm)) == NULL &&
		    (back = kvf_aligned_alloc(KVF_MEDIA_ALIGN, bytes)) == NULL)
			return kvf_fail(KVF_ENOMEM,
					"kvf_media_give_segment: memory backend: cannot allocate a buffer of %zu bytes",
					bytes);
		memset(*buf + len, 0, bytes - len); /* unwritten: zeros */
		pthread_rwlock_rdlock(&mm->lock);
		installed = atomic_compare_exchange_strong(s, &old, *buf);
		pthread_rwlock_unlock(&mm->lock);
		if (installed) {
			*buf = back;
			goto done;
		}
		spare_give(mm, back); /* another write installed it meanwhile */
	}
	/* exclusive, as for trim: no reader may hold the old bytes, whose
	 * pages past len the new ones keep, as with a write */
	pthread_rwlock_wrlock(&mm->lock);
	old = atomic_load(s);
	memcpy(*buf + len, old + len, bytes - len);
	atomic_store(s, *buf);
	pthread_rwlock_unlock(&mm->lock);
	*buf = old;
done:
	atomic_fetch_add(&mm->bytes_written, len);
	atomic_fetch_add(&mm->write_ios, 1);
	return KVF_OK;
}

static kvf_status mem_read(struct kvf_media *m, const struct kvf_media_io *io,
			   uint32_t n_io)
{
	struct media_mem *mm = to_mem(m);
	uint32_t ps = m->geo.page_size;

	pthread_rwlock_rdlock(&mm->lock);
	for (uint32_t i = 0; i < n_io; i++) {
		unsigned char *seg = atomic_load(slot(mm, io[i].stripe,
						      io[i].seg));
		size_t len = (size_t)io[i].n_pages * ps;

		if (seg)
			memcpy(io[i].buf, seg + (size_t)io[i].page * ps, len);
		else
			memset(io[i].buf, 0, len);
		atomic_fetch_add(&mm->bytes_read, len);
		atomic_fetch_add(&mm->read_ios, 1);
	}
	pthread_rwlock_unlock(&mm->lock);
	return KVF_OK;
}

static kvf_status mem_trim(struct kvf_media *m, uint32_t stripe, uint64_t seg)
{
	struct media_mem *mm = to_mem(m);
	unsigned char *old;

	pthread_rwlock_wrlock(&mm->lock);
	old = atomic_exchange(slot(mm, stripe, seg), NULL);
	pthread_rwlock_unlock(&mm->lock);
	if (old)
		spare_give(mm, old);
	atomic_fetch_add(&mm->trims, 1);
	return KVF_OK;
}

static kvf_status mem_sync(struct kvf_media *m)
{
	atomic_fetch_add(&to_mem(m)->syncs, 1);
	return KVF_OK;
}

static void mem_stats(struct kvf_media *m, struct kvf_media_stats *out)
{
	struct media_mem *mm = to_mem(m);
	uint64_t pages;

	out->bytes_written = atomic_load(&mm->bytes_written);
	out->bytes_read = atomic_load(&mm->bytes_read);
	out->write_ios = atomic_load(&mm->write_ios);
	out->read_ios = atomic_load(&mm->read_ios);
	out->trims = atomic_load(&mm->trims);
	out->syncs = atomic_load(&mm->syncs);
	pages = out->bytes_written / m->geo.page_size;
	out->host_pages_written = pages;
	out->nand_pages_programmed = pages;
}

static void mem_close(struct kvf_media *m)
{
	struct media_mem *mm = to_mem(m);
	uint64_t n = (uint64_t)m->geo.n_stripes * m->geo.segs_per_stripe;

	for (uint64_t i = 0; i < n; i++)
		kvf_free(atomic_load(&mm->segs[i]));
	kvf_free(mm->segs);
	mm->segs = NULL;
	while (mm->spare) {
		unsigned char *b = mm->spare;

		memcpy(&mm->spare, b, sizeof(b));
		kvf_free(b);
	}
	pthread_mutex_destroy(&mm->spare_lock);
	pthread_rwlock_destroy(&mm->lock);
}

static const unsigned char *mem_map(struct kvf_media *m, uint32_t stripe,
				    uint64_t seg, uint32_t page)
{
	struct media_mem *mm = to_mem(m);
	unsigned char *s = atomic_load(slot(mm, stripe, seg));

	if (s == NULL)
		return NULL;
	atomic_fetch_add(&mm->bytes_read, m->geo.page_size);
	atomic_fetch_add(&mm->read_ios, 1);
	return s + (size_t)page * m->geo.page_size;
}

static const struct kvf_media_ops mem_ops = {
	.version = KVF_MEDIA_OPS_VERSION,
	.name = "memory",
	.write = mem_write,
	.read = mem_read,
	.trim_segment = mem_trim,
	.sync = mem_sync,
	.stats = mem_stats,
	.close = mem_close,
	.map = mem_map,
	.give_segment = mem_give,
};

kvf_status kvf_media_mem_open(const struct kvf_media_config *cfg,
			      struct kvf_media **out)
{
	uint64_t n = (uint64_t)cfg->geo.n_stripes * cfg->geo.segs_per_stripe;
	struct media_mem *mm;

	if (n > SIZE_MAX / sizeof(*mm->segs))
		return kvf_fail(KVF_EINVAL,
				"kvf_media_open: memory backend: %llu segments is too many",
				(unsigned long long)n);
	mm = kvf_calloc(1, sizeof(*mm));
	if (mm == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_media_open: memory backend: out of memory");
	mm->segs = kvf_calloc(n, sizeof(*mm->segs));
	if (mm->segs == NULL) {
		kvf_free(mm);
		return kvf_fail(KVF_ENOMEM,
				"kvf_media_open: memory backend: cannot allocate the table of %llu segments",
				(unsigned long long)n);
	}
	if (pthread_mutex_init(&mm->spare_lock, NULL) != 0) {
		kvf_free(mm->segs);
		kvf_free(mm);
		return kvf_fail(KVF_ENOMEM,
				"kvf_media_open: memory backend: cannot create a lock");
	}
	if (pthread_rwlock_init(&mm->lock, NULL) != 0) {
		pthread_mutex_destroy(&mm->spare_lock);
		kvf_free(mm->segs);
		kvf_free(mm);
		return kvf_fail(KVF_ENOMEM,
				"kvf_media_open: memory backend: cannot create a lock");
	}
	mm->spare_cap = n / 2;
	mm->base.ops = &mem_ops;
	mm->base.geo = cfg->geo;
	*out = &mm->base;
	return KVF_OK;
}
