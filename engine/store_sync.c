/*
 * store_sync.c - kvf_sync and the durable point.
 *
 * Sync: every sequence's partial groups and open segments are written
 * (under that sequence's lock, one at a time, so other sequences keep
 * appending), the media is synced, then one catalog batch with the
 * sequences' lengths commits with its log synced.  Segments that died
 * before the sync began are then reused (engine/segment.h explains why
 * not sooner).  A durable point (store_durable_point) is the commit every
 * call that must outlive a crash ends in: kvf_sync, and the sequence and
 * optimizer calls that record in the catalog.  A file of its own: what a
 * durable point promises is read apart from open and close.
 *
 * Locking: sync_lock, then world shared, then each sequence's lock in
 * turn; seg_lock for the epoch.
 */
#include <string.h>

#include "api/status.h"
#include "engine/append.h"
#include "engine/cleaner.h"
#include "engine/segment.h"
#include "engine/seq.h"
#include "engine/store.h"
#include "engine/syncmark.h"
#include "engine/writer.h"

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
	ms.optim_bytes = atomic_load(&st->c.optim_bytes);
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
