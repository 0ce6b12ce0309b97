/*
 * optim_state.h - the open optimizer handles and the optimizer ids (optim_handle.c).
 */
#ifndef KVF_ENGINE_OPTIM_STATE_H
#define KVF_ENGINE_OPTIM_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

struct kvf_opt;

/* struct optim_registry - the open kvf_opt handles (optim_handle.c), so
 * close can detach them, and the ids of optimizer pseudo-sequences.
 * Locking: lock guards open; next_id is atomic. */
struct optim_registry {
	pthread_mutex_t lock;
	struct kvf_opt *open;
	_Atomic uint64_t next_id;
};

#endif /* KVF_ENGINE_OPTIM_STATE_H */
