/*
 * recompute_state.h - the registered K,V projection weights (owned by
 * recompute.c; engine/planning/recompute.h says how they are used).
 */
#ifndef KVF_ENGINE_RECOMPUTE_STATE_H
#define KVF_ENGINE_RECOMPUTE_STATE_H

#include <pthread.h>
#include <stdint.h>

/* One layer's weights; shared by the calls using them, freed by the last
 * (refs guarded by the registry's lock). */
struct layer_weights {
	float *w_k;        /* [d][cols] fp32, d = n_q * head_dim */
	float *w_v;        /* [d][cols], cols = n_kv * head_dim */
	float rope_theta;  /* 0 = no RoPE */
	uint32_t refs;     /* the registry's reference and the users' */
};

struct recompute_registry {
	pthread_mutex_t lock;         /* layer[] and every refs */
	struct layer_weights **layer; /* [n_layers], NULL until the first
				       * registration; an entry NULL until
				       * its layer is registered */
};

#endif /* KVF_ENGINE_RECOMPUTE_STATE_H */
