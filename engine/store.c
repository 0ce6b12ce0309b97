/*
 * store.c - the store's lifecycle: kvf_open, kvf_close, kvf_sync,
 * kvf_stats_get, and the sticky fatal state.
 *
 * Open checks the directory (header file, lock, catalog), opens the media
 * and rebuilds the in-memory state (engine/recovery.c).  A store being
 * created that fails part way removes everything it made.
 *
 * Sync: every sequence's partial groups and open segments are written
 * (under that sequence's lock, one at a time, so other sequences keep
 * appending), the media is synced, then one catalog batch with the
 * sequences' lengths commits with its log synced.  Segments that died
 * before the sync began are then reused (engine/segment.h explains why
 * not sooner).
 */
#include "engine/store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "api/alloc.h"
#include "api/options.h"
#include "api/status.h"
#include "engine/append.h"
#include "engine/cleaner.h"
#include "engine/kt.h"
#include "engine/opt_store.h"
#include "engine/pool.h"
#include "engine/readpath.h"
#include "engine/recovery.h"
#include "engine/segment.h"
#include "engine/seq.h"
#include "engine/syncmark.h"
#include "engine/writer.h"
#include "ftl/nand.h"

kvf_status store_check(kvf_store *st, const char *call)
{
	if (atomic_load(&st->fatal))
		return kvf_fail(KVF_EFATAL,
				"%s: the store %s stopped after a failure; close and reopen it (%s)",
				call, st->dir, st->fatal_msg);
	return KVF_OK;
}

kvf_status store_set_fatal(kvf_store *st, kvf_status cause, const char *what)
{
	char prev[KVF_ERRMSG_CAP];
	int expected = 0;

	snprintf(prev, sizeof(prev), "%s", kvf_last_error());
	kvf_fail(KVF_EFATAL,
		 "%s failed (%s: %s); the store %s is now unusable: close and reopen it",
		 what, kvf_strerror(cause), prev, st->dir);
	/* the first failure names the cause for every later call: its
	 * message is in place before the flag that makes calls read it */
	pthread_mutex_lock(&st->pool_lock);
	if (atomic_load(&st->fatal) == 0) {
		snprintf(st->fatal_msg, sizeof(st->fatal_msg), "%s",
			 kvf_last_error());
		atomic_compare_exchange_strong(&st->fatal, &expected, 1);
	}
	pthread_mutex_unlock(&st->pool_lock);
	return KVF_EFATAL;
}

static uint32_t dtype_bytes(kvf_dtype d)
{
	return d == KVF_DTYPE_F32 ? 4 : 2;
}

static uint64_t header_checksum(const struct store_header *h)
{
	return XXH3_64bits(h, offsetof(struct store_header, checksum));
}

static char *path_join(const char *dir, const char *leaf)
{
	size_t n = strlen(dir) + strlen(leaf) + 2;
	char *p = kvf_malloc(n);

	if (p)
		snprintf(p, n, "%s/%s", dir, leaf);
	return p;
}

static int rm_one(const char *path, const struct stat *sb, int flag,
		  struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void remove_tree(const char *path)
{
	nftw(path, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

/* ---- options and header ------------------------------------------------ */

static int is_pow2(uint64_t x)
{
	return x && !(x & (x - 1));
}

/* Ranges of the option fields that are not part of the model. */
#define MAX_THREADS 1024u      /* pool workers: beyond this is a mistake */
#define MAX_QUEUE_DEPTH 4096u  /* io_uring ring entries */
#define MAX_FLASH_CHANNELS 256u

/* check_model - the model a store is created for, or that a reopen names */
static kvf_status check_model(const kvf_options *o)
{
	const kvf_model *m = &o->model;
	uint32_t row;

	if (m->n_layers == 0 || m->n_layers > KV_MAX_LAYERS)
		return kvf_fail(KVF_EINVAL, "kvf_open: model.n_layers %u out of range (1..%u)",
				m->n_layers, KV_MAX_LAYERS);
	if (m->n_kv_heads == 0 || m->n_kv_heads > KV_MAX_HEADS)
		return kvf_fail(KVF_EINVAL, "kvf_open: model.n_kv_heads %u out of range (1..%u)",
				m->n_kv_heads, KV_MAX_HEADS);
	if (m->n_q_heads == 0 || m->n_q_heads > KV_MAX_HEADS ||
	    m->n_q_heads % m->n_kv_heads != 0)
		return kvf_fail(KVF_EINVAL,
				"kvf_open: model.n_q_heads %u must be a multiple of n_kv_heads %u, at most %u",
				m->n_q_heads, m->n_kv_heads, KV_MAX_HEADS);
	if ((unsigned)m->dtype > KVF_DTYPE_F32)
		return kvf_fail(KVF_EINVAL, "kvf_open: model.dtype %d is not a kvf_dtype",
				(int)m->dtype);
	row = m->head_dim * dtype_bytes(m->dtype);
	if (m->head_dim == 0 || m->head_dim > o->page_size / 2 ||
	    o->page_size % row != 0)
		return kvf_fail(KVF_EINVAL,
				"kvf_open: model.head_dim %u: one token of a head (%u bytes) must divide the page size %u",
				m->head_dim, row, o->page_size);
	if (o->kt_pages && m->head_dim > 512)
		return kvf_fail(KVF_EINVAL,
				"kvf_open: kt_pages needs head_dim <= 512 (SparF's per-task dim tables), got %u",
				m->head_dim);
	return KVF_OK;
}

/* check_options - every field of o in its range, before anything is made;
 * the model only when one is given (a zero model reopens as stored) */
static kvf_status check_options(const kvf_options *o)
{
	const kvf_model *m = &o->model;
	uint64_t seg = o->segment_size, pps, n_stripes, per_stripe;
	uint32_t page_bits = 0;

	if ((unsigned)o->media > KVF_MEDIA_FLASH)
		return kvf_fail(KVF_EINVAL, "kvf_open: media %d is not a kvf_media_kind",
				(int)o->media);
	if (!is_pow2(o->page_size) || o->page_size < 4096 || o->page_size > 65536)
		return kvf_fail(KVF_EINVAL,
				"kvf_open: page_size %u must be a power of two in 4096..65536",
				o->page_size);
	if (o->n_threads > MAX_THREADS)
		return kvf_fail(KVF_EINVAL, "kvf_open: n_threads %u out of range (0..%u; 0 = online CPUs)",
				o->n_threads, MAX_THREADS);
	if (o->kt_pages > 1)
		return kvf_fail(KVF_EINVAL, "kvf_open: kt_pages %u must be 0 or 1",
				o->kt_pages);
	if (seg == 0 || seg % o->page_size != 0 || seg / o->page_size < 4 ||
	    seg / o->page_size > 65536)
		return kvf_fail(KVF_EINVAL,
				"kvf_open: segment_size %llu must be 4 to 65536 pages of %u bytes",
				(unsigned long long)seg, o->page_size);
	if (o->queue_depth > MAX_QUEUE_DEPTH)
		return kvf_fail(KVF_EINVAL, "kvf_open: queue_depth %u out of range (0..%u; 0 = %u)",
				o->queue_depth, MAX_QUEUE_DEPTH, KVF_MEDIA_DEFAULT_QD);
	if (o->n_stripes > KVF_MEDIA_MAX_STRIPES ||
	    o->n_device_paths > KVF_MEDIA_MAX_STRIPES)
		return kvf_fail(KVF_EINVAL, "kvf_open: n_stripes %u / n_device_paths %u out of range (0..%u)",
				o->n_stripes, o->n_device_paths,
				KVF_MEDIA_MAX_STRIPES);
	n_stripes = o->n_stripes ? o->n_stripes
				 : (o->n_device_paths ? o->n_device_paths : 1);
	if ((o->device_paths != NULL) != (o->n_device_paths != 0) ||
	    (o->n_device_paths && o->n_device_paths != n_stripes))
		return kvf_fail(KVF_EINVAL,
				"kvf_open: device_paths %s with n_device_paths %u for %llu stripes (give one path per stripe, or none)",
				o->device_paths ? "set" : "NULL", o->n_device_paths,
				(unsigned long long)n_stripes);
	for (uint32_t i = 0; i < o->n_device_paths; i++)
		if (o->device_paths[i] == NULL || o->device_paths[i][0] == '\0')
			return kvf_fail(KVF_EINVAL, "kvf_open: device_paths[%u] is %s",
					i, o->device_paths[i] ? "empty" : "NULL");
	if (o->n_device_paths && o->media != KVF_MEDIA_FILE)
		return kvf_fail(KVF_EINVAL,
				"kvf_open: device_paths are for media KVF_MEDIA_FILE, not media %d",
				(int)o->media);
	if (o->direct_io > 2)
		return kvf_fail(KVF_EINVAL,
				"kvf_open: direct_io %u must be 0 (where allowed), 1 (on) or 2 (off)",
				o->direct_io);
	if (o->read_only > 1)
		return kvf_fail(KVF_EINVAL, "kvf_open: read_only %u must be 0 or 1",
				o->read_only);
	if (o->flash_channels > MAX_FLASH_CHANNELS)
		return kvf_fail(KVF_EINVAL, "kvf_open: flash_channels %u out of range (0..%u; 0 = one per stripe)",
				o->flash_channels, MAX_FLASH_CHANNELS);
	if (o->flash_cell > 4)
		return kvf_fail(KVF_EINVAL, "kvf_open: flash_cell %u out of range (0..4)",
				o->flash_cell);
	if (!(o->flash_spare >= 0 && o->flash_spare < 0.9f))
		return kvf_fail(KVF_EINVAL, "kvf_open: flash_spare %g out of range [0, 0.9)",
				(double)o->flash_spare);
	if (o->trim > 2)
		return kvf_fail(KVF_EINVAL, "kvf_open: trim %u must be 0, 1 or 2", o->trim);
	if (o->verify_reads > 1)
		return kvf_fail(KVF_EINVAL, "kvf_open: verify_reads %u must be 0 or 1",
				o->verify_reads);
	pps = seg / o->page_size;
	while ((1ull << page_bits) < pps)
		page_bits++;
	per_stripe = o->capacity_bytes / n_stripes / seg;
	if (per_stripe < 2)
		return kvf_fail(KVF_EINVAL,
				"kvf_open: capacity_bytes %llu holds fewer than 2 segments of %llu bytes per stripe (%llu stripes)",
				(unsigned long long)o->capacity_bytes,
				(unsigned long long)seg,
				(unsigned long long)n_stripes);
	if (per_stripe * n_stripes >= (1ull << (32 - page_bits)) - 1)
		return kvf_fail(KVF_EINVAL,
				"kvf_open: capacity_bytes %llu is too many segments of %llu bytes (at most %llu)",
				(unsigned long long)o->capacity_bytes,
				(unsigned long long)seg,
				(unsigned long long)(1ull << (32 - page_bits)) - 2);
	if (m->n_layers || m->n_q_heads || m->n_kv_heads || m->head_dim)
		return check_model(o);
	return KVF_OK;
}

/* take_options - the caller's options over our defaults, each checked */
static kvf_status take_options(const kvf_options *in, kvf_options *o)
{
	kvf_status rc;

	kvf_options_init(o, NULL);
	if (in == NULL)
		return KVF_OK;
	if ((rc = kvf_struct_check("kvf_open", "opts", in, sizeof(*o))) != KVF_OK)
		return rc;
	memcpy(o, in, in->struct_size < sizeof(*o) ? in->struct_size : sizeof(*o));
	o->struct_size = sizeof(*o);
	return check_options(o);
}

/* build_header - describe a new store made with o (check_options passed) */
static kvf_status build_header(const kvf_options *o, struct store_header *h)
{
	const kvf_model *m = &o->model;
	uint64_t seg = o->segment_size, pps, n_stripes, per_stripe;
	uint32_t page_bits = 0;
	kvf_status rc;

	if ((rc = check_model(o)) != KVF_OK)
		return rc;
	pps = seg / o->page_size;
	while ((1ull << page_bits) < pps)
		page_bits++;
	n_stripes = o->n_stripes ? o->n_stripes
				 : (o->n_device_paths ? o->n_device_paths : 1);
	per_stripe = o->capacity_bytes / n_stripes / seg;
	memset(h, 0, sizeof(*h));
	memcpy(h->magic, STORE_MAGIC, 8);
	h->format_version = STORE_FORMAT_VERSION;
	h->header_size = sizeof(*h);
	h->n_layers = m->n_layers;
	h->n_q_heads = m->n_q_heads;
	h->n_kv_heads = m->n_kv_heads;
	h->head_dim = m->head_dim;
	h->dtype = (uint32_t)m->dtype;
	h->page_size = o->page_size;
	h->segment_size = seg;
	h->segs_per_stripe = per_stripe;
	h->n_stripes = (uint32_t)n_stripes;
	h->media = (uint32_t)o->media;
	h->kt_pages = o->kt_pages;
	h->page_bits = page_bits;
	h->kt_dims = o->kt_pages ? kt_choose_dims(m->head_dim) : 0;
	return KVF_OK;
}

/* check_against - o (from the caller) must agree with the stored h */
static kvf_status check_against(const kvf_options *o, const struct store_header *h,
				const char *path)
{
	const kvf_model *m = &o->model;
	int model_given = m->n_layers || m->n_q_heads || m->n_kv_heads ||
			  m->head_dim;
	uint64_t n_stripes = o->n_stripes ? o->n_stripes
					  : (o->n_device_paths ? o->n_device_paths : 1);

	/* a read-only open with no model (tools) takes everything as stored */
	if (!model_given && o->read_only)
		return KVF_OK;

#define MISMATCH(field, have, want)                                            \
	kvf_fail(KVF_EMISMATCH,                                                \
		 "kvf_open: %s %llu contradicts the store's %llu (%s)", field, \
		 (unsigned long long)(have), (unsigned long long)(want), path)
	if (model_given) {
		if (m->n_layers != h->n_layers)
			return MISMATCH("model.n_layers", m->n_layers, h->n_layers);
		if (m->n_q_heads != h->n_q_heads)
			return MISMATCH("model.n_q_heads", m->n_q_heads, h->n_q_heads);
		if (m->n_kv_heads != h->n_kv_heads)
			return MISMATCH("model.n_kv_heads", m->n_kv_heads, h->n_kv_heads);
		if (m->head_dim != h->head_dim)
			return MISMATCH("model.head_dim", m->head_dim, h->head_dim);
		if ((uint32_t)m->dtype != h->dtype)
			return MISMATCH("model.dtype", m->dtype, h->dtype);
	}
	if (o->page_size != h->page_size)
		return MISMATCH("page_size", o->page_size, h->page_size);
	if (o->segment_size != h->segment_size)
		return MISMATCH("segment_size", o->segment_size, h->segment_size);
	if (n_stripes != h->n_stripes)
		return MISMATCH("n_stripes", n_stripes, h->n_stripes);
	if (o->capacity_bytes / h->n_stripes / h->segment_size != h->segs_per_stripe)
		return MISMATCH("capacity_bytes", o->capacity_bytes,
				h->segs_per_stripe * h->n_stripes * h->segment_size);
	if ((uint32_t)o->media != h->media)
		return MISMATCH("media", o->media, h->media);
	if (o->kt_pages != h->kt_pages)
		return MISMATCH("kt_pages", o->kt_pages, h->kt_pages);
#undef MISMATCH
	return KVF_OK;
}

/* store_read_header - the store header at path; KVF_ENOENT if none.
 * A file that is there but is not a whole, intact header of ours is
 * damage (KVF_ECORRUPT): the name KVFLASH is the store's. */
kvf_status store_read_header(const char *path, struct store_header *h)
{
	unsigned char buf[sizeof(*h)];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0) {
		if (errno == ENOENT)
			return KVF_ENOENT;
		return kvf_fail_errno(KVF_EIO, errno, "kvf_open: open %s", path);
	}
	n = read(fd, buf, sizeof(buf));
	close(fd);
	if (n < 0)
		return kvf_fail_errno(KVF_EIO, errno, "kvf_open: read %s", path);
	return store_header_decode(buf, (size_t)n, path, h);
}

/* check_fields - a header whose checksum holds must still describe a store
 * that could have been made (build_header): open divides by its sizes and
 * sizes its tables from it.  Anything else is damage. */
static kvf_status check_fields(const struct store_header *h, const char *path)
{
	char why[KVF_ERRMSG_CAP];
	uint32_t page_bits = 0;
	kvf_options o;
	kvf_status rc;

	kvf_options_init(&o, NULL);
	o.model = (kvf_model){ h->n_layers, h->n_q_heads, h->n_kv_heads,
			       h->head_dim, (kvf_dtype)h->dtype };
	o.page_size = h->page_size;
	o.segment_size = h->segment_size;
	o.media = (kvf_media_kind)h->media;
	o.kt_pages = h->kt_pages;
	if (h->n_stripes == 0 || h->n_stripes > KVF_MEDIA_MAX_STRIPES ||
	    h->segs_per_stripe == 0 || h->segs_per_stripe > UINT32_MAX ||
	    h->segment_size > UINT32_MAX) {
		snprintf(why, sizeof(why),
			 "%u stripes of %llu segments of %llu bytes",
			 h->n_stripes, (unsigned long long)h->segs_per_stripe,
			 (unsigned long long)h->segment_size);
		goto bad;
	}
	o.n_stripes = h->n_stripes;
	o.capacity_bytes = h->segs_per_stripe * h->n_stripes * h->segment_size;
	if ((rc = check_options(&o)) != KVF_OK || (rc = check_model(&o)) != KVF_OK) {
		snprintf(why, sizeof(why), "%s", kvf_last_error());
		goto bad;
	}
	while ((1ull << page_bits) < h->segment_size / h->page_size)
		page_bits++;
	if (h->page_bits != page_bits ||
	    h->kt_dims != (h->kt_pages ? kt_choose_dims(h->head_dim) : 0)) {
		snprintf(why, sizeof(why), "page_bits %u, kt_dims %u", h->page_bits,
			 h->kt_dims);
		goto bad;
	}
	return KVF_OK;
bad:
	return kvf_fail(KVF_ECORRUPT,
			"kvf_open: %s is damaged: its checksum holds but its fields describe no store (%s)",
			path, why);
}

kvf_status store_header_decode(const void *buf, size_t n, const char *path,
			       struct store_header *out)
{
	struct store_header hh, *h = &hh;
	kvf_status rc;

	memset(h, 0, sizeof(*h));
	memcpy(h, buf, n < sizeof(*h) ? n : sizeof(*h));
	if (n < 12 || memcmp(h->magic, STORE_MAGIC, 8) != 0)
		return kvf_fail(KVF_ECORRUPT,
				"kvf_open: %s is damaged: %zu bytes without the KVFLASH magic (the store header is unreadable; its segments and catalog are not touched)",
				path, n);
	/* a newer format may lay its header out otherwise: only a header
	 * of our size and checksum can be judged damaged with certainty */
	if (h->format_version > STORE_FORMAT_VERSION &&
	    (h->header_size != sizeof(*h) || header_checksum(h) == h->checksum))
		return kvf_fail(KVF_EVERSION,
				"kvf_open: %s has format version %u; this library reads up to %u",
				path, h->format_version, STORE_FORMAT_VERSION);
	if (n != sizeof(*h) || h->header_size != sizeof(*h))
		return kvf_fail(KVF_ECORRUPT,
				"kvf_open: %s is damaged: %zu bytes, header_size %u (expected %zu)",
				path, n, h->header_size, sizeof(*h));
	if (header_checksum(h) != h->checksum)
		return kvf_fail(KVF_ECORRUPT,
				"kvf_open: %s is damaged: checksum %016llx, computed %016llx",
				path, (unsigned long long)h->checksum,
				(unsigned long long)header_checksum(h));
	/* older headers have this layout; their catalog records do not */
	if (h->format_version < STORE_FORMAT_VERSION)
		return kvf_fail(KVF_EVERSION,
				"kvf_open: %s has format version %u, which this library no longer reads (it reads %u); make the store afresh",
				path, h->format_version, STORE_FORMAT_VERSION);
	if ((rc = check_fields(h, path)) != KVF_OK)
		return rc;
	*out = *h;
	return KVF_OK;
}

/* write_header - write h to path atomically (temp file, fsync, rename) */
static kvf_status write_header(const char *dir, const char *path,
			       struct store_header *h)
{
	char *tmp = path_join(dir, STORE_HEADER_FILE ".tmp");
	int fd, dfd;

	if (tmp == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_open: out of memory");
	h->checksum = header_checksum(h);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, h, sizeof(*h)) != (ssize_t)sizeof(*h) ||
	    fsync(fd) != 0 || rename(tmp, path) != 0) {
		int err = errno;

		if (fd >= 0)
			close(fd);
		unlink(tmp);
		kvf_free(tmp);
		return kvf_fail_errno(KVF_EIO, err, "kvf_open: writing %s", path);
	}
	close(fd);
	kvf_free(tmp);
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
	return KVF_OK;
}

/* dir_is_empty - holds nothing but what kvf_open itself makes (LOCK) */
static int dir_is_empty(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int empty = 1;

	if (d == NULL)
		return 0;
	while ((e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
		    strcmp(e->d_name, "LOCK"))
			empty = 0;
	closedir(d);
	return empty;
}

/* sync_dir - make the directory's entries (creations, renames, unlinks)
 * durable */
static void sync_dir(const char *dir)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
}

/* begin_create - mark dir as a store being created: until the marker is
 * gone, whatever else the directory holds is the leftover of a creation
 * that did not finish, which the next open removes and starts afresh.
 * The marker is only ever written into a directory that holds nothing but
 * our LOCK, or holds our own store. */
static kvf_status begin_create(const char *dir, const char *cpath)
{
	int fd = open(cpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	if (fd < 0 ||
	    write(fd, CREATING_TEXT, sizeof(CREATING_TEXT) - 1) !=
		    (ssize_t)sizeof(CREATING_TEXT) - 1 ||
	    fsync(fd) != 0) {
		int err = errno;

		if (fd >= 0)
			close(fd);
		return kvf_fail_errno(KVF_EIO, err, "kvf_open: creating %s", cpath);
	}
	close(fd);
	sync_dir(dir);
	return KVF_OK;
}

/* is_creating - cpath is our creation marker: a file of that name that
 * somebody else put there is not, and nothing is removed on its word
 * (begin_create may have been cut short between creating and writing it:
 * an empty marker counts, in a directory that holds nothing a creation
 * does not make) */
static int is_creating(const char *dir, const char *cpath)
{
	char buf[sizeof(CREATING_TEXT)];
	int fd = open(cpath, O_RDONLY | O_CLOEXEC);
	ssize_t n;
	DIR *d;
	struct dirent *e;
	int ours = 1;

	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf));
	close(fd);
	if (n == (ssize_t)sizeof(CREATING_TEXT) - 1 &&
	    memcmp(buf, CREATING_TEXT, (size_t)n) == 0)
		return 1;
	if (n != 0 || (d = opendir(dir)) == NULL)
		return 0;
	while ((e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
		    strcmp(e->d_name, "LOCK") &&
		    strcmp(e->d_name, STORE_CREATING_FILE))
			ours = 0;
	closedir(d);
	return ours;
}

/* clear_leftovers - remove all an unfinished creation left in dir: every
 * entry but the LOCK and the marker, which go last */
static void clear_leftovers(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char p[4096];

	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
		    !strcmp(e->d_name, "LOCK") ||
		    !strcmp(e->d_name, STORE_CREATING_FILE))
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		remove_tree(p);
	}
	closedir(d);
	sync_dir(dir);
}

/* finish_create - the store is whole: its header goes in (atomically), and
 * only then the marker goes */
static kvf_status finish_create(kvf_store *st, const char *hpath,
				const char *cpath)
{
	kvf_status rc = write_header(st->dir, hpath, &st->hdr);

	if (rc != KVF_OK)
		return rc;
	if (unlink(cpath) != 0)
		return kvf_fail_errno(KVF_EIO, errno, "kvf_open: removing %s",
				      cpath);
	sync_dir(st->dir);
	return KVF_OK;
}

/* ---- open / close ------------------------------------------------------ */

/* derive - the shape numbers every module uses, from the header */
static void derive(kvf_store *st)
{
	const struct store_header *h = &st->hdr;

	st->elt_bytes = dtype_bytes((kvf_dtype)h->dtype);
	st->row_bytes = h->head_dim * st->elt_bytes;
	st->group_tokens = h->page_size / st->row_bytes;
	st->pages_per_seg = (uint32_t)(h->segment_size / h->page_size);
	st->data_per_seg = max_data_pages(st->pages_per_seg, h->page_size);
	st->page_bits = h->page_bits;
	st->n_segments = (uint32_t)(h->segs_per_stripe * h->n_stripes);
	st->kt_dims = h->kt_dims;
	st->kt_groups = h->kt_dims ? h->head_dim / h->kt_dims : 0;
	st->kt_tokens = h->kt_dims ? h->page_size / (h->kt_dims * st->elt_bytes) : 0;
}

/* open_media - the stripes: the caller's devices, or files in the dir */
static kvf_status open_media(kvf_store *st, const kvf_options *o)
{
	struct kvf_media_config cfg = {
		.kind = (kvf_media_kind)st->hdr.media,
		.geo = { .n_stripes = st->hdr.n_stripes,
			 .page_size = st->hdr.page_size,
			 .pages_per_segment = st->pages_per_seg,
			 .segs_per_stripe = st->hdr.segs_per_stripe },
		.queue_depth = o->queue_depth,
		.read_only = st->read_only,
		.direct_io = o->direct_io == 1 ? KVF_MEDIA_ON :
			     o->direct_io == 2 ? KVF_MEDIA_OFF : KVF_MEDIA_AUTO,
	};
	struct kvf_flash_config fc;
	char **paths = NULL, *image = NULL;
	kvf_status rc;

	if (cfg.kind == KVF_MEDIA_FLASH) {
		/* one erase block per segment, page-mapped like an SSD */
		kvf_flash_config_init(&fc);
		fc.channels = o->flash_channels ? o->flash_channels
						: st->hdr.n_stripes;
		fc.cell = (enum kvf_flash_cell)o->flash_cell;
		fc.spare_factor = o->flash_spare;
		fc.pages_per_block = st->pages_per_seg;
		fc.page_size = st->hdr.page_size;
		/* the device persists in its image, as an SSD would */
		fc.backing = KVF_FLASH_BACKING_IMAGE;
		if ((image = path_join(st->dir, FLASH_IMAGE_FILE)) == NULL)
			return kvf_fail(KVF_ENOMEM, "kvf_open: out of memory");
		fc.path = image;
		cfg.flash = &fc;
	}
	if (cfg.kind == KVF_MEDIA_FILE && o->device_paths == NULL) {
		paths = kvf_calloc(st->hdr.n_stripes, sizeof(*paths));
		if (paths == NULL)
			return kvf_fail(KVF_ENOMEM, "kvf_open: out of memory");
		for (uint32_t i = 0; i < st->hdr.n_stripes; i++) {
			char leaf[32];

			snprintf(leaf, sizeof(leaf), "stripe-%03u.kvf", i);
			if ((paths[i] = path_join(st->dir, leaf)) == NULL) {
				rc = kvf_fail(KVF_ENOMEM, "kvf_open: out of memory");
				goto out;
			}
		}
		cfg.paths = (const char *const *)paths;
	} else {
		cfg.paths = o->device_paths;
	}
	rc = kvf_media_open(&cfg, &st->media);
	if (rc != KVF_OK)
		kvf_fail_wrap(rc, "kvf_open");
out:
	for (uint32_t i = 0; paths && i < st->hdr.n_stripes; i++)
		kvf_free(paths[i]);
	kvf_free(paths);
	kvf_free(image);
	return rc;
}

/* check_config_record - the catalog's "C" must be this header (or is
 * written, for a new store) */
static kvf_status check_config_record(kvf_store *st, int created)
{
	unsigned char tag = META_TAG_CONFIG;
	struct catalog_batch *b;
	void *val;
	size_t vlen;
	kvf_status rc;

	if (!created) {
		rc = catalog_get(st->cat, &tag, 1, &val, &vlen);
		if (rc == KVF_ENOENT)
			return kvf_fail(KVF_ECORRUPT,
					"kvf_open: %s/meta has no configuration record: not this store's catalog",
					st->dir);
		if (rc != KVF_OK)
			return rc;
		rc = vlen == sizeof(st->hdr) && !memcmp(val, &st->hdr, vlen)
			     ? KVF_OK
			     : kvf_fail(KVF_ECORRUPT,
					"kvf_open: %s/meta belongs to another store (its configuration differs from %s/KVFLASH)",
					st->dir, st->dir);
		kvf_free(val);
		return rc;
	}
	b = catalog_batch_new();
	if (b == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_open: out of memory");
	catalog_batch_put(b, &tag, 1, &st->hdr, sizeof(st->hdr));
	rc = catalog_commit(st->cat, b, 1);
	catalog_batch_free(b);
	return rc;
}

static uint64_t random_id(void)
{
	struct timespec ts;
	uint64_t x;

	clock_gettime(CLOCK_REALTIME, &ts);
	x = ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^
	    ((uint64_t)getpid() << 16);
	return XXH3_64bits(&x, sizeof(x));
}

/* store_release - free everything; with `created` remove what open made */
static void store_release(kvf_store *st, int created, int made_dir,
			  int fresh)
{
	cleaner_stop(st);
	writer_stop(st);
	pool_destroy(st->pool);
	if (!st->media_borrowed)
		kvf_media_free(st->media);
	catalog_close(st->cat);
	seq_table_free(st);
	seg_table_free(st);
	catalog_batch_free(st->reclaim_batch);
	if (created && st->dir) {
		/* stack paths: this also runs when memory has run out */
		char p[4096];

		for (uint32_t i = 0; i < st->hdr.n_stripes && st->opts.device_paths == NULL; i++) {
			snprintf(p, sizeof(p), "%s/stripe-%03u.kvf", st->dir, i);
			unlink(p);
		}
		snprintf(p, sizeof(p), "%s/%s", st->dir, FLASH_IMAGE_FILE);
		unlink(p);
		snprintf(p, sizeof(p), "%s/meta", st->dir);
		remove_tree(p);
		snprintf(p, sizeof(p), "%s/%s", st->dir, STORE_HEADER_FILE);
		unlink(p);
		snprintf(p, sizeof(p), "%s/%s", st->dir, SYNCMARK_FILE);
		unlink(p);
		snprintf(p, sizeof(p), "%s/%s", st->dir, STORE_CREATING_FILE);
		unlink(p);
	}
	if ((created || made_dir || fresh) && st->dir && !st->read_only) {
		/* a failed create leaves nothing: not its LOCK, not the
		 * directory it made */
		char p[4096];

		snprintf(p, sizeof(p), "%s/LOCK", st->dir);
		if (st->lock_created)
			unlink(p);
		if (made_dir)
			rmdir(st->dir);
	}
	if (st->lock_fd >= 0)
		close(st->lock_fd);
	if (st->mark_fd >= 0)
		close(st->mark_fd);
	kvf_free(st->mark_path);
	pthread_rwlock_destroy(&st->world);
	pthread_rwlock_destroy(&st->seq_table_lock);
	pthread_mutex_destroy(&st->seg_lock);
	pthread_mutex_destroy(&st->sync_lock);
	segbuf_pool_free(st);
	read_batches_free(st);
	pthread_mutex_destroy(&st->pool_lock);
	pthread_mutex_destroy(&st->opt_lock);
	pthread_cond_destroy(&st->writer_idle);
	pthread_cond_destroy(&st->writer_work);
	pthread_mutex_destroy(&st->writer_lock);
	kvf_free(st->dir);
	kvf_free(st);
}

/* trim_policy - whether reusing a segment trims it first: on devices, the
 * flash emulator (its GC then skips the dead pages) and memory (the bytes
 * go to the media's spares, or are freed past them), but not on the
 * preallocated stripe files, where punching a hole only makes the next
 * write allocate the blocks again */
static int trim_policy(kvf_store *st)
{
	struct kvf_media_stats ms;

	if (st->opts.trim == 1 || st->opts.trim == 2)
		return st->opts.trim == 1;
	kvf_media_stats(st->media, &ms);
	if (st->hdr.media != KVF_MEDIA_FILE)
		return 1;
	return ms.blkdev_stripes == st->hdr.n_stripes;
}

/* compute_threads - pool workers: n_threads (0 = online CPUs) less the
 * calling thread, which works too */
static uint32_t compute_threads(const kvf_options *o)
{
	long n = o->n_threads ? (long)o->n_threads : sysconf(_SC_NPROCESSORS_ONLN);

	return n > 1 ? (uint32_t)(n - 1) : 0;
}

/* lock_dir - one handle per directory */
static kvf_status lock_dir(kvf_store *st)
{
	char *p = path_join(st->dir, "LOCK");
	int fd;

	if (p == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_open: out of memory");
	st->lock_created = !st->read_only && access(p, F_OK) != 0;
	fd = open(p, (st->read_only ? O_RDONLY : O_RDWR | O_CREAT) | O_CLOEXEC, 0644);
	if (fd < 0 && st->read_only && errno == ENOENT)
		fd = open(st->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		kvf_status rc = kvf_fail_errno(KVF_EIO, errno, "kvf_open: open %s", p);

		kvf_free(p);
		return rc;
	}
	if (flock(fd, (st->read_only ? LOCK_SH : LOCK_EX) | LOCK_NB) != 0) {
		kvf_status rc = errno == EWOULDBLOCK
			? kvf_fail(KVF_EBUSY, "kvf_open: %s is open by another handle (%s is locked)",
				   st->dir, p)
			: kvf_fail_errno(KVF_EIO, errno, "kvf_open: flock %s", p);

		close(fd);
		kvf_free(p);
		return rc;
	}
	kvf_free(p);
	st->lock_fd = fd;
	return KVF_OK;
}

/* open_mark - the durable-point mark of a store whose catalog is synced */
static kvf_status open_mark(kvf_store *st, int created)
{
	if ((st->mark_path = path_join(st->dir, SYNCMARK_FILE)) == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_open: out of memory");
	return syncmark_open(st->dir, created, st->read_only, st->hdr.store_id,
			     &st->mark_fd);
}

/* check_mark - a catalog with fewer durable points than the mark lost
 * records that were synced: refuse it rather than roll the store back */
static kvf_status check_mark(kvf_store *st)
{
	struct syncmark m;
	kvf_status rc;

	if (st->mark_fd < 0)
		return KVF_OK;
	if ((rc = syncmark_read(st->mark_fd, st->mark_path, st->hdr.store_id,
				&m)) != KVF_OK)
		return rc;
	if (st->n_points >= m.n_points)
		return KVF_OK;
	return kvf_fail(KVF_ECORRUPT,
			"kvf_open: the catalog %s/meta lost records: it holds %llu durable points, but %s says %llu completed (the last at seqno %llu, after %llu syncs); its write-ahead log (meta/*.log) is damaged, and what the lost points made durable (sequences, their lengths, forks, frees, segments, optimizer steps) is missing. Nothing was changed: see kvtool verify and kvtool repair",
			st->dir, (unsigned long long)st->n_points,
			st->mark_path, (unsigned long long)m.n_points,
			(unsigned long long)m.seqno,
			(unsigned long long)m.n_syncs);
}

/* persists - does the store's data outlive its handle?  File stores and
 * flash stores on their own device image do (their catalog is synced and
 * their durable points marked); memory stores and stores on a caller's
 * media do not. */
static int persists(const kvf_store *st, const struct kvf_media *media)
{
	return media == NULL && (st->hdr.media == KVF_MEDIA_FILE ||
				 st->hdr.media == KVF_MEDIA_FLASH);
}

kvf_status kvf_open(const char *dir, const kvf_options *opts, kvf_store **out)
{
	return store_open_media(dir, opts, NULL, out);
}

kvf_status store_open_media(const char *dir, const kvf_options *opts,
		      struct kvf_media *media, kvf_store **out)
{
	struct store_header stored;
	int created = 0, made_dir = 0, fresh = 0, creating;
	kvf_store *st;
	char *hpath = NULL, *mpath = NULL, *cpath = NULL;
	kvf_status rc;

	if (out == NULL)
		return kvf_fail(KVF_EINVAL, "kvf_open: out is NULL");
	*out = NULL;
	if (dir == NULL || *dir == '\0')
		return kvf_fail(KVF_EINVAL, "kvf_open: dir is %s", dir ? "empty" : "NULL");
	st = kvf_calloc(1, sizeof(*st));
	if (st == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_open: out of memory");
	st->lock_fd = -1;
	st->mark_fd = -1;
	{
		/* writer-preferring, so a cleaning pass is not starved by a
		 * stream of appends; nothing takes world twice */
		pthread_rwlockattr_t a;

		pthread_rwlockattr_init(&a);
		pthread_rwlockattr_setkind_np(&a,
			PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
		pthread_rwlock_init(&st->world, &a);
		pthread_rwlockattr_destroy(&a);
	}
	pthread_rwlock_init(&st->seq_table_lock, NULL);
	pthread_mutex_init(&st->seg_lock, NULL);
	pthread_mutex_init(&st->sync_lock, NULL);
	pthread_mutex_init(&st->writer_lock, NULL);
	pthread_cond_init(&st->writer_work, NULL);
	pthread_cond_init(&st->writer_idle, NULL);
	pthread_mutex_init(&st->pool_lock, NULL);
	pthread_mutex_init(&st->opt_lock, NULL);
	atomic_init(&st->next_seqno, 1);
	atomic_init(&st->next_opt_id, 1);
	st->epoch = 1;
	if ((rc = take_options(opts, &st->opts)) != KVF_OK)
		goto fail;
	st->read_only = st->opts.read_only != 0;
	st->dir = kvf_strdup(dir);
	hpath = path_join(dir, STORE_HEADER_FILE);
	mpath = path_join(dir, "meta");
	cpath = path_join(dir, STORE_CREATING_FILE);
	if (!st->dir || !hpath || !mpath || !cpath) {
		rc = kvf_fail(KVF_ENOMEM, "kvf_open: out of memory");
		goto fail;
	}
	if (st->read_only) {
		struct stat sb;

		if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
			rc = kvf_fail(KVF_ENOENT, "kvf_open: %s holds no store (%s)",
				      dir, errno == ENOENT ? "no such directory"
							   : "not a directory");
			goto fail;
		}
	} else if (mkdir(dir, 0755) == 0) {
		made_dir = 1;
	} else if (errno != EEXIST) {
		rc = kvf_fail_errno(errno == ENOENT ? KVF_ENOENT : KVF_EIO, errno,
				    "kvf_open: mkdir %s", dir);
		goto fail;
	}
	if ((rc = lock_dir(st)) != KVF_OK)
		goto fail;
	creating = is_creating(dir, cpath);
	rc = store_read_header(hpath, &stored);
	st->media_borrowed = media != NULL;
	if (rc == KVF_OK && creating && !st->read_only) {
		/* killed between the header and the marker's removal: the
		 * store is whole */
		unlink(cpath);
		sync_dir(dir);
		creating = 0;
	}
	if (rc == KVF_OK && stored.media == KVF_MEDIA_MEMORY && !st->read_only &&
	    media == NULL) {
		/* a memory store's data died with its last handle (a flash
		 * store's lives on in its device image):
		 * its files go, under the marker, and a new one is made */
		if ((rc = begin_create(dir, cpath)) != KVF_OK)
			goto fail;
		creating = 1;
		rc = KVF_ENOENT;
	}
	if (rc == KVF_OK) {
		if (opts && (rc = check_against(&st->opts, &stored, hpath)) != KVF_OK)
			goto fail;
		st->hdr = stored;
	} else if (rc == KVF_ENOENT) {
		fresh = 1; /* no store here: a failure removes our LOCK */
		if (!creating && !dir_is_empty(dir) && access(mpath, F_OK) == 0) {
			rc = kvf_fail(KVF_ECORRUPT,
				      "kvf_open: %s has a catalog (meta/) but its store header %s is missing: the store is damaged; nothing was changed",
				      dir, hpath);
			goto fail;
		}
		if (st->read_only) {
			rc = kvf_fail(KVF_ENOENT, "kvf_open: %s holds no store (%s)",
				      dir, creating ? "its creation did not finish"
						    : "no KVFLASH header");
			goto fail;
		}
		if (!creating && !dir_is_empty(dir)) {
			rc = kvf_fail(KVF_EINVAL,
				      "kvf_open: %s is not a kvflash store (no KVFLASH header) and is not empty",
				      dir);
			goto fail;
		}
		if (opts == NULL) {
			rc = kvf_fail(KVF_EINVAL,
				      "kvf_open: %s holds no store; creating one needs options with a model",
				      dir);
			goto fail;
		}
		/* every check passed: only now may a cut-short creation go */
		if ((rc = build_header(&st->opts, &st->hdr)) != KVF_OK)
			goto fail;
		if (creating)
			clear_leftovers(dir);
		st->hdr.store_id = random_id();
		/* the catalog's config record is this header, checksum too */
		st->hdr.checksum = header_checksum(&st->hdr);
		created = 1;
		if (!creating && (rc = begin_create(dir, cpath)) != KVF_OK)
			goto fail;
	} else {
		goto fail;
	}
	derive(st);
	if ((rc = catalog_open(mpath, created, st->read_only,
				    persists(st, media) ? CATALOG_FSYNC
				    : media || st->hdr.media == KVF_MEDIA_FLASH
					    ? CATALOG_NO_FSYNC : CATALOG_VOLATILE,
				    &st->cat)) != KVF_OK) {
		kvf_fail_wrap(rc, "kvf_open");
		goto fail;
	}
	if (media) {
		const struct kvf_media_geometry *g = &media->geo;

		if (g->n_stripes != st->hdr.n_stripes ||
		    g->page_size != st->hdr.page_size ||
		    g->pages_per_segment != st->pages_per_seg ||
		    g->segs_per_stripe != st->hdr.segs_per_stripe) {
			rc = kvf_fail(KVF_EMISMATCH,
				      "kvf_open: the media's geometry (%u stripes, %u-byte pages, %u pages a segment, %llu segments a stripe) is not the store's",
				      g->n_stripes, g->page_size,
				      g->pages_per_segment,
				      (unsigned long long)g->segs_per_stripe);
			goto fail;
		}
		st->media = media;
	}
	if ((rc = check_config_record(st, created)) != KVF_OK ||
	    (!media && (rc = open_media(st, &st->opts)) != KVF_OK) ||
	    (rc = seg_table_init(st)) != KVF_OK ||
	    (rc = seq_table_init(st)) != KVF_OK)
		goto fail;
	if ((st->reclaim_batch = catalog_batch_new()) == NULL) {
		rc = kvf_fail(KVF_ENOMEM, "kvf_open: out of memory");
		goto fail;
	}
	st->trim = trim_policy(st);
	if (persists(st, media) && (rc = open_mark(st, created)) != KVF_OK)
		goto fail;
	if (created)
		seg_finish_load(st);
	else if ((rc = recovery_load(st)) != KVF_OK ||
		 (rc = check_mark(st)) != KVF_OK)
		goto fail;
	if ((rc = pool_create(compute_threads(&st->opts), &st->pool)) != KVF_OK)
		goto fail;
	if (!st->read_only && ((rc = writer_start(st)) != KVF_OK ||
			       (rc = cleaner_start(st)) != KVF_OK))
		goto fail;
	if (created && (rc = finish_create(st, hpath, cpath)) != KVF_OK)
		goto fail;
	kvf_free(hpath);
	kvf_free(mpath);
	kvf_free(cpath);
	*out = st;
	return KVF_OK;

fail:
	kvf_free(hpath);
	kvf_free(mpath);
	kvf_free(cpath);
	store_release(st, created, made_dir, fresh);
	return rc;
}

kvf_status kvf_close(kvf_store *st)
{
	kvf_status rc = KVF_OK;

	if (st == NULL)
		return KVF_OK;
	cleaner_stop(st);
	/* a handle that went fatal may have lost its last writes: say so */
	if ((rc = store_check(st, "kvf_close")) == KVF_OK && !st->read_only)
		rc = kvf_sync(st);
	opt_detach_all(st);
	store_release(st, 0, 0, 0);
	return rc;
}

/* ---- sync --------------------------------------------------------------- */

struct sync_ctx {
	struct catalog_batch *b;
	kvf_status rc;
};

static void sync_seq(kvf_store *st, struct seq *seq, void *arg)
{
	struct sync_ctx *c = arg;

	if (c->rc != KVF_OK)
		return;
	pthread_mutex_lock(&seq->lock);
	if (!seq->dead) {
		c->rc = seq_seal_partials(st, seq);
		if (c->rc == KVF_OK)
			c->rc = openseg_flush_all(st, seq);
		if (c->rc == KVF_OK)
			c->rc = seq_vbar_record(st, seq, c->b);
		if (c->rc == KVF_OK && seq->changes != seq->synced_changes) {
			c->rc = seq_record(st, seq, c->b);
			/* counts as synced only once the batch commits */
			seq->capture = seq->changes;
			seq->capture_gen = st->sync_gen;
		}
	}
	pthread_mutex_unlock(&seq->lock);
}

/* sync_done - the sync's batch committed: what it recorded is synced */
static void sync_done(kvf_store *st, struct seq *seq, void *arg)
{
	(void)arg;
	pthread_mutex_lock(&seq->lock);
	if (seq->capture_gen == st->sync_gen)
		seq->synced_changes = seq->capture;
	if (seq->vbar_capture_gen == st->sync_gen)
		seq->vbar_synced = seq->vbar_capture;
	pthread_mutex_unlock(&seq->lock);
}

kvf_status store_durable_point(kvf_store *st, struct catalog_batch *b,
				int is_sync)
{
	struct catalog_batch *reclaim;
	unsigned char tag = META_TAG_SYNC;
	struct meta_sync ms;
	uint64_t e0;
	kvf_status rc;

	/* deaths recorded from here on wait for the next durable point */
	pthread_mutex_lock(&st->seg_lock);
	e0 = st->epoch++;
	pthread_mutex_unlock(&st->seg_lock);
	/* not next_seqno - 1: a segment sealed by another sequence while
	 * this point ran may have its seqno and be written only after the
	 * media sync; recovery would take it for one on media */
	ms.seqno = writer_written_bound(st);
	if ((rc = kvf_media_sync(st->media)) != KVF_OK)
		return store_set_fatal(st, rc, "media sync");
	ms.n_syncs = st->n_syncs + (is_sync ? 1 : 0);
	ms.n_points = st->n_points + 1;
	ms.user_bytes = atomic_load(&st->c.user_bytes);
	ms.data_bytes = atomic_load(&st->c.data_bytes);
	ms.padding_bytes = atomic_load(&st->c.padding_bytes);
	ms.kt_bytes = atomic_load(&st->c.kt_bytes);
	ms.cleaner_bytes = atomic_load(&st->c.cleaner_bytes);
	ms.summary_bytes = atomic_load(&st->c.summary_bytes);
	ms.opt_bytes = atomic_load(&st->c.opt_bytes);
	catalog_batch_put(b, &tag, 1, &ms, sizeof(ms));
	if ((rc = catalog_commit(st->cat, b, 1)) != KVF_OK)
		return store_set_fatal(st, rc, "catalog commit");
	st->synced_seqno = ms.seqno;
	st->n_syncs = ms.n_syncs;
	st->n_points = ms.n_points;
	if (st->mark_fd >= 0) {
		struct syncmark m = { ms.n_points, ms.seqno, ms.n_syncs };

		if ((rc = syncmark_write(st->mark_fd, st->mark_path,
					 st->hdr.store_id, &m)) != KVF_OK)
			return store_set_fatal(st, rc, "durable-point mark");
	}
	reclaim = st->reclaim_batch;
	catalog_batch_clear(reclaim);
	/* the point itself is durable: a trim that fails only leaves its
	 * segment dying, to be tried again at the next one */
	(void)seg_reclaim(st, e0, reclaim);
	rc = KVF_OK;
	if (st->wear_dirty)
		seg_wear_record(st, reclaim);
	if (catalog_batch_count(reclaim) > 0 &&
	    catalog_commit(st->cat, reclaim, 0) != KVF_OK)
		rc = store_set_fatal(st, KVF_EIO, "reclaim commit");
	return rc;
}

kvf_status kvf_sync(kvf_store *st)
{
	struct sync_ctx c = { 0 };
	kvf_status rc;

	if (st == NULL)
		return kvf_fail(KVF_EINVAL, "kvf_sync: store is NULL");
	if ((rc = store_check(st, "kvf_sync")) != KVF_OK)
		return rc;
	if (st->read_only)
		return KVF_OK;
	c.b = catalog_batch_new();
	if (c.b == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_sync: out of memory");
	for (int attempt = 0;; attempt++) {
		pthread_mutex_lock(&st->sync_lock);
		pthread_rwlock_rdlock(&st->world);
		st->sync_gen++;
		if ((rc = seq_foreach(st, sync_seq, &c)) == KVF_OK)
			rc = c.rc;
		if (rc != KVF_ENOSPC || attempt == 1)
			break;
		/* no room for the partial pages: clean, then go again */
		pthread_rwlock_unlock(&st->world);
		pthread_mutex_unlock(&st->sync_lock);
		if ((rc = cleaner_run(st, 1)) != KVF_OK) {
			/* ENOSPC stays ENOSPC; a fatal failure stays fatal */
			kvf_fail_wrap(rc, "kvf_sync");
			catalog_batch_free(c.b);
			return rc;
		}
		/* records put by the first attempt may be of sequences freed
		 * meanwhile: the second captures everything afresh */
		catalog_batch_free(c.b);
		if ((c.b = catalog_batch_new()) == NULL)
			return kvf_fail(KVF_ENOMEM, "kvf_sync: out of memory");
		c.rc = KVF_OK;
	}
	if (rc == KVF_OK)
		rc = store_durable_point(st, c.b, 1);
	if (rc == KVF_OK) /* if this fails, the next sync writes them again */
		(void)seq_foreach(st, sync_done, NULL);
	if (rc != KVF_OK)
		kvf_fail_wrap(rc, "kvf_sync");
	pthread_rwlock_unlock(&st->world);
	pthread_mutex_unlock(&st->sync_lock);
	catalog_batch_free(c.b);
	return rc;
}

/* ---- stats -------------------------------------------------------------- */

static void index_bytes_of(kvf_store *st, struct seq *seq, void *arg)
{
	uint64_t *sum = arg;
	uint32_t n = seq_n_streams(st);

	pthread_mutex_lock(&seq->lock);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t sid;
		struct stream *s = seq_stream_at(st, seq, i, &sid);

		if (s)
			*sum += (uint64_t)s->n_alloc * PAGE_REF_BYTES +
				sizeof(*s);
	}
	pthread_mutex_unlock(&seq->lock);
}

kvf_status kvf_stats_get(kvf_store *st, kvf_stats *out)
{
	struct kvf_media_stats ms;
	kvf_stats s;
	kvf_status rc;

	if (st == NULL)
		return kvf_fail(KVF_EINVAL, "kvf_stats_get: store is NULL");
	if ((rc = kvf_struct_check("kvf_stats_get", "out", out, sizeof(s))) != KVF_OK)
		return rc;
	memset(&s, 0, sizeof(s));
	s.user_bytes = atomic_load(&st->c.user_bytes);
	s.data_bytes = atomic_load(&st->c.data_bytes);
	s.padding_bytes = atomic_load(&st->c.padding_bytes);
	s.cleaner_bytes = atomic_load(&st->c.cleaner_bytes);
	s.summary_bytes = atomic_load(&st->c.summary_bytes);
	s.kt_bytes = atomic_load(&st->c.kt_bytes);
	s.opt_bytes = atomic_load(&st->c.opt_bytes);
	s.host_bytes_written = s.data_bytes + s.padding_bytes + s.opt_bytes +
			       s.cleaner_bytes + s.kt_bytes + s.summary_bytes;
	s.metadata_bytes = catalog_bytes_written(st->cat);
	/* the KV cache's amplification: optimizer state has no user bytes */
	s.host_wa = s.user_bytes ? (double)(s.host_bytes_written - s.opt_bytes) /
					   (double)s.user_bytes
				 : 0;
	kvf_media_stats(st->media, &ms);
	s.device_wa = ms.host_pages_written
		? (double)ms.nand_pages_programmed / (double)ms.host_pages_written
		: 1.0;
	s.total_wa = s.host_wa * s.device_wa;
	s.bytes_read = atomic_load(&st->c.bytes_read);
	s.pages_read = atomic_load(&st->c.pages_read);
	s.segments_written = atomic_load(&st->c.segments_written);
	s.segments_cleaned = atomic_load(&st->c.segments_cleaned);
	s.segments_reclaimed = atomic_load(&st->c.segments_reclaimed);
	s.sparf_pages_read = atomic_load(&st->c.sparf_pages_read);
	s.sparf_pages_skipped = atomic_load(&st->c.sparf_pages_skipped);
	s.n_syncs = st->n_syncs;
	(void)seq_foreach(st, index_bytes_of, &s.index_bytes); /* best effort */
	pthread_mutex_lock(&st->seg_lock);
	s.segments_total = st->n_segments;
	for (uint32_t i = 0; i < st->n_segments; i++) {
		switch (st->segs[i].state) {
		case SEG_FREE: s.segments_free++; break;
		case SEG_OPEN: s.segments_open++; break;
		case SEG_SEALED: s.segments_sealed++; break;
		case SEG_DYING: s.segments_dying++; break;
		case SEG_CORRUPT: s.segments_corrupt++; break;
		}
		s.live_pages += st->segs[i].live;
	}
	/* the segment table, every live bitmap, the reclaim scratch */
	s.index_bytes += (uint64_t)st->n_segments *
			 (sizeof(struct seg_info) + (st->data_per_seg + 63) / 64 * 8 +
			  2 * sizeof(uint32_t)) +
			 (uint64_t)st->shared_cap * 2 * sizeof(uint32_t);
	pthread_mutex_unlock(&st->seg_lock);
	s.n_sequences = seq_count(st);
	s.struct_size = out->struct_size;
	memcpy(out, &s, out->struct_size < sizeof(s) ? out->struct_size : sizeof(s));
	return KVF_OK;
}
