/*
 * prefix_calls.c - the public calls of prefix reuse:
 * kvf_seq_create_tokens (a new sequence sharing the longest stored prefix
 * of its token ids: a fork of the sequence that holds it) and
 * kvf_seq_add_tokens (more token ids for a sequence).  The index is
 * prefix.c; the fork and its records are seq_calls.c's.
 *
 * Locking: none of its own; a lookup takes the index's lock and lets it
 * go before the fork, so the sequence it names may be freed meanwhile:
 * the fork then answers KVF_ENOENT and the lookup is made again.
 */
#include <string.h>

#include "api/status.h"
#include "engine/base/catalog.h"
#include "engine/base/fatal.h"
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
	struct prefix_match m = { KVF_SEQ_NONE, 0 };
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
		rc = seq_fork_with(st, call, m.holder, id, m.n_tokens, ps);
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
	*n_reused = m.n_tokens;
	return KVF_OK;
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
