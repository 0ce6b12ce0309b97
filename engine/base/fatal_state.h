/*
 * fatal_state.h - the store's sticky fatal state (owned by fatal.c;
 * engine/base/fatal.h says how it works).  Types only, so that
 * store_state.h composes it without including fatal.c's calls.
 *
 * Owns the flag and the first failure's message.  Invariant: msg is in
 * place before `on` becomes 1, and is set once.  Locking: lock orders the
 * setters; readers only load `on`, then read msg.
 */
#ifndef KVF_ENGINE_FATAL_STATE_H
#define KVF_ENGINE_FATAL_STATE_H

#include <pthread.h>
#include <stdatomic.h>

#include "api/status.h"

struct store_fatal {
	_Atomic int on;
	pthread_mutex_t lock;
	char msg[KVF_ERRMSG_CAP];
};

#endif /* KVF_ENGINE_FATAL_STATE_H */
