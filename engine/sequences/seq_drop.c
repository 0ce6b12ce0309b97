/*
 * seq_drop.c - giving a sequence up: the deletion of its records (and of
 * its token ids in the prefix index), then of its page references.  kvf_seq_free and eviction (engine/cleaning/evict.c) both
 * free through seq_free_id; the optimizer plane drops its state's pages
 * with seq_drop_all.
 *
 * Locking: dur.lock, world shared, then the sequence's lock (dur.lock
 * first, so a sync does not write back a freed sequence).
 */
#include "api/alloc.h"
#include "api/status.h"
#include "engine/base/catalog.h"
#include "engine/base/fatal.h"
#include "engine/base/key.h"
#include "engine/base/meta.h"
#include "engine/segments/openseg.h"
#include "engine/sequences/prefix.h"
#include "engine/segments/segtable.h"
#include "engine/sequences/seq.h"
#include "engine/sequences/seq_int.h"
#include "engine/sequences/seq_state.h"
#include "engine/sequences/seq_stream.h"
#include "engine/base/store_state.h"
#include "engine/segments/writer.h"

/* drop_refs - give up every page reference of seq's index (at free) */
static void drop_refs(kvf_store *st, struct seq *seq)
{
	uint32_t n = seq_n_streams(st);

	for (uint32_t i = 0; i < n; i++) {
		uint32_t sid;
		struct stream *s = seq_stream_at(st, seq, i, &sid);

		if (s == NULL)
			continue;
		for (uint32_t g = 0; g < s->n_groups; g++) {
			uint32_t a = stream_page(s, g).addr;

			if (a != ADDR_NONE && openseg_page(st, seq, a) == NULL)
				seg_ref_dec(st, a);
		}
	}
	openseg_release(st, seq);
}

void seq_drop_all(kvf_store *st, struct seq *seq)
{
	(void)seq_jobs_reap(st, seq, 1); /* every page committed first */
	drop_refs(st, seq);
}

/* evictable - seq is not pinned (caller holds seq->lock, so no call is
 * running on it: a call holds the lock throughout; internal passes that
 * hold a reference without it, such as a sync's, do not count) */
static int evictable(struct seq *seq)
{
	return seq->pins == 0;
}

kvf_status seq_free_id(kvf_store *st, const char *call, uint64_t id,
		       unsigned how)
{
	int evicting = (how & SEQ_FREE_EVICT) != 0;
	struct catalog_batch *b;
	unsigned char key[9];
	struct seq *seq;
	kvf_status rc;

	if ((rc = store_writable(st, call)) != KVF_OK)
		return rc;
	pthread_mutex_lock(&st->dur.lock);
	pthread_rwlock_rdlock(&st->world);
	/* no use counted: a free is not a use, and eviction must not make
	 * its victim look used */
	if ((rc = (how ? seq_find_any_locked : seq_find_locked)(st, call, id,
								&seq)) != KVF_OK)
		goto out;
	if ((how & SEQ_FREE_CACHED) && !seq->cached) {
		seq_unlock_put(st, seq);
		rc = kvf_fail(KVF_ENOENT,
			      "%s: sequence %llu is not a cached prefix: it is the caller's (kvf_seq_free frees it)",
			      call, (unsigned long long)id);
		goto out;
	}
	if (evicting && !evictable(seq)) {
		seq_unlock_put(st, seq);
		rc = kvf_fail(KVF_EBUSY, "%s: sequence %llu is pinned",
			      call, (unsigned long long)id);
		goto out;
	}
	/* every page must be committed before its reference is dropped */
	if ((rc = seq_jobs_reap(st, seq, 1)) != KVF_OK) {
		seq_unlock_put(st, seq);
		goto out;
	}
	b = catalog_batch_new();
	if (b == NULL) {
		seq_unlock_put(st, seq);
		rc = kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
		goto out;
	}
	meta_key_u64(key, META_TAG_SEQ, id);
	catalog_batch_delete(b, key, sizeof(key));
	if (seq->vbar) {
		meta_key_u64(key, META_TAG_VBAR, id);
		catalog_batch_delete(b, key, sizeof(key));
	}
	meta_key_u64(key, META_TAG_USE, id); /* if a sync wrote one */
	catalog_batch_delete(b, key, sizeof(key));
	if (seq->drop) { /* kvf_h2o_evict's marks */
		meta_key_u64(key, META_TAG_DROP, id);
		catalog_batch_delete(b, key, sizeof(key));
	}
	if (seq->has_ref_record) {
		meta_key_u64(key, META_TAG_REF, id);
		catalog_batch_delete(b, key, sizeof(key));
	}
	prefix_record_delete(b, id); /* token ids, if it registered any */
	rc = catalog_commit(st->cat, b, 0);
	catalog_batch_free(b);
	if (rc != KVF_OK) {
		rc = store_set_fatal(st, rc, call);
		seq_unlock_put(st, seq);
		goto out;
	}
	seq->dead = 1;
	prefix_forget(st, seq);
	seq_table_remove(st, seq);
	drop_refs(st, seq);
	pthread_mutex_unlock(&seq->lock);
	if (seq->cached)
		atomic_fetch_add(&st->prefix.cache_dropped, 1);
	else if (evicting)
		seq_note_evicted(st, id);
	seq_put(st, seq); /* the table's reference */
	seq_put(st, seq); /* ours */
out:
	pthread_rwlock_unlock(&st->world);
	pthread_mutex_unlock(&st->dur.lock);
	return rc;
}
