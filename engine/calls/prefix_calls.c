/*
 * prefix_calls.c - the public calls of prefix reuse:
 * kvf_seq_create_tokens (a new sequence sharing the longest stored prefix
 * of its token ids: a fork of the sequence that holds it),
 * kvf_seq_add_tokens (more token ids for a sequence), and the cached
 * prefixes: kvf_seq_free (which leaves one behind), kvf_prefix_drop and
 * the budget.  The index is prefix.c; the fork and its records are
 * seq_calls.c's; a cached prefix's eviction is evict.c's.
 *
 * A cached prefix is a fork of the published whole chunks of the freed
 * sequence, under an id of the store's and marked in its "T" record:
 * pages, references, the cleaner, sync, recovery and verify treat it as
 * any fork, and the sequence calls do not see it (seq_find_locked).
 *
 * Locking: none of its own; a lookup takes the index's lock and lets it
 * go before the fork, so the sequence it names may be freed meanwhile:
 * the fork then answers KVF_ENOENT and the lookup is made again.  Keeping
 * and dropping cached prefixes runs one sequence call at a time (forks
 * and frees), with no lock held between them.
 */
#include <stdio.h>
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/base/catalog.h"
#include "engine/base/fatal.h"
#include "engine/cleaning/cleaner.h"
#include "engine/sequences/dropmark.h"
#include "engine/sequences/prefix.h"
#include "engine/sequences/seq.h"
#include "engine/sequences/seq_state.h"
#include "engine/base/store_state.h"

/* lookups tried before a creation gives up sharing: each retry follows a
 * holder freed between the lookup and the fork */
#define LOOKUP_TRIES 4

kvf_status kvf_seq_create_tokens(kvf_store *st, uint64_t id,
				 const uint32_t *tokens, uint64_t n_tokens,
				 uint64_t *n_reused)
{
	const char *call = "kvf_seq_create_tokens";
	struct prefix_match m = { KVF_SEQ_NONE, 0, 0 };
	struct prefix_seq *ps;
	kvf_status rc;

	if ((rc = store_writable(st, call)) != KVF_OK)
		return rc;
	if (n_reused == NULL || (tokens == NULL && n_tokens > 0))
		return kvf_fail(KVF_EINVAL, "%s: %s is NULL", call,
				n_reused ? "tokens" : "n_reused");
	if (id == SEQ_NO_PARENT)
		return kvf_fail(KVF_EINVAL, "%s: sequence id %llu is reserved",
				call, (unsigned long long)id);
	if (n_tokens > PREFIX_MAX_TOKENS)
		return kvf_fail(KVF_ERANGE, "%s: %llu tokens (at most %llu)",
				call, (unsigned long long)n_tokens,
				(unsigned long long)PREFIX_MAX_TOKENS);
	if ((ps = prefix_seq_new(id, tokens, n_tokens)) == NULL)
		return kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
	for (int i = 0; i < LOOKUP_TRIES; i++) {
		prefix_lookup(st, tokens, n_tokens, &m);
		if (m.n_tokens == 0 || m.holder == id)
			break;
		/* with no room for the holder's waiting pages, clean (and
		 * evict, never the holder) and try again, as an append */
		for (int r = 0;; r++) {
			rc = seq_fork_with(st, call, m.holder, id, m.n_tokens, ps);
			if (!cleaner_make_room(st, r, 1, m.holder, call, &rc))
				break;
		}
		/* ENOENT: the holder went between lookup and fork.  ERANGE:
		 * a shared page is at its reference limit; share nothing */
		if (rc != KVF_ENOENT && rc != KVF_ERANGE)
			goto done;
		m.n_tokens = 0;
	}
	m.n_tokens = 0;
	rc = seq_create_with(st, call, id, ps);
done:
	if (rc != KVF_OK) {
		prefix_seq_free(ps);
		return rc;
	}
	prefix_count_reuse(st, n_tokens, m.n_tokens);
	if (m.n_tokens > 0 && m.from_cache)
		atomic_fetch_add(&st->prefix.cache_hits, 1);
	*n_reused = m.n_tokens;
	return KVF_OK;
}

/* ---- cached prefixes ------------------------------------------------------ */

/* ids tried for a new cached prefix before giving up keeping it: each
 * taken one is a caller's sequence that happens to hold it */
#define CACHED_ID_TRIES 8

/* keep - before sequence id is freed: fork its published whole chunks
 * into a new cached prefix, if some are held by no other sequence and
 * they fit the budget.  Best effort: the free goes on whatever happens
 * here.  Return: the cached prefix's id, or KVF_SEQ_NONE. */
static uint64_t keep(kvf_store *st, const char *call, uint64_t id)
{
	uint64_t budget = st->opts.prefix_cache_bytes, n, cid = KVF_SEQ_NONE;
	struct prefix_seq_figures f;
	struct prefix_seq *ps = NULL;
	struct seq *seq;

	if (budget == 0 || seq_find_locked(st, call, id, &seq) != KVF_OK)
		return KVF_SEQ_NONE;
	prefix_seq_figures(st, seq, &f);
	n = f.chunks * st->group_tokens;
	if (f.own_chunks > 0 &&
	    f.own_chunks * prefix_chunk_bytes(st) <= budget)
		ps = prefix_seq_new(KVF_SEQ_NONE, seq->prefix->tokens, n);
	seq_unlock_put(st, seq);
	if (ps == NULL)
		return KVF_SEQ_NONE;
	ps->cached = 1;
	for (int i = 0; i < CACHED_ID_TRIES && cid == KVF_SEQ_NONE; i++) {
		/* once the fork has it, ps is the cached prefix's, which
		 * another thread may drop at once: only try_id is read after */
		uint64_t try_id = prefix_cached_id(st);
		struct seq *old;

		ps->id = try_id;
		if ((old = seq_get(st, try_id)) == NULL &&
		    seq_fork_with(st, call, id, try_id, n, ps) == KVF_OK)
			cid = try_id;
		seq_put(st, old);
		if (old == NULL && cid == KVF_SEQ_NONE)
			break; /* the fork failed: no cached prefix */
	}
	if (cid == KVF_SEQ_NONE) {
		prefix_seq_free(ps);
		return KVF_SEQ_NONE;
	}
	atomic_fetch_add(&st->prefix.cache_kept, 1);
	return cid;
}

/* drop_one - drop cached prefix id; KVF_ENOENT (gone meanwhile) is fine */
static kvf_status drop_one(kvf_store *st, const char *call, uint64_t id)
{
	kvf_status rc = seq_free_id(st, call, id, SEQ_FREE_CACHED);

	return rc == KVF_ENOENT ? KVF_OK : rc;
}

/* worse - a is worth less than b: fewer hits, then used longer ago */
static int worse(const struct prefix_cached_info *a,
		 const struct prefix_cached_info *b)
{
	if (a->hits != b->hits)
		return a->hits < b->hits;
	return a->last_use_ns < b->last_use_ns;
}

/* trim - after cached prefix fresh was kept: drop the cached prefixes
 * another holds whole (fresh last among them), then the least valuable
 * until the budget holds.  Return: KVF_OK, or a drop's failure. */
static kvf_status trim(kvf_store *st, const char *call, uint64_t fresh)
{
	kvf_status rc = KVF_OK;

	for (;;) {
		struct prefix_cached_info *v, *pick = NULL;
		int over;
		size_t n;

		if ((rc = prefix_cached_list(st, &v, &n)) != KVF_OK)
			return kvf_fail(rc, "%s: out of memory", call);
		over = prefix_cached_bytes(st) > st->opts.prefix_cache_bytes;
		for (size_t i = 0; i < n; i++) {
			struct prefix_cached_info *c = &v[i];

			if (c->covered) {
				if (pick == NULL || !pick->covered ||
				    pick->id == fresh)
					pick = c;
			} else if (over && c->own_chunks > 0 &&
				   (pick == NULL ||
				    (!pick->covered && worse(c, pick)))) {
				pick = c;
			}
		}
		if (pick == NULL) {
			kvf_free(v);
			return KVF_OK;
		}
		rc = drop_one(st, call, pick->id);
		kvf_free(v);
		if (rc != KVF_OK)
			return rc;
	}
}

kvf_status kvf_seq_free(kvf_store *st, uint64_t id)
{
	const char *call = "kvf_seq_free";
	uint64_t cid;
	kvf_status rc;

	if ((rc = store_writable(st, call)) != KVF_OK)
		return rc;
	cid = keep(st, call, id);
	rc = seq_free_id(st, call, id, 0);
	if (rc == KVF_OK && cid != KVF_SEQ_NONE)
		(void)trim(st, call, cid); /* the free stands; a failed
					    * drop leaves more cached */
	if (rc != KVF_OK && cid != KVF_SEQ_NONE) {
		/* a refused free changes nothing: the copy kept goes (its
		 * failure, too, leaves the free's message) */
		char msg[512];

		snprintf(msg, sizeof(msg), "%s", kvf_last_error());
		if (seq_free_id(st, call, cid, SEQ_FREE_CACHED) != KVF_OK)
			(void)kvf_fail(rc, "%s", msg);
	}
	return rc;
}

kvf_status kvf_prefix_drop(kvf_store *st, uint64_t id, uint64_t *n_dropped)
{
	const char *call = "kvf_prefix_drop";
	struct prefix_cached_info *v;
	uint64_t done = 0;
	kvf_status rc;
	size_t n;

	if ((rc = store_writable(st, call)) != KVF_OK)
		return rc;
	if (id != KVF_SEQ_NONE) {
		if ((rc = seq_free_id(st, call, id, SEQ_FREE_CACHED)) != KVF_OK)
			return rc;
		if (n_dropped)
			*n_dropped = 1;
		return KVF_OK;
	}
	if ((rc = prefix_cached_list(st, &v, &n)) != KVF_OK)
		return kvf_fail(rc, "%s: out of memory", call);
	for (size_t i = 0; i < n && rc == KVF_OK; i++) {
		rc = seq_free_id(st, call, v[i].id, SEQ_FREE_CACHED);
		if (rc == KVF_OK)
			done++;
		else if (rc == KVF_ENOENT) /* gone meanwhile */
			rc = KVF_OK;
	}
	kvf_free(v);
	if (rc == KVF_OK && n_dropped)
		*n_dropped = done;
	return rc;
}

kvf_status kvf_seq_add_tokens(kvf_store *st, uint64_t id,
			      const uint32_t *tokens, uint64_t n_tokens)
{
	const char *call = "kvf_seq_add_tokens";
	struct prefix_seq *ps = NULL;
	struct catalog_batch *b = NULL;
	struct seq *seq;
	uint64_t have;
	kvf_status rc;

	if ((rc = store_writable(st, call)) != KVF_OK)
		return rc;
	if (tokens == NULL && n_tokens > 0)
		return kvf_fail(KVF_EINVAL, "%s: tokens is NULL", call);
	pthread_rwlock_rdlock(&st->world);
	if ((rc = seq_get_locked(st, call, id, &seq)) != KVF_OK)
		goto out_world;
	have = seq->prefix ? seq->prefix->n_tokens : 0;
	if (n_tokens > 0 && dropmark_any(st, seq, DROP_ANY)) {
		/* its ids stop at its first dropped group (kvf_h2o_evict): a
		 * prefix shared from it must hold every token */
		rc = kvf_fail(KVF_ENOTSUP,
			      "%s: sequence %llu has token groups kvf_h2o_evict dropped; it registers no more token ids for prefix reuse",
			      call, (unsigned long long)id);
		goto out_seq;
	}
	if (n_tokens > PREFIX_MAX_TOKENS - have) {
		rc = kvf_fail(KVF_ERANGE, "%s: %llu more tokens after %llu (at most %llu in all)",
			      call, (unsigned long long)n_tokens,
			      (unsigned long long)have,
			      (unsigned long long)PREFIX_MAX_TOKENS);
		goto out_seq;
	}
	if (n_tokens == 0)
		goto out_seq;
	/* room first, then the record, then the ids: a refusal changes
	 * nothing */
	if (seq->prefix == NULL &&
	    (ps = prefix_seq_new(id, NULL, 0)) == NULL)
		goto oom;
	if (prefix_seq_grow(seq->prefix ? seq->prefix : ps, n_tokens) != KVF_OK ||
	    (b = catalog_batch_new()) == NULL ||
	    prefix_record(b, id, seq->create_seqno,
			  seq->prefix ? seq->prefix->tokens : NULL, have,
			  tokens, n_tokens) != KVF_OK)
		goto oom;
	if ((rc = catalog_commit(st->cat, b, 0)) != KVF_OK) {
		rc = store_set_fatal(st, rc, call);
		goto out_seq;
	}
	if (ps) {
		memcpy(ps->tokens, tokens, n_tokens * sizeof(*tokens));
		ps->n_tokens = n_tokens;
		prefix_attach(st, seq, ps);
		ps = NULL;
	} else {
		memcpy(seq->prefix->tokens + have, tokens,
		       n_tokens * sizeof(*tokens));
		seq->prefix->n_tokens += n_tokens;
		prefix_publish(st, seq);
	}
	goto out_seq;
oom:
	rc = kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
out_seq:
	prefix_seq_free(ps);
	catalog_batch_free(b);
	seq_unlock_put(st, seq);
out_world:
	pthread_rwlock_unlock(&st->world);
	return rc;
}
