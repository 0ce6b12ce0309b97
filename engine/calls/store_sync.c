/*
 * store_sync.c - kvf_sync.
 *
 * Sync: every sequence's partial groups and open segments are written
 * (under that sequence's lock, one at a time, so other sequences keep
 * appending; small open segments share the stripes' packs,
 * engine/sequences/seq_pack.h), the packs' summaries and records follow, the media is synced, then one catalog batch with the
 * sequences' lengths commits with its log synced.  Segments that died
 * before the sync began are then reused (engine/segments/segtable.h explains why
 * not sooner).  The commit itself is a durable point (engine/durability/durable.c).
 *
 * Locking: dur.lock, then world shared, then each sequence's lock in
 * turn; segtab.lock for the epoch.
 */
#include <string.h>

#include "api/status.h"
#include "engine/writes/append.h"
#include "engine/base/catalog.h"
#include "engine/cleaning/cleaner.h"
#include "engine/durability/durable.h"
#include "engine/base/fatal.h"
#include "engine/segments/openseg.h"
#include "engine/segments/segtable.h"
#include "engine/sequences/seq.h"
#include "engine/sequences/seq_pack.h"
#include "engine/sequences/seq_stream.h"
#include "engine/base/store_state.h"

struct sync_ctx {
	struct catalog_batch *b;
	kvf_status rc;
	int pack;   /* small open segments go into packs */
};

/* SYNC_PACK_SEQS - from how many sequences a sync packs (or when a
 * segment each would take a quarter of the free ones).  Packing writes
 * each sequence's tail under its lock, one after the other, where a
 * segment of its own goes to the writer threads (8 in flight).  Below it
 * a sync takes a segment per sequence as ever, which costs little room:
 * the unwritten part of each goes back to the file system
 * (kvf_media_release_tail), and it dies at a later sync. */
#define SYNC_PACK_SEQS 32u

static int sync_packs(kvf_store *st)
{
	uint32_t n = seq_count(st);

	return n > SYNC_PACK_SEQS ||
	       (uint64_t)n * st->hdr.n_stripes * 4 > seg_free_count(st);
}

static void sync_seq(kvf_store *st, struct seq *seq, void *arg)
{
	struct sync_ctx *c = arg;

	if (c->rc != KVF_OK)
		return;
	pthread_mutex_lock(&seq->lock);
	/* a sequence not admitted stays off the media (writeback.h) */
	if (!seq->dead && seq->admitted) {
		c->rc = seq_seal_partials(st, seq);
		if (c->rc == KVF_OK)
			c->rc = c->pack && seq->ns == SEQ_NS_USER
					? seq_flush_packed(st, seq)
					: openseg_flush_all(st, seq);
		if (c->rc == KVF_OK)
			c->rc = seq_vbar_record(st, seq, c->b);
		if (c->rc == KVF_OK)
			c->rc = seq_use_record(st, seq, c->b);
		if (c->rc == KVF_OK && seq->changes != seq->synced_changes) {
			c->rc = seq_record(st, seq, c->b);
			/* counts as synced only once the batch commits */
			seq->capture = seq->changes;
			seq->capture_gen = st->dur.gen;
		}
	}
	pthread_mutex_unlock(&seq->lock);
}

/* sync_done - the sync's batch committed: what it recorded is synced */
static void sync_done(kvf_store *st, struct seq *seq, void *arg)
{
	(void)arg;
	pthread_mutex_lock(&seq->lock);
	if (seq->capture_gen == st->dur.gen) {
		seq->synced_changes = seq->capture;
		seq_record_done(st, seq);
	}
	if (seq->vbar_capture_gen == st->dur.gen)
		seq->vbar_synced = seq->vbar_capture;
	if (seq->use_capture_gen == st->dur.gen)
		seq->use_synced = seq->use_capture;
	pthread_mutex_unlock(&seq->lock);
}

static kvf_status sync_once(kvf_store *st)
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
		pthread_mutex_lock(&st->dur.lock);
		pthread_rwlock_rdlock(&st->world);
		st->dur.gen++;
		c.pack = sync_packs(st);
		if ((rc = seq_foreach_created(st, sync_seq, &c)) == KVF_OK)
			rc = c.rc;
		/* the packs go out whatever happened: index entries point
		 * into them */
		{
			kvf_status prc = openseg_pack_end(st);

			if (rc == KVF_OK || prc == KVF_EFATAL)
				rc = prc;
		}
		if (rc != KVF_ENOSPC)
			break;
		/* no room for the partial pages: clean (or evict), then go
		 * again; ENOSPC stays ENOSPC, a fatal failure stays fatal */
		pthread_rwlock_unlock(&st->world);
		pthread_mutex_unlock(&st->dur.lock);
		if (!cleaner_make_room(st, attempt, 1, KVF_SEQ_NONE, "kvf_sync", &rc)) {
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
	pthread_mutex_unlock(&st->dur.lock);
	catalog_batch_free(c.b);
	return rc;
}

kvf_status kvf_sync(kvf_store *st)
{
	struct prof_mark m;
	kvf_status rc;

	if (st == NULL)
		return kvf_fail(KVF_EINVAL, "kvf_sync: store is NULL");
	m = prof_begin(&st->prof);
	rc = sync_once(st);
	prof_end(&st->prof, PROF_SYNC, m);
	return rc;
}
