/*
 * cleaner.h - making free segments out of partly dead ones.
 *
 * Lifetime-aware placement makes most segments die whole (a freed sequence
 * takes its segments with it); the cleaner handles the rest: it picks
 * victims by cost-benefit (LFS: (1 - u) * age / (1 + u), u = live
 * fraction), copies their live pages into one fresh segment of the same
 * stripe, commits, and frees the victims.
 */
#ifndef KVF_ENGINE_CLEANER_H
#define KVF_ENGINE_CLEANER_H

#include <pthread.h>

#include "api/status.h"
#include "engine/cleaning/cleaner_state.h"
#include "engine/base/wake.h"
#include "kvflash.h"


/*
 * cleaner_run - get at least `want` free segments on each stripe if it can:
 * first by reusing dying segments (a durable point), then by putting the
 * small open segments of sequences into packs (seq_pack_small: many short
 * sequences each hold one between syncs), then by cleaning.
 * Takes st->world exclusive: the caller must hold no store lock.
 * Return: KVF_OK when it made progress or there was nothing to do,
 * KVF_ENOSPC when nothing could be freed, KVF_EFATAL.
 */
kvf_status cleaner_run(kvf_store *st, uint32_t want);

/*
 * cleaner_make_room - a call refused with KVF_ENOSPC that changed nothing
 * may be tried again once the cleaner has run: run it for `want` free
 * segments a stripe, unless this was try CLEANER_TRIES already.  When
 * cleaning frees nothing and eviction is on, evict (never sequence keep,
 * the caller's; KVF_SEQ_NONE: none) and clean again.
 * @attempt: tries so far, from 0.
 * @what: names the call and what it was for ("kvf_append: sequence 7").
 * Return: 1: try again; 0: do not, with *rc the final status (as it was
 * unless KVF_ENOSPC: then KVF_ENOSPC "<what>: the store is full of live
 * data", or the cleaner's fatal status).  The caller holds no store lock.
 */
#define CLEANER_TRIES 4
#define EVICT_TRIES 16 /* rounds that evict nothing but find room */
int cleaner_make_room(kvf_store *st, int attempt, uint32_t want, uint64_t keep,
		      const char *what, kvf_status *rc);

/* cleaner_start / cleaner_stop - the background cleaner thread, which
 * keeps free segments above a low watermark */
kvf_status cleaner_start(kvf_store *st);
void cleaner_stop(kvf_store *st);

#endif /* KVF_ENGINE_CLEANER_H */
