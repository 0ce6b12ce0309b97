/*
 * optim_int.h - what the optimizer files of engine/ share: the handle, the
 * catalog record, the constants and the small helpers the step and the
 * other calls both use (SQLite's btreeInt.h in spirit).  The engine's own
 * entry points are in engine/optim/optim_store.h; the public calls are kvf_opt_*
 * in kvflash.h.
 *
 * An optimizer is a sequence of the SEQ_NS_OPTIM namespace with six
 * streams: params, m and v, each in two generations.  Chunk c of a state
 * is one page of page_size / 4 fp32 values (the last one zero-padded).
 * The catalog record "O" + name holds the sequence id, the size, the
 * steps done, the committed generation and the configuration.
 *
 * A step reads every chunk of the committed generation g in batches,
 * updates it with the caller's gradient (compute/optim.h), and writes the
 * result as generation 1 - g, params first, then m and v; then, once
 * every new page is written and committed, a durable point commits the
 * "O" record naming the new generation.  Recovery takes only the
 * committed generation's entries (seq_stream_groups), so a crash in the
 * middle of a step leaves the previous step whole.  The pages of
 * generation 1 - g from two steps ago are what the new ones replace.
 *
 * Files: optim_layout.c (the record, the streams, placing and finding
 * chunks), optim_handle.c (create, open, read, steps, close, free),
 * optim_step.c (kvf_opt_step), optim_commit.c (reserving, committing and
 * recovering a generation).
 *
 * Locking: create, step and free take dur.lock (they end in a durable
 * point), then world shared, then the optimizer's sequence lock: the
 * order kvf_sync and the cleaner use.  One step at a time per optimizer.
 */
#ifndef KVF_ENGINE_OPTIM_INT_H
#define KVF_ENGINE_OPTIM_INT_H

#include "compute/optim.h"
#include "engine/reads/readpath.h"
#include "engine/segments/segtable.h"
#include "engine/sequences/seq.h"
#include "engine/base/store_state.h"

#define OPTIM_NAME_MAX 200u
#define OPTIM_BATCH 512u /* chunks per batch at most: on files, 512 pages of
			  * each state read together (2 MiB with 4 KiB pages;
			  * 128 kept the disk idle more often) */

enum { ST_PARAM = KVC_CHUNK_P, ST_M = KVC_CHUNK_M, ST_V = KVC_CHUNK_V };
struct meta_optim {
	uint64_t seq;       /* pseudo-sequence id */
	uint64_t n_params;  /* parameters */
	uint64_t steps;     /* steps done */
	uint32_t gen;       /* committed generation */
	uint32_t cfg_size;  /* bytes of kvf_opt_config that follow */
};

struct kvf_opt {
	kvf_store *st;            /* NULL once the store was closed: every
				   * call but kvf_opt_close is KVF_ECLOSED */
	kvf_opt *prev, *next;     /* the store's open handles; st->optims.lock */
	char *name;
	uint64_t seq_id;          /* pseudo-sequence */
	uint64_t n_params;        /* parameters */
	uint64_t n_chunks;        /* pages per state */
	uint32_t per_chunk;       /* parameters per page */
	kvf_opt_config cfg;       /* hyper-parameters */
	unsigned states;          /* kvc_optim_states: which moments exist */
	uint32_t batch;           /* chunks per batch: OPTIM_BATCH, or all */
	float *work;              /* [2][3][batch][per_chunk], aligned:
				   * one half computed while the other loads */
	const struct kvc_optim *k;
	/* a step's batch b uses half b % 2 of these: */
	const float *src[2][3][OPTIM_BATCH]; /* committed chunks: the memory
					      * media's own pages, or work */
	unsigned char *dst[3][OPTIM_BATCH];  /* the new chunks: open-segment
					      * slots, or work pages placed
					      * after the update */
	uint64_t hash[3][OPTIM_BATCH];       /* page_hash of each new chunk */
	/* the reads of one batch, media other than memory: */
	struct page_read want[3 * OPTIM_BATCH];
	struct kvf_media_io io[3 * OPTIM_BATCH];
	struct catalog_batch *commit;      /* a step's record, at its end */
};

struct load_ctx {
	kvf_opt *o;
	uint32_t half;  /* work half loaded */
	uint32_t state;
};

/* The small helpers are static inline here: the step calls them per page. */

/* optim_sid - the stream id of state (ST_*) in generation gen */
static inline uint32_t optim_sid(uint32_t state, uint32_t gen)
{
	return stream_id(0, KIND_OPTIM, state * 2 + gen);
}

/* optim_state_kept - whether the optimizer's states include s */
static inline int optim_state_kept(unsigned states, uint32_t s)
{
	return s == ST_PARAM || (s == ST_M && (states & KVC_OPTIM_M)) ||
	       (s == ST_V && (states & KVC_OPTIM_V));
}

/* optim_batch_len - chunks of the batch starting at chunk c0 */
static inline uint32_t optim_batch_len(const kvf_opt *o, uint64_t c0)
{
	return (uint32_t)(o->n_chunks - c0 < o->batch ? o->n_chunks - c0
						      : o->batch);
}

/* optim_work_page - chunk j of state in work half half */
static inline float *optim_work_page(kvf_opt *o, uint32_t half,
				     uint32_t state, uint32_t j)
{
	return o->work + (((size_t)half * 3 + state) * o->batch + j) * o->per_chunk;
}

/* ---- optim_layout.c ------------------------------------------------------ */

/* optim_record_put - add the "O" record of name to batch b */
void optim_record_put(struct catalog_batch *b, const char *name,
		      const struct meta_optim *m, const kvf_opt_config *cfg);

/* optim_record_get - read the "O" record of name; KVF_ENOENT if none */
kvf_status optim_record_get(kvf_store *st, const char *name,
			    struct meta_optim *m, kvf_opt_config *cfg);

/* optim_streams_alloc - the six streams of a pseudo-sequence */
kvf_status optim_streams_alloc(kvf_store *st, struct seq *seq, uint64_t n_chunks,
			       unsigned states);

/* optim_place_batch - write chunks [c0, c0 + n) of every kept state from
 * the work buffers of half as generation gen */
kvf_status optim_place_batch(kvf_opt *o, struct seq *seq, uint64_t c0,
			     uint32_t n, uint32_t gen, uint32_t half);

/* optim_load_page - stream_read_entries callback (arg: struct load_ctx):
 * point src at the page in place, or copy it into work */
kvf_status optim_load_page(void *arg, uint64_t i, const unsigned char *page,
			   int in_place);

/* ---- optim_handle.c ------------------------------------------------------ */

/* optim_config_take - a caller's kvf_opt_config (any struct_size, the
 * kind's defaults for fields it lacks), checked as torch.optim checks
 * it, into *out; KVF_EINVAL naming the field (message starts with call),
 * KVF_EVERSION */
kvf_status optim_config_take(const char *call, const kvf_opt_config *in,
			     kvf_opt_config *out);
/* optim_enter - the checks every call on a handle starts with */
kvf_status optim_enter(kvf_opt *o, const char *call);

/* ---- optim_commit.c ------------------------------------------------------ */

/* optim_reserve_gen - reserve the segments and buffers generation gen
 * needs whole; *want: free segments a stripe it needs */
kvf_status optim_reserve_gen(kvf_opt *o, struct seq *seq, uint32_t gen,
			     const char *call, uint32_t *want);

/* optim_make_room - after a refused create or step: whether to retry once
 * the cleaner made room (cleaner_make_room) */
int optim_make_room(kvf_store *st, int attempt, uint32_t want,
		    const char *call, const char *name, kvf_status *rc);

/* optim_commit_gen - flush seq's segments, then durably name gen as
 * current.  Caller holds dur.lock, world shared and seq->lock. */
kvf_status optim_commit_gen(kvf_opt *o, struct seq *seq, uint64_t steps,
			    uint32_t gen, int with_seq_record);

#endif /* KVF_ENGINE_OPTIM_INT_H */
