/*
 * store_state.h - the store's internal state, shared by the engine's
 * modules: the composition of their states (types only; the calls are in
 * each module's header).
 *
 * A store is a directory: the header file KVFLASH, the catalog (RocksDB)
 * in meta/, a LOCK file, and the media (files stripe-NNN.kvf unless device
 * paths were given).
 *
 * Data flows: kvf_append copies each head's tokens into its stream's group
 * buffer; a full group is sealed into a page of the sequence's open segment
 * on the stream's next stripe; a full open segment is written with its
 * summary in one write and its catalog record is committed; kvf_sync seals
 * partial groups and segments and makes it all durable.
 *
 * Locking, in the order they may be taken:
 *   dur.lock        one durable point at a time: kvf_sync, the cleaner,
 *                   kvf_seq_free and the optimizer calls take it first;
 *   world (rwlock)  every public call holds it shared; the cleaner's
 *                   relocation commit holds it exclusive, so it sees no
 *                   call half done;
 *   seq->lock       a sequence's streams, lengths and open segments;
 *                   held for a whole call on that sequence (reads too);
 *   seqtab.lock     the id -> sequence table;
 *   segtab.lock     the segment table, free lists, page references
 *                   (live bits and the shared-page map).
 * A call holds one sequence lock, except fork (the parent, then the new
 * child before it is visible) and attention batches (in id order).  The
 * leaf locks (writer, buffer pools, fatal state, the cleaner's bell) are
 * taken last and alone.
 *
 * The engine's files call one way, in the order at the top of
 * docs/store.md; tests/check-layers.sh holds them to it.
 */
#ifndef KVF_ENGINE_STORE_STATE_H
#define KVF_ENGINE_STORE_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "engine/cleaning/cleaner_state.h"
#include "engine/durability/durable_state.h"
#include "engine/cleaning/evict_state.h"
#include "engine/base/fatal_state.h"
#include "engine/base/key.h"
#include "engine/base/meta.h"
#include "engine/base/prof.h"
#include "engine/segments/openseg_state.h"
#include "engine/optim/optim_state.h"
#include "engine/sequences/prefix_state.h"
#include "engine/reads/readpath_state.h"
#include "engine/planning/recompute_state.h"
#include "engine/base/segfmt.h"
#include "engine/segments/segtable_state.h"
#include "engine/sequences/seq_state.h"
#include "engine/base/tier_state.h"
#include "engine/segments/writer_state.h"
#include "compute/codec.h"
#include "ftl/media.h"
#include "api/status.h"
#include "kvflash.h"

struct catalog; /* engine/base/catalog.h */

/* counters for kvf_stats; atomics, updated where the bytes move.  The
 * write counters are saved by every durable point ("N") and restored at
 * open, so they count since the store was created; reads count since open */
struct store_counters {
	_Atomic uint64_t user_bytes;      /* bytes handed to append */
	_Atomic uint64_t data_bytes;      /* full data pages written */
	_Atomic uint64_t padding_bytes;   /* partial pages written by sync */
	_Atomic uint64_t kt_bytes;        /* K^T pages written */
	_Atomic uint64_t optim_bytes;     /* optimizer state pages written */
	_Atomic uint64_t cleaner_bytes;   /* pages copied by the cleaner */
	_Atomic uint64_t summary_bytes;   /* summary pages written */
	_Atomic uint64_t bytes_read;      /* bytes read from media */
	_Atomic uint64_t pages_read;      /* pages read from media */
	_Atomic uint64_t segments_written; /* segment writes */
	_Atomic uint64_t segments_cleaned; /* victims the cleaner emptied */
	_Atomic uint64_t segments_reclaimed; /* trimmed for reuse */
	_Atomic uint64_t sparf_pages_read;   /* pages SparF read */
	_Atomic uint64_t sparf_pages_skipped; /* K/V pages dense would
					       * have read and SparF did not */
	_Atomic uint64_t wb_bytes;           /* pages waiting for write-back */
	_Atomic uint64_t wb_runs;            /* runs written back */
	_Atomic uint64_t dram_only_bytes;    /* waiting pages freed unwritten */
	_Atomic uint64_t attend_calls;       /* attention calls */
	_Atomic uint64_t attend_bytes_read;  /* bytes they read from media */
	_Atomic uint64_t prefetch_pages;     /* pages prefetches cached */
};

/*
 * struct kvf_store - a composition of the modules' states, each declared
 * in its module's header with what it owns, its invariants and its
 * locking.  What is directly here belongs to the store itself (store.c):
 * fixed at open, read by every module without a lock.
 */
struct kvf_store {
	char *dir;              /* the store directory */
	kvf_options opts;       /* as opened; paths not kept */
	struct store_header hdr; /* the configuration on disk */
	int read_only;          /* opened read-only */
	int lock_fd;            /* flock on DIR/LOCK */
	int lock_created;       /* this open made DIR/LOCK */
	struct catalog *cat;
	struct kvf_media *media;
	int media_borrowed;     /* media is the caller's (store_open_media) */
	int trim;               /* trim dying segments (kvf_options.trim) */

	/* shape, derived once from hdr */
	uint32_t elt_bytes;     /* bytes per element of the dtype */
	uint32_t group_tokens;  /* G: tokens of one head in a token group */
	uint32_t group_pages;   /* P: index entries (pages) of a group */
	uint32_t group_bytes;   /* G * row_bytes, or a codec's encoded
				 * group (the larger of K's and V's) */
	uint32_t group_stride;  /* S: entries of a group: P, or with a
				 * codec P + the pages of G plain rows */
	uint32_t plain_off;     /* first entry of a group's plain rows: P
				 * with a codec (group.h), else 0 */
	kvf_codec codec;        /* how sealed K and V groups are kept */
	struct kvc_codec_layout codec_lay[2]; /* its K and V layouts */
	const struct kvc_codec_kernels *ck; /* codec kernels; NULL: none */
	uint32_t row_bytes;     /* head_dim * elt_bytes: one token of a head */
	uint32_t pages_per_seg; /* pages per segment */
	uint32_t data_per_seg;  /* data pages per segment (summary aside) */
	uint32_t page_bits;     /* low bits of an address: page in segment */
	uint32_t n_segments;    /* n_stripes * segs_per_stripe */
	uint32_t kt_dims;       /* E: head dims per K^T page (0: no K^T) */
	uint32_t kt_tokens;     /* T: tokens per K^T page */
	uint32_t kt_groups;     /* head_dim / E: K^T pages per token block */

	pthread_rwlock_t world; /* see the file comment */
	struct pool *pool;      /* workers for compute near the data */
	struct store_counters c;
	struct prof prof;       /* engine/base/prof.h */

	struct store_fatal fatal;     /* engine/base/fatal.h */
	struct seg_table segtab;      /* engine/segments/segtable.h */
	struct seq_table seqtab;      /* engine/sequences/seq.h */
	struct writer writer;         /* engine/segments/writer.h */
	struct segbuf_pool bufs;      /* engine/segments/writer.h */
	struct seg_pack pack;         /* engine/segments/openseg.h */
	struct read_spares reads;     /* engine/reads/readpath.h */
	struct prefetch_busy prefetch; /* engine/reads/prefetch.h */
	struct durable dur;           /* engine/durability/durable.h */
	struct cleaner cleaner;       /* engine/cleaning/cleaner.h */
	struct optim_registry optims; /* engine/optim/optim_store.h */
	struct tier tier;             /* engine/base/tier.h */
	struct recompute_registry recomp; /* engine/planning/recompute.h */
	struct evictor evict;         /* engine/cleaning/evict.h */
	struct prefix_index prefix;   /* engine/sequences/prefix.h */
};

/* seg_stripe - the stripe of a global segment id */
static inline uint32_t seg_stripe(const struct kvf_store *st, uint32_t segid)
{
	return segid % st->hdr.n_stripes;
}

static inline uint64_t seg_in_stripe(const struct kvf_store *st,
				     uint32_t segid)
{
	return segid / st->hdr.n_stripes;
}

#endif /* KVF_ENGINE_STORE_STATE_H */
