/*
 * evict_calls.c - the public eviction calls: kvf_seq_pin, kvf_seq_unpin,
 * kvf_evict and kvf_evict_log (engine/cleaning/evict.h does the work).  Apart from
 * evict.c because kvf_evict reclaims with the cleaner, which comes after
 * eviction in the engine's order.
 *
 * Locking: a pin takes world shared, then the sequence's lock.
 */
#include "api/status.h"
#include "engine/cleaning/cleaner.h"
#include "engine/cleaning/evict.h"
#include "engine/base/fatal.h"
#include "engine/sequences/seq.h"
#include "engine/sequences/seq_state.h"
#include "engine/base/store_state.h"

/* pin_by - add delta (+1 or -1) to seq's pins */
static kvf_status pin_by(kvf_store *st, const char *call, uint64_t id,
			 int delta)
{
	struct seq *seq;
	kvf_status rc;

	if (st == NULL)
		return kvf_fail(KVF_EINVAL, "%s: store is NULL", call);
	if ((rc = store_check(st, call)) != KVF_OK)
		return rc;
	pthread_rwlock_rdlock(&st->world);
	if ((rc = seq_get_locked(st, call, id, &seq)) != KVF_OK)
		goto out;
	if (delta < 0 && seq->pins == 0)
		rc = kvf_fail(KVF_EINVAL, "%s: sequence %llu is not pinned", call,
			      (unsigned long long)id);
	else if (delta > 0 && seq->pins == UINT32_MAX)
		rc = kvf_fail(KVF_ERANGE, "%s: sequence %llu is pinned %u times already",
			      call, (unsigned long long)id, seq->pins);
	else
		seq->pins += (uint32_t)delta;
	seq_unlock_put(st, seq);
out:
	pthread_rwlock_unlock(&st->world);
	return rc;
}

kvf_status kvf_seq_pin(kvf_store *st, uint64_t id)
{
	return pin_by(st, "kvf_seq_pin", id, 1);
}

kvf_status kvf_seq_unpin(kvf_store *st, uint64_t id)
{
	return pin_by(st, "kvf_seq_unpin", id, -1);
}

kvf_status kvf_evict(kvf_store *st, uint32_t policy, uint64_t bytes,
		     uint64_t *freed)
{
	const char *call = "kvf_evict";
	uint64_t pages, got;
	kvf_status rc;

	if (freed)
		*freed = 0;
	if ((rc = store_writable(st, call)) != KVF_OK)
		return rc;
	if (policy > KVF_EVICT_ENDURANCE)
		return kvf_fail(KVF_EINVAL,
				"%s: policy %u unknown (0 the store's, 1 LRU, 2 LFU, 3 endurance)",
				call, policy);
	if (policy == KVF_EVICT_NONE)
		policy = st->opts.evict_policy;
	if (policy == KVF_EVICT_NONE)
		return kvf_fail(KVF_EINVAL,
				"%s: policy 0 means the store's, and this store was opened without one (kvf_options.evict_policy)",
				call);
	if (bytes == 0)
		return KVF_OK;
	pages = bytes / st->hdr.page_size + (bytes % st->hdr.page_size != 0);
	got = evict_run(st, policy, pages, KVF_EVICTED_CALL, KVF_SEQ_NONE);
	if (freed)
		*freed = got * st->hdr.page_size;
	if (got == 0)
		return KVF_OK;
	/* make the victims' segments reusable now, as a sync would */
	rc = cleaner_run(st, 0);
	return rc == KVF_ENOSPC ? KVF_OK : rc;
}

kvf_status kvf_evict_log(kvf_store *st, kvf_evict_event *out, uint32_t cap,
			 uint32_t *n, uint64_t *lost)
{
	const char *call = "kvf_evict_log";
	kvf_status rc;

	if (st == NULL || n == NULL || (out == NULL && cap > 0))
		return kvf_fail(KVF_EINVAL, "%s: %s is NULL", call,
				st == NULL ? "store" : n == NULL ? "n" : "out (with cap > 0)");
	if ((rc = store_check(st, call)) != KVF_OK)
		return rc;
	*n = evict_log_take(st, out, cap, lost);
	return KVF_OK;
}
