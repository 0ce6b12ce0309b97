/*
 * seq_calls.c - the public sequence calls: kvf_seq_create,
 * kvf_seq_reset, kvf_seq_len and kvf_seq_fork (the child shares the parent's full groups
 * and copies its partial tail group); freeing itself is seq_drop.c's, as
 * eviction frees too, and kvf_seq_free is prefix_calls.c's, as a free
 * may leave a cached prefix behind.  A file of its own: these are the
 * calls a caller makes on sequences, apart from the table (seq.c) and
 * the streams (seq_stream.c) they use.
 *
 * Locking: world shared, then the sequence's lock; kvf_seq_free takes
 * dur.lock first, so a sync does not write back a freed sequence.
 */
#include "engine/sequences/dropmark.h"
#include "engine/sequences/seq_int.h"

#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/base/group.h"
#include "engine/writes/append.h"
#include "engine/base/catalog.h"
#include "engine/base/fatal.h"
#include "engine/base/key.h"
#include "engine/reads/kt_read.h"
#include "engine/base/meta.h"
#include "engine/segments/openseg.h"
#include "engine/sequences/prefix.h"
#include "engine/reads/readpath.h"
#include "engine/segments/segtable.h"
#include "engine/sequences/seq.h"
#include "engine/sequences/seq_state.h"
#include "engine/sequences/seq_stream.h"
#include "engine/base/store_state.h"
#include "engine/cleaning/cleaner.h"
#include "engine/writes/writeback.h"
#include "engine/segments/writer.h"

/* ---- public calls ------------------------------------------------------ */

/* commit_one - commit a batch holding seq's record (and ref) changes */
static kvf_status commit_batch(kvf_store *st, struct catalog_batch *b,
			       const char *call)
{
	kvf_status rc = catalog_commit(st->cat, b, 0);

	if (rc != KVF_OK)
		return store_set_fatal(st, rc, call);
	return KVF_OK;
}

static kvf_status exists_already(const char *call, uint64_t id)
{
	return kvf_fail(KVF_EEXIST, "%s: sequence %llu exists already", call,
			(unsigned long long)id);
}

kvf_status kvf_seq_create(kvf_store *st, uint64_t id)
{
	return seq_create_with(st, "kvf_seq_create", id, NULL);
}

kvf_status seq_create_with(kvf_store *st, const char *call, uint64_t id,
			   struct prefix_seq *tok)
{
	struct catalog_batch *b;
	struct seq *seq, *old;
	kvf_status rc;

	if ((rc = store_writable(st, call)) != KVF_OK)
		return rc;
	if (id == SEQ_NO_PARENT)
		return kvf_fail(KVF_EINVAL, "%s: sequence id %llu is reserved",
				call, (unsigned long long)id);
	if ((rc = seq_id_take(st, call, id)) != KVF_OK)
		return rc;
	pthread_rwlock_rdlock(&st->world);
	if ((old = seq_get(st, id)) != NULL) {
		seq_put(st, old);
		rc = exists_already(call, id);
		goto out;
	}
	seq = seq_alloc(st, id);
	b = catalog_batch_new();
	if (seq == NULL || b == NULL) {
		if (seq)
			seq_destroy(st, seq);
		catalog_batch_free(b);
		rc = kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
		goto out;
	}
	seq->create_seqno = atomic_fetch_add(&st->writer.next_seqno, 1);
	/* writeback.h; a sequence in the prefix index is there to be
	 * shared from the media: admitted at once */
	seq->admitted = tok != NULL || st->opts.admit_tokens == 0;
	if (tok && prefix_record(b, id, seq->create_seqno, tok->tokens,
				tok->n_tokens, NULL, 0) != KVF_OK) {
		catalog_batch_free(b);
		seq_destroy(st, seq);
		rc = kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
		goto out;
	}
	/* locked before it is visible: it takes tok before any call sees it */
	pthread_mutex_lock(&seq->lock);
	if ((rc = seq_record(st, seq, b)) != KVF_OK ||
	    (rc = seq_insert(st, seq)) != KVF_OK) {
		pthread_mutex_unlock(&seq->lock);
		catalog_batch_free(b);
		seq_destroy(st, seq);
		if (rc == KVF_EEXIST) /* created by another thread meanwhile */
			rc = exists_already(call, id);
		goto out;
	}
	rc = commit_batch(st, b, call);
	catalog_batch_free(b);
	if (rc == KVF_OK)
		seq_record_done(st, seq);
	if (rc == KVF_OK && tok)
		prefix_attach(st, seq, tok);
	pthread_mutex_unlock(&seq->lock);
out:
	pthread_rwlock_unlock(&st->world);
	return rc;
}

kvf_status kvf_seq_reset(kvf_store *st, uint64_t id)
{
	const char *call = "kvf_seq_reset";
	kvf_status rc;

	if ((rc = store_writable(st, call)) != KVF_OK)
		return rc;
	if (id == SEQ_NO_PARENT)
		return kvf_fail(KVF_EINVAL, "%s: sequence id %llu is reserved",
				call, (unsigned long long)id);
	/* two commits: a crash between them leaves the id free, which the
	 * next reset takes as it finds it */
	rc = seq_free_id(st, call, id, 0);
	if (rc != KVF_OK && rc != KVF_ENOENT)
		return rc;
	return seq_create_with(st, call, id, NULL);
}

kvf_status kvf_seq_len(kvf_store *st, uint64_t id, uint32_t layer,
		       uint64_t *n_tokens)
{
	const char *call = "kvf_seq_len";
	struct seq *seq;
	kvf_status rc;

	if (st == NULL || n_tokens == NULL)
		return kvf_fail(KVF_EINVAL, "%s: %s is NULL", call,
				st ? "n_tokens" : "store");
	if ((rc = store_check(st, call)) != KVF_OK)
		return rc;
	if (layer >= st->hdr.n_layers)
		return kvf_fail(KVF_ERANGE, "%s: layer %u out of range (store has %u layers)",
				call, layer, st->hdr.n_layers);
	if ((rc = seq_get_locked(st, call, id, &seq)) != KVF_OK)
		return rc;
	*n_tokens = seq->len[layer];
	seq_unlock_put(st, seq);
	return KVF_OK;
}

/* fork_stream - share parent stream ps's full groups below n_tokens with
 * cs, copy the partial tail group; add the shared entries to refs */
static kvf_status fork_stream(kvf_store *st, struct seq *parent,
			      struct stream *ps, struct stream *cs,
			      uint32_t sid, uint64_t n_tokens,
			      uint64_t parent_tokens,
			      struct meta_ref_entry *refs, uint64_t *n_refs)
{
	uint32_t G = st->group_tokens;
	uint64_t full = n_tokens / G, tail = n_tokens % G;
	uint64_t n = group_entry(st, full); /* the whole groups' entries */
	kvf_status rc;

	if ((rc = stream_reserve(st, cs, n + st->group_stride)) != KVF_OK)
		return rc;
	for (uint64_t e = 0; e < n && e < ps->n_groups; e++) {
		struct page_ref r = stream_page(ps, e);

		/* a codec store's unused entries (group.h) are not shared */
		if (r.addr == ADDR_NONE || !group_entry_used(st, ps, n_tokens, e))
			continue;
		stream_set_page(cs, e, r);
		refs[(*n_refs)++] = (struct meta_ref_entry){
			.stream = sid, .group = (uint32_t)e, .addr = r.addr };
	}
	cs->n_groups = (uint32_t)n;
	if (tail == 0)
		return KVF_OK;
	if ((rc = stream_gbuf_alloc(st, cs, group_buf_bytes(st))) != KVF_OK)
		return rc;
	return stream_group_copy(st, parent, ps, parent_tokens, full, cs->gbuf);
}

/* fork_kt_stream - share the K^T entries of the blocks below n_tokens */
static kvf_status fork_kt_stream(kvf_store *st, struct stream *ps,
				 struct stream *cs, uint32_t sid,
				 uint64_t n_tokens, struct meta_ref_entry *refs,
				 uint64_t *n_refs)
{
	uint64_t n = n_tokens / st->kt_tokens * st->kt_groups;
	kvf_status rc;

	if ((rc = stream_reserve(st, cs, n + 1)) != KVF_OK)
		return rc;
	for (uint64_t i = 0; i < n; i++) {
		struct page_ref r = stream_page(ps, i);

		stream_set_page(cs, i, r);
		refs[(*n_refs)++] = (struct meta_ref_entry){
			.stream = sid, .group = (uint32_t)i, .addr = r.addr };
	}
	cs->n_groups = (uint32_t)n;
	return KVF_OK;
}

kvf_status seq_id_take(kvf_store *st, const char *call, uint64_t id)
{
	struct seq *old = seq_get(st, id);
	int cached = old && old->cached;
	kvf_status rc;

	seq_put(st, old);
	if (!cached)
		return KVF_OK;
	/* the cache gives way; freed meanwhile is as good */
	rc = seq_free_id(st, call, id, SEQ_FREE_CACHED);
	return rc == KVF_ENOENT ? KVF_OK : rc;
}

kvf_status kvf_seq_fork(kvf_store *st, uint64_t parent_id, uint64_t child_id,
			uint64_t n_tokens)
{
	kvf_status rc;

	/* the parent's waiting pages go to the media first: with no room,
	 * clean (and evict, never the parent) and try again, as an append */
	for (int i = 0;; i++) {
		rc = seq_fork_with(st, "kvf_seq_fork", parent_id, child_id,
				   n_tokens, NULL);
		if (!cleaner_make_room(st, i, 1, parent_id, "kvf_seq_fork", &rc))
			return rc;
	}
}

kvf_status seq_fork_with(kvf_store *st, const char *call, uint64_t parent_id,
			 uint64_t child_id, uint64_t n_tokens,
			 struct prefix_seq *tok)
{
	unsigned char *ref_rec = NULL; /* struct meta_ref + entries */
	struct meta_ref_entry *refs = NULL;
	struct catalog_batch *b = NULL;
	struct seq *parent, *child = NULL, *old;
	uint64_t n_refs = 0, max_refs = 0;
	uint32_t G, n_streams;
	kvf_status rc;
	int took = 0;

	if ((rc = store_writable(st, call)) != KVF_OK)
		return rc;
	if (child_id == SEQ_NO_PARENT)
		return kvf_fail(KVF_EINVAL, "%s: sequence id %llu is reserved",
				call, (unsigned long long)child_id);
	if (child_id == parent_id)
		return kvf_fail(KVF_EINVAL, "%s: child and parent are both %llu",
				call, (unsigned long long)child_id);
again:
	pthread_rwlock_rdlock(&st->world);
	if ((old = seq_get(st, child_id)) != NULL) {
		int cached = old->cached;

		seq_put(st, old);
		if (!cached) {
			rc = exists_already(call, child_id);
			goto out_world;
		}
	}
	/* a creation with token ids (prefix reuse, or the store keeping a
	 * cached prefix) may share from a cached prefix; kvf_seq_fork may
	 * not, the caller never sees one */
	if (tok == NULL)
		rc = seq_get_locked(st, call, parent_id, &parent);
	else if ((rc = seq_find_any_locked(st, call, parent_id, &parent)) ==
		 KVF_OK)
		seq_note_use(st, parent);
	if (rc != KVF_OK)
		goto out_world;
	for (uint32_t l = 0; l < st->hdr.n_layers; l++)
		if (parent->len[l] < n_tokens) {
			rc = kvf_fail(KVF_ERANGE,
				      "%s: n_tokens %llu past the end of sequence %llu (layer %u has %llu tokens)",
				      call, (unsigned long long)n_tokens,
				      (unsigned long long)parent_id, l,
				      (unsigned long long)parent->len[l]);
			goto out_parent;
		}
	{
		uint32_t l;
		uint64_t g = dropmark_inside(st, parent, n_tokens, &l);

		if (g != UINT64_MAX) {
			rc = kvf_fail(KVF_ERANGE,
				      "%s: n_tokens %llu falls inside token group %llu of layer %u KV head %u of sequence %llu, which kvf_h2o_evict dropped; fork at its start (%llu) or its end (%llu)",
				      call, (unsigned long long)n_tokens,
				      (unsigned long long)g, l / st->hdr.n_kv_heads,
				      l % st->hdr.n_kv_heads,
				      (unsigned long long)parent_id,
				      (unsigned long long)(g * st->group_tokens),
				      (unsigned long long)((g + 1) * st->group_tokens));
			goto out_parent;
		}
	}
	/* a cached prefix under child_id gives way (seq_id_take) only now
	 * that the fork is known good: a refused fork changes nothing */
	if ((old = seq_get(st, child_id)) != NULL) {
		seq_put(st, old);
		if (!took) {
			seq_unlock_put(st, parent);
			pthread_rwlock_unlock(&st->world);
			if ((rc = seq_id_take(st, call, child_id)) != KVF_OK)
				return rc;
			took = 1;
			goto again;
		}
		rc = exists_already(call, child_id);
		goto out_parent;
	}
	G = st->group_tokens;
	n_streams = seq_n_streams(st);
	/* entries a stream shares: its whole groups, or a K^T stream's
	 * complete blocks (more when a group leaves part of its pages) */
	max_refs = (n_tokens / G + 1) * st->group_stride;
	if (st->kt_dims && n_tokens / st->kt_tokens * st->kt_groups > max_refs)
		max_refs = n_tokens / st->kt_tokens * st->kt_groups;
	max_refs *= n_streams;
	child = seq_alloc(st, child_id);
	ref_rec = kvf_malloc(sizeof(struct meta_ref) +
			     (max_refs ? max_refs : 1) * sizeof(*refs));
	if (ref_rec)
		refs = (struct meta_ref_entry *)(ref_rec + sizeof(struct meta_ref));
	b = catalog_batch_new();
	if (child == NULL || ref_rec == NULL || b == NULL ||
	    (parent->x && seq_x_alloc(st, child) != KVF_OK) ||
	    (parent->kt && seq_kt_alloc(st, child) != KVF_OK)) {
		rc = kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
		goto out_child;
	}
	/* shared pages must be on media, with committed records, before
	 * the child's record refers to them (those waiting for write-back
	 * too) */
	if ((rc = wb_flush_seq(st, parent, call)) != KVF_OK ||
	    (rc = openseg_flush_all(st, parent)) != KVF_OK)
		goto out_child;
	parent->admitted = 1; /* its pages are on media now, the child's too */
	child->family = parent->family;
	child->parent = parent_id;
	for (uint32_t i = 0; i < n_streams; i++) {
		uint32_t sid;
		struct stream *ps = seq_stream_at(st, parent, i, &sid);
		struct stream *cs = seq_stream_at(st, child, i, &sid);
		enum kv_kind kind = stream_kind(sid);
		uint64_t ptok = seq_tokens(parent, kind, stream_layer(sid));
		uint64_t n = n_tokens < ptok ? n_tokens : ptok;

		if (ps == NULL || cs == NULL)
			continue;
		if (kind == KIND_KT) {
			/* complete blocks only: the child rebuilds its open
			 * block from its K tokens when it needs it */
			n = n / st->kt_tokens * st->kt_tokens;
			rc = fork_kt_stream(st, ps, cs, sid, n, refs, &n_refs);
			if (rc != KVF_OK)
				goto out_child;
			continue;
		}
		rc = fork_stream(st, parent, ps, cs, sid, n, ptok, refs,
				 &n_refs);
		if (rc != KVF_OK)
			goto out_child;
	}
	for (uint32_t l = 0; l < st->hdr.n_layers; l++) {
		child->len[l] = n_tokens;
		child->x_len[l] = n_tokens < parent->x_len[l] ? n_tokens
							       : parent->x_len[l];
	}
	/* the child shares no page of a group the parent dropped: it has
	 * it dropped too */
	if ((rc = dropmark_copy(st, child, parent, n_tokens / G)) != KVF_OK) {
		kvf_fail_wrap(rc, call);
		goto out_child;
	}
	/* the child's part-filled K^T blocks, from its K tokens: its
	 * appends read nothing */
	for (uint32_t l = 0; child->kt && l < st->hdr.n_layers; l++)
		for (uint32_t h = 0; h < st->hdr.n_kv_heads; h++) {
			const unsigned char *blk;

			if (n_tokens % st->kt_tokens == 0)
				break;
			if ((rc = kt_open_block(st, child, l, h, &blk)) != KVF_OK) {
				kvf_fail_wrap(rc, call);
				goto out_child;
			}
		}
	child->create_seqno = atomic_fetch_add(&st->writer.next_seqno, 1);
	child->has_ref_record = 1;
	{
		struct meta_ref h = { .seqno = child->create_seqno, .n = n_refs };
		unsigned char key[9];

		memcpy(ref_rec, &h, sizeof(h));
		meta_key_u64(key, META_TAG_REF, child_id);
		catalog_batch_put(b, key, sizeof(key), ref_rec,
				  sizeof(h) + n_refs * sizeof(*refs));
	}
	for (uint64_t i = 0; i < n_refs; i++)
		if (seg_ref_full(st, refs[i].addr)) {
			rc = kvf_fail(KVF_ERANGE,
				      "%s: a page of sequence %llu is already shared by %u sequences, the most a page can be",
				      call, (unsigned long long)parent_id,
				      UINT16_MAX);
			goto out_child;
		}
	if ((rc = seq_record(st, child, b)) != KVF_OK ||
	    (child->drop && (rc = dropmark_record(st, child, b)) != KVF_OK))
		goto out_child;
	if (tok && (tok->cached
			    ? prefix_record_cached(b, child_id,
						   child->create_seqno,
						   tok->tokens, tok->n_tokens)
			    : prefix_record(b, child_id, child->create_seqno,
					    tok->tokens, tok->n_tokens, NULL,
					    0)) != KVF_OK) {
		rc = kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
		goto out_child;
	}
	child->cached = tok && tok->cached; /* before the table has it */
	/* the shared pages' references first, then the child appears in
	 * the table already locked: no call can reach it half made */
	for (uint64_t i = 0; i < n_refs; i++)
		if (seg_ref_inc(st, refs[i].addr) != KVF_OK) {
			while (i-- > 0)
				seg_ref_dec(st, refs[i].addr);
			rc = kvf_fail(KVF_ENOMEM, "%s: out of memory for page references",
				      call);
			goto out_child;
		}
	pthread_mutex_lock(&child->lock);
	if ((rc = seq_insert(st, child)) != KVF_OK) {
		pthread_mutex_unlock(&child->lock);
		for (uint64_t i = 0; i < n_refs; i++)
			seg_ref_dec(st, refs[i].addr);
		kvf_fail_wrap(rc, call);
		goto out_child;
	}
	/* the child's partial tail groups go to media before its record, so
	 * a child that a crash leaves behind is whole */
	if ((rc = seq_seal_partials(st, child)) == KVF_OK)
		rc = openseg_flush_all(st, child);
	if (rc == KVF_OK)
		rc = commit_batch(st, b, call);
	if (rc != KVF_OK && rc != KVF_EFATAL) { /* undo: the child never was */
		child->dead = 1;
		seq_drop_all(st, child);
		pthread_mutex_unlock(&child->lock);
		seq_remove(st, child);
		child = NULL;
		kvf_fail_wrap(rc, call);
		goto out_child;
	}
	if (rc == KVF_OK)
		seq_record_done(st, child);
	if (rc == KVF_OK && tok)
		prefix_attach(st, child, tok);
	pthread_mutex_unlock(&child->lock);
	child = NULL;
out_child:
	if (child)
		seq_destroy(st, child);
	kvf_free(ref_rec);
	catalog_batch_free(b);
out_parent:
	seq_unlock_put(st, parent);
out_world:
	pthread_rwlock_unlock(&st->world);
	return rc;
}
