/*
 * store.c - the store's lifecycle: kvf_open and kvf_close.
 *
 * Open checks the directory (header file, lock, catalog), opens the media
 * and rebuilds the in-memory state (engine/lifecycle/recovery.c).  A store being
 * created that fails part way removes everything it made.  The options
 * and the header are checked in store_header.c, the creation marker kept
 * in store_create.c (both through engine/base/store_int.h); kvf_sync is in
 * store_sync.c, the durable point in durable.c, kvf_stats_get in
 * store_stats.c.
 */
#include "engine/lifecycle/store.h"

#include <errno.h>
#include <fcntl.h>
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
#include "engine/base/jobs.h"
#include "engine/reads/prefetch.h"
#include "engine/base/catalog.h"
#include "engine/cleaning/cleaner.h"
#include "engine/durability/durable.h"
#include "engine/cleaning/evict.h"
#include "engine/base/fatal.h"
#include "engine/optim/optim_store.h"
#include "engine/base/pool.h"
#include "engine/sequences/prefix.h"
#include "engine/reads/readpath.h"
#include "engine/planning/recompute.h"
#include "engine/lifecycle/recovery.h"
#include "engine/base/group.h"
#include "engine/base/segfmt.h"
#include "engine/segments/segtable.h"
#include "engine/sequences/seq.h"
#include "engine/base/store_header.h"
#include "engine/base/store_int.h"
#include "engine/base/syncmark.h"
#include "engine/segments/openseg.h"
#include "engine/base/tier.h"
#include "engine/segments/writer.h"
#include "ftl/nand.h"

/* ---- open / close ------------------------------------------------------ */

/* derive - the shape numbers every module uses, from the header */
static void derive(kvf_store *st)
{
	const struct store_header *h = &st->hdr;
	struct group_geom g = store_group_of(h);

	st->elt_bytes = store_dtype_bytes((kvf_dtype)h->dtype);
	st->row_bytes = h->head_dim * st->elt_bytes;
	st->group_tokens = g.tokens;
	st->group_pages = g.pages;
	st->group_bytes = g.bytes;
	st->codec = (kvf_codec)h->codec;
	st->group_stride = g.pages;
	st->plain_off = 0;
	if (st->codec != KVF_CODEC_NONE) {
		/* plain rows of a group after its encoded pages (group.h) */
		st->plain_off = g.pages;
		st->group_stride = g.pages + group_fill_pages(st, g.tokens);
		kvc_codec_layout(st->codec, KVF_KIND_K, g.tokens, h->head_dim,
				 store_codec_layout_of(h), &st->codec_lay[0]);
		kvc_codec_layout(st->codec, KVF_KIND_V, g.tokens, h->head_dim,
				 store_codec_layout_of(h), &st->codec_lay[1]);
		st->ck = kvc_codec_kernels();
	}
	st->pages_per_seg = (uint32_t)(h->segment_size / h->page_size);
	st->data_per_seg = max_data_pages(st->pages_per_seg, h->page_size);
	st->page_bits = h->page_bits;
	st->n_segments = (uint32_t)(h->segs_per_stripe * h->n_stripes);
	st->kt_dims = h->kt_dims;
	st->kt_groups = h->kt_dims ? h->head_dim / h->kt_dims : 0;
	st->kt_tokens = h->kt_dims ? h->page_size / (h->kt_dims * st->elt_bytes) : 0;
}

/* open_media - the stripes: the caller's devices, or files in the dir;
 * an existing store's must be there (one missing is its data gone, not a
 * file to make anew) */
static kvf_status open_media(kvf_store *st, const kvf_options *o, int existing)
{
	struct kvf_media_config cfg = {
		.kind = (kvf_media_kind)st->hdr.media,
		.geo = { .n_stripes = st->hdr.n_stripes,
			 .page_size = st->hdr.page_size,
			 .pages_per_segment = st->pages_per_seg,
			 .segs_per_stripe = st->hdr.segs_per_stripe },
		.queue_depth = o->queue_depth,
		.read_only = st->read_only,
		.existing = existing != 0,
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
		if ((image = store_path_join(st->dir, FLASH_IMAGE_FILE)) == NULL)
			return kvf_fail(KVF_ENOMEM, "kvf_open: out of memory");
		if (existing) {
			struct stat sb;
			int r = stat(image, &sb), e = errno;

			rc = r != 0 && e != ENOENT
				? kvf_fail_errno(KVF_EIO, e, "kvf_open: stat %s", image)
			   : r != 0 || sb.st_size == 0
				? kvf_fail(KVF_ECORRUPT,
					   "kvf_open: the flash image %s is %s: the device's data is gone",
					   image, r != 0 ? "missing" : "empty")
				: KVF_OK;
			if (rc != KVF_OK) {
				kvf_free(image);
				return rc;
			}
		}
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
			if ((paths[i] = store_path_join(st->dir, leaf)) == NULL) {
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
	prefix_free(st);
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
		store_remove_tree(p);
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
	durable_free(st);
	seg_table_end(st);
	writer_free(st);
	read_spares_free(st);
	prefetch_free(st);
	optim_registry_free(st);
	recompute_free(st);
	tier_free(st);
	evict_free(st);
	fatal_destroy(&st->fatal);
	pthread_rwlock_destroy(&st->world);
	kvf_free(st->dir);
	kvf_free(st);
}

/* trim_policy - whether reclaiming a segment trims it: by default
 * everywhere, stripe files included, where a punched hole gives a dead
 * segment's space back to the file system (a store allocates about what
 * it holds; reusing the segment allocates it again, one fallocate; a few
 * stay untrimmed for reuse unless trim = 1, segtable.c's keep_cap).
 * trim = 2 keeps the blocks of stripe files (docs/store.md, "Footprint"). */
static int trim_policy(kvf_store *st)
{
	if (st->opts.trim == 2)
		return 0;
	return 1;
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
	char *p = store_path_join(st->dir, "LOCK");
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
	if ((st->dur.mark_path = store_path_join(st->dir, SYNCMARK_FILE)) == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_open: out of memory");
	return syncmark_open(st->dir, created, st->read_only, st->hdr.store_id,
			     &st->dur.mark_fd);
}

/* check_mark - a catalog with fewer durable points than the mark lost
 * records that were synced: refuse it rather than roll the store back */
static kvf_status check_mark(kvf_store *st)
{
	struct syncmark m;
	kvf_status rc;

	if (st->dur.mark_fd < 0)
		return KVF_OK;
	if ((rc = syncmark_read(st->dur.mark_fd, st->dur.mark_path, st->hdr.store_id,
				&m)) != KVF_OK)
		return rc;
	if (st->dur.n_points >= m.n_points)
		return KVF_OK;
	return kvf_fail(KVF_ECORRUPT,
			"kvf_open: the catalog %s/meta lost records: it holds %llu durable points, but %s says %llu completed (the last at seqno %llu, after %llu syncs); its write-ahead log (meta/*.log) is damaged, and what the lost points made durable (sequences, their lengths, forks, frees, segments, optimizer steps) is missing. Nothing was changed: see kvtool verify and kvtool repair",
			st->dir, (unsigned long long)st->dur.n_points,
			st->dur.mark_path, (unsigned long long)m.n_points,
			(unsigned long long)m.seqno,
			(unsigned long long)m.n_syncs);
}

/* precheck_catalog - before a writable open of an existing store's
 * catalog: the checks that refuse it (its configuration record, its
 * durable points against the mark) on a read-only open, closed again */
static kvf_status precheck_catalog(kvf_store *st, const char *mpath)
{
	kvf_status rc;

	if ((rc = catalog_open(mpath, 0, 1, CATALOG_FSYNC, &st->cat)) != KVF_OK) {
		kvf_fail_wrap(rc, "kvf_open");
		return rc;
	}
	if ((rc = check_config_record(st, 0)) == KVF_OK &&
	    (rc = recovery_sync_record(st)) == KVF_OK)
		rc = check_mark(st);
	catalog_close(st->cat);
	st->cat = NULL;
	return rc;
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
	/* every module's locks first: release undoes them all */
	fatal_init(&st->fatal);
	seg_table_begin(st);
	writer_init(st);
	openseg_pack_init(st);
	read_spares_init(st);
	prefetch_init(st);
	optim_registry_init(st);
	recompute_init(st);
	tier_init(st);
	prefix_init(st);
	if ((rc = durable_init(st)) != KVF_OK ||
	    (rc = evict_init(st)) != KVF_OK ||
	    (rc = store_take_options(opts, &st->opts)) != KVF_OK)
		goto fail;
	st->read_only = st->opts.read_only != 0;
	st->prof.on = st->opts.profile != 0;
	st->dir = kvf_strdup(dir);
	hpath = store_path_join(dir, STORE_HEADER_FILE);
	mpath = store_path_join(dir, "meta");
	cpath = store_path_join(dir, STORE_CREATING_FILE);
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
	creating = store_is_creating(dir, cpath);
	rc = store_read_header(hpath, &stored);
	st->media_borrowed = media != NULL;
	if (rc == KVF_OK && creating && !st->read_only) {
		/* killed between the header and the marker's removal: the
		 * store is whole */
		unlink(cpath);
		store_sync_dir(dir);
		creating = 0;
	}
	if (rc == KVF_OK && stored.media == KVF_MEDIA_MEMORY && !st->read_only &&
	    media == NULL) {
		/* a memory store's data died with its last handle (a flash
		 * store's lives on in its device image):
		 * its files go, under the marker, and a new one is made */
		if ((rc = store_begin_create(dir, cpath)) != KVF_OK)
			goto fail;
		creating = 1;
		rc = KVF_ENOENT;
	}
	if (rc == KVF_OK) {
		if (opts && (rc = store_check_against(&st->opts, &stored, hpath)) != KVF_OK)
			goto fail;
		st->hdr = stored;
	} else if (rc == KVF_ENOENT) {
		fresh = 1; /* no store here: a failure removes our LOCK */
		if (!creating && !store_dir_is_empty(dir) && access(mpath, F_OK) == 0) {
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
		if (!creating && !store_dir_is_empty(dir)) {
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
		if ((rc = store_build_header(&st->opts, &st->hdr)) != KVF_OK)
			goto fail;
		if (creating)
			store_clear_leftovers(dir);
		st->hdr.store_id = random_id();
		/* the catalog's config record is this header, checksum too */
		st->hdr.checksum = store_header_checksum(&st->hdr);
		created = 1;
		if (!creating && (rc = store_begin_create(dir, cpath)) != KVF_OK)
			goto fail;
	} else {
		goto fail;
	}
	derive(st);
	/* a refused open changes nothing: RocksDB's writable open replays
	 * the catalog's log into a new table and drops the old log, with
	 * whatever a damaged log held past the damage (kvf_repair's to give
	 * back), so what can refuse the open is checked first on the media,
	 * the mark and a read-only open of the catalog */
	if (!created && !st->read_only && persists(st, media) &&
	    ((rc = open_media(st, &st->opts, 1)) != KVF_OK ||
	     (rc = open_mark(st, 0)) != KVF_OK ||
	     (rc = precheck_catalog(st, mpath)) != KVF_OK))
		goto fail;
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
	    (!media && !st->media &&
	     (rc = open_media(st, &st->opts, !created)) != KVF_OK) ||
	    (rc = seg_table_init(st)) != KVF_OK ||
	    (rc = seq_table_init(st)) != KVF_OK ||
	    (rc = tier_start(st)) != KVF_OK)
		goto fail;
	st->trim = trim_policy(st);
	if (persists(st, media) && st->dur.mark_path == NULL &&
	    (rc = open_mark(st, created)) != KVF_OK)
		goto fail;
	if (created)
		seg_finish_load(st);
	/* the mark is checked before recovery trims or deletes anything:
	 * what a catalog that lost points does not know is not free */
	else if ((rc = recovery_sync_record(st)) != KVF_OK ||
		 (rc = check_mark(st)) != KVF_OK ||
		 (rc = recovery_load(st)) != KVF_OK ||
		 (rc = prefix_load(st)) != KVF_OK)
		goto fail;
	if ((rc = pool_create(compute_threads(&st->opts), &st->pool)) != KVF_OK)
		goto fail;
	if (!st->read_only && ((rc = writer_start(st)) != KVF_OK ||
			       (rc = cleaner_start(st)) != KVF_OK))
		goto fail;
	if (created && (rc = store_finish_create(st, hpath, cpath)) != KVF_OK)
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

/* admit_seq - kvf_close admits every sequence (writeback.h) */
static void admit_seq(kvf_store *st, struct seq *seq, void *arg)
{
	(void)st;
	(void)arg;
	pthread_mutex_lock(&seq->lock);
	seq->admitted = 1;
	pthread_mutex_unlock(&seq->lock);
}

kvf_status kvf_close(kvf_store *st)
{
	kvf_status rc = KVF_OK;

	if (st == NULL)
		return KVF_OK;
	prefetch_close(st); /* its reads would go into a tier about to go */
	jobs_drain(st);     /* background jobs on st end first */
	cleaner_stop(st);
	/* a handle that went fatal may have lost its last writes: say so */
	if ((rc = store_check(st, "kvf_close")) == KVF_OK && !st->read_only) {
		/* what the handle held off the media goes now */
		(void)seq_foreach(st, admit_seq, NULL);
		rc = kvf_sync(st);
	}
	optim_detach_all(st);
	store_release(st, 0, 0, 0);
	return rc;
}
