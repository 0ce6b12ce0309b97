/*
 * recompute.h - K,V recomputed from the stored X near the data (HILOS's
 * X-cache, KVPR's recomputation input): kvf_kv_weights_set,
 * kvf_recompute_kv, kvf_attend_x and kvf_attend_x_start.  The weights are
 * kept in memory per layer, reference-counted so a registration does not
 * pull them from under a running call.
 */
#ifndef KVF_ENGINE_RECOMPUTE_H
#define KVF_ENGINE_RECOMPUTE_H

#include "engine/planning/recompute_state.h"
#include "kvflash.h"

/* recompute_init - the registry, empty (at open, before anything fails);
 * recompute_free - every layer's weights (at close) */
void recompute_init(kvf_store *st);
void recompute_free(kvf_store *st);

/*
 * recompute_attend_with - kvf_attend_x over [t0, t1) with the weights w
 * instead of the layer's registered ones (kvf_profile_run times the
 * near-data path with weights of its own, leaving the caller's alone).
 * Return: as kvf_attend_x.
 */
kvf_status recompute_attend_with(kvf_store *st, uint64_t seq, uint32_t layer,
				 uint64_t t0, uint64_t t1, const float *q,
				 float *out, struct layer_weights *w);

#endif /* KVF_ENGINE_RECOMPUTE_H */
