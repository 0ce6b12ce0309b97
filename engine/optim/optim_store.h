/*
 * optim_store.h - the engine side of optimizer state kept in the store (the
 * public calls are kvf_opt_* in kvflash.h).
 */
#ifndef KVF_ENGINE_OPTIM_STORE_H
#define KVF_ENGINE_OPTIM_STORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "api/status.h"
#include "engine/optim/optim_state.h"
#include "kvflash.h"

/* optim_recovery_load - at open, after the sequences: give each optimizer's
 * pseudo-sequence its streams and committed generation */
kvf_status optim_recovery_load(kvf_store *st);

/* optim_registry_init / optim_registry_free - first at open, last at
 * close */
void optim_registry_init(kvf_store *st);
void optim_registry_free(kvf_store *st);

/* optim_detach_all - kvf_close: every open kvf_opt handle of st loses its
 * store; later calls on it answer KVF_ECLOSED, kvf_opt_close frees it. */
void optim_detach_all(kvf_store *st);

#endif /* KVF_ENGINE_OPTIM_STORE_H */
