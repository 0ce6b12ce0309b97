/*
 * durable.h - the durable point (engine/durability/durable.c) and what it owns.
 */
#ifndef KVF_ENGINE_DURABLE_H
#define KVF_ENGINE_DURABLE_H

#include <pthread.h>
#include <stdint.h>

#include "api/status.h"
#include "engine/durability/durable_state.h"
#include "kvflash.h"

struct catalog_batch;

kvf_status durable_init(kvf_store *st);
void durable_free(kvf_store *st);

/*
 * store_durable_point - make every committed segment durable (media sync,
 * then b plus the sync record committed with a synced log) and reuse the
 * segments that died before it.  is_sync counts it as a kvf_sync.
 * Caller holds dur.lock.  Return: KVF_OK, or KVF_EFATAL.
 */
kvf_status store_durable_point(kvf_store *st, struct catalog_batch *b,
				int is_sync);

#endif /* KVF_ENGINE_DURABLE_H */
