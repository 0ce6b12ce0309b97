/*
 * meta.h - the layout of the catalog records (engine/base/catalog.h).
 *
 * Keys start with one tag byte; numbers in keys are big-endian so records
 * of one kind sort by id.  Values are little-endian packed structs.
 *
 *   KEY               VALUE
 *   "C"               struct store_header (segfmt.h): the configuration
 *   "N"               struct meta_sync: state of the last kvf_sync
 *   "W"               u32 erase count per segment id (n_segments of them)
 *   "S" seq(8)        struct meta_seq + u64 len[n_layers] + u64 x_len[n_layers]
 *   "G" segid(4)      struct meta_seg + struct meta_run[n_runs]
 *   "R" seq(8)        struct meta_ref + struct meta_ref_entry[n]
 *   "O" name          optimizer state: engine/optim/optim_int.h's struct meta_optim +
 *                     its kvf_opt_config
 *   "P" seq(8)        as "S", for an optimizer's sequence (SEQ_NS_OPTIM)
 *   "V" seq(8)        SparF's running means of V: u64 count then
 *                     f32 mean[head_dim], per (layer, kv head)
 *   "T" seq(8)        struct meta_tokens + u32 token ids[n]: the tokens
 *                     a sequence registered for prefix reuse, and
 *                     whether it is a cached prefix (engine/sequences/prefix.c)
 *   "U" seq(8)        struct meta_use: recency and frequency for eviction,
 *                     as of the last kvf_sync (engine/cleaning/evict.c)
 *   "D" seq(8)        struct meta_drop + u64 bits[n_lanes][words]: the
 *                     token groups kvf_h2o_evict dropped, per (layer,
 *                     KV head)
 *                     (engine/sequences/dropmark.c)
 *
 * "G" is a sealed segment: for each index slot that points into it, which
 * (sequence, stream, group) owns it, in runs: consecutive pages that hold
 * groups of one stream at a fixed stride share one entry (a stream's groups
 * go round the stripes, so a stripe holds every n_stripes-th; an
 * optimizer's segment is a few runs, not one entry per page).  "R" holds
 * the index entries a forked sequence shares with its parent.  At open
 * the index is rebuilt from "G" and "R": per (sequence, stream, group)
 * the entry with the highest seqno wins, and entries older than their
 * sequence's create_seqno (an earlier sequence with the same id) or past
 * its length are ignored.
 */
#ifndef KVF_ENGINE_META_H
#define KVF_ENGINE_META_H

#include <assert.h>
#include <stdint.h>

#define META_TAG_CONFIG 'C'
#define META_TAG_SYNC 'N'
#define META_TAG_WEAR 'W'
#define META_TAG_SEQ 'S'
#define META_TAG_SEG 'G'
#define META_TAG_REF 'R'
#define META_TAG_OPTIM 'O'
#define META_TAG_OPTIM_SEQ 'P'
#define META_TAG_VBAR 'V'
#define META_TAG_TOKENS 'T'
#define META_TAG_USE 'U'
#define META_TAG_DROP 'D'

struct meta_sync {
	uint64_t seqno;         /* highest seqno made durable by the last sync */
	uint64_t n_syncs;       /* syncs since the store was created */
	uint64_t n_points;      /* durable points since the store was
				 * created (syncs, optimizer steps, cleaning
				 * passes); engine/base/syncmark.h checks it */
	/* byte counters since the store was created (store_counters) */
	uint64_t user_bytes;
	uint64_t data_bytes;
	uint64_t padding_bytes;
	uint64_t kt_bytes;
	uint64_t cleaner_bytes;
	uint64_t summary_bytes;
	uint64_t optim_bytes;
};

struct meta_seq {
	uint64_t create_seqno; /* seqno when this sequence was created */
	uint64_t family;       /* root of its fork tree (itself if none) */
	uint64_t parent;       /* forked from; UINT64_MAX if none */
	uint32_t n_layers;     /* entries in each length array that follows */
	uint32_t reserved;
};

/* "U": a caller's sequence's place in eviction's order, so LRU and LFU
 * keep it across a reopen.  last_use is on the store-wide use clock,
 * which a reopen starts past every recorded value; a record whose
 * create_seqno is not its sequence's is of an earlier one (ignored). */
struct meta_use {
	uint64_t create_seqno;
	uint64_t last_use;     /* seqtab.use_clock at its last use */
	uint64_t uses;         /* public calls on it, over its life */
};

/* "D": bit g of a lane's words (lane = layer * n_kv_heads + KV head) is
 * set when token group g of its K and V streams was dropped; a record
 * whose create_seqno is not its sequence's is of an earlier one
 * (ignored). */
struct meta_drop {
	uint64_t create_seqno;
	uint32_t n_lanes;      /* lanes that follow */
	uint32_t words;        /* u64 words per lane */
};

struct meta_seg {
	uint64_t seqno;        /* commit sequence number */
	uint64_t write_ns;     /* wall clock when sealed (ns since epoch) */
	uint64_t owner;        /* placement class: the sequence it was
				* for; KVF_SEQ_NONE for the cleaner's */
	uint32_t n_data_pages; /* data pages; the summary follows them */
	uint32_t n_runs;       /* struct meta_run entries that follow */
};

/* Index slots of a segment: pages page + i, i < n, are groups
 * group + i * stride of the stream.  A page with several owners (forks)
 * is in several runs. */
struct meta_run {
	uint64_t seq;    /* owning sequence */
	uint64_t family; /* its fork family */
	uint32_t stream; /* stream_id() */
	uint32_t group;  /* group in the stream of the first page */
	uint32_t page;   /* first data page inside the segment */
	uint8_t ns;      /* namespace of seq: SEQ_NS_USER or SEQ_NS_OPTIM */
	uint8_t stride;  /* groups between consecutive pages, at least 1 */
	uint16_t n;      /* pages in the run, at least 1 */
};

#define META_RUN_MAX UINT16_MAX
#define META_STRIDE_MAX UINT8_MAX

/* meta_run_add - record that page r.page of the segment is the slot r
 * (r.n = 1, r.stride = 1) after runs[0, *n_runs): extends the last run
 * when r is its next page and next group (a run of one page takes the
 * stride r gives it), else appends.  runs has room for one more. */
static inline void meta_run_add(struct meta_run *runs, uint32_t *n_runs,
				struct meta_run r)
{
	struct meta_run *last = *n_runs ? &runs[*n_runs - 1] : NULL;
	uint32_t step;

	if (last == NULL || last->seq != r.seq || last->family != r.family ||
	    last->stream != r.stream || last->ns != r.ns ||
	    last->n == META_RUN_MAX || last->page + last->n != r.page)
		goto append;
	/* in 64 bits: a run never wraps past group 2^32 - 1 */
	step = r.group > last->group ? r.group - last->group : 0;
	if (last->n == 1 && step >= 1 && step <= META_STRIDE_MAX)
		last->stride = (uint8_t)step;
	else if (last->n == 1 ||
		 (uint64_t)r.group !=
			 (uint64_t)last->group + (uint64_t)last->n * last->stride)
		goto append;
	last->n++;
	return;
append:
	runs[(*n_runs)++] = r;
}

/* meta_run_ok - whether r names pages inside a segment of n_data data
 * pages and groups that do not wrap around */
static inline int meta_run_ok(const struct meta_run *r, uint32_t n_data)
{
	return r->n >= 1 && r->stride >= 1 &&
	       (uint64_t)r->page + r->n <= n_data &&
	       (uint64_t)r->group + (uint64_t)(r->n - 1) * r->stride <= UINT32_MAX;
}

struct meta_ref {
	uint64_t seqno; /* seqno of the fork */
	uint64_t n;     /* entries that follow */
};

struct meta_ref_entry {
	uint32_t stream; /* stream_id() */
	uint32_t group;  /* group in the stream */
	uint32_t addr;   /* page address */
	uint32_t reserved;
};

struct meta_tokens {
	uint64_t create_seqno; /* of the sequence it belongs to */
	uint32_t n;            /* token ids that follow (u32 each) */
	uint32_t flags;        /* META_TOKENS_*; 0 in records written before
				* cached prefixes (where n was a u64 whose
				* high half was 0) */
};

/* the sequence is a cached prefix of the store (docs/prefix.md) */
#define META_TOKENS_CACHED 1u

static_assert(sizeof(struct meta_tokens) == 16, "meta_tokens");
static_assert(sizeof(struct meta_sync) == 80, "meta_sync");
static_assert(sizeof(struct meta_seq) == 32, "meta_seq");
static_assert(sizeof(struct meta_use) == 24, "meta_use");
static_assert(sizeof(struct meta_drop) == 16, "meta_drop");
static_assert(sizeof(struct meta_seg) == 32, "meta_seg");
static_assert(sizeof(struct meta_run) == 32, "meta_run");
static_assert(sizeof(struct meta_ref) == 16, "meta_ref");
static_assert(sizeof(struct meta_ref_entry) == 16, "meta_ref_entry");

/* meta keys */
static inline void meta_key_u64(unsigned char key[9], char tag, uint64_t id)
{
	key[0] = (unsigned char)tag;
	for (int i = 0; i < 8; i++)
		key[1 + i] = (unsigned char)(id >> (56 - 8 * i));
}

static inline void meta_key_u32(unsigned char key[5], char tag, uint32_t id)
{
	key[0] = (unsigned char)tag;
	for (int i = 0; i < 4; i++)
		key[1 + i] = (unsigned char)(id >> (24 - 8 * i));
}

static inline uint64_t meta_key_id(const unsigned char *key, unsigned n)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < n; i++)
		v = (v << 8) | key[1 + i];
	return v;
}

#endif /* KVF_ENGINE_META_H */
