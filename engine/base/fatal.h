/*
 * fatal.h - the store's sticky fatal state.  After a failure that leaves
 * memory and media out of step (a segment write or a commit that failed),
 * every call answers KVF_EFATAL naming the first failure, until close.
 *
 * The state (struct store_fatal: the flag and the first failure's
 * message, its invariant and locking) is in fatal_state.h.
 */
#ifndef KVF_ENGINE_FATAL_H
#define KVF_ENGINE_FATAL_H

#include "api/status.h"
#include "engine/base/fatal_state.h"
#include "kvflash.h"

void fatal_init(struct store_fatal *f);
void fatal_destroy(struct store_fatal *f);

/* store_check - refuse calls on a store in the fatal state (KVF_EFATAL,
 * the message names call and the first failure) */
kvf_status store_check(kvf_store *st, const char *call);
/* store_set_fatal - enter the fatal state after `what` failed with cause
 * (the message of that failure is the thread's last error); returns
 * KVF_EFATAL */
kvf_status store_set_fatal(kvf_store *st, kvf_status cause, const char *what);
/* store_writable - the checks every call that changes the store makes
 * first: st not NULL (KVF_EINVAL), not fatal, not read-only (KVF_ENOTSUP) */
kvf_status store_writable(kvf_store *st, const char *call);
/* store_failed - the store is in the fatal state */
int store_failed(kvf_store *st);

#endif /* KVF_ENGINE_FATAL_H */
