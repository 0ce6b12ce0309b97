/*
 * evict.h - eviction: when the media fills with live data, drop whole
 * sequences by kvf_options.evict_policy (LRU, LFU or endurance-aware)
 * instead of refusing appends.  See docs/store.md, "Eviction".
 *
 * A run scores every sequence that may go (a caller's, not pinned,
 * holding at least one page nobody else references), frees
 * the best victims with seq_free_id until enough pages are given back, and
 * logs each one.  Freed pages become garbage; the cleaner reclaims their
 * segments (the caller runs it: cleaner.c comes after this file).
 */
#ifndef KVF_ENGINE_EVICT_H
#define KVF_ENGINE_EVICT_H

#include <stdint.h>

#include "engine/cleaning/evict_state.h"
#include "kvflash.h"

kvf_status evict_init(kvf_store *st);
void evict_free(kvf_store *st);

/* evict_live_share - live pages (and pages waiting for write-back) over
 * the media's data pages */
double evict_live_share(kvf_store *st);

/* evict_pages_over_low - live pages above evict_low (0 if below) */
uint64_t evict_pages_over_low(kvf_store *st);

/* evict_over_high - eviction is on and the live share passed evict_high */
int evict_over_high(kvf_store *st);

/*
 * evict_run - evict by policy (a kvf_evict_policy other than NONE) until
 * want_pages pages are given back, for reason (kvf_evict_reason); keep is
 * a sequence that must stay (the one whose append needs the room) or
 * KVF_SEQ_NONE.  want_pages 0: down to evict_low.
 * Return: the pages given back (0 when nothing could go).
 */
uint64_t evict_run(kvf_store *st, uint32_t policy, uint64_t want_pages,
		   uint32_t reason, uint64_t keep);

/* evict_log_take - kvf_evict_log's records (evict.c owns the log) */
uint32_t evict_log_take(kvf_store *st, kvf_evict_event *out, uint32_t cap,
			uint64_t *lost);

/* evict_stats - eviction's figures into s */
void evict_stats(kvf_store *st, kvf_stats *s);

#endif /* KVF_ENGINE_EVICT_H */
