/*
 * kvflash.h - the public interface of kvflash, a flash-aware KV-cache store.
 *
 * This is the only public header.  Everything here is prefixed kvf_/KVF_;
 * anything not declared here is private and may change.  A call is declared
 * here only once it is implemented.  It is longer than the house's 700
 * lines on purpose: it is the whole contract, read as one manual, in
 * sections (status, options, the store, sequences, attention, optimizer
 * state, inspection), and a program needs only this one file.
 *
 * Conventions, for every call:
 *  - Fallible calls return kvf_status; KVF_OK (0) is success.  The numeric
 *    values of the codes are pinned and never renumbered.
 *  - On failure kvf_last_error() returns a message naming the call, the bad
 *    value and the limit.  Output parameters are written only on success.
 *  - Structs that cross the API start with struct_size and only grow at the
 *    end.  Their _init functions fill every field with its default; zero in
 *    a field always means "the default".
 *  - The caller owns every buffer it passes; the library keeps no pointer
 *    to it after the call returns.
 */
#ifndef KVFLASH_H
#define KVFLASH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(KVF_BUILDING_LIBRARY) && defined(__GNUC__)
#define KVF_API __attribute__((visibility("default")))
#else
#define KVF_API
#endif

/* ---- versions --------------------------------------------------------- */

/* The library version.  CMake parses these three lines; keep their form. */
#define KVF_VERSION_MAJOR 0
#define KVF_VERSION_MINOR 1
#define KVF_VERSION_PATCH 0

#define KVF_VERSION_NUMBER \
	(KVF_VERSION_MAJOR * 10000 + KVF_VERSION_MINOR * 100 + KVF_VERSION_PATCH)

/*
 * kvf_version_number - the library version of the code actually linked.
 * Return: MAJOR * 10000 + MINOR * 100 + PATCH.
 * Concurrency: any thread, any time.
 */
KVF_API unsigned kvf_version_number(void);

/*
 * kvf_version_string - the same version as "MAJOR.MINOR.PATCH".
 * Return: a static string, never NULL.
 * Concurrency: any thread, any time.
 */
KVF_API const char *kvf_version_string(void);

/* ---- status codes ----------------------------------------------------- */

/*
 * Status codes, grouped by what the caller should do.  Values are pinned:
 * new codes take unused values inside their group, none is renumbered.
 */
typedef enum {
	KVF_OK = 0,

	/* 10..29: the call was wrong; fix the argument.  Nothing changed. */
	KVF_EINVAL = 10,   /* malformed argument: NULL, misaligned, bad enum */
	KVF_ERANGE = 11,   /* a number past its limit: layer, token, segment */
	KVF_ENOENT = 12,   /* the named object does not exist */
	KVF_EEXIST = 13,   /* the object to create exists already */
	KVF_EMISMATCH = 14, /* options contradict the stored configuration */
	KVF_EVERSION = 15, /* struct or format newer than this library */
	KVF_ECLOSED = 16,  /* the handle was closed */
	KVF_ENOTSUP = 17,  /* valid, but not supported by this build/media */

	/* 30..39: out of a resource; free something and retry. */
	KVF_ENOMEM = 30,   /* memory allocation failed */
	KVF_ENOSPC = 31,   /* the media is full of live data */
	KVF_EBUSY = 32,    /* held by another handle or process */

	/* 40..49: the data or the device failed; the rest stays usable. */
	KVF_EIO = 40,      /* the operating system reported an I/O error */
	KVF_ECORRUPT = 41, /* stored data failed verification; not returned */

	/* 50: sticky.  Every later call on the handle returns it; reopen. */
	KVF_EFATAL = 50
} kvf_status;

/*
 * kvf_strerror - a short static description of a status code.
 * Return: never NULL.  An unknown code gives "unknown status N" in a
 * thread-local buffer that the next unknown code on the thread reuses.
 * Concurrency: any thread, any time.
 */
KVF_API const char *kvf_strerror(kvf_status status);

/*
 * kvf_last_error - the message of the last failed kvf_ call on this thread.
 * Return: a thread-local string, "" when no call has failed on this thread.
 * It stays valid until the next failing kvf_ call on the same thread.
 * Concurrency: each thread sees only its own message.
 */
KVF_API const char *kvf_last_error(void);

/* ---- model, options --------------------------------------------------- */

typedef enum { KVF_DTYPE_F16, KVF_DTYPE_BF16, KVF_DTYPE_F32 } kvf_dtype;

typedef enum {
	KVF_MEDIA_FILE,   /* one file or block device per stripe */
	KVF_MEDIA_MEMORY, /* process memory; gone at close */
	KVF_MEDIA_FLASH   /* emulated NAND flash device */
} kvf_media_kind;

/* kvf_dtype_name, kvf_media_name - a static lower-case name ("f16",
 * "bf16", "f32"; "file", "memory", "flash"), "unknown" for a value out of
 * range.  kvf_kind_name and kvf_seg_state_name, below, likewise. */
KVF_API const char *kvf_dtype_name(kvf_dtype dtype);
KVF_API const char *kvf_media_name(kvf_media_kind media);

/*
 * Compressed KV (docs/compression.md): how a token group of K or V is
 * encoded once sealed (kvf_options.codec, below).
 */
typedef enum {
	KVF_CODEC_NONE = 0, /* full width in the store dtype, bit-exact */
	KVF_CODEC_FP8 = 1,  /* E4M3, one f32 scale per group (as vLLM) */
	KVF_CODEC_INT8 = 2, /* symmetric 8-bit: K a scale per channel of
			     * the group, V a scale per token */
	KVF_CODEC_INT4 = 3  /* asymmetric 4-bit with zero point (KIVI):
			     * K per channel of the group, V per token */
} kvf_codec;

/* kvf_codec_name - "none", "fp8", "int8", "int4"; "unknown" for a value
 * out of range.  Concurrency: any thread. */
KVF_API const char *kvf_codec_name(kvf_codec codec);

/* The model shape a store is created for. */
typedef struct {
	uint32_t n_layers;   /* transformer layers */
	uint32_t n_q_heads;  /* query heads per layer */
	uint32_t n_kv_heads; /* key/value heads; n_q_heads % n_kv_heads == 0.
			      * Grouped-query attention: query head h
			      * attends with KV head
			      * h / (n_q_heads / n_kv_heads), so each
			      * KV head serves a run of consecutive
			      * query heads (as torch's
			      * repeat_interleave; 1 = multi-query,
			      * n_q_heads = multi-head) */
	uint32_t head_dim;   /* elements per head vector, 1..KVF_HEAD_DIM_MAX,
			      * any value in every dtype and page size (see
			      * below) */
	kvf_dtype dtype;     /* element type of stored K/V */
} kvf_model;

/*
 * Head sizes.  Any head_dim from 1 to KVF_HEAD_DIM_MAX works in every
 * dtype at every page size, with nothing to pad: reads return exactly
 * head_dim elements a token and the default attention scale is
 * 1/sqrt(head_dim).  The store keeps each head's tokens in token groups of
 * G tokens over P pages, chosen at creation as the fewest pages whose
 * unused bytes are at most 3 % of them (G = floor(P * page_size / (head_dim
 * * element bytes))); rows may cross a page boundary inside a group.  A
 * row that divides the page gives P = 1 and G = page_size / row, as before
 * (head_dim 128, f16, 4 KiB pages: 16 tokens a page); head_dim 80 in f16
 * at 4 KiB takes P = 1, G = 25 (2.3 % unused), head_dim 192 in f16 P = 2,
 * G = 21 (1.6 % unused).  kvf_store_info_get reports G and P.  kt_pages
 * (SparF) needs head_dim <= 512.
 */
#define KVF_HEAD_DIM_MAX 1024u

/* Store options.  Fill with kvf_options_init, then change what you need. */
typedef struct {
	size_t struct_size;       /* sizeof(kvf_options), set by _init */
	kvf_model model;          /* the shape the store holds */
	kvf_media_kind media;     /* default KVF_MEDIA_FILE */
	uint32_t page_size;       /* bytes per page; default 4096 */
	uint32_t n_threads;       /* worker threads; 0 = online CPUs */
	uint32_t kt_pages;        /* 1 = also keep K^T pages for SparF */
	uint64_t segment_size;    /* bytes per segment per stripe; 1 MiB */
	uint64_t capacity_bytes;  /* media bytes over all stripes; 4 GiB.
				   * A limit, not an allocation: a new
				   * stripe file is sparse, and allocates
				   * segment by segment as data is written
				   * (reusing freed segments first, and
				   * giving dead ones back, see trim), up
				   * to this or the file system's free
				   * space; then appends answer KVF_ENOSPC */
	uint32_t n_stripes;       /* stripes; 0 = n_device_paths or 1 */
	uint32_t queue_depth;     /* I/O requests in flight per ring; 32 */
	const char *const *device_paths; /* NULL = files in the store dir */
	uint32_t n_device_paths;  /* entries in device_paths */
	uint32_t direct_io;       /* 0 = where allowed, 1 = on, 2 = off */
	uint32_t read_only;       /* 1 = open an existing store read-only */
	/* KVF_MEDIA_FLASH: the emulated device, kept in its image
	 * DIR/flash.img (page bytes, per-page spare records, erase
	 * counts), so a flash store persists like a file store: closed,
	 * killed or cut off and reopened it recovers with its data, its
	 * FTL mapping and its wear.  These three apply when the store is
	 * created; a reopened store keeps the device it has */
	uint32_t flash_channels;  /* channels; 0 = one per stripe */
	uint32_t flash_cell;      /* 0 = TLC, 1 SLC, 2 MLC, 3 TLC, 4 QLC */
	float flash_spare;        /* spare factor (physical - logical) /
				   * physical; 0 = 0.07 */
	uint32_t trim;            /* trim segments when they are reclaimed:
				   * devices get a discard, stripe files a
				   * punched hole (a dead segment's space
				   * goes back to the file system), the
				   * flash emulator and memory drop the
				   * pages.  0 = the default: every one, but
				   * that stripe files keep a few reclaimed
				   * segments (2, and half a segment a
				   * segment of live pages) untrimmed for
				   * reuse; 1 = every one; 2 = never
				   * (stripe files keep every block they
				   * ever allocated, up to capacity_bytes) */
	uint32_t verify_reads;    /* check pages against their hash when
				   * read: 0 = those read from file or
				   * flash media (a memory store's pages,
				   * read in place, are hashed when
				   * written but not checked again: they
				   * never left the process), 1 = every
				   * page, a memory store's too */
	uint64_t dram_budget;     /* bytes of DRAM the store may hold for KV
				   * (docs/store.md, "The memory tier"):
				   * group buffers, the index, cached pages
				   * and pages waiting for write-back, never
				   * more.  Default 1 GiB; at least 1 MiB
				   * (KVF_EINVAL below, but for 0);
				   * 0 = no tier: nothing cached, pages
				   * written as they fill, no limit on
				   * group buffers and index */
	/* Eviction (docs/store.md, "Eviction"): when live data passes
	 * evict_high of the media (or an append finds no room), whole
	 * sequences are dropped by the policy until it is below evict_low.
	 * Pinned sequences (kvf_seq_pin) and optimizer state are never
	 * evicted; a call running on a sequence finishes first.  Handle options: a
	 * reopen may change them */
	uint32_t evict_policy;    /* kvf_evict_policy; default
				   * KVF_EVICT_NONE: a full store answers
				   * KVF_ENOSPC */
	float evict_high;         /* share of the media's pages live that
				   * starts eviction; default 0.90 */
	float evict_low;          /* share eviction brings it down to;
				   * default 0.80; 0 < low < high <= 1 */
	uint64_t admit_tokens;    /* endurance-aware admission (docs/
				   * store.md, "Admission"): 0 = off (the
				   * default); N = a sequence's K, V and X
				   * pages stay in the memory tier, off the
				   * media, until the sequence holds N
				   * tokens (in the layer appended), so a
				   * sequence freed sooner never costs a
				   * media write.  Such a sequence is not
				   * covered by kvf_sync until admitted (a
				   * crash may bring it back with fewer
				   * tokens, as few as none); kvf_close and
				   * kvf_seq_fork admit it, and so does a
				   * tier with no room for its pages.
				   * Needs dram_budget > 0 and file or
				   * flash media */
	uint32_t profile;         /* 1 = time the write path's stages
				   * (kvf_stats prof_*_ns: copies, hashing,
				   * the memory tier, segments, the writer
				   * queue, locks); two clock reads a stage,
				   * so a few percent slower.  Default 0.
				   * A handle option: a reopen may change
				   * it */
	uint64_t prefix_cache_bytes; /* cached prefixes (docs/prefix.md,
				   * "Cached prefixes"): when a sequence
				   * with published prefix chunks is freed,
				   * the store keeps those chunks as a
				   * cached prefix that later
				   * kvf_seq_create_tokens calls share from,
				   * until this many bytes of K/V (chunks
				   * only cached prefixes hold; kvf_stats.
				   * prefix_cached_bytes) are passed, an
				   * append needs the room (cached prefixes
				   * go before any sequence, even with
				   * KVF_EVICT_NONE), or kvf_prefix_drop.
				   * Default 1 GiB; 0 = off: a free takes
				   * its chunks out at once.  A handle
				   * option: a reopen may change it (the
				   * cached prefixes stay until dropped) */
	/* Compressed KV (docs/compression.md): a kvf_codec, chosen when the
	 * store is created and recorded in its header; a reopen must name
	 * the same one (else KVF_EMISMATCH; a read-only open with no model
	 * takes the store's).  KVF_CODEC_NONE (0, the default) keeps rows
	 * in the model's dtype, bit-exact.  With FP8, INT8 or INT4 the
	 * store keeps each head's K and V in token groups of G tokens
	 * (kvf_store_info_get) encoded when a group fills: appends take the
	 * model's dtype as always, the part-filled last group of a head
	 * stays exact (in memory, and written exact by kvf_sync), reads
	 * return the decoded values in the model's dtype and attention
	 * computes on the encoded pages.  An append whose values a codec
	 * cannot hold (NaN, infinity, magnitude above 65504, the f16 range)
	 * is refused with KVF_ERANGE, naming the token, and changes
	 * nothing.  X streams (kvf_append_x) stay plain.  KVF_EINVAL (nothing
	 * created) for a value that is no kvf_codec, and for a model whose
	 * head_dim the codec cannot make smaller than plain rows (e.g. INT8
	 * of head_dim 1: its per-token scale costs more than the code).
	 * A truncation or fork that cuts inside an encoded group makes its
	 * kept tokens the exact tail again as decoded values (encoded anew
	 * when the group fills) */
	uint32_t codec;
} kvf_options;

/* kvf_options.evict_policy: which sequences eviction drops first.  Every
 * policy skips a sequence whose every page is shared with another (a fork
 * family member): dropping it would give no room back. */
typedef enum {
	KVF_EVICT_NONE = 0,      /* never evict */
	KVF_EVICT_LRU = 1,       /* least recently used first */
	KVF_EVICT_LFU = 2,       /* least often used first (ties: LRU) */
	KVF_EVICT_ENDURANCE = 3  /* prefer dropping to rewriting: LRU rank
				  * plus the share of the pages the cleaner
				  * would have to copy to reclaim the
				  * sequence's segments (kept live by
				  * others); see docs/store.md */
} kvf_evict_policy;

/* Fills *o with defaults for model m; use kvf_options_init. */
KVF_API void kvf_options_init_sized(kvf_options *o, const kvf_model *m,
				    size_t struct_size);

/*
 * kvf_options_init - fill every field of *o with its default, for model m.
 * m may be NULL (the model is then zero and must be set before use).
 * Concurrency: any thread; *o is the caller's.
 */
static inline void kvf_options_init(kvf_options *o, const kvf_model *m)
{
	kvf_options_init_sized(o, m, sizeof(*o));
}

/* Options of one attention (or scoring) call. */
typedef struct {
	size_t struct_size; /* sizeof(kvf_attn_opts), set by _init */
	float scale;        /* softmax scale; 0 = 1/sqrt(head_dim) */
	uint32_t sparse;    /* 0 dense, 1 SparF, 2 SparF by whole groups */
	uint32_t top_r;     /* SparF: head dims used for approximate scores */
	uint32_t top_k;     /* SparF: tokens attended exactly */
	float *lse;         /* NULL, or [n_q_heads] log-sum-exp out */
	const uint8_t *mask; /* NULL, or [mask_len] per token: 0 = skip it */
	uint64_t mask_len;  /* entries in mask; at least the layer's tokens */
	uint64_t window;    /* 0 = every token; else only the last window */
	uint32_t h2o;       /* 1 = add this call's attention probabilities
			     * to the sequence's H2O scores (kvf_h2o_read);
			     * 0 = not (other values: KVF_EINVAL) */
	/* SparF's exact set: tokens always attended exactly, whatever the
	 * approximate scores say, counted in top_k (the rest of top_k goes
	 * by score; sizes past top_k raise it).  Real heads put much of
	 * their mass on the first tokens (attention sinks) and the newest
	 * ones.  With a window, the sinks are the window's first tokens. */
	uint32_t sink_tokens;   /* SparF: first tokens; 0 = the smaller of
				 * KVF_SINK_TOKENS_DEFAULT and top_k / 4,
				 * KVF_TOKENS_NONE = none */
	uint32_t recent_tokens; /* SparF: last tokens; 0 = top_k /
				 * KVF_RECENT_SHARE_DEFAULT,
				 * KVF_TOKENS_NONE = none */
} kvf_attn_opts;

/* kvf_attn_opts.sink_tokens, recent_tokens: no tokens (0 is the default) */
#define KVF_TOKENS_NONE UINT32_MAX
/* The default sinks (StreamingLLM keeps 4), and the default recent window
 * as a share of top_k (an eighth); by default at least 5/8 of top_k is
 * left to the scores.  By groups (sparse = 2) the budget is ceil(top_k /
 * group) whole groups, so the default sinks take their group only when
 * that budget is at least 4 groups, the default recent window only when
 * it is at least 8: below, every group is chosen by score. */
#define KVF_SINK_TOKENS_DEFAULT 4u
#define KVF_RECENT_SHARE_DEFAULT 8u

/* Fills *o with defaults; use kvf_attn_opts_init. */
KVF_API void kvf_attn_opts_init_sized(kvf_attn_opts *o, size_t struct_size);

/*
 * kvf_attn_opts_init - dense attention, default scale, no LSE output.
 * Concurrency: any thread; *o is the caller's.
 */
static inline void kvf_attn_opts_init(kvf_attn_opts *o)
{
	kvf_attn_opts_init_sized(o, sizeof(*o));
}

/* Figures of one store, from kvf_stats_get.  Written bytes count since the
 * store was created (as of its last sync, plus this handle's since); read
 * bytes and segment events count since open. */
typedef struct {
	size_t struct_size;          /* sizeof(kvf_stats), set by the caller */
	uint64_t user_bytes;         /* bytes handed to kvf_append(_x) */
	uint64_t host_bytes_written; /* bytes written to media, all causes */
	double host_wa;              /* (host_bytes_written - opt_bytes) /
				      * user_bytes */
	double device_wa;            /* NAND programs / host page writes */
	double total_wa;             /* host_wa * device_wa */
	uint64_t bytes_read;         /* bytes read from media */
	uint64_t index_bytes;        /* memory held by the index */
	/* host_bytes_written, by cause */
	uint64_t data_bytes;         /* full token-group pages */
	uint64_t padding_bytes;      /* partial group pages written by sync */
	uint64_t cleaner_bytes;      /* live pages the cleaner copied */
	uint64_t kt_bytes;           /* K^T pages */
	uint64_t summary_bytes;      /* segment summaries */
	uint64_t metadata_bytes;     /* catalog bytes (not in host_wa) */
	/* segments */
	uint32_t segments_total;     /* segments of the media */
	uint32_t segments_free;      /* ready for writing */
	uint32_t segments_open;      /* being filled */
	uint32_t segments_sealed;    /* holding live pages */
	uint32_t segments_dying;     /* no live page; reused after a sync */
	uint32_t segments_corrupt;   /* failed verification at open */
	uint64_t segments_written;   /* segment writes since open */
	uint64_t segments_cleaned;   /* victims the cleaner emptied */
	uint64_t segments_reclaimed; /* segments trimmed for reuse */
	uint64_t pages_read;         /* pages read from media */
	uint64_t live_pages;         /* pages the index references */
	uint64_t n_sequences;        /* live sequences */
	uint64_t n_syncs;            /* syncs since the store was created */
	uint64_t sparf_pages_read;   /* pages SparF read (K^T and K/V) */
	uint64_t sparf_pages_skipped; /* K/V pages dense attention would have
				       * read and SparF did not */
	uint64_t opt_bytes;          /* optimizer state pages written (part
				      * of host_bytes_written; user_bytes
				      * counts no optimizer bytes) */
	/* the memory tier (kvf_options.dram_budget); counts since open */
	uint64_t dram_budget;        /* the budget; 0 = no tier */
	uint64_t dram_bytes;         /* DRAM held now: group buffers, index,
				      * cached pages, pages waiting for
				      * write-back */
	uint64_t dram_peak;          /* the most dram_bytes was since open */
	uint64_t cache_bytes;        /* cached pages, both pools */
	uint64_t cache_recent_bytes; /* of them, the recent pool: pages just
				      * written or read */
	uint64_t cache_hot_bytes;    /* the importance pool: pages attention
				      * keeps selecting */
	uint64_t cache_hits;         /* page reads served from DRAM */
	uint64_t cache_misses;       /* page reads that went to the media */
	uint64_t cache_evictions;    /* pages dropped for room */
	uint64_t writeback_bytes;    /* pages waiting for write-back now */
	uint64_t writeback_runs;     /* per-head runs written back */
	uint64_t attend_calls;       /* attention calls (kvf_attend*,
				      * kvf_scores) */
	uint64_t attend_bytes_read;  /* bytes those calls read from media */
	/* eviction (kvf_options.evict_policy); counts since open */
	uint64_t evict_runs;         /* times eviction ran */
	uint64_t evict_runs_full;    /* of them, because an append or a
				      * kvf_sync found no room */
	uint64_t evict_runs_watermark; /* because live data passed
				      * evict_high */
	uint64_t evicted_seqs;       /* sequences evicted */
	uint64_t evicted_bytes;      /* media bytes they alone held */
	uint64_t evict_copy_bytes;   /* bytes of other sequences' pages left
				      * in the victims' segments (the
				      * cleaner copies them to reclaim) */
	double live_share;           /* live pages / the media's data pages */
	/* prefix reuse (kvf_seq_create_tokens); counts since open */
	uint64_t prefix_lookups;     /* kvf_seq_create_tokens calls */
	uint64_t prefix_hits;        /* of them, calls that reused >= 1 token */
	uint64_t prefix_tokens_asked; /* tokens those calls were given */
	uint64_t prefix_tokens_reused; /* of them, shared with a stored
					* prefix instead of appended */
	uint64_t prefix_bytes_saved; /* K/V bytes of those tokens (all
				      * layers): bytes not rewritten */
	uint64_t prefix_chunks;      /* token chunks in the prefix index now */
	uint64_t dram_only_bytes;    /* pages freed while they waited in DRAM
				      * (write-back or admission): never
				      * written to the media; since open */
	/* the write path's stages (kvf_options.profile = 1, else 0): ns
	 * summed over threads since open, each exclusive of the stages
	 * inside it, so the foreground ones of a single appending thread
	 * add up to its time in kvf_append and kvf_sync */
	uint64_t prof_append_ns;     /* kvf_append(_x) outside the stages
				      * below: planning, lookups */
	uint64_t prof_lock_ns;       /* waiting for the store's and the
				      * sequence's locks */
	uint64_t prof_copy_ns;       /* rows copied into group buffers and
				      * segment pages */
	uint64_t prof_hash_ns;       /* sealed pages hashed */
	uint64_t prof_tier_ns;       /* the memory tier: holds, pages
				      * waiting for write-back, written
				      * segments handed to the cache */
	uint64_t prof_segment_ns;    /* segments reserved and opened */
	uint64_t prof_queue_ns;      /* waiting for the segment writers */
	uint64_t prof_sync_ns;       /* kvf_sync outside the stages above:
				      * media sync, catalog commits */
	uint64_t prof_writer_ns;     /* the writer threads (in the
				      * background): segment writes and
				      * their commits */
	uint64_t cache_segments;     /* written segments the cache took in
				      * place (no copy), since open */
	uint64_t cache_segments_skipped; /* written segments not cached:
				      * no spare buffer was ready */
	/* cached prefixes (kvf_options.prefix_cache_bytes) */
	uint64_t prefix_cached;      /* cached prefixes now */
	uint64_t prefix_cached_bytes; /* K/V bytes of the chunks that only
				      * cached prefixes hold: what dropping
				      * them all gives back */
	uint64_t prefix_cache_kept;  /* cached prefixes made since open */
	uint64_t prefix_cache_dropped; /* of all, dropped since open (the
				      * budget, eviction, kvf_prefix_drop,
				      * a creation taking the id, or held
				      * whole by a newer one) */
	uint64_t prefix_cache_hits;  /* kvf_seq_create_tokens calls since
				      * open whose deepest shared chunk only
				      * cached prefixes held: hits the cache
				      * made */
	uint64_t prefetch_pages;     /* pages kvf_prefetch and the layer-
				      * ahead reads of kvf_attend_batch
				      * cached, since open (their reads
				      * count in bytes_read, pages_read) */
} kvf_stats;

/* ---- the store --------------------------------------------------------- */

typedef struct kvf_store kvf_store;

/*
 * kvf_open - create the store in dir, or reopen it.
 * @dir: the store directory; created (one level) if missing.
 * @opts: NULL to reopen with the stored configuration; otherwise every
 *        field that shapes the store (model, page_size, segment_size,
 *        capacity_bytes, n_stripes, kt_pages, media) must match a store
 *        that exists (a zero model means "as stored"; a zero model
 *        with read_only takes every field as stored).
 * @out: receives the handle; NULL on failure.
 * Crash contract: after a crash (process killed, power lost), each
 * sequence holds a prefix of the tokens appended to it that is at least as
 * long as what its last successful kvf_sync covered (tokens appended after
 * that sync may come back too), and every token it holds, K, V and X, is
 * the one appended; nothing half written is ever returned.  An optimizer is
 * at its last step that returned KVF_OK, or at a later step that was in
 * progress.  kvf_seq_create, kvf_seq_fork and kvf_seq_free take effect in
 * the catalog when they return; after a crash each one is either in
 * effect or not (never in part), and certainly in effect after the next
 * kvf_sync.  Damage is never rolled back silently: a catalog that lost
 * records of a completed sync is refused (KVF_ECORRUPT; kvtool verify
 * reports it, kvtool repair salvages what is left).
 * Creation is atomic: a crash while kvf_open creates a store leaves no
 * store (the same call then creates it afresh) or a complete one.
 * One open handle per directory (several read-only ones may share it);
 * the directory's lock dies with its owner, so a reopen right after the
 * owner was killed succeeds.
 * A KVF_MEDIA_MEMORY store starts empty at every open.  A KVF_MEDIA_FLASH
 * store keeps the same contract as a file store: its emulated device
 * lives in DIR/flash.img, synced by kvf_sync, and at reopen its FTL is
 * rebuilt from the image's spare areas as an SSD's is after power loss (a
 * page whose program a crash tore is taken as never written, so its
 * older version is read, never its torn bytes).
 * Return: KVF_OK; KVF_EINVAL (an option out of its range, checked before
 * anything is made: the message names the field; or dir is not a store
 * and not empty); KVF_EMISMATCH (option contradicts the stored
 * configuration); KVF_EVERSION (newer format or options struct);
 * KVF_ECORRUPT (damaged header, catalog or durable-point mark, a catalog
 * that lost synced records, a stripe file or flash image that is missing
 * or cut short, or a store whose header is missing: the message names the
 * file and what is at stake; nothing is changed);
 * KVF_EBUSY (open by another live handle); KVF_ENOENT (read_only and no
 * store); KVF_ENOTSUP; KVF_EIO; KVF_ENOMEM.  A failed create leaves no
 * files.
 * Concurrency: any thread; different directories in parallel.
 */
KVF_API kvf_status kvf_open(const char *dir, const kvf_options *opts,
			    kvf_store **out);

/*
 * kvf_close - sync, then release the store.  NULL is a no-op.
 * Everything is released in every case, even when the final sync fails;
 * st is then invalid, as a freed pointer is: no call may use it again.
 * Optimizer handles of st (kvf_opt) stay allocated until kvf_opt_close;
 * every other call on them answers KVF_ECLOSED.
 * Return: KVF_OK; the status of the final kvf_sync; KVF_EFATAL when the
 * handle had stopped after a failure (writes since the last successful
 * sync may not be durable).
 * Concurrency: no other call on st, or on its optimizer handles, may run
 * meanwhile.
 */
KVF_API kvf_status kvf_close(kvf_store *st);

/*
 * kvf_sync - make everything appended so far durable: partial token
 * groups are written as padded pages, open segments are written, and the
 * catalog is committed with its log on stable storage.  With admission
 * on (kvf_options.admit_tokens), a sequence not yet admitted is left in
 * DRAM and not made durable.
 * Return: KVF_OK; KVF_ENOSPC (no room for the partial pages; nothing
 * lost, free sequences and retry); KVF_EFATAL.
 * Concurrency: any thread; appends and reads may run alongside.
 */
KVF_API kvf_status kvf_sync(kvf_store *st);

/*
 * kvf_stats_get - the store's figures.  Set out->struct_size first.
 * Return: KVF_OK; KVF_EINVAL (NULL, struct_size too small); KVF_EVERSION.
 * Concurrency: any thread, any time the store is open.
 */
KVF_API kvf_status kvf_stats_get(kvf_store *st, kvf_stats *out);

/*
 * kvf_seq_create - start an empty sequence with the caller's id.
 * Return: KVF_OK; KVF_EEXIST; KVF_EINVAL (id UINT64_MAX is reserved);
 * KVF_ENOTSUP (read-only); KVF_ENOMEM; KVF_EFATAL.
 * Concurrency: any thread.
 */
KVF_API kvf_status kvf_seq_create(kvf_store *st, uint64_t seq);

/*
 * kvf_seq_reset - start sequence seq empty, whatever the store holds under
 * that id: a sequence left by an earlier run (creation is durable at once,
 * so a killed engine's sequences are still there when it restarts, and
 * kvf_seq_create of their ids answers KVF_EEXIST) is freed first, as
 * kvf_seq_free frees it (its forks keep what they share), then the id is
 * created afresh.  An engine that keeps no state of its own across a
 * crash starts each request with kvf_seq_reset instead of kvf_seq_create.
 * Crash contract: a crash during the call leaves the id absent, the old
 * sequence, or the new empty one; calling it again gives the new one.
 * Return: KVF_OK; KVF_EINVAL (st NULL, id UINT64_MAX); KVF_ENOTSUP
 * (read-only); KVF_EEXIST (another thread created seq meanwhile);
 * KVF_ENOMEM; KVF_EFATAL.
 * Concurrency: any thread; a call on seq running meanwhile either
 * finishes first or answers KVF_ENOENT.
 */
KVF_API kvf_status kvf_seq_reset(kvf_store *st, uint64_t seq);

/*
 * kvf_seq_fork - make child a copy of parent's first n_tokens tokens of
 * every layer.  Full token groups are shared by reference; the partial
 * last group is copied.  Later appends to either do not affect the other.
 * Return: KVF_OK; KVF_ENOENT (parent); KVF_EEXIST (child); KVF_ERANGE
 * (n_tokens past the end of some layer of parent); KVF_EINVAL; KVF_EIO,
 * KVF_ECORRUPT (a partial group to copy could not be read back: the child
 * was not made); KVF_ENOSPC (parent's pages waiting for write-back go to
 * the media first, and no room could be made, by cleaning or, with a
 * policy, eviction, which never takes parent: the child was not made);
 * KVF_EFATAL.
 * Concurrency: any thread; waits for calls on parent.
 */
KVF_API kvf_status kvf_seq_fork(kvf_store *st, uint64_t parent, uint64_t child,
				uint64_t n_tokens);

/*
 * kvf_seq_free - delete a sequence; its pages become garbage (segments
 * they empty are reused after the next kvf_sync); its pages still in
 * DRAM are dropped unwritten (kvf_stats.dram_only_bytes).  With
 * kvf_options.prefix_cache_bytes (the default), the whole token groups it
 * published as prefix chunks (kvf_seq_create_tokens, kvf_seq_add_tokens)
 * that no other sequence holds stay, as a cached prefix the store owns
 * (a fork of them under an id of the store's: its pages are shared, not
 * copied), unless they alone pass the budget; the rest goes.  Keeping
 * them writes the sequence's pages that wait in DRAM, as kvf_seq_fork
 * does; a failure to keep them only leaves them out of the cache.
 * Return: KVF_OK; KVF_ENOENT (also for the id of a cached prefix:
 * kvf_prefix_drop drops those); KVF_ENOTSUP (read-only); KVF_EFATAL.
 * Concurrency: any thread; a call on seq running meanwhile either finishes
 * first or answers KVF_ENOENT.
 */
KVF_API kvf_status kvf_seq_free(kvf_store *st, uint64_t seq);

/*
 * kvf_seq_create_tokens - start a sequence for the token ids
 * tokens[0, n_tokens), sharing the K/V of the longest prefix of them
 * that the store holds.  The ids are hashed a token group (chunk) at a
 * time in a chain (XXH3-64, each chunk's hash seeded with the one before)
 * and matched against the chunks that live sequences published; a match
 * is confirmed on the token ids themselves, never on a hash alone.  The
 * match may end inside a group (the new sequence copies that partial
 * group, as kvf_seq_fork does).  The new sequence then holds *n_reused
 * tokens of every layer (shared pages, counted in kvf_stats); the caller
 * appends K/V for tokens [*n_reused, n_tokens) (and for any later ones).
 * The ids are registered with the sequence: each whole group of them that
 * every layer's K/V covers becomes a reusable prefix chunk, and stays one
 * while the sequence lives.  The caller promises that the K/V it appends
 * for a token is the one its ids determine (same model, same ids before
 * it).  n_tokens 0 creates an empty sequence that registers ids later.
 * @n_reused: receives the tokens shared (0 when nothing matched); it may
 *        equal n_tokens.
 * Return: KVF_OK; KVF_EEXIST; KVF_EINVAL (NULL tokens with n_tokens > 0,
 * NULL n_reused, id UINT64_MAX); KVF_ERANGE (n_tokens over 2^26);
 * KVF_ENOTSUP (read-only); KVF_EIO, KVF_ECORRUPT (a partial group to copy
 * could not be read back: nothing was made); KVF_ENOSPC (the holder's
 * pages waiting for write-back go to the media first, and no room could
 * be made, by cleaning or, with a policy, eviction, which never takes the
 * holder: nothing was made); KVF_ENOMEM; KVF_EFATAL.
 * Concurrency: any thread; waits for calls on the sequence it shares from.
 */
KVF_API kvf_status kvf_seq_create_tokens(kvf_store *st, uint64_t seq,
					 const uint32_t *tokens,
					 uint64_t n_tokens, uint64_t *n_reused);

/*
 * kvf_seq_add_tokens - register the next n_tokens token ids of a sequence
 * (a reply, the next turn), after those it registered before; its whole
 * groups become reusable prefix chunks once every layer's K/V covers
 * them.  Works on any sequence (one made by kvf_seq_create registers
 * from token 0).  Ids may run ahead of the K/V appended.
 * Return: KVF_OK; KVF_ENOENT; KVF_EINVAL (NULL tokens with n_tokens > 0);
 * KVF_ERANGE (more than 2^26 ids in all); KVF_ENOTSUP (read-only, or a
 * sequence with groups kvf_h2o_evict dropped: its ids stop at the first);
 * KVF_ENOMEM; KVF_EFATAL.
 * Concurrency: any thread; calls on the same sequence are serialized.
 */
KVF_API kvf_status kvf_seq_add_tokens(kvf_store *st, uint64_t seq,
				      const uint32_t *tokens,
				      uint64_t n_tokens);

/*
 * kvf_prefix_drop - drop cached prefixes (docs/prefix.md, "Cached
 * prefixes"): the chunks only they hold leave the prefix index and their
 * pages become garbage (segments they empty are reused after the next
 * kvf_sync, as a free's).  Chunks a live sequence holds stay with it.
 * @seq: a cached prefix's id (kvf_prefix_list, kvf_seq_info_get's
 *       cached), or KVF_SEQ_NONE for every cached prefix.
 * @n_dropped: receives how many were dropped; may be NULL.
 * Return: KVF_OK (KVF_SEQ_NONE with none cached drops none);
 * KVF_ENOENT (seq is no sequence, or one of the caller's: the message
 * says which; nothing dropped); KVF_EINVAL (st NULL); KVF_ENOTSUP
 * (read-only); KVF_ENOMEM; KVF_EFATAL.
 * Concurrency: any thread; a kvf_seq_create_tokens running meanwhile
 * shares from a cached prefix before it goes, or does not share it.
 */
KVF_API kvf_status kvf_prefix_drop(kvf_store *st, uint64_t seq,
				   uint64_t *n_dropped);

/*
 * kvf_seq_export - write one sequence to the file at path: its K and V
 * of every layer, its X if it has any, and its registered token ids, in
 * a versioned file checked by XXH3-64 per chunk, each chunk compressed
 * with lz4 (after splitting 16-bit values into byte planes) only when that
 * makes it smaller.  The file holds the token order, not the store's
 * layout, so any store of the same model shape can import it.  An
 * existing file is replaced only when the export succeeds (written to
 * path.tmp, then renamed).
 * Return: KVF_OK; KVF_ENOENT (seq); KVF_EINVAL (NULL path); KVF_EIO (the
 * file; errno in the message); KVF_ECORRUPT (a page failed its check:
 * no file is left); KVF_ENOMEM; KVF_EFATAL.
 * Concurrency: any thread; appends to seq meanwhile are not exported (the
 * lengths are taken at the start); freeing it meanwhile gives KVF_ENOENT.
 */
KVF_API kvf_status kvf_seq_export(kvf_store *st, uint64_t seq,
				  const char *path);

/*
 * kvf_seq_import - make a sequence from a file of kvf_seq_export.  The
 * whole file is checked first (header, every chunk's checksum and size),
 * then the sequence is made and filled; a failure at any point leaves no
 * sequence behind.  On a store open read-only, the file and the id are
 * checked all the same and KVF_ENOTSUP comes last: it means the import
 * would be taken by the store opened for writing.
 * @seq: the id to give it; KVF_SEQ_NONE for the id it had when exported.
 * @out_seq: NULL, or receives the id used.
 * Return: KVF_OK; KVF_EEXIST (the id is taken); KVF_ENOENT (no such
 * file); KVF_ECORRUPT (not an export, or damaged: the message names the
 * file, offset and check); KVF_ENOTSUP (an export format other than this
 * library's: version in the message; or a read-only store); KVF_EMISMATCH
 * (the file's model shape differs from the store's: the message names
 * the field and both values); KVF_ERANGE (a store with a codec cannot
 * encode a K or V value of the file: the message names the layer, token,
 * head and dim); KVF_EIO; KVF_ENOSPC; KVF_ENOMEM; KVF_EINVAL (NULL path);
 * KVF_EFATAL.
 * Concurrency: any thread.
 */
KVF_API kvf_status kvf_seq_import(kvf_store *st, const char *path,
				  uint64_t seq, uint64_t *out_seq);

/*
 * kvf_seq_len - tokens of K/V appended to one layer of a sequence.
 * Return: KVF_OK; KVF_ENOENT; KVF_ERANGE (layer); KVF_EINVAL (NULL).
 * Concurrency: any thread.
 */
KVF_API kvf_status kvf_seq_len(kvf_store *st, uint64_t seq, uint32_t layer,
			       uint64_t *n_tokens);

/*
 * kvf_seq_truncate - keep the first n_tokens tokens of every layer of a
 * sequence and drop the rest: K and V, X (a layer with fewer X rows keeps
 * them all), K^T pages, the means of V and H2O scores that covered
 * dropped tokens, and the registered token ids past n_tokens (their
 * prefix chunks are no longer offered for reuse from the moment it
 * returns; register the new ones with kvf_seq_add_tokens).  For
 * speculative decoding (drop the rejected draft tokens), beam search and
 * an edited chat.  Pages shared with a fork or a prefix sharer stay as
 * they are for it: this sequence gives up its references, and copies the
 * kept part of the group the cut falls in.  Appends then continue at
 * n_tokens.  n_tokens equal to the length keeps every K/V token (token
 * ids registered past it still go).
 * Crash contract: like kvf_seq_free, the cut is in the catalog when it
 * returns, and certainly in effect after the next kvf_sync; a crash
 * brings the sequence back either as before the cut (its synced tokens)
 * or cut (then with at least min(n_tokens, what the last sync covered)
 * tokens), never with a dropped token and a later one; on a codec store
 * (kvf_options.codec) a cut inside a group the last sync wrote encoded
 * may come back cut at that group's start until the next kvf_sync
 * writes the kept tokens as a tail.  A cut of tokens appended since the
 * last sync writes nothing.  The room of the dropped
 * pages is reused after the next kvf_sync.
 * Return: KVF_OK; KVF_ENOENT (seq); KVF_ERANGE (n_tokens past the end of
 * some layer: the message names the layer and its length); KVF_EINVAL
 * (st NULL); KVF_ENOTSUP (read-only); KVF_EIO, KVF_ECORRUPT (the group
 * the cut falls in could not be read back: nothing changed); KVF_ENOMEM;
 * KVF_EFATAL.
 * Concurrency: any thread; waits for calls on seq, and for a kvf_sync.
 */
KVF_API kvf_status kvf_seq_truncate(kvf_store *st, uint64_t seq,
				    uint64_t n_tokens);

/*
 * kvf_seq_pin, kvf_seq_unpin - keep a sequence out of eviction while the
 * caller uses it (a request being served).  Pins count: a sequence pinned
 * twice needs two unpins.  Pins belong to the handle: a reopen starts
 * with none.
 * Return: KVF_OK; KVF_ENOENT; KVF_EINVAL (st NULL; unpin of a sequence
 * not pinned); KVF_EFATAL.
 * Concurrency: any thread.
 */
KVF_API kvf_status kvf_seq_pin(kvf_store *st, uint64_t seq);
KVF_API kvf_status kvf_seq_unpin(kvf_store *st, uint64_t seq);

/* why a sequence was evicted (kvf_evict_event.reason) */
typedef enum {
	KVF_EVICTED_FULL = 1,      /* an append or sync found no room */
	KVF_EVICTED_WATERMARK = 2, /* live data passed evict_high */
	KVF_EVICTED_CALL = 3       /* kvf_evict */
} kvf_evict_reason;

/* One evicted sequence, from kvf_evict_log. */
typedef struct {
	uint64_t seq;         /* its id; calls on it answer KVF_ENOENT */
	uint32_t reason;      /* kvf_evict_reason */
	uint32_t policy;      /* kvf_evict_policy that chose it */
	uint64_t bytes;       /* media bytes only it held (given back once
			       * the cleaner reclaims its segments) */
	uint64_t copy_bytes;  /* other live bytes in its segments */
	uint64_t uses;        /* calls on it (LFU's count; kept across a
			       * reopen as of the last sync) */
	uint64_t idle;        /* calls on other sequences since its last
			       * (LRU's age) */
} kvf_evict_event;

/*
 * kvf_evict - evict sequences now, by policy (0 = the store's
 * evict_policy), until at least bytes of media are given back or nothing
 * more can be; then reclaim their segments as kvf_sync would.
 * @freed: NULL, or receives the bytes given back (may be below bytes).
 * Return: KVF_OK (also when less could be freed: see *freed); KVF_EINVAL
 * (st NULL, policy unknown, or 0 on a store without a policy);
 * KVF_ENOTSUP (read-only); KVF_EIO; KVF_EFATAL.
 * Concurrency: any thread; as kvf_seq_free for each victim.
 */
KVF_API kvf_status kvf_evict(kvf_store *st, uint32_t policy, uint64_t bytes,
			     uint64_t *freed);

/*
 * kvf_evict_log - take the records of sequences evicted since the last
 * call, oldest first (the store keeps the latest 4096; older ones are
 * counted in *lost).
 * @out: [cap] records; @n: receives how many were written; @lost: NULL,
 *       or receives the records dropped for room since the last call.
 * Return: KVF_OK; KVF_EINVAL (st or n NULL, out NULL with cap > 0).
 * Concurrency: any thread; each record goes to one caller.
 */
KVF_API kvf_status kvf_evict_log(kvf_store *st, kvf_evict_event *out,
				 uint32_t cap, uint32_t *n, uint64_t *lost);

/*
 * kvf_append - append n_tokens tokens of K and V to one layer.
 * @k, @v: [n_tokens][n_kv_heads][head_dim] in the store's dtype.
 * All or nothing: a refused append changes nothing.
 * Return: KVF_OK; KVF_ENOENT (seq); KVF_ERANGE (layer); KVF_EINVAL (NULL
 * buffer); KVF_ENOSPC (media full of live data: free sequences); KVF_ENOTSUP
 * (read-only); KVF_EIO, KVF_ECORRUPT (the partial token group it extends,
 * written by an earlier sync, could not be read back: nothing changed);
 * KVF_ENOMEM; KVF_EFATAL.
 * Concurrency: appends to different sequences run in parallel; calls on the
 * same sequence are serialized.
 */
KVF_API kvf_status kvf_append(kvf_store *st, uint64_t seq, uint32_t layer,
			      uint32_t n_tokens, const void *k, const void *v);

/* kvf_append_at's pos: append wherever the layer ends (kvf_append) */
#define KVF_POS_ANY UINT64_MAX

/*
 * kvf_append_at - kvf_append, only if the layer holds exactly pos tokens
 * now: the engine states the position of its first new token, so a
 * position that went astray (a retried step, a rollback not done) is
 * refused instead of stored at the wrong place.  pos KVF_POS_ANY appends
 * wherever the layer ends.
 * Return: as kvf_append; KVF_ERANGE also when the layer's length is not
 * pos (the message names both; nothing changed).
 * Concurrency: as kvf_append; the check and the append are one step.
 */
KVF_API kvf_status kvf_append_at(kvf_store *st, uint64_t seq, uint32_t layer,
				 uint64_t pos, uint32_t n_tokens, const void *k,
				 const void *v);

/*
 * kvf_read - tokens [t0, t1) of one KV head into caller buffers.
 * @k_out, @v_out: [t1-t0][head_dim] in the store's dtype; either may be NULL
 * to skip it.  Pages read from file or flash media are verified first (a
 * memory store's with kvf_options.verify_reads = 1).
 * Return: KVF_OK; KVF_ENOENT; KVF_ERANGE (layer, head, or range past the
 * end); KVF_EINVAL (reversed range, both outputs NULL); KVF_ECORRUPT (a
 * page failed its checksum: message names segment and page; nothing of it
 * is returned); KVF_EIO.
 * Concurrency: any thread; other sequences may append meanwhile.
 */
KVF_API kvf_status kvf_read(kvf_store *st, uint64_t seq, uint32_t layer,
			    uint32_t kv_head, uint64_t t0, uint64_t t1,
			    void *k_out, void *v_out);

/*
 * kvf_append_x - append n_tokens pre-projection activations (the X-cache
 * of HILOS, the recomputation input of KVPR) to one layer.
 * @x: [n_tokens][n_q_heads * head_dim] in the store's dtype.
 * Return and concurrency: as kvf_append.
 */
KVF_API kvf_status kvf_append_x(kvf_store *st, uint64_t seq, uint32_t layer,
				uint32_t n_tokens, const void *x);

/*
 * kvf_read_x - X tokens [t0, t1) of one layer into x_out
 * ([t1-t0][n_q_heads * head_dim]).  Return and concurrency: as kvf_read.
 */
KVF_API kvf_status kvf_read_x(kvf_store *st, uint64_t seq, uint32_t layer,
			      uint64_t t0, uint64_t t1, void *x_out);

/*
 * kvf_prefetch - a hint: read the K and V pages of one layer of seq (every
 * KV head) that lie on media and are not in the memory tier into the tier,
 * in the background, so that a later kvf_attend or kvf_read of that layer
 * finds them in DRAM.  Returns at once.  A prefetch fills only the tier's
 * free room (it never evicts a cached page), reads only what fits, and
 * skips pages that moved meanwhile; its reads count in bytes_read and the
 * pages it cached in prefetch_pages (kvf_stats).  An attention of the
 * layer (kvf_attend, kvf_attend_batch, kvf_scores, kvf_topk) that comes
 * while it is queued takes it off, and while it reads stops it after the
 * batch in flight (and waits for that batch), then reads the rest itself.
 * Nothing to do (KVF_OK): no memory tier (dram_budget 0), memory media, a
 * tier with no free room, every page cached, the same layer already being
 * read ahead, or 4 prefetches of the store queued or running.
 * Return: KVF_OK (queued or nothing to do); KVF_EINVAL (st NULL);
 * KVF_ERANGE (layer); KVF_ENOENT (seq); KVF_ECLOSED, KVF_EFATAL as every
 * call; KVF_ENOMEM.  A read that fails in the background is not reported:
 * the attention that needs the page reads it and reports what it finds.
 * Concurrency: any thread; prefetches run on one background thread the
 * process's stores share, never ahead of kvf_attend_start's jobs;
 * kvf_close takes the store's queued ones off, stops a running one after
 * the batch in flight, and waits for it.
 */
KVF_API kvf_status kvf_prefetch(kvf_store *st, uint64_t seq, uint32_t layer);

/* ---- attention and scores near the data --------------------------------- */

/*
 * kvf_attend - decode attention of one layer of a sequence, computed where
 * the K and V pages are: only q goes in and the output comes out.
 * @q: [n_q_heads][head_dim] fp32; @out: [n_q_heads][head_dim] fp32.
 * @opts: NULL for dense attention over every token with scale
 *        1/sqrt(head_dim); else scale, mask, window (the last window
 *        tokens only), lse ([n_q_heads] natural-log log-sum-exp of each
 *        head's scores, to merge with attention computed elsewhere:
 *        kvf_attn_merge) and h2o (accumulate this call's probabilities).
 *        sparse = 1 (SparF, InstInfer Algorithm 1; needs kt_pages): the
 *        top_r dims (0 = head_dim / 4; rounded up to whole K^T pages of E
 *        dims, chosen by the sum of |q| over a KV head's query heads)
 *        give approximate scores, the top_k tokens (0 = an eighth) of each
 *        query head are attended exactly: the exact set (the first
 *        sink_tokens and the last recent_tokens attended) and the rest of
 *        top_k by approximate score; the result is
 *        alpha * exact + (1 - alpha) * mean(V), alpha the share of the
 *        chosen tokens' exact mass in it plus the approximate mass of the
 *        tokens left out; lse is then that of the chosen tokens.
 *        sparse = 2: as 1, but the tokens are chosen as whole token
 *        groups (pages): the groups of the exact set (whose defaults
 *        apply only to budgets of 4 and 8 groups on) and, up to
 *        ceil(top_k / group) groups in all, those whose tokens' squared
 *        approximate probabilities, summed over the KV head's query
 *        heads, are largest (all of them when top_k is every token
 *        attended), every token of theirs attended.  A page read is
 *        then never read for one token, so the bytes read stay near
 *        top_k / tokens of dense's however the heavy tokens are
 *        scattered.
 * The query heads that share a KV head (GQA) are computed in one pass
 * over its pages; tokens still in group buffers are included.  A sequence
 * with no token gives out = 0 and lse = -INFINITY.  A head whose scores
 * hold a NaN (a NaN in q or in a stored key, or infinities whose product
 * or difference is one) has no softmax: its out and lse are NaN, never a
 * finite answer that left tokens out.
 * Return: KVF_OK; KVF_EINVAL (NULL buffer, bad option); KVF_ERANGE
 * (layer, mask shorter than the sequence, top_r); KVF_ENOENT;
 * KVF_ENOTSUP (sparse on a store without kt_pages, or with h2o);
 * KVF_EVERSION (opts); KVF_ECORRUPT (a page failed its checksum: the
 * message names it; out and lse are then unspecified); KVF_EIO; KVF_ENOMEM.
 * Concurrency: any thread; waits for calls on the same sequence; other
 * sequences may append meanwhile.
 */
KVF_API kvf_status kvf_attend(kvf_store *st, uint64_t seq, uint32_t layer,
			      const float *q, float *out,
			      const kvf_attn_opts *opts);

/*
 * kvf_attend_batch - kvf_attend for n_seqs sequences of one layer, their
 * (sequence, KV head) tasks spread over all workers and stripes.
 * @seqs: [n_seqs] distinct ids.  @q, @out: [n_seqs][n_q_heads][head_dim].
 * @opts: as kvf_attend; lse, when given, is [n_seqs][n_q_heads]; a mask
 *        applies to every sequence (mask_len covers the longest).
 * Return: as kvf_attend; KVF_EINVAL also for an id given twice.
 * Reading ahead: for a sequence whose dense attention (opts NULL or
 * sparse 0) read from media, the call queues a kvf_prefetch of the next
 * layer, of the tokens the same call would attend there (from the
 * window's start with a window), so the caller's work between layers
 * overlaps its reads; a warm sequence queues nothing.
 * Concurrency: as kvf_attend; sequences are locked in id order.
 */
KVF_API kvf_status kvf_attend_batch(kvf_store *st, uint32_t n_seqs,
				    const uint64_t *seqs, uint32_t layer,
				    const float *q, float *out,
				    const kvf_attn_opts *opts);

/*
 * kvf_attn_merge - combine two partial attention results over disjoint
 * token sets (each with its log-sum-exp) into the result over both.
 * @out_a, @out_b, @out: [n_heads][head_dim]; @lse_*: [n_heads].  out and
 * lse may alias an input.  A side with lse -INFINITY contributes nothing;
 * a side with lse NaN (kvf_attend: no softmax) makes the head NaN.
 * Return: KVF_OK; KVF_EINVAL (NULL, zero size).  Concurrency: pure.
 */
KVF_API kvf_status kvf_attn_merge(uint32_t n_heads, uint32_t head_dim,
				  const float *out_a, const float *lse_a,
				  const float *out_b, const float *lse_b,
				  float *out, float *lse);

/*
 * kvf_scores - the softmax attention probability of every token attended
 * (all, or the last opts->window) for each query head.
 * @probs: [n_q_heads][probs_cap]; row h gets the probabilities of the
 *         attended tokens in order (masked tokens 0).
 * Return: as kvf_attend; KVF_ERANGE when probs_cap is smaller than the
 * tokens attended.  Concurrency: as kvf_attend.
 */
KVF_API kvf_status kvf_scores(kvf_store *st, uint64_t seq, uint32_t layer,
			      const float *q, const kvf_attn_opts *opts,
			      float *probs, uint64_t probs_cap);

/*
 * kvf_topk - per KV head, the k tokens with the most attention mass from
 * the query heads that share it (the mean of their probabilities).
 * @tokens: [n_kv_heads][k] token positions, ascending within a head.
 * @mass: NULL, or [n_kv_heads][k] their mean probability.
 * @n_out: [n_kv_heads] tokens selected per head (min(k, tokens attended)).
 * Return: as kvf_attend; KVF_EINVAL for k = 0.
 * Concurrency: as kvf_attend.
 */
KVF_API kvf_status kvf_topk(kvf_store *st, uint64_t seq, uint32_t layer,
			    const float *q, const kvf_attn_opts *opts,
			    uint32_t k, uint64_t *tokens, float *mass,
			    uint32_t *n_out);

/*
 * kvf_score_fn - receives the raw scores of n tokens from token first for
 * query head q_head: q . k times the scale (the softmax logits; -INFINITY
 * where masked).  Return 0 to go on, nonzero to stop the iteration.
 */
typedef int (*kvf_score_fn)(void *arg, uint32_t q_head, uint64_t first,
			    uint32_t n, const float *scores);

/*
 * kvf_scores_iter - the raw attention scores of every token attended, in
 * blocks of at most one token group, KV head after KV head and in token
 * order within one, so a caller can merge them with scores it computes
 * elsewhere (tokens it holds itself) before normalizing.  opts: scale,
 * mask, window (sparse and h2o do not apply: KVF_ENOTSUP).
 * fn runs on the calling thread with the sequence locked: it must not
 * call the library on the same sequence.
 * Return: as kvf_scores, KVF_OK also when fn stopped early.
 * Concurrency: as kvf_attend.
 */
KVF_API kvf_status kvf_scores_iter(kvf_store *st, uint64_t seq, uint32_t layer,
				   const float *q, const kvf_attn_opts *opts,
				   kvf_score_fn fn, void *arg);

/*
 * kvf_h2o_read - the H2O scores (attention probability accumulated by the
 * kvf_attend calls with opts.h2o = 1, summed over the query heads of the
 * KV head) of tokens [t0, t1); tokens never scored read 0.  The scores
 * live in memory only: not kept across a reopen, not inherited by a fork.
 * Return: KVF_OK; KVF_EINVAL; KVF_ERANGE; KVF_ENOENT.
 * Concurrency: as kvf_read.
 */
KVF_API kvf_status kvf_h2o_read(kvf_store *st, uint64_t seq, uint32_t layer,
				uint32_t kv_head, uint64_t t0, uint64_t t1,
				float *out);

/* Options of kvf_h2o_evict: how much of each layer stays. */
typedef struct {
	size_t struct_size;   /* sizeof(kvf_h2o_evict_opts), set by _init */
	double keep;          /* share of a layer's tokens kept, in (0, 1];
			       * default 0.5; unused when keep_tokens > 0 */
	uint64_t keep_tokens; /* 0, or the tokens a layer keeps (at least 1) */
	uint32_t sinks;       /* first tokens always kept: 0 =
			       * KVF_SINK_TOKENS_DEFAULT (the first group),
			       * KVF_TOKENS_NONE = none */
	uint32_t window;      /* last tokens always kept: 0 = half of what
			       * the layer keeps, KVF_TOKENS_NONE = none */
} kvf_h2o_evict_opts;

/* kvf_h2o_evict: every layer, each by its own scores */
#define KVF_LAYER_ALL UINT32_MAX

/* Fills *o with defaults; use kvf_h2o_evict_opts_init. */
KVF_API void kvf_h2o_evict_opts_init_sized(kvf_h2o_evict_opts *o,
					   size_t struct_size);

/*
 * kvf_h2o_evict_opts_init - keep half of each layer, default sinks and
 * window.  Concurrency: any thread; *o is the caller's.
 */
static inline void kvf_h2o_evict_opts_init(kvf_h2o_evict_opts *o)
{
	kvf_h2o_evict_opts_init_sized(o, sizeof(*o));
}

/*
 * kvf_h2o_evict - H2O eviction inside a sequence (Zhang et al., 2023):
 * each KV head of a layer drops the whole token groups that attention
 * valued least, by its own scores, so a long sequence's bytes stay
 * bounded.  A group's value is the sum of its tokens' H2O scores
 * (kvf_h2o_read: over the query heads sharing the KV head).  Groups go,
 * lowest value first, until the head keeps at most its budget (keep of
 * the layer's tokens, or keep_tokens; whole groups, so it may keep more
 * when the sinks, the window and the groups not yet on media take the
 * rest).  Never dropped: a group holding one of the first `sinks` tokens
 * or one of the last `window`, the last (tail) group, the group the
 * last synced length ends inside (until a sync moves that length on: a
 * crash gives it back, with that group's synced tokens), a group still
 * waiting for write-back in memory; tokens the scores never saw count as
 * valued 0.
 * Crash contract: like kvf_seq_truncate, the drop is in the catalog when
 * the call returns (a "D" record, committed before any page is given
 * up; it survives the process being killed) and certainly in effect
 * after the next kvf_sync; a crash brings the sequence back either as
 * before the drop or after it.  The pages' room goes back to the
 * cleaner after the next durable point.  Afterwards every
 * attention call, dense, batch, multi-query and SparF (whose K^T pages
 * keep the dropped tokens' columns, never chosen), kvf_scores, kvf_topk
 * (probability 0), kvf_scores_iter (not handed out) and the H2O
 * accumulation treat a head's dropped tokens as masked for the query
 * heads that share it; kvf_read of a range holding one answers KVF_ENOENT
 * naming it; lengths and positions do not change and appends go on.  A
 * fork shares the marks of the groups it takes; kvf_seq_truncate or
 * kvf_seq_fork at a token inside a dropped group is refused (KVF_ERANGE),
 * a cut below one clears its mark; kvf_seq_export refuses such a sequence
 * (KVF_ENOTSUP).  SparF's mean of V is rebuilt from the kept tokens at
 * its next use.
 * @layer: a layer, or KVF_LAYER_ALL.  @opts: NULL for the defaults.
 * @dropped: NULL, or the tokens this call dropped, summed over the KV
 *           heads (and layers): each head's are its own.
 * Return: KVF_OK (also when nothing qualified: *dropped = 0); KVF_ENOENT
 * (no such sequence); KVF_ERANGE (layer); KVF_EINVAL (keep outside (0, 1]
 * or not finite, a layer with tokens whose scores were never gathered:
 * attend it with opts.h2o = 1 first); KVF_EVERSION (opts); KVF_ENOTSUP (read-only store);
 * KVF_ENOMEM; KVF_EIO; KVF_EFATAL (the store failed earlier, or the
 * record could not be committed: it takes no more writes).  Nothing
 * changes on a refusal.
 * Concurrency: any thread; waits for calls on the same sequence and for
 * a sync in progress.
 */
KVF_API kvf_status kvf_h2o_evict(kvf_store *st, uint64_t seq, uint32_t layer,
				 const kvf_h2o_evict_opts *opts,
				 uint64_t *dropped);

/* ---- inspection ------------------------------------------------------- */

/*
 * Calls for tools (kvtool) and tests that look inside a store: its
 * configuration, its sequences, its segments, and a full verification.
 * They read the store and change nothing in it, so they work on a store
 * opened read-only (kvf_options.read_only = 1 and a zero model: everything
 * as stored) as well as on one being written.
 */

#define KVF_SEQ_NONE UINT64_MAX     /* no sequence (ids never take it) */
#define KVF_SEGMENT_NONE UINT32_MAX /* no segment */
#define KVF_PAGE_SUMMARY UINT32_MAX /* kvf_verify_damage: the summary */

/* What a stored page holds. */
typedef enum {
	KVF_KIND_K = 0,  /* keys, token-indexed */
	KVF_KIND_V = 1,  /* values, token-indexed */
	KVF_KIND_X = 2,  /* pre-projection activations (kvf_append_x) */
	KVF_KIND_KT = 3  /* keys transposed (kt_pages) */
} kvf_kind;

/* The state of a segment of the media. */
typedef enum {
	KVF_SEG_FREE = 0,   /* ready for writing */
	KVF_SEG_OPEN = 1,   /* a sequence is filling it (in memory) */
	KVF_SEG_SEALED = 2, /* on media, committed, holding live pages */
	KVF_SEG_DYING = 3,  /* no live page; reused after the next sync */
	KVF_SEG_CORRUPT = 4 /* failed verification at open; kept out of use */
} kvf_seg_state;

/* "k", "v", "x", "kt"; "free", "open", "sealed", "dying", "corrupt" */
KVF_API const char *kvf_kind_name(kvf_kind kind);
KVF_API const char *kvf_seg_state_name(kvf_seg_state state);

/* The configuration of an open store, from kvf_store_info_get. */
typedef struct {
	size_t struct_size;        /* sizeof(kvf_store_info), set by the caller */
	uint32_t format_version;   /* on-disk format of the store */
	uint32_t library_version;  /* kvf_version_number() of the library */
	kvf_model model;           /* the shape the store holds */
	uint32_t page_size;        /* bytes per page */
	uint32_t group_tokens;     /* G: tokens of one head in one token
				    * group (group_pages pages) */
	uint64_t segment_size;     /* bytes per segment per stripe */
	uint64_t segs_per_stripe;  /* segments on each stripe */
	uint32_t n_stripes;        /* stripes (files or devices) */
	uint32_t data_pages_per_segment; /* most data pages of a segment
					  * (its summary takes the rest) */
	uint64_t capacity_bytes;   /* n_stripes * segs_per_stripe * segment_size */
	kvf_media_kind media;      /* where the segments live */
	uint32_t kt_pages;         /* 1 = K^T pages are kept */
	uint64_t store_id;         /* random id, also in every segment summary */
	uint32_t read_only;        /* 1 = this handle was opened read-only */
	uint32_t group_pages;      /* P: pages a token group of a K/V/X head
				    * takes (1 unless its rows leave more
				    * than 3 % of one page unused) */
	uint32_t group_bytes;      /* bytes of those P pages rows fill (with
				    * a codec: an encoded group's, K's or
				    * V's, the larger) */
	uint32_t codec;            /* kvf_codec of sealed K/V groups */
	uint32_t codec_layout;     /* their encoded layout's version: 1 every
				    * scale an f16, 2 K's INT8/INT4 scales a
				    * byte each (docs/compression.md); 0
				    * without a codec */
} kvf_store_info;

/*
 * kvf_store_info_get - the configuration of st.  Set out->struct_size first.
 * Return: KVF_OK; KVF_EINVAL (st or out NULL, struct_size too small);
 * KVF_EVERSION (struct_size larger, nonzero tail); KVF_EFATAL.
 * Concurrency: any thread, any time the store is open.
 */
KVF_API kvf_status kvf_store_info_get(kvf_store *st, kvf_store_info *out);

/*
 * kvf_seq_list - the ids of the live sequences, ascending.
 * @ids: receives the first min(cap, *n) ids; may be NULL when cap is 0.
 * @cap: entries ids has room for.
 * @n: receives the number of live sequences, even when larger than cap
 *     (call with cap 0 to size the array; sequences created meanwhile
 *     may make it grow).
 * Return: KVF_OK; KVF_EINVAL (st or n NULL, ids NULL with cap > 0);
 * KVF_ENOMEM; KVF_EFATAL.
 * Concurrency: any thread; a sequence created or freed meanwhile is listed
 * or not, as if the call ran entirely before or after it.
 */
KVF_API kvf_status kvf_seq_list(kvf_store *st, uint64_t *ids, size_t cap,
				size_t *n);

/*
 * kvf_prefix_list - the ids of the store's cached prefixes, ascending
 * (kvf_options.prefix_cache_bytes); kvf_seq_info_get describes each, and
 * kvf_prefix_drop drops them.  kvf_seq_list never lists them, and the
 * other sequence calls answer KVF_ENOENT for their ids.
 * @ids, @cap, @n: as kvf_seq_list.
 * Return: KVF_OK; KVF_EINVAL (st or n NULL, ids NULL with cap > 0);
 * KVF_ENOMEM; KVF_EFATAL.
 * Concurrency: any thread.
 */
KVF_API kvf_status kvf_prefix_list(kvf_store *st, uint64_t *ids, size_t cap,
				   size_t *n);

/*
 * kvf_seq_x_len - tokens of X (kvf_append_x) appended to one layer of a
 * sequence.
 * Return: KVF_OK; KVF_ENOENT; KVF_ERANGE (layer); KVF_EINVAL (NULL);
 * KVF_EFATAL.
 * Concurrency: any thread.
 */
KVF_API kvf_status kvf_seq_x_len(kvf_store *st, uint64_t seq, uint32_t layer,
				 uint64_t *n_tokens);

/* One sequence, from kvf_seq_info_get.  Per-layer lengths come from
 * kvf_seq_len and kvf_seq_x_len. */
typedef struct {
	size_t struct_size;    /* sizeof(kvf_seq_info), set by the caller */
	uint64_t id;           /* the sequence */
	uint64_t family;       /* root of its fork tree; id if never forked */
	uint64_t parent;       /* forked from; KVF_SEQ_NONE if not a fork */
	uint64_t tokens;       /* K/V tokens, summed over the layers */
	uint64_t x_tokens;     /* X tokens, summed over the layers */
	uint64_t pages;        /* pages its index names (media or being
				* written); partial groups in memory aside */
	uint64_t shared_pages; /* of those, pages other sequences (forks)
				* name too */
	/* prefix reuse (kvf_seq_create_tokens, kvf_seq_add_tokens) */
	uint64_t prefix_tokens; /* token ids registered */
	uint64_t prefix_chunks; /* of them, whole token groups published as
				 * reusable prefix chunks */
	uint64_t prefix_shared_chunks; /* of those, chunks other sequences
					* hold too */
	uint64_t prefix_hash;   /* chain hash of its deepest shared chunk,
				 * 0 if none: sequences with the same value
				 * share that prefix */
	uint32_t cached;        /* 1: one of the store's cached prefixes
				 * (kvf_prefix_list), not a caller's */
	uint64_t cached_own_chunks; /* a cached prefix's chunks that no
				 * other sequence holds: what dropping it
				 * gives back */
	uint64_t cached_hits;   /* a cached prefix's worth: creations that
				 * reused the first of those chunks (since
				 * open) */
} kvf_seq_info;

/*
 * kvf_seq_info_get - what one sequence is and holds.  Set
 * out->struct_size first.  Also describes the store's cached prefixes
 * (kvf_prefix_list; out->cached says so).
 * Return: KVF_OK; KVF_ENOENT (seq); KVF_EINVAL (st or out NULL,
 * struct_size too small); KVF_EVERSION; KVF_EFATAL.
 * Concurrency: any thread; waits for calls on seq.
 */
KVF_API kvf_status kvf_seq_info_get(kvf_store *st, uint64_t seq,
				    kvf_seq_info *out);

/* One segment, from kvf_segment_info_get.  Segments are numbered
 * 0 .. kvf_stats.segments_total - 1; segment s lies on stripe
 * s % n_stripes, at index s / n_stripes of that stripe. */
typedef struct {
	size_t struct_size;     /* sizeof(kvf_segment_info), set by the caller */
	uint32_t segid;         /* the segment */
	uint32_t stripe;        /* stripe (file or device) holding it */
	uint64_t seg_in_stripe; /* index on the stripe: byte offset is
				 * seg_in_stripe * segment_size */
	kvf_seg_state state;    /* see kvf_seg_state */
	uint32_t data_pages;    /* data pages on media; 0 when FREE or OPEN */
	uint32_t live_pages;    /* pages the index names (OPEN: placed so far) */
	uint32_t erase_count;   /* times trimmed for reuse */
	uint64_t seqno;         /* commit sequence number; 0 when FREE or OPEN */
	uint64_t write_ns;      /* when written, ns since the epoch (UTC);
				 * 0 when FREE or OPEN */
	uint64_t owner;         /* sequence it was filled for (the cleaner's
				 * copies say 0); KVF_SEQ_NONE when FREE */
} kvf_segment_info;

/*
 * kvf_segment_info_get - the state of segment segid.  Set
 * out->struct_size first.
 * Return: KVF_OK; KVF_ERANGE (segid not below segments_total); KVF_EINVAL
 * (st or out NULL, struct_size too small); KVF_EVERSION; KVF_EFATAL.
 * Concurrency: any thread; the answer is one consistent snapshot of the
 * segment, which writers and the cleaner may change right after.
 */
KVF_API kvf_status kvf_segment_info_get(kvf_store *st, uint32_t segid,
					kvf_segment_info *out);

/* One damaged page (or segment summary) that kvf_verify found. */
typedef struct {
	size_t struct_size;     /* sizeof(kvf_verify_damage) of the library:
				 * fields past it are absent */
	uint32_t segid;         /* segment; KVF_SEGMENT_NONE when the index
				 * has no page for the group at all */
	uint32_t page;          /* data page in the segment, or
				 * KVF_PAGE_SUMMARY: the segment's summary */
	uint32_t stripe;        /* stripe of the segment */
	uint64_t seg_in_stripe; /* its index on the stripe */
	uint64_t seq;           /* sequence whose index names the page;
				 * KVF_SEQ_NONE for a summary */
	uint32_t layer;         /* layer of the page */
	kvf_kind kind;          /* what it holds */
	uint32_t head;          /* KV head (K, V), or slice (X: query head) */
	uint64_t group;         /* token group: tokens [group * group_tokens,
				 * (group + 1) * group_tokens); for KT the
				 * entry of the K^T stream: token block *
				 * K^T pages per block + dim group */
	kvf_status status;      /* KVF_ECORRUPT, or KVF_EIO (unreadable) */
	const char *message;    /* what is wrong, naming the segment, page,
				 * expected and found; valid during the call */
} kvf_verify_damage;

/*
 * kvf_verify_fn - receives each damage kvf_verify finds, on the thread
 * that called kvf_verify, with no lock of the store held.  Return 0 to go
 * on, nonzero to stop the verification early.
 */
typedef int (*kvf_verify_fn)(void *arg, const kvf_verify_damage *d);

/* The outcome of kvf_verify. */
typedef struct {
	size_t struct_size;         /* sizeof(kvf_verify_report), set by the caller */
	uint64_t sequences_checked; /* sequences walked */
	uint64_t pages_checked;     /* index entries whose page was checked */
	uint64_t bad_pages;         /* of those, damaged or missing (calls
				     * of fn for pages) */
	uint32_t segments_checked;  /* segment summaries read and checked */
	uint32_t bad_segments;      /* of those, damaged or unreadable */
	uint64_t bytes_read;        /* bytes read from media */
	uint32_t stopped;           /* 1 = fn asked to stop; counts are partial */
} kvf_verify_report;

/*
 * kvf_verify - read every page the index names and check it, and check
 * that the index and the segment summaries agree.
 * For each sealed segment the summary is read and its magic, store id,
 * segment id, sequence number and checksum checked.  For each sequence,
 * every page its index names on media is read and checked: its XXH3-64
 * against the summary's and the index's check; the summary's key against
 * the index slot (stream and token group; a fork's shared pages name the
 * ancestor that wrote them); the segment's state.  fn (may be NULL) gets
 * one call per index entry naming a damaged page (a page forks share is
 * reported for each sequence naming it), one per damaged summary, and one
 * per token group the index lost.  Pages still in memory (partial groups,
 * segments being filled) are not on media and are not checked.
 * @out: receives the counts; bad_pages + bad_segments == 0 means clean.
 * Return: KVF_OK, also when damage was found (out says so); KVF_EINVAL (st
 * or out NULL, struct_size too small); KVF_EVERSION; KVF_ENOMEM; KVF_EFATAL.
 * Concurrency: any thread; other calls run meanwhile (each sequence is
 * checked as of one moment; sequences created after the call began are not
 * checked, those freed meanwhile are skipped).  fn must not close st.
 */
KVF_API kvf_status kvf_verify(kvf_store *st, kvf_verify_fn fn, void *arg,
			      kvf_verify_report *out);

/* The outcome of kvf_repair. */
typedef struct {
	size_t struct_size;          /* sizeof(kvf_repair_report), set by the caller */
	uint64_t catalog_points;     /* durable points the catalog held */
	uint64_t marked_points;      /* durable points the store completed
				      * (its mark DIR/SYNCED) */
	uint32_t segments_scanned;   /* segments read from media */
	uint32_t segments_restored;  /* segment records rebuilt from their
				      * summaries */
	uint32_t segments_damaged;   /* summaries of the lost points whose
				      * pages fail their hash: not restored */
	uint32_t segments_optimizer; /* optimizer segments of the lost points:
				      * not restored (an optimizer stays at
				      * the step its records hold) */
	uint64_t sequences_restored; /* sequences the catalog lost, remade
				      * (a fork's link to its parent is not
				      * known again: it becomes a root) */
	uint64_t sequences_extended; /* sequences given back tokens */
	uint64_t tokens_restored;    /* K/V tokens given back, over layers */
	uint32_t changed;            /* 1 = the catalog was rewritten */
	uint64_t x_tokens_restored;  /* X tokens given back, over layers */
} kvf_repair_report;

/*
 * kvf_repair - salvage a store whose catalog lost records (kvf_open says
 * KVF_ECORRUPT, "the catalog ... lost records").  Never run implicitly.
 * First the catalog keeps what its log replays to before its damage, as
 * kvf_open and the dry run read it (RocksDB's RepairDB runs only for a
 * catalog that does not open at all: a damaged table or manifest).  Then
 * every segment on media is read: a summary that is whole, of this store,
 * written after the catalog's last durable point and by the last one the
 * store completed, with every page matching its hash, gives back its
 * segment record, and the sequences it holds are given back the tokens it
 * proves: whole token groups that run on from a sequence's lengths, K and
 * V of every head and X of every query head (the tokens of a stream's
 * last, partial group are not known again and stay lost, as do K^T pages,
 * fork links and optimizer steps of the lost points; a sequence freed
 * among the lost points may come back; a store with kt_pages gets its
 * segment records back but no tokens, since K^T pages would be missing).
 * Finally the catalog is marked as having every point, so the store
 * opens.
 * @dir: the store; it must not be open.  @opts: NULL, or options whose
 * device_paths name the store's devices (other fields are ignored).
 * @dry_run: 1 = count what would be done and change nothing.
 * @out: receives the counts.
 * Return: KVF_OK (out says what was done); KVF_EINVAL (NULL, struct_size
 * too small); KVF_ENOENT (no store in dir); KVF_ENOTSUP (memory or flash
 * media: repair reads segments from stripe files only); KVF_EBUSY (open
 * elsewhere); KVF_ECORRUPT (the store header or the mark is damaged, or
 * a stripe file is missing or cut short: nothing to repair from);
 * KVF_EIO; KVF_ENOMEM.
 * Concurrency: any thread; dir must not be open anywhere.
 */
KVF_API kvf_status kvf_repair(const char *dir, const kvf_options *opts,
			      int dry_run, kvf_repair_report *out);

/* ---- optimizer configuration ------------------------------------------ */

typedef enum {
	KVF_OPT_ADAM,
	KVF_OPT_ADAMW,
	KVF_OPT_SGD,
	KVF_OPT_ADAGRAD
} kvf_opt_kind;

/* Hyper-parameters of one optimizer; the meanings are torch.optim's. */
typedef struct {
	size_t struct_size;   /* sizeof(kvf_opt_config), set by _init */
	kvf_opt_kind kind;    /* which update rule */
	float lr;             /* learning rate */
	float beta1;          /* Adam/AdamW: first-moment decay */
	float beta2;          /* Adam/AdamW: second-moment decay */
	float eps;            /* Adam/AdamW/AdaGrad: denominator term */
	float weight_decay;   /* L2 (Adam, SGD, AdaGrad) or decoupled (AdamW) */
	float momentum;       /* SGD: momentum factor */
	float dampening;      /* SGD: dampening of the momentum */
	uint32_t nesterov;    /* SGD: 1 = Nesterov momentum */
	float lr_decay;       /* AdaGrad: learning-rate decay */
	float initial_accumulator_value; /* AdaGrad: start of sum of g^2 */
	kvf_dtype out_dtype;  /* dtype written to params_out */
	float max_grad_norm;  /* clip the global gradient L2 norm to this, as
			       * torch.nn.utils.clip_grad_norm_; 0 = off */
	float grad_scale;     /* multiply gradients by this first (loss
			       * unscaling: 1 / loss scale); 0 = 1 */
} kvf_opt_config;

/* Fills *c with PyTorch's defaults for kind; use kvf_opt_config_init. */
KVF_API void kvf_opt_config_init_sized(kvf_opt_config *c, kvf_opt_kind kind,
				       size_t struct_size);

/*
 * kvf_opt_config_init - PyTorch's defaults for kind: Adam lr 1e-3, betas
 * (0.9, 0.999), eps 1e-8; AdamW the same with weight_decay 1e-2; SGD lr
 * 1e-3, no momentum; AdaGrad lr 1e-2, eps 1e-10.  out_dtype is f32.
 * Concurrency: any thread; *c is the caller's.
 */
static inline void kvf_opt_config_init(kvf_opt_config *c, kvf_opt_kind kind)
{
	kvf_opt_config_init_sized(c, kind, sizeof(*c));
}

/* A gradient handed to an optimizer step. */
typedef struct {
	kvf_dtype dtype;         /* of values */
	const void *values;      /* dense: n_params values; sparse: n values */
	const uint32_t *indices; /* NULL = dense; else n ascending indices */
	uint64_t n;              /* entries in values (and indices) */
} kvf_grad;

/* ---- optimizer state in the store ---------------------------------------- */

typedef struct kvf_opt kvf_opt;

/*
 * kvf_opt_create - keep the state of an optimizer for one tensor of
 * n_params fp32 parameters in the store, under a name: params (from init,
 * or zeros when init is NULL) and the moments the rule needs, in
 * page-sized fp32 chunks spread over the stripes.  Durable on return.
 * @name: 1..200 bytes, unique in the store.  @cfg: the hyper-parameters
 * (kvf_opt_config_init), checked as torch.optim checks them.
 * Return: KVF_OK and *out; KVF_EINVAL (name, n_params 0 or over 2^32 - 1,
 * a hyper-parameter: message names it); KVF_EEXIST; KVF_ENOSPC;
 * KVF_ENOTSUP (read-only); KVF_ENOMEM; KVF_EFATAL.
 * Concurrency: any thread.
 */
KVF_API kvf_status kvf_opt_create(kvf_store *st, const char *name,
				  uint64_t n_params, const kvf_opt_config *cfg,
				  const float *init, kvf_opt **out);

/*
 * kvf_opt_open - find the optimizer state called name again (after a
 * reopen, at the step of the last completed kvf_opt_step).
 * Return: KVF_OK and *out; KVF_ENOENT; KVF_EINVAL; KVF_ENOMEM.
 */
KVF_API kvf_status kvf_opt_open(kvf_store *st, const char *name,
				kvf_opt **out);

/*
 * kvf_opt_step - one optimizer step with the caller's gradient: the state
 * streams through the update kernel chunk by chunk next to the data and is
 * written back (params first, then the moments); the updated parameters
 * come out in cfg.out_dtype.  A step is atomic: a crash in the middle
 * leaves the state of the previous step; a step that returns KVF_OK is
 * durable.  A gradient with a NaN or infinity changes nothing
 * (KVF_ERANGE, for mixed-precision loss scaling to back off).
 * @grad: dense (indices NULL, n = n_params values) or Top-K (n ascending
 *        indices below n_params and n values; the rest are zero).
 * @params_out: NULL, or [n_params] in cfg.out_dtype.
 * Return: KVF_OK; KVF_EINVAL (NULL, wrong length, unsorted or repeated
 * index, bad dtype); KVF_ECLOSED (its store was closed); KVF_ERANGE
 * (index past n_params, non-finite gradient, or one grad_scale takes past
 * the fp32 range); KVF_ENOTSUP (read-only store); KVF_ENOSPC (no room for a new generation of the state, even
 * after cleaning: nothing changed); KVF_ECORRUPT, KVF_EIO (state
 * unreadable: the state stays at the previous step, but params_out may
 * hold part of this step's output); KVF_EFATAL.
 * Concurrency: one call at a time per optimizer; other sequences and
 * optimizers may run meanwhile.
 */
KVF_API kvf_status kvf_opt_step(kvf_opt *opt, const kvf_grad *grad,
				void *params_out);

/*
 * kvf_opt_step_config - kvf_opt_step with this step's hyper-parameters:
 * the caller's training loop owns the schedule (warm-up, cosine, step
 * decay; torch.optim's param_groups) and passes lr, weight_decay, beta1,
 * beta2, eps, momentum, dampening, nesterov, lr_decay, max_grad_norm and
 * grad_scale each step, as Smart-Infinity's host hands them to the
 * device with each update.  The moments and the step count carry on as
 * with kvf_opt_step (Adam's bias correction counts every step); the
 * stored configuration is unchanged (kvf_opt_step keeps using it).
 * @cfg: filled with kvf_opt_config_init; kind and out_dtype must be the
 *        optimizer's; checked as kvf_opt_create checks it.
 * Return: as kvf_opt_step; KVF_EINVAL also for a hyper-parameter torch
 * refuses (the message names it), another kind or out_dtype, or an SGD
 * momentum turned on or off (0 against != 0 at kvf_opt_create: the state
 * holds a momentum buffer only when created with one; any other
 * momentum may be scheduled); KVF_EVERSION.
 * Concurrency: as kvf_opt_step.
 */
KVF_API kvf_status kvf_opt_step_config(kvf_opt *opt, const kvf_opt_config *cfg,
				       const kvf_grad *grad, void *params_out);

/*
 * kvf_opt_read - the current parameters [i0, i0 + n) as fp32.
 * Return: KVF_OK; KVF_EINVAL; KVF_ECLOSED (its store was closed);
 * KVF_ERANGE; KVF_ECORRUPT; KVF_EIO; KVF_EFATAL.
 */
KVF_API kvf_status kvf_opt_read(kvf_opt *opt, uint64_t i0, uint64_t n,
				float *out);

/* kvf_opt_steps - steps completed (0 after create); n_params out.
 * Return: KVF_OK; KVF_EINVAL; KVF_ECLOSED; KVF_ENOENT (freed); KVF_EFATAL. */
KVF_API kvf_status kvf_opt_steps(kvf_opt *opt, uint64_t *steps,
				 uint64_t *n_params);

/* kvf_opt_close - release the handle (the state stays in the store).
 * NULL is a no-op; a handle whose store was closed is released too.
 * Return: KVF_OK. */
KVF_API kvf_status kvf_opt_close(kvf_opt *opt);

/*
 * kvf_opt_free - delete the optimizer state called name from the store;
 * no handle to it may be open.
 * Return: KVF_OK; KVF_ENOENT; KVF_EBUSY (a handle is open); KVF_ENOTSUP
 * (read-only); KVF_EFATAL.
 */
KVF_API kvf_status kvf_opt_free(kvf_store *st, const char *name);

/* ---- typed appends, multi-query and asynchronous attention ------------- */

/*
 * A view of caller memory holding rows of K, V or X: the element type, the
 * shape [n_tokens][n_heads][head_dim] and the byte strides of the first two
 * dimensions (the head_dim elements of one row are contiguous), so a slice
 * of a larger tensor can be passed as it lies.  Fill with kvf_tensor_init.
 */
typedef struct {
	size_t struct_size;    /* sizeof(kvf_tensor), set by _init */
	kvf_dtype dtype;       /* element type of data */
	const void *data;      /* element [0][0][0]; NULL only when n_tokens is 0 */
	uint64_t n_tokens;     /* shape[0]: tokens */
	uint32_t n_heads;      /* shape[1]: heads (KV heads; X: query heads) */
	uint32_t head_dim;     /* shape[2]: elements of one row */
	uint64_t token_stride; /* bytes from a token to the next;
				* 0 = n_heads * head_dim elements (dense) */
	uint64_t head_stride;  /* bytes from a head to the next;
				* 0 = head_dim elements (dense) */
	uint64_t data_bytes;   /* bytes the caller's buffer holds from data;
				* 0 = not stated (not checked) */
} kvf_tensor;

/* Fills *t with an empty dense view; use kvf_tensor_init. */
KVF_API void kvf_tensor_init_sized(kvf_tensor *t, size_t struct_size);

/*
 * kvf_tensor_init - an empty view (no data, zero shape, dense strides).
 * Concurrency: any thread; *t is the caller's.
 */
static inline void kvf_tensor_init(kvf_tensor *t)
{
	kvf_tensor_init_sized(t, sizeof(*t));
}

/*
 * kvf_append_tensor - kvf_append with the layout stated: k and v describe
 * [n_tokens][n_kv_heads][head_dim] rows with any strides, in f16, bf16 or
 * f32 whatever the store's dtype.  Rows of another dtype are converted:
 * narrowing (f32 to f16 or bf16, f16 and bf16 to each other through an
 * exact f32) rounds to nearest even once, values past f16's range become
 * infinities, NaN stays NaN (made quiet), infinities and signed zeros are
 * kept; widening is exact.  A dense view of the store's dtype is appended
 * straight from the caller's memory; any other is gathered (and
 * converted) first, one copy of its rows.
 * Return: as kvf_append; KVF_EINVAL also for a view that is NULL, has a
 * struct_size too small, a dtype that is no kvf_dtype, n_heads or
 * head_dim other than the store's, k and v of different n_tokens, more
 * than 2^32 - 1 tokens, strides that make rows overlap, a view whose
 * rows would lie past the end of the address space after data (strides
 * are unsigned byte counts: a "negative" one is such a view), or a view
 * that reaches past its data_bytes (the message names the view, the value
 * and the limit); KVF_EVERSION.
 * Concurrency: as kvf_append.
 */
KVF_API kvf_status kvf_append_tensor(kvf_store *st, uint64_t seq,
				     uint32_t layer, const kvf_tensor *k,
				     const kvf_tensor *v);

/*
 * kvf_append_tensor_at - kvf_append_tensor, only if the layer holds
 * exactly pos tokens now (kvf_append_at; KVF_POS_ANY: wherever it ends).
 * Return: as kvf_append_tensor; KVF_ERANGE also when the layer's length
 * is not pos (the message names both; nothing changed).
 * Concurrency: as kvf_append.
 */
KVF_API kvf_status kvf_append_tensor_at(kvf_store *st, uint64_t seq,
					uint32_t layer, uint64_t pos,
					const kvf_tensor *k,
					const kvf_tensor *v);

/*
 * kvf_append_x_tensor - kvf_append_x with the layout stated: x describes
 * [n_tokens][n_q_heads][head_dim] rows in f16, bf16 or f32, converted to
 * the store's dtype as kvf_append_tensor converts.
 * Return and concurrency: as kvf_append_tensor.
 */
KVF_API kvf_status kvf_append_x_tensor(kvf_store *st, uint64_t seq,
				       uint32_t layer, const kvf_tensor *x);

/*
 * kvf_read_as - kvf_read into buffers of dtype (f16, bf16 or f32, any
 * store dtype): k_out and v_out are [t1-t0][head_dim] of dtype, converted
 * as kvf_append_tensor converts (a value narrowed when appended comes
 * back as it was stored; f16 read as f32 and appended again is exact).
 * Return: as kvf_read; KVF_EINVAL also for a dtype that is no kvf_dtype;
 * KVF_ENOMEM (room to convert).
 * Concurrency: as kvf_read.
 */
KVF_API kvf_status kvf_read_as(kvf_store *st, uint64_t seq, uint32_t layer,
			       uint32_t kv_head, uint64_t t0, uint64_t t1,
			       kvf_dtype dtype, void *k_out, void *v_out);

/*
 * kvf_read_x_as - kvf_read_x into x_out ([t1-t0][n_q_heads * head_dim])
 * of dtype.  Return and concurrency: as kvf_read_as.
 */
KVF_API kvf_status kvf_read_x_as(kvf_store *st, uint64_t seq, uint32_t layer,
				 uint64_t t0, uint64_t t1, kvf_dtype dtype,
				 void *x_out);

/*
 * kvf_attend_multi - attention of n_q query positions of one sequence at
 * once (chunked prefill, speculative-decoding verification), with a causal
 * mask relative to the positions, computed next to the data in one pass
 * over each KV head's pages.
 * @n_q: query positions (>= 1).
 * @positions: NULL (every query attends every token), or [n_q] token
 *        positions, each below the layer's length: query i attends the
 *        tokens t <= positions[i] (and with opts->window w only those with
 *        t > positions[i] - w).  Positions need not be sorted or distinct.
 * @q, @out: [n_q][n_q_heads][head_dim] fp32.
 * @opts: as kvf_attend (scale, mask, window, lse); lse, when given, is
 *        [n_q][n_q_heads].  sparse and h2o are refused (KVF_ENOTSUP).
 * A query that attends no token gets out = 0 and lse = -INFINITY.
 * Return: as kvf_attend; KVF_EINVAL also for n_q 0; KVF_ERANGE for a
 * position at or past the layer's length (the message names the query,
 * the position and the length).
 * Concurrency: as kvf_attend.
 */
KVF_API kvf_status kvf_attend_multi(kvf_store *st, uint64_t seq,
				    uint32_t layer, uint32_t n_q,
				    const uint64_t *positions, const float *q,
				    float *out, const kvf_attn_opts *opts);

/* An attention call running in the background (kvf_attend_start). */
typedef struct kvf_job kvf_job;

/*
 * kvf_attend_start - start kvf_attend_batch in the background and return
 * at once, so the caller computes (the next micro-batch, the MLP of the
 * previous layer) while the store reads and attends; kvf_job_wait gives
 * the result.  The arguments are checked before anything starts (an
 * argument error is returned here and no job is made).  seqs, q and opts
 * are copied; out, and the opts->lse and opts->mask buffers, must stay
 * valid and untouched until kvf_job_wait returns.
 * @job: receives the handle; NULL on failure.
 * Return: KVF_OK; the argument errors of kvf_attend_batch (KVF_EINVAL,
 * KVF_ERANGE, KVF_ENOTSUP, KVF_EVERSION); KVF_ENOMEM; KVF_EFATAL.
 * Concurrency: any thread; the job runs as kvf_attend_batch would on
 * another thread.  kvf_close waits for the store's jobs to finish (their
 * handles must still be waited for).
 */
KVF_API kvf_status kvf_attend_start(kvf_store *st, uint32_t n_seqs,
				    const uint64_t *seqs, uint32_t layer,
				    const float *q, float *out,
				    const kvf_attn_opts *opts, kvf_job **job);

/*
 * kvf_job_wait - wait for a job to finish and release it.  NULL is
 * KVF_EINVAL.  The job's failure, if any, is this thread's
 * kvf_last_error() on return.
 * Return: the status of the attention (as kvf_attend_batch).
 * Concurrency: one call per job, from any thread.
 */
KVF_API kvf_status kvf_job_wait(kvf_job *job);

/* ---- planners: the profile, KVPR's split, HILOS's X-cache ------------- */

/*
 * A store's measured figures and the caller's own rates, which the
 * planners below turn into a split of work (docs/planners.md).  The caller
 * states its rates; kvf_profile_run measures the store's and keeps the
 * whole record in the store directory (DIR/PROFILE), where kvf_profile_get
 * finds it after a reopen.  Fill with kvf_profile_init.  Rates are per
 * second; a planner refuses a rate it needs that is not finite and > 0.
 */
typedef struct {
	size_t struct_size;            /* sizeof(kvf_profile), set by _init */
	/* the caller's, given */
	double caller_flops;           /* FLOP/s the caller computes at
					* (recomputation, attention): a GPU's,
					* or the host's */
	double link_bytes_per_s;       /* bytes/s from the store to the
					* caller: PCIe to a GPU, or the host's
					* memory bandwidth */
	/* the store's, measured by kvf_profile_run */
	double read_cold_bytes_per_s;  /* K,V read with no page cached */
	double read_warm_bytes_per_s;  /* the same read again (DRAM tier) */
	double sparf_cold_bytes_per_s; /* bytes SparF attention reads, per s
					* of the call, nothing cached; 0
					* without kt_pages */
	double sparf_warm_bytes_per_s; /* the same, again */
	double attend_tokens_per_s;    /* dense attention near the data,
					* tokens of one layer (every head)
					* per s, pages cached */
	double store_flops;            /* FLOP/s of the K,V recomputation
					* from X near the data, as
					* kvf_attend_x runs it: X read,
					* projected, attended */
	double read_x_bytes_per_s;     /* X read with no page cached (X is
					* kept per query head, so it reads
					* as many streams as there are query
					* heads) */
	double x_latency_s;            /* seconds to read one token of X,
					* nothing cached: the fixed cost of
					* starting a path from X, which a
					* split must win back */
	uint64_t profile_tokens;       /* tokens the measurement used */
	uint64_t measured_unix_s;      /* when (seconds since 1970) */
} kvf_profile;

/* Fills *p with zeros (nothing given, nothing measured); use
 * kvf_profile_init. */
KVF_API void kvf_profile_init_sized(kvf_profile *p, size_t struct_size);

/*
 * kvf_profile_init - an empty profile.
 * Concurrency: any thread; *p is the caller's.
 */
static inline void kvf_profile_init(kvf_profile *p)
{
	kvf_profile_init_sized(p, sizeof(*p));
}

/*
 * kvf_profile_run - measure the store on a scratch sequence and keep the
 * result with the store.
 * @scratch_seq: an id not in use; the sequence is created in layer 0 with
 *        n_tokens of random K, V and X, measured, and freed.
 * @n_tokens: tokens to measure with; 0 = 4096.
 * @p: in: caller_flops and link_bytes_per_s (finite, > 0); out: every
 *     measured field.  Written to DIR/PROFILE (replacing what was there,
 *     atomically) before it is published in *p.
 * Cold reads are made after the store's DRAM tier was emptied (of every
 * sequence's cached pages: later reads of other sequences go to the media
 * until the tier fills again); with buffered (not direct) I/O the
 * operating system's cache may still hold the pages.  Takes a second or
 * two for the default size.
 * Return: KVF_OK; KVF_EINVAL (NULL, a caller rate not finite and > 0);
 * KVF_EEXIST (scratch_seq); KVF_ERANGE (n_tokens past 2^20); KVF_ENOTSUP
 * (read-only store); KVF_EVERSION; KVF_ENOSPC; KVF_EIO; KVF_ENOMEM;
 * KVF_EFATAL.  On failure the scratch sequence is freed and the stored
 * profile is unchanged.
 * Concurrency: any thread; other sequences may be used meanwhile (and
 * then slow the figures down).
 */
KVF_API kvf_status kvf_profile_run(kvf_store *st, uint64_t scratch_seq,
				   uint64_t n_tokens, kvf_profile *p);

/*
 * kvf_profile_get - the profile kept with the store by kvf_profile_run.
 * Set out->struct_size (kvf_profile_init) first.
 * Return: KVF_OK; KVF_EINVAL (NULL, struct_size too small); KVF_ENOENT (no
 * profile was kept); KVF_ECORRUPT (DIR/PROFILE fails its checksum or is
 * not a profile: the message names the file); KVF_EVERSION (a newer
 * profile format); KVF_EIO.
 * Concurrency: any thread.
 */
KVF_API kvf_status kvf_profile_get(kvf_store *st, kvf_profile *out);

/* The planners split work only when the split is predicted at least
 * this much faster than not splitting (a share of the step time): a
 * smaller gain is within the error of the rates, and a second path has
 * costs the model does not see (threads handing work over, two sides
 * sharing a busy CPU). */
#define KVF_PLAN_MIN_GAIN 0.1

/* KVPR's split of one layer's s tokens (kvf_plan_kvpr).  Set
 * struct_size = sizeof(kvf_kvpr_plan) before the call. */
typedef struct {
	size_t struct_size;   /* sizeof(kvf_kvpr_plan), set by the caller */
	uint64_t l;           /* the caller recomputes [0, l) from X */
	double t_step_s;      /* predicted seconds of the step, attention
			       * of the caller over all s tokens included */
	double t_x_s;         /* X[0, l) read and handed over */
	double t_recompute_s; /* the caller's recomputation of [0, l) */
	double t_transfer_s;  /* K,V of [l, s) read and handed over */
} kvf_kvpr_plan;

/*
 * kvf_plan_kvpr - the recomputation split point l of KVPR: the caller
 * recomputes K,V of tokens [0, l) from X[0, l) while the store streams
 * K,V of [l, s) (kvf_kvpr_start); l minimizes
 * t_x + max(t_recompute, t_transfer) under the profiled rates
 * (read_x_bytes_per_s, read_cold_bytes_per_s and link_bytes_per_s for
 * the bytes, caller_flops for the recomputation and the attention).  A
 * split is taken only when, with x_latency_s (the fixed cost of reading X
 * at all) added, it is predicted KVF_PLAN_MIN_GAIN faster than l = 0;
 * otherwise l = 0.
 * @m: the model shape (as in kvf_options.model).
 * @n_tokens: s.  @x_tokens: tokens of X stored (l never passes it).
 * Pure: reads nothing from a store.
 * Return: KVF_OK; KVF_EINVAL (NULL, struct_size too small, a rate it
 * needs not finite and > 0, x_latency_s negative or not finite, a bad
 * model shape: the message names it); KVF_EVERSION (profile struct
 * newer, with a tail not zero).  The output is written only on KVF_OK.
 * Concurrency: pure.
 */
KVF_API kvf_status kvf_plan_kvpr(const kvf_profile *p, const kvf_model *m,
				 uint64_t n_tokens, uint64_t x_tokens,
				 kvf_kvpr_plan *out);

/* HILOS's X-cache share (kvf_plan_xcache).  Set struct_size first. */
typedef struct {
	size_t struct_size;  /* sizeof(kvf_xcache_plan), set by the caller */
	double alpha;        /* share of the tokens kept as X, in [0, 1] */
	uint64_t x_tokens;   /* alpha * n_tokens, to the better whole
			      * neighbour: tokens [0,
			      * x_tokens) recomputed near the data */
	double t_step_s;     /* predicted seconds: the slower side */
	double t_store_s;    /* the store: read X, recompute, attend */
	double t_caller_s;   /* the caller: K,V of the rest, attend */
	uint32_t x_smaller;  /* 1 when a token's X is smaller than its
			      * K plus V (n_q_heads < 2 n_kv_heads, as in
			      * MHA): the X-cache also saves bytes; 0 for
			      * GQA with few KV heads, where it costs
			      * bytes and pays only by running in
			      * parallel */
} kvf_xcache_plan;

/*
 * kvf_plan_xcache - the X-cache share alpha of HILOS: tokens [0, alpha s)
 * are kept as X, the store recomputes their K,V near the data and attends
 * them (kvf_attend_x_start) while the caller reads K,V of the rest and
 * attends them, and the two merge by LSE (kvf_attn_merge).  alpha
 * balances the two sides: the store's time per token (its whole path,
 * X read and attention included, at store_flops) against the caller's
 * (K,V at the slower of read_cold_bytes_per_s and link_bytes_per_s,
 * attention at caller_flops);
 * as for kvf_plan_kvpr, alpha is 0 unless the split, x_latency_s
 * included, is predicted KVF_PLAN_MIN_GAIN faster than alpha = 0.
 * @x_tokens: tokens of X stored (alpha s never passes it).
 * Return: KVF_OK; KVF_EINVAL (as kvf_plan_kvpr).  Concurrency: pure.
 */
KVF_API kvf_status kvf_plan_xcache(const kvf_profile *p, const kvf_model *m,
				   uint64_t n_tokens, uint64_t x_tokens,
				   kvf_xcache_plan *out);

/*
 * kvf_plan_beta - HillInfer's split of importance evaluation (scoring
 * every token against the query) between the caller and the store.
 * With the caller's rate f_c (caller_flops) and the store's f_s (the
 * scoring rate near the data, from attend_tokens_per_s) both finish
 * together when the caller scores beta = f_c / f_s tokens for each one
 * the store scores.
 * @beta: out, f_c / f_s.  @near_share: NULL or out, the store's share
 *        f_s / (f_c + f_s) of the tokens.
 * Return: KVF_OK; KVF_EINVAL (as kvf_plan_kvpr).  Concurrency: pure.
 */
KVF_API kvf_status kvf_plan_beta(const kvf_profile *p, const kvf_model *m,
				 double *beta, double *near_share);

/*
 * kvf_kv_weights_set - register the K and V projection weights of one
 * layer, so the store can recompute K,V from the stored X near the data
 * (kvf_recompute_kv, kvf_attend_x).  K = RoPE(X W_k), V = X W_v, with X a
 * token's [n_q_heads * head_dim] activations as kvf_append_x stores them.
 * @w_k, @w_v: [n_q_heads * head_dim][n_kv_heads * head_dim] fp32, row
 *        major; copied.  Registering a layer again replaces its weights.
 * @rope_theta: the RoPE base (10000 for Llama 2); 0 = no RoPE.  Token t
 *        of the sequence is at position t.  RoPE needs an even head_dim.
 * The weights live in memory only: register them after every kvf_open.
 * Return: KVF_OK; KVF_EINVAL (NULL, rope_theta not finite or < 0, RoPE
 * with an odd head_dim, a weight not finite: the message names it);
 * KVF_ERANGE (layer); KVF_ENOMEM.
 * Concurrency: any thread; a recomputation running on the layer uses the
 * weights it started with.
 */
KVF_API kvf_status kvf_kv_weights_set(kvf_store *st, uint32_t layer,
				      const float *w_k, const float *w_v,
				      float rope_theta);

/*
 * kvf_recompute_kv - K,V of tokens [t0, t1) of one layer, recomputed near
 * the data from the stored X with the registered weights.
 * @k_out, @v_out: [t1-t0][n_kv_heads][head_dim] fp32; either may be NULL.
 * X is never dropped, so K,V recomputed from it would bring back tokens
 * kvf_h2o_evict dropped: a range holding one (of any KV head of the
 * layer) is refused.
 * Return: KVF_OK; KVF_EINVAL (NULL, reversed range); KVF_ENOENT (seq, or
 * no weights registered for the layer); KVF_ERANGE (layer, range past the
 * stored X); KVF_ENOTSUP (the range holds a token kvf_h2o_evict dropped:
 * the message names the first; recompute around it); KVF_ECORRUPT;
 * KVF_EIO; KVF_ENOMEM.  Nothing is written on a refusal.
 * Concurrency: as kvf_read_x.
 */
KVF_API kvf_status kvf_recompute_kv(kvf_store *st, uint64_t seq,
				    uint32_t layer, uint64_t t0, uint64_t t1,
				    float *k_out, float *v_out);

/*
 * kvf_attend_x - decode attention over tokens [t0, t1) of one layer whose
 * K,V the store recomputes from the stored X near the data (HILOS's
 * X-cache).  q, out as kvf_attend.
 * @opts: NULL, or scale and lse as kvf_attend (lse: [n_q_heads], to merge
 *        with the caller's attention over its tokens: kvf_attn_merge);
 *        sparse, mask, window and h2o are refused.  An empty range gives
 *        out = 0 and lse = -INFINITY.
 * Return: as kvf_recompute_kv (KVF_ENOTSUP too for a range holding a
 * dropped token); KVF_ENOTSUP (sparse, mask, window, h2o); KVF_EVERSION
 * (opts).  Concurrency: as kvf_read_x.
 */
KVF_API kvf_status kvf_attend_x(kvf_store *st, uint64_t seq, uint32_t layer,
				uint64_t t0, uint64_t t1, const float *q,
				float *out, const kvf_attn_opts *opts);

/*
 * kvf_attend_x_start - kvf_attend_x in the background (kvf_job_wait gives
 * the status), so the caller attends its own tokens meanwhile.  The
 * arguments are checked first; q and opts are copied; out and opts->lse
 * must stay valid until kvf_job_wait returns.
 * Return: KVF_OK; the argument errors of kvf_attend_x; KVF_ENOMEM.
 * Concurrency: as kvf_attend_start.
 */
KVF_API kvf_status kvf_attend_x_start(kvf_store *st, uint64_t seq,
				      uint32_t layer, uint64_t t0, uint64_t t1,
				      const float *q, float *out,
				      const kvf_attn_opts *opts, kvf_job **job);

/*
 * kvf_kvpr_start - hand out both ranges of KVPR's split (kvf_plan_kvpr):
 * X of tokens [0, l) is read into x_out before the call returns, so the
 * caller starts recomputing K,V of [0, l) at once, while K,V of [l, s) are
 * read in the background into k_out and v_out; kvf_job_wait says when
 * they are there.
 * @l, @s: 0 <= l <= s <= the layer's tokens, l <= its X tokens.
 * @x_out: [l][n_q_heads * head_dim] in the store's dtype (NULL when l 0).
 * @k_out, @v_out: [n_kv_heads][s - l][head_dim] in the store's dtype, one
 *        head after another; they must stay valid until kvf_job_wait.
 * Return: KVF_OK; the errors of kvf_read_x (KVF_EINVAL, KVF_ENOENT,
 * KVF_ERANGE, KVF_ECORRUPT, KVF_EIO: then no job is made); KVF_ENOMEM.
 * The background read's errors come from kvf_job_wait: it reads through
 * kvf_read, so [l, s) holding a token kvf_h2o_evict dropped gives
 * KVF_ENOENT there.  X is never dropped, so the caller's recomputation
 * of [0, l) would bring dropped tokens back: on a sequence with dropped
 * groups, KVPR fits only s at or below the first dropped token.
 * Concurrency: as kvf_attend_start.
 */
KVF_API kvf_status kvf_kvpr_start(kvf_store *st, uint64_t seq, uint32_t layer,
				  uint64_t l, uint64_t s, void *x_out,
				  void *k_out, void *v_out, kvf_job **job);

/* The public structs, for bindings (ctypes) that mirror them. */
typedef enum {
	KVF_STRUCT_OPTIONS = 0,   /* kvf_options */
	KVF_STRUCT_ATTN_OPTS = 1, /* kvf_attn_opts */
	KVF_STRUCT_STATS = 2,     /* kvf_stats */
	KVF_STRUCT_OPT_CONFIG = 3, /* kvf_opt_config */
	KVF_STRUCT_GRAD = 4,      /* kvf_grad */
	KVF_STRUCT_TENSOR = 5,    /* kvf_tensor */
	KVF_STRUCT_STORE_INFO = 6, /* kvf_store_info */
	KVF_STRUCT_SEQ_INFO = 7,  /* kvf_seq_info */
	KVF_STRUCT_MODEL = 8,     /* kvf_model */
	KVF_STRUCT_PROFILE = 9,   /* kvf_profile */
	KVF_STRUCT_KVPR_PLAN = 10, /* kvf_kvpr_plan */
	KVF_STRUCT_XCACHE_PLAN = 11 /* kvf_xcache_plan */
} kvf_struct;

/*
 * kvf_struct_size - sizeof the public struct `which` in this library, so a
 * binding that mirrors the structs (the Python package) can check its
 * mirrors at load time and fill the _init_sized calls.
 * Return: the size in bytes; 0 for an unknown value.
 * Concurrency: any thread, any time.
 */
KVF_API size_t kvf_struct_size(kvf_struct which);


#ifdef __cplusplus
}
#endif
#endif /* KVFLASH_H */
