/*
 * durable.c - the durable point: the commit every call that must outlive
 * a crash ends in (kvf_sync, and the sequence and optimizer calls that
 * record in the catalog).  The media is synced up to the last segment the
 * writer has written, then the sync record commits with its log synced,
 * then the segments that died before the point are reused.
 *
 * Locking: the caller holds dur.lock; the segment table's lock is taken
 * for the epoch.
 */
#include "engine/durability/durable.h"

#include <unistd.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/base/catalog.h"
#include "engine/base/fatal.h"
#include "engine/segments/segtable.h"
#include "engine/base/store_state.h"
#include "engine/base/syncmark.h"
#include "engine/segments/writer.h"

kvf_status durable_init(kvf_store *st)
{
	pthread_mutex_init(&st->dur.lock, NULL);
	st->dur.mark_fd = -1;
	st->dur.reclaim_batch = catalog_batch_new();
	if (st->dur.reclaim_batch == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_open: out of memory");
	return KVF_OK;
}

void durable_free(kvf_store *st)
{
	catalog_batch_free(st->dur.reclaim_batch);
	st->dur.reclaim_batch = NULL;
	if (st->dur.mark_fd >= 0)
		close(st->dur.mark_fd);
	st->dur.mark_fd = -1;
	kvf_free(st->dur.mark_path);
	st->dur.mark_path = NULL;
	pthread_mutex_destroy(&st->dur.lock);
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
	pthread_mutex_lock(&st->segtab.lock);
	e0 = st->segtab.epoch++;
	pthread_mutex_unlock(&st->segtab.lock);
	/* not next_seqno - 1: a segment sealed by another sequence while
	 * this point ran may have its seqno and be written only after the
	 * media sync; recovery would take it for one on media */
	ms.seqno = writer_written_bound(st);
	if ((rc = kvf_media_sync(st->media)) != KVF_OK)
		return store_set_fatal(st, rc, "media sync");
	ms.n_syncs = st->dur.n_syncs + (is_sync ? 1 : 0);
	ms.n_points = st->dur.n_points + 1;
	ms.user_bytes = atomic_load(&st->c.user_bytes);
	ms.data_bytes = atomic_load(&st->c.data_bytes);
	ms.padding_bytes = atomic_load(&st->c.padding_bytes);
	ms.kt_bytes = atomic_load(&st->c.kt_bytes);
	ms.cleaner_bytes = atomic_load(&st->c.cleaner_bytes);
	ms.summary_bytes = atomic_load(&st->c.summary_bytes);
	ms.optim_bytes = atomic_load(&st->c.optim_bytes);
	catalog_batch_put(b, &tag, 1, &ms, sizeof(ms));
	/* the records of the segments this point makes reusable go in the
	 * same batch, so they are gone before any of them is trimmed */
	(void)seg_reclaim_pick(st, e0, b);
	if ((rc = catalog_commit(st->cat, b, 1)) != KVF_OK)
		return store_set_fatal(st, rc, "catalog commit");
	st->dur.synced_seqno = ms.seqno;
	st->dur.n_syncs = ms.n_syncs;
	st->dur.n_points = ms.n_points;
	if (st->dur.mark_fd >= 0) {
		struct syncmark m = { ms.n_points, ms.seqno, ms.n_syncs };

		if ((rc = syncmark_write(st->dur.mark_fd, st->dur.mark_path,
					 st->hdr.store_id, &m)) != KVF_OK)
			return store_set_fatal(st, rc, "durable-point mark");
	}
	reclaim = st->dur.reclaim_batch;
	catalog_batch_clear(reclaim);
	/* the point itself is durable: a trim that fails only leaves its
	 * segment dying, to be tried again at the next one */
	(void)seg_reclaim_apply(st);
	rc = KVF_OK;
	if (st->segtab.wear_dirty)
		seg_wear_record(st, reclaim);
	if (catalog_batch_count(reclaim) > 0 &&
	    catalog_commit(st->cat, reclaim, 0) != KVF_OK)
		rc = store_set_fatal(st, KVF_EIO, "reclaim commit");
	return rc;
}

