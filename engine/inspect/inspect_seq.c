/*
 * inspect_seq.c - the inspection calls on sequences: kvf_seq_list (kvtool
 * ls), kvf_prefix_list (the store's cached prefixes), kvf_seq_x_len and
 * kvf_seq_info_get.  A file of its own: each
 * walks one sequence's index under its lock, which the store-wide calls
 * in inspect.c never take.
 *
 * Locking (engine/base/store_state.h's order): world shared, then seq->lock (through
 * seq_get_locked), then segtab.lock inside seg_page_refs.
 */
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/inspect/inspect_int.h"
#include "engine/base/key.h"
#include "engine/sequences/prefix.h"
#include "engine/segments/segtable.h"
#include "engine/sequences/seq.h"
#include "engine/sequences/seq_state.h"
#include "engine/sequences/seq_stream.h"

/* list_ids - kvf_seq_list and kvf_prefix_list: the ids `which` selects
 * (inspect_live_ids), up to cap of them into ids, and how many in *n */
static kvf_status list_ids(kvf_store *st, const char *call, uint32_t which,
			   uint64_t *ids, size_t cap, size_t *n)
{
	uint64_t *list;
	size_t k;
	kvf_status rc;

	if ((rc = inspect_common(st, call, NULL, 0)) != KVF_OK)
		return rc;
	if (n == NULL)
		return kvf_fail(KVF_EINVAL, "%s: n is NULL", call);
	if (ids == NULL && cap > 0)
		return kvf_fail(KVF_EINVAL, "%s: ids is NULL with cap %zu", call, cap);
	pthread_rwlock_rdlock(&st->world);
	rc = inspect_live_ids(st, call, &list, &k, which);
	pthread_rwlock_unlock(&st->world);
	if (rc != KVF_OK)
		return rc;
	if (cap > 0)
		memcpy(ids, list, (k < cap ? k : cap) * sizeof(*ids));
	kvf_free(list);
	*n = k;
	return KVF_OK;
}

kvf_status kvf_seq_list(kvf_store *st, uint64_t *ids, size_t cap, size_t *n)
{
	return list_ids(st, "kvf_seq_list", SEQ_NS_USER | INSPECT_CALLERS, ids,
			cap, n);
}

kvf_status kvf_prefix_list(kvf_store *st, uint64_t *ids, size_t cap,
			   size_t *n)
{
	return list_ids(st, "kvf_prefix_list", SEQ_NS_USER | INSPECT_CACHED,
			ids, cap, n);
}

/* ---- kvf_seq_x_len, kvf_seq_info_get ------------------------------------- */

kvf_status kvf_seq_x_len(kvf_store *st, uint64_t id, uint32_t layer,
			 uint64_t *n_tokens)
{
	const char *call = "kvf_seq_x_len";
	struct seq *seq;
	kvf_status rc;

	if ((rc = inspect_common(st, call, NULL, 0)) != KVF_OK)
		return rc;
	if (n_tokens == NULL)
		return kvf_fail(KVF_EINVAL, "%s: n_tokens is NULL", call);
	if (layer >= st->hdr.n_layers)
		return kvf_fail(KVF_ERANGE, "%s: layer %u out of range (store has %u layers)",
				call, layer, st->hdr.n_layers);
	pthread_rwlock_rdlock(&st->world);
	if ((rc = seq_get_locked(st, call, id, &seq)) == KVF_OK) {
		*n_tokens = seq->x_len[layer];
		seq_unlock_put(st, seq);
	}
	pthread_rwlock_unlock(&st->world);
	return rc;
}

/* count_pages - pages of stream s that the index names, and how many of
 * them other sequences name too.  Caller holds seq->lock. */
static void count_pages(kvf_store *st, const struct stream *s,
			uint64_t *pages, uint64_t *shared)
{
	for (uint32_t g = 0; g < s->n_groups; g++) {
		uint32_t a = stream_page(s, g).addr;

		if (a == ADDR_NONE)
			continue;
		(*pages)++;
		if (addr_seg(a, st->page_bits) < st->n_segments &&
		    seg_page_refs(st, a) > 1)
			(*shared)++;
	}
}

kvf_status kvf_seq_info_get(kvf_store *st, uint64_t id, kvf_seq_info *out)
{
	const char *call = "kvf_seq_info_get";
	uint32_t n_streams;
	kvf_seq_info in;
	struct seq *seq;
	kvf_status rc;

	if ((rc = inspect_common(st, call, out, sizeof(in))) != KVF_OK)
		return rc;
	memset(&in, 0, sizeof(in));
	n_streams = seq_n_streams(st);
	pthread_rwlock_rdlock(&st->world);
	/* a cached prefix too (kvtool ls shows them); a use only of the
	 * caller's */
	if ((rc = seq_find_any_locked(st, call, id, &seq)) != KVF_OK)
		goto out;
	if (!seq->cached)
		seq_note_use(st, seq);
	in.id = seq->id;
	in.cached = (uint32_t)seq->cached;
	in.family = seq->family;
	in.parent = seq->parent == SEQ_NO_PARENT ? KVF_SEQ_NONE : seq->parent;
	for (uint32_t l = 0; l < st->hdr.n_layers; l++) {
		in.tokens += seq->len[l];
		in.x_tokens += seq->x_len[l];
	}
	for (uint32_t i = 0; i < n_streams; i++) {
		uint32_t sid;
		struct stream *s = seq_stream_at(st, seq, i, &sid);

		if (s)
			count_pages(st, s, &in.pages, &in.shared_pages);
	}
	{
		struct prefix_seq_figures f;

		prefix_seq_figures(st, seq, &f);
		in.prefix_tokens = f.tokens;
		in.prefix_chunks = f.chunks;
		in.prefix_shared_chunks = f.shared_chunks;
		in.prefix_hash = f.shared_hash;
	}
	if (seq->cached) {
		struct prefix_cached_info c;

		prefix_cached_value(st, seq, &c);
		in.cached_own_chunks = c.own_chunks;
		in.cached_hits = c.hits;
	}
	seq_unlock_put(st, seq);
out:
	pthread_rwlock_unlock(&st->world);
	if (rc == KVF_OK)
		inspect_publish(out, &in, sizeof(in));
	return rc;
}
