/*
 * opt_store.c - optimizer state kept in the store, updated next to the data
 * (Smart-Infinity's SmartUpdate/SmartComp in software).
 *
 * An optimizer is a sequence of the SEQ_NS_OPT namespace with six
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
 * Locking: create, step and free take sync_lock (they end in a durable
 * point), then world shared, then the optimizer's sequence lock: the
 * order kvf_sync and the cleaner use.  One step at a time per optimizer.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "api/alloc.h"
#include "api/options.h"
#include "api/status.h"
#include "compute/half.h"
#include "compute/optim.h"
#include "engine/cleaner.h"
#include "engine/opt_store.h"
#include "engine/pool.h"
#include "engine/readpath.h"
#include "engine/segment.h"
#include "engine/seq.h"
#include "engine/writer.h"

#define OPT_NAME_MAX 200u
#define OPT_BATCH 512u /* chunks per batch at most: on files, 512 pages of
			* each state read together (2 MiB with 4 KiB pages;
			* 128 kept the disk idle more often) */

/* gradients of fewer values are summed on one thread */
#define OPT_SUMSQ_SPLIT_MIN (1u << 20)

#define OPT_SPLIT 8u  /* tasks a batch is split into when the state is in
		       * memory: workers join in as they come free */

enum { ST_PARAM = KVC_CHUNK_P, ST_M = KVC_CHUNK_M, ST_V = KVC_CHUNK_V };

struct meta_opt {
	uint64_t seq;       /* pseudo-sequence id */
	uint64_t n_params;  /* parameters */
	uint64_t steps;     /* steps done */
	uint32_t gen;       /* committed generation */
	uint32_t cfg_size;  /* bytes of kvf_opt_config that follow */
};

struct kvf_opt {
	kvf_store *st;            /* NULL once the store was closed: every
				   * call but kvf_opt_close is KVF_ECLOSED */
	kvf_opt *prev, *next;     /* the store's open handles; st->opt_lock */
	char *name;
	uint64_t seq_id;          /* pseudo-sequence */
	uint64_t n_params;        /* parameters */
	uint64_t n_chunks;        /* pages per state */
	uint32_t per_chunk;       /* parameters per page */
	kvf_opt_config cfg;       /* hyper-parameters */
	unsigned states;          /* kvc_opt_states: which moments exist */
	uint32_t batch;           /* chunks per batch: OPT_BATCH, or all */
	float *work;              /* [2][3][batch][per_chunk], aligned:
				   * one half computed while the other loads */
	const struct kvc_optim *k;
	/* a step's batch b uses half b % 2 of these: */
	const float *src[2][3][OPT_BATCH]; /* committed chunks: the memory
					    * media's own pages, or work */
	unsigned char *dst[3][OPT_BATCH];  /* the new chunks: open-segment
					    * slots, or work pages placed
					    * after the update */
	uint64_t hash[3][OPT_BATCH];       /* page_hash of each new chunk */
	/* the reads of one batch, media other than memory: */
	struct page_read want[3 * OPT_BATCH];
	struct kvf_media_io io[3 * OPT_BATCH];
	struct catalog_batch *commit;      /* a step's record, at its end */
};

static uint32_t sid_of(uint32_t state, uint32_t gen)
{
	return stream_id(0, KIND_OPT, state * 2 + gen);
}

static int state_kept(unsigned states, uint32_t s)
{
	return s == ST_PARAM || (s == ST_M && (states & KVC_OPT_M)) ||
	       (s == ST_V && (states & KVC_OPT_V));
}

/* record - the "O" record of name (key in *key, value in *val) */
static void record_put(struct catalog_batch *b, const char *name,
		       const struct meta_opt *m, const kvf_opt_config *cfg)
{
	size_t nl = strlen(name);
	unsigned char key[1 + OPT_NAME_MAX], val[sizeof(*m) + sizeof(*cfg)];
	struct meta_opt mm = *m;

	key[0] = META_TAG_OPT;
	memcpy(key + 1, name, nl);
	mm.cfg_size = sizeof(*cfg);
	memcpy(val, &mm, sizeof(mm));
	memcpy(val + sizeof(mm), cfg, sizeof(*cfg));
	catalog_batch_put(b, key, nl + 1, val, sizeof(val));
}

static kvf_status record_get(kvf_store *st, const char *name,
			     struct meta_opt *m, kvf_opt_config *cfg)
{
	size_t nl = strlen(name), vlen;
	unsigned char key[1 + OPT_NAME_MAX];
	void *val;
	kvf_status rc;

	key[0] = META_TAG_OPT;
	memcpy(key + 1, name, nl);
	rc = catalog_get(st->cat, key, nl + 1, &val, &vlen);
	if (rc != KVF_OK)
		return rc;
	memcpy(m, val, vlen < sizeof(*m) ? vlen : sizeof(*m));
	if (vlen != sizeof(*m) + sizeof(*cfg) || m->cfg_size != sizeof(*cfg)) {
		kvf_free(val);
		return kvf_fail(KVF_ECORRUPT,
				"the catalog record of optimizer '%s' is malformed (%zu bytes)",
				name, vlen);
	}
	memcpy(cfg, (char *)val + sizeof(*m), sizeof(*cfg));
	kvf_free(val);
	return KVF_OK;
}

static kvf_status check_name(const char *call, const char *name)
{
	if (name == NULL || name[0] == '\0')
		return kvf_fail(KVF_EINVAL, "%s: name is %s", call,
				name ? "empty" : "NULL");
	if (strlen(name) > OPT_NAME_MAX)
		return kvf_fail(KVF_EINVAL, "%s: name is %zu bytes, more than %u",
				call, strlen(name), OPT_NAME_MAX);
	return KVF_OK;
}

/* opt_streams_alloc - the six streams of a pseudo-sequence */
static kvf_status opt_streams_alloc(struct seq *seq, uint64_t n_chunks)
{
	if (seq->opt == NULL)
		seq->opt = kvf_calloc(OPT_STREAMS, sizeof(struct stream));
	if (seq->opt == NULL)
		return kvf_fail(KVF_ENOMEM, "out of memory for optimizer streams");
	for (uint32_t i = 0; i < OPT_STREAMS; i++) {
		kvf_status rc = stream_reserve(&seq->opt[i], n_chunks);

		if (rc != KVF_OK)
			return rc;
	}
	seq->opt_chunks = n_chunks;
	return KVF_OK;
}

/* handle_link, handle_unlink - keep the store's list of open handles, so
 * that closing the store can detach them */
static void handle_link(kvf_opt *o)
{
	kvf_store *st = o->st;

	pthread_mutex_lock(&st->opt_lock);
	o->next = st->opt_open;
	if (o->next)
		o->next->prev = o;
	st->opt_open = o;
	pthread_mutex_unlock(&st->opt_lock);
}

static void handle_unlink(kvf_opt *o)
{
	kvf_store *st = o->st;

	pthread_mutex_lock(&st->opt_lock);
	if (o->prev)
		o->prev->next = o->next;
	else if (st->opt_open == o)
		st->opt_open = o->next;
	if (o->next)
		o->next->prev = o->prev;
	o->prev = o->next = NULL;
	pthread_mutex_unlock(&st->opt_lock);
}

void opt_detach_all(kvf_store *st)
{
	pthread_mutex_lock(&st->opt_lock);
	while (st->opt_open) {
		kvf_opt *o = st->opt_open;

		st->opt_open = o->next;
		o->prev = o->next = NULL;
		o->st = NULL;
	}
	pthread_mutex_unlock(&st->opt_lock);
}

/* opt_enter - the checks every call on a handle starts with */
static kvf_status opt_enter(kvf_opt *o, const char *call)
{
	if (o == NULL)
		return kvf_fail(KVF_EINVAL, "%s: opt is NULL", call);
	if (o->st == NULL)
		return kvf_fail(KVF_ECLOSED,
				"%s: the store of optimizer '%s' was closed; only kvf_opt_close may follow",
				call, o->name);
	return store_check(o->st, call);
}

static void handle_free(kvf_opt *o)
{
	if (o->st)
		handle_unlink(o);
	kvf_free(o->name);
	kvf_free(o->work);
	catalog_batch_free(o->commit);
	kvf_free(o);
}

/* handle_new - a handle with its work buffers */
static kvf_status handle_new(kvf_store *st, const char *name, uint64_t seq_id,
			     uint64_t n_params, const kvf_opt_config *cfg,
			     kvf_opt **out)
{
	kvf_opt *o = kvf_calloc(1, sizeof(*o));

	if (o == NULL)
		return kvf_fail(KVF_ENOMEM, "out of memory for an optimizer handle");
	o->st = st;
	o->name = kvf_strdup(name);
	o->seq_id = seq_id;
	o->n_params = n_params;
	o->per_chunk = st->hdr.page_size / sizeof(float);
	o->n_chunks = (n_params + o->per_chunk - 1) / o->per_chunk;
	o->cfg = *cfg;
	o->states = kvc_opt_states(cfg);
	o->k = kvc_optim();
	o->batch = (uint32_t)(o->n_chunks < OPT_BATCH ? o->n_chunks : OPT_BATCH);
	o->work = kvf_aligned_alloc(KVF_MEDIA_ALIGN, (size_t)2 * 3 * o->batch *
						     st->hdr.page_size);
	o->commit = catalog_batch_new();
	if (o->name == NULL || o->work == NULL || o->commit == NULL) {
		o->st = NULL; /* not linked yet */
		handle_free(o);
		return kvf_fail(KVF_ENOMEM, "out of memory for optimizer buffers");
	}
	handle_link(o);
	*out = o;
	return KVF_OK;
}

/* batch_len - chunks of the batch starting at chunk c0 */
static uint32_t batch_len(const kvf_opt *o, uint64_t c0)
{
	return (uint32_t)(o->n_chunks - c0 < o->batch ? o->n_chunks - c0
						      : o->batch);
}

static float *work_page(kvf_opt *o, uint32_t half, uint32_t state, uint32_t j)
{
	return o->work + (((size_t)half * 3 + state) * o->batch + j) * o->per_chunk;
}

/* place_batch - write chunks [c0, c0 + n) of every kept state (params
 * first) from the work buffers as generation gen */
static kvf_status place_batch(kvf_opt *o, struct seq *seq, uint64_t c0,
			      uint32_t n, uint32_t gen, uint32_t half)
{
	kvf_store *st = o->st;

	for (uint32_t s = 0; s < 3; s++) {
		uint32_t sid = sid_of(s, gen);
		struct stream *str = &seq->opt[s * 2 + gen];

		if (!state_kept(o->states, s))
			continue;
		for (uint32_t j = 0; j < n; j++) {
			uint64_t c = c0 + j;
			uint32_t old = c < str->n_groups ? stream_page(str, c).addr
							 : ADDR_NONE;
			struct page_ref ref;
			kvf_status rc;

			rc = openseg_place(st, seq, stream_stripe(st, sid, c),
					   work_page(o, half, s, j),
					   page_key_make(seq->id, sid, (uint32_t)c),
					   old, &ref);
			if (rc != KVF_OK)
				return rc;
			stream_set_page(str, c, ref);
			if (c >= str->n_groups)
				str->n_groups = (uint32_t)c + 1;
			atomic_fetch_add(&st->c.opt_bytes, st->hdr.page_size);
		}
	}
	return KVF_OK;
}

/*
 * reserve_gen - reserve the segments one whole generation needs, and put
 * in the pool the segment buffers writing it holds at once: one open per
 * stripe it touches, and the writer's jobs in flight (no more than the
 * segments it fills), whose buffers go back to the pool at each reap.  A
 * step then neither allocates a buffer nor fails for one half way, as
 * long as no other sequence draws from the pool meanwhile.
 */
static kvf_status reserve_gen(kvf_opt *o, struct seq *seq, uint32_t gen,
			      const char *call, uint32_t *want)
{
	kvf_store *st = o->st;
	uint32_t pages[KVF_MEDIA_MAX_STRIPES] = { 0 };
	uint64_t segs = 0, open = 0;
	kvf_status rc;

	for (uint32_t s = 0; s < 3; s++)
		if (state_kept(o->states, s))
			for (uint64_t c = 0; c < o->n_chunks; c++)
				pages[stream_stripe(st, sid_of(s, gen), c)]++;
	*want = 0;
	for (uint32_t s = 0; s < st->hdr.n_stripes; s++) {
		uint32_t n = (pages[s] + st->data_per_seg - 1) / st->data_per_seg;

		segs += n;
		open += pages[s] > 0;
		*want = n > *want ? n : *want;
	}
	rc = segbuf_reserve(st, (uint32_t)(open + (segs < WRITER_MAX_INFLIGHT
							  ? segs
							  : WRITER_MAX_INFLIGHT)));
	if (rc != KVF_OK)
		return kvf_fail_wrap(rc, call);
	return openseg_reserve(st, seq, pages, call);
}

/* make_room - a create or step of optimizer name was refused: whether
 * to try again once the cleaner made want free segments a stripe
 * (cleaner_make_room) */
static int make_room(kvf_store *st, int attempt, uint32_t want,
		     const char *call, const char *name, kvf_status *rc)
{
	char what[OPT_NAME_MAX + 64];

	if (*rc != KVF_ENOSPC)
		return 0;
	snprintf(what, sizeof(what), "%s: optimizer '%s'", call, name);
	return cleaner_make_room(st, attempt, want, what, rc);
}

/* commit_gen - flush seq's segments, then durably name gen as current.
 * Caller holds sync_lock, world shared and seq->lock. */
static kvf_status commit_gen(kvf_opt *o, struct seq *seq, uint64_t steps,
			     uint32_t gen, int with_seq_record)
{
	kvf_store *st = o->st;
	struct meta_opt m = { .seq = seq->id, .n_params = o->n_params,
			      .steps = steps, .gen = gen };
	struct catalog_batch *b = o->commit;
	kvf_status rc;

	if ((rc = openseg_flush_all(st, seq)) != KVF_OK)
		return rc;
	catalog_batch_clear(b);
	record_put(b, o->name, &m, &o->cfg);
	rc = with_seq_record ? seq_record(st, seq, b) : KVF_OK;
	if (rc == KVF_OK)
		rc = store_durable_point(st, b, 0);
	if (rc == KVF_OK) {
		seq->opt_gen = gen;
		seq->opt_steps = steps;
	}
	return rc;
}

/* create_once - kvf_opt_create after its checks: make the state and
 * commit it, or change nothing; *want: the free segments a stripe the
 * state needs, when that is what it lacked (KVF_ENOSPC) */
static kvf_status create_once(kvf_store *st, const char *name,
			      uint64_t n_params, const kvf_opt_config *cfg_in,
			      const float *init, kvf_opt **out, uint32_t *want)
{
	const char *call = "kvf_opt_create";
	kvf_opt_config cfg = *cfg_in, old_cfg;
	struct meta_opt m;
	struct seq *seq = NULL;
	kvf_opt *o = NULL;
	kvf_status rc;

	pthread_mutex_lock(&st->sync_lock); /* sync_lock, then world */
	pthread_rwlock_rdlock(&st->world);
	rc = record_get(st, name, &m, &old_cfg);
	if (rc == KVF_OK) {
		rc = kvf_fail(KVF_EEXIST, "%s: an optimizer called '%s' exists already",
			      call, name);
		goto out;
	}
	if (rc != KVF_ENOENT)
		goto out;
	seq = seq_alloc(st, atomic_fetch_add(&st->next_opt_id, 1));
	if (seq == NULL) {
		rc = kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
		goto out;
	}
	seq->ns = SEQ_NS_OPT;
	seq->create_seqno = atomic_fetch_add(&st->next_seqno, 1);
	if ((rc = handle_new(st, name, seq->id, n_params, &cfg, &o)) != KVF_OK ||
	    (rc = opt_streams_alloc(seq, o->n_chunks)) != KVF_OK)
		goto out_seq;
	if ((rc = seq_insert(st, seq)) != KVF_OK)
		goto out_seq;
	pthread_mutex_lock(&seq->lock);
	rc = reserve_gen(o, seq, 0, call, want);
	for (uint64_t c0 = 0; rc == KVF_OK && c0 < o->n_chunks; c0 += o->batch) {
		uint32_t n = batch_len(o, c0);

		memset(o->work, 0, (size_t)3 * o->batch * st->hdr.page_size);
		for (uint32_t j = 0; j < n; j++) {
			uint64_t i0 = (c0 + j) * o->per_chunk;
			uint64_t cnt = n_params - i0 < o->per_chunk ? n_params - i0
								    : o->per_chunk;

			if (init)
				memcpy(work_page(o, 0, ST_PARAM, j), init + i0,
				       cnt * sizeof(float));
			kvc_opt_state_init(&cfg,
					   (o->states & KVC_OPT_M) ? work_page(o, 0, ST_M, j) : NULL,
					   (o->states & KVC_OPT_V) ? work_page(o, 0, ST_V, j) : NULL,
					   cnt);
		}
		rc = place_batch(o, seq, c0, n, 0, 0);
	}
	seg_unreserve(st, seq);
	if (rc == KVF_OK)
		rc = commit_gen(o, seq, 0, 0, 1);
	if (rc != KVF_OK) {
		/* nothing was committed: drop the pages and the sequence */
		seq->dead = 1;
		seq_drop_all(st, seq);
		pthread_mutex_unlock(&seq->lock);
		seq_remove(st, seq);
		seq = NULL;
		goto out_handle;
	}
	seq->opt_handles++;
	pthread_mutex_unlock(&seq->lock);
	*out = o;
	pthread_rwlock_unlock(&st->world);
	pthread_mutex_unlock(&st->sync_lock);
	return KVF_OK;

out_seq:
	if (seq)
		seq_destroy(st, seq);
out_handle:
	if (o)
		handle_free(o);
out:
	pthread_rwlock_unlock(&st->world);
	pthread_mutex_unlock(&st->sync_lock);
	return rc;
}

kvf_status kvf_opt_create(kvf_store *st, const char *name, uint64_t n_params,
			  const kvf_opt_config *cfg_in, const float *init,
			  kvf_opt **out)
{
	const char *call = "kvf_opt_create";
	kvf_opt_config cfg;
	char why[160];
	kvf_status rc;

	if (out == NULL || st == NULL)
		return kvf_fail(KVF_EINVAL, "%s: %s is NULL", call,
				st ? "out" : "store");
	*out = NULL;
	if ((rc = store_check(st, call)) != KVF_OK || (rc = check_name(call, name)) != KVF_OK)
		return rc;
	if (st->read_only)
		return kvf_fail(KVF_ENOTSUP, "%s: the store %s is open read-only",
				call, st->dir);
	if (n_params == 0 || n_params > UINT32_MAX)
		return kvf_fail(KVF_EINVAL, "%s: n_params %llu out of range (1..%u)",
				call, (unsigned long long)n_params, UINT32_MAX);
	if ((rc = kvf_struct_check(call, "cfg", cfg_in, sizeof(cfg))) != KVF_OK)
		return rc;
	kvf_opt_config_init(&cfg, cfg_in->kind);
	memcpy(&cfg, cfg_in, cfg_in->struct_size < sizeof(cfg) ? cfg_in->struct_size
							       : sizeof(cfg));
	cfg.struct_size = sizeof(cfg);
	if (!kvc_opt_config_check(&cfg, why, sizeof(why)))
		return kvf_fail(KVF_EINVAL, "%s: %s", call, why);
	if ((unsigned)cfg.out_dtype > KVF_DTYPE_F32)
		return kvf_fail(KVF_EINVAL, "%s: out_dtype %d is not a kvf_dtype",
				call, (int)cfg.out_dtype);
	if (!(cfg.max_grad_norm >= 0) || !isfinite(cfg.max_grad_norm) ||
	    !(cfg.grad_scale >= 0) || !isfinite(cfg.grad_scale))
		return kvf_fail(KVF_EINVAL,
				"%s: max_grad_norm %g and grad_scale %g must be finite and >= 0",
				call, (double)cfg.max_grad_norm, (double)cfg.grad_scale);
	for (int attempt = 0;; attempt++) {
		uint32_t want = 1;

		rc = create_once(st, name, n_params, &cfg, init, out, &want);
		if (!make_room(st, attempt, want, call, name, &rc))
			return rc;
	}
}

kvf_status kvf_opt_open(kvf_store *st, const char *name, kvf_opt **out)
{
	const char *call = "kvf_opt_open";
	kvf_opt_config cfg;
	struct meta_opt m;
	struct seq *seq;
	kvf_opt *o;
	kvf_status rc;

	if (out == NULL || st == NULL)
		return kvf_fail(KVF_EINVAL, "%s: %s is NULL", call,
				st ? "out" : "store");
	*out = NULL;
	if ((rc = store_check(st, call)) != KVF_OK || (rc = check_name(call, name)) != KVF_OK)
		return rc;
	pthread_rwlock_rdlock(&st->world);
	rc = record_get(st, name, &m, &cfg);
	if (rc == KVF_ENOENT)
		rc = kvf_fail(KVF_ENOENT, "%s: no optimizer called '%s'", call, name);
	if (rc != KVF_OK)
		goto out;
	seq = seq_get_ns(st, SEQ_NS_OPT, m.seq);
	if (seq == NULL) {
		rc = kvf_fail(KVF_ECORRUPT, "%s: optimizer '%s' names sequence %llu, which is missing",
			      call, name, (unsigned long long)m.seq);
		goto out;
	}
	rc = handle_new(st, name, m.seq, m.n_params, &cfg, &o);
	if (rc == KVF_OK) {
		pthread_mutex_lock(&seq->lock);
		seq->opt_handles++;
		pthread_mutex_unlock(&seq->lock);
		*out = o;
	}
	seq_put(st, seq);
out:
	pthread_rwlock_unlock(&st->world);
	return rc;
}

struct load_ctx {
	kvf_opt *o;
	uint32_t half;  /* work half loaded */
	uint32_t state;
};

/* load_page - point src at the page where the memory media keeps it, or
 * copy it into work */
static kvf_status load_page(void *arg, uint64_t i, const unsigned char *page,
			    int in_place)
{
	struct load_ctx *l = arg;
	float *w = work_page(l->o, l->half, l->state, (uint32_t)i);

	if (in_place) {
		l->o->src[l->half][l->state][i] = (const float *)page;
		return KVF_OK;
	}
	memcpy(w, page, l->o->st->hdr.page_size);
	l->o->src[l->half][l->state][i] = w;
	return KVF_OK;
}

/* load_batch - chunks [c0, c0 + n) of every kept state, generation gen,
 * into src[half]: where the memory media keeps them, else read into the
 * work pages of half, every state's reads in flight at once.  The
 * committed generation is all written (commit_gen flushed it), so the
 * reads may run while the step places the new one. */
static kvf_status load_batch(kvf_opt *o, struct seq *seq, uint64_t c0,
			     uint32_t n, uint32_t gen, uint32_t half)
{
	uint64_t idx[OPT_BATCH];
	uint32_t k = 0;

	if (o->st->hdr.media != KVF_MEDIA_MEMORY) {
		for (uint32_t s = 0; s < 3; s++) {
			if (!state_kept(o->states, s))
				continue;
			for (uint32_t j = 0; j < n; j++) {
				float *w = work_page(o, half, s, j);

				o->want[k++] = (struct page_read){
					&seq->opt[s * 2 + gen], c0 + j,
					(unsigned char *)w };
				o->src[half][s][j] = w;
			}
		}
		return stream_read_into(o->st, seq, o->want, k, o->io);
	}
	for (uint32_t j = 0; j < n; j++)
		idx[j] = c0 + j;
	for (uint32_t s = 0; s < 3; s++) {
		struct load_ctx l = { o, half, s };
		kvf_status rc;

		if (!state_kept(o->states, s))
			continue;
		/* stream_read_entries hands pages out as (position, page) */
		rc = stream_read_entries(o->st, seq, &seq->opt[s * 2 + gen], idx, n,
					 load_page, &l);
		if (rc != KVF_OK)
			return rc;
	}
	return KVF_OK;
}

static size_t dtype_size(kvf_dtype d)
{
	return d == KVF_DTYPE_F32 ? 4 : 2;
}

struct sumsq_ctx {
	const struct kvc_optim *k;
	const kvf_grad *g;
	double part[OPT_SPLIT];
};

static kvf_status sumsq_task(void *arg, uint32_t i)
{
	struct sumsq_ctx *c = arg;
	uint64_t a = c->g->n * i / OPT_SPLIT, z = c->g->n * (i + 1) / OPT_SPLIT;

	c->part[i] = kvc_opt_grad_sumsq(c->k, (const char *)c->g->values +
						      a * dtype_size(c->g->dtype),
					(size_t)(z - a), c->g->dtype);
	return KVF_OK;
}

/* grad_sumsq - the sum of the squared values, on every worker for a large
 * gradient; the parts are fixed and added in order, so the result does
 * not depend on which thread ran which */
static double grad_sumsq(kvf_opt *o, const kvf_grad *g)
{
	struct sumsq_ctx c = { .k = o->k, .g = g };
	double sum = 0;

	if (g->n < OPT_SUMSQ_SPLIT_MIN ||
	    pool_run(o->st->pool, OPT_SPLIT, sumsq_task, &c) != KVF_OK)
		return kvc_opt_grad_sumsq(o->k, g->values, g->n, g->dtype);
	for (uint32_t i = 0; i < OPT_SPLIT; i++)
		sum += c.part[i];
	return sum;
}

/* check_grad - the gradient's shape and values, before anything moves;
 * *scale gets grad_scale times the clipping coefficient */
static kvf_status check_grad(kvf_opt *o, const kvf_grad *g, float *scale)
{
	const char *call = "kvf_opt_step";
	double sumsq;

	if (g == NULL)
		return kvf_fail(KVF_EINVAL, "%s: grad is NULL", call);
	if ((unsigned)g->dtype > KVF_DTYPE_F32)
		return kvf_fail(KVF_EINVAL, "%s: grad dtype %d is not a kvf_dtype",
				call, (int)g->dtype);
	if (g->indices == NULL && g->n != o->n_params)
		return kvf_fail(KVF_EINVAL,
				"%s: a dense gradient has %llu values, the optimizer has %llu parameters",
				call, (unsigned long long)g->n,
				(unsigned long long)o->n_params);
	if (g->indices && g->n > o->n_params)
		return kvf_fail(KVF_EINVAL, "%s: %llu sparse entries for %llu parameters",
				call, (unsigned long long)g->n,
				(unsigned long long)o->n_params);
	if (g->values == NULL && g->n > 0)
		return kvf_fail(KVF_EINVAL, "%s: grad values are NULL", call);
	if (g->indices) {
		size_t bad = kvc_opt_grad_check(g->indices, g->n, o->n_params);

		if (bad < g->n)
			return kvf_fail(g->indices[bad] >= o->n_params ? KVF_ERANGE : KVF_EINVAL,
					"%s: sparse index %u at position %zu %s",
					call, g->indices[bad], bad,
					g->indices[bad] >= o->n_params
						? "is past n_params"
						: "is not above the one before (indices must ascend)");
	}
	sumsq = grad_sumsq(o, g);
	if (!isfinite(sumsq))
		return kvf_fail(KVF_ERANGE,
				"%s: the gradient holds NaN or infinity; nothing changed",
				call);
	*scale = o->cfg.grad_scale > 0 ? o->cfg.grad_scale : 1.0f;
	if (o->cfg.max_grad_norm > 0)
		*scale *= kvc_opt_clip_coef(sqrt(sumsq) * *scale, o->cfg.max_grad_norm);
	return KVF_OK;
}

/* What the tasks of one batch share. */
struct step_ctx {
	kvf_opt *o;
	struct seq *seq;
	const kvf_grad *g;
	void *params_out;
	const struct kvc_opt_step *step;
	size_t gsz;      /* bytes per gradient value */
	uint32_t gen;    /* committed generation, read */
	uint32_t cur;    /* half of the batch being updated */
	uint64_t c0;     /* its first chunk */
	uint32_t n;      /* its chunks */
	uint32_t next_n; /* chunks of the batch after it (0: none) */
	uint32_t split;  /* 1: tasks share the update (the state is in
			  * memory); 0: task 1 loads the next batch */
};

/* plan_batch - where each new chunk of the batch goes: the free slots of
 * the open segments (params first, then m, then v: the order they are
 * placed in), and the work pages of half `half` for those that do not fit.
 * fit: first shorten *n to the chunks whose pages all fit (at least one),
 * so that none waits in a work page to be copied once more. */
static kvf_status plan_batch(kvf_opt *o, struct seq *seq, uint64_t c0,
			     uint32_t *n, uint32_t gen, uint32_t half, int fit)
{
	kvf_store *st = o->st;
	unsigned char *slot[KVF_MEDIA_MAX_STRIPES] = { NULL };
	uint32_t room[KVF_MEDIA_MAX_STRIPES], used[KVF_MEDIA_MAX_STRIPES] = { 0 };

	for (uint32_t j = 0; j < *n; j++)
		for (uint32_t s = 0; s < 3; s++) {
			uint32_t stripe = stream_stripe(st, sid_of(s, gen), c0 + j);

			if (!state_kept(o->states, s))
				continue;
			if (slot[stripe] == NULL) {
				kvf_status rc = openseg_slot(st, seq, stripe, &slot[stripe]);

				if (rc != KVF_OK)
					return rc;
				room[stripe] = openseg_room(st, seq, stripe);
			}
			if (fit && ++used[stripe] > room[stripe] && j > 0) {
				*n = j; /* chunk j does not fit whole */
				goto assign;
			}
		}
assign:
	for (uint32_t s = 0; s < 3; s++) {
		if (!state_kept(o->states, s))
			continue;
		for (uint32_t j = 0; j < *n; j++) {
			uint32_t stripe = stream_stripe(st, sid_of(s, gen), c0 + j);

			if (room[stripe] > 0) {
				o->dst[s][j] = slot[stripe];
				slot[stripe] += st->hdr.page_size;
				room[stripe]--;
			} else {
				o->dst[s][j] = (unsigned char *)work_page(o, half, s, j);
			}
		}
	}
	return KVF_OK;
}

/* fill_batch - record the batch's new chunks as generation gen, in the
 * order plan_batch gave them slots; copy in those left in work pages */
static kvf_status fill_batch(kvf_opt *o, struct seq *seq, uint64_t c0,
			     uint32_t n, uint32_t gen, uint32_t half)
{
	kvf_store *st = o->st;
	kvf_status rc = KVF_OK;
	uint64_t placed = 0;

	for (uint32_t s = 0; s < 3 && rc == KVF_OK; s++) {
		uint32_t sid = sid_of(s, gen);
		struct stream *str = &seq->opt[s * 2 + gen];

		if (!state_kept(o->states, s))
			continue;
		for (uint32_t j = 0; j < n && rc == KVF_OK; j++) {
			uint64_t c = c0 + j;
			uint32_t stripe = stream_stripe(st, sid, c);
			uint32_t old = c < str->n_groups ? stream_page(str, c).addr
							 : ADDR_NONE;
			struct page_ref ref;

			if (o->dst[s][j] == (unsigned char *)work_page(o, half, s, j)) {
				unsigned char *slot;

				if ((rc = openseg_slot(st, seq, stripe, &slot)) != KVF_OK)
					break;
				memcpy(slot, o->dst[s][j], st->hdr.page_size);
			}
			rc = openseg_fill_hashed(st, seq, stripe,
						 page_key_make(seq->id, sid, (uint32_t)c),
						 old, o->hash[s][j], &ref);
			if (rc != KVF_OK)
				break;
			stream_set_page(str, c, ref);
			if (c >= str->n_groups)
				str->n_groups = (uint32_t)c + 1;
			placed++;
		}
	}
	/* one shared counter update per batch, not per page */
	atomic_fetch_add(&st->c.opt_bytes, placed * st->hdr.page_size);
	return rc;
}

/* update - chunks [j0, j1) of the batch: each committed chunk updated by
 * the kernels straight into its new place (one pass over the data; a
 * last, partial chunk's unused tail is copied as it was), and hashed */
static void update(const struct step_ctx *x, uint32_t j0, uint32_t j1)
{
	kvf_opt *o = x->o;
	const kvf_grad *g = x->g;
	uint32_t ps = o->st->hdr.page_size;

	for (uint32_t j = j0; j < j1; j++) {
		uint64_t i0 = (x->c0 + j) * o->per_chunk;
		size_t cnt = (size_t)(o->n_params - i0 < o->per_chunk
					      ? o->n_params - i0 : o->per_chunk);
		struct kvc_opt_chunk c = { { NULL, NULL, NULL },
					   { NULL, NULL, NULL } };
		void *po = x->params_out ? (char *)x->params_out +
				i0 * dtype_size(o->cfg.out_dtype) : NULL;

		for (uint32_t s = 0; s < 3; s++) {
			if (!state_kept(o->states, s))
				continue;
			c.in[s] = o->src[x->cur][s][j];
			c.out[s] = (float *)o->dst[s][j];
			if (cnt < o->per_chunk && c.out[s] != c.in[s])
				memcpy(c.out[s] + cnt, c.in[s] + cnt,
				       (o->per_chunk - cnt) * sizeof(float));
		}
		if (g->indices == NULL) {
			kvc_opt_dense_from(o->k, x->step, &c, cnt,
					   (const char *)g->values + i0 * x->gsz,
					   g->dtype, po);
		} else {
			size_t first, count;

			kvc_opt_grad_span(g->indices, g->n, i0, cnt, &first, &count);
			kvc_opt_sparse_from(o->k, x->step, &c, cnt, i0,
					    count ? g->indices + first : NULL,
					    count ? (const char *)g->values + first * x->gsz
						  : NULL,
					    count, g->dtype, po);
		}
		for (uint32_t s = 0; s < 3; s++)
			if (c.out[s])
				o->hash[s][j] = page_hash(c.out[s], ps);
	}
}

/* step_task - split: task i updates its eighth of the batch; else task 0
 * updates the batch and places it (the caller is waiting, holding the
 * sequence's lock for it), while task 1 loads the next one into the
 * other half */
static kvf_status step_task(void *arg, uint32_t i)
{
	struct step_ctx *x = arg;

	if (x->split) {
		update(x, x->n * i / OPT_SPLIT, x->n * (i + 1) / OPT_SPLIT);
		return KVF_OK;
	}
	if (i == 0) {
		update(x, 0, x->n);
		return fill_batch(x->o, x->seq, x->c0, x->n, 1 - x->gen, x->cur);
	}
	return load_batch(x->o, x->seq, x->c0 + x->o->batch, x->next_n, x->gen,
			  x->cur ^ 1);
}

/* run_split - the state is in memory, so loading is only finding the
 * pages: each batch is as long as the open segments have room for, and
 * every worker updates a share of it */
static kvf_status run_split(struct step_ctx *x)
{
	kvf_opt *o = x->o;
	kvf_status rc = KVF_OK;

	for (uint64_t c0 = 0; rc == KVF_OK && c0 < o->n_chunks; c0 += x->n) {
		x->c0 = c0;
		x->n = batch_len(o, c0);
		rc = plan_batch(o, x->seq, c0, &x->n, 1 - x->gen, 0, 1);
		if (rc == KVF_OK)
			rc = load_batch(o, x->seq, c0, x->n, x->gen, 0);
		if (rc == KVF_OK)
			rc = pool_run(o->st->pool, OPT_SPLIT, step_task, x);
		if (rc == KVF_OK)
			rc = fill_batch(o, x->seq, c0, x->n, 1 - x->gen, 0);
	}
	return rc;
}

/* run_pipelined - a worker loads batch b + 1 into one half of the work
 * buffers while batch b, in the other, is updated and placed: the reads
 * go on while placing b seals segments and hands them to the writer */
static kvf_status run_pipelined(struct step_ctx *x)
{
	kvf_opt *o = x->o;
	kvf_status rc = load_batch(o, x->seq, 0, batch_len(o, 0), x->gen, 0);

	for (uint64_t c0 = 0; rc == KVF_OK && c0 < o->n_chunks; c0 += o->batch) {
		x->c0 = c0;
		x->n = batch_len(o, c0);
		x->next_n = c0 + o->batch < o->n_chunks ? batch_len(o, c0 + o->batch)
							 : 0;
		rc = plan_batch(o, x->seq, c0, &x->n, 1 - x->gen, x->cur, 0);
		if (rc == KVF_OK)
			rc = pool_run(o->st->pool, x->next_n ? 2 : 1, step_task, x);
		x->cur ^= 1;
	}
	return rc;
}

/* step_once - kvf_opt_step after its checks.  On failure the committed
 * generation stays (what was placed of the new one is garbage, and
 * params_out may be partly written, unless the failure came first: no
 * room, KVF_ENOSPC, when *want is the free segments a stripe a
 * generation needs) */
static kvf_status step_once(kvf_opt *o, const kvf_grad *g, void *params_out,
			    float scale, uint32_t *want)
{
	const char *call = "kvf_opt_step";
	kvf_store *st = o->st;
	struct kvc_opt_step step;
	struct seq *seq;
	uint64_t steps;
	uint32_t gen;
	struct step_ctx x;
	kvf_status rc;

	pthread_mutex_lock(&st->sync_lock); /* sync_lock, then world */
	pthread_rwlock_rdlock(&st->world);
	seq = seq_get_ns(st, SEQ_NS_OPT, o->seq_id);
	if (seq == NULL) {
		pthread_rwlock_unlock(&st->world);
		pthread_mutex_unlock(&st->sync_lock);
		return kvf_fail(KVF_ENOENT, "%s: optimizer '%s' was freed", call, o->name);
	}
	pthread_mutex_lock(&seq->lock);
	gen = seq->opt_gen;
	steps = seq->opt_steps;
	kvc_opt_step_prepare(&step, &o->cfg, steps + 1, scale);
	/* its message names call */
	rc = reserve_gen(o, seq, 1 - gen, call, want);
	x = (struct step_ctx){ .o = o, .seq = seq, .g = g, .params_out = params_out,
			       .step = &step, .gsz = dtype_size(g->dtype), .gen = gen,
			       .split = st->hdr.media == KVF_MEDIA_MEMORY };
	if (rc == KVF_OK) {
		rc = x.split ? run_split(&x) : run_pipelined(&x);
		/* on failure the old generation is intact and still
		 * committed; what was placed of the new one is garbage
		 * after the next step */
		if (rc != KVF_OK && rc != KVF_EFATAL)
			kvf_fail_wrap(rc, call);
	}
	seg_unreserve(st, seq);
	if (rc == KVF_OK)
		rc = commit_gen(o, seq, steps + 1, 1 - gen, 0);
	seq_unlock_put(st, seq);
	pthread_rwlock_unlock(&st->world);
	pthread_mutex_unlock(&st->sync_lock);
	return rc;
}

kvf_status kvf_opt_step(kvf_opt *o, const kvf_grad *g, void *params_out)
{
	const char *call = "kvf_opt_step";
	float scale = 1.0f;
	kvf_status rc;

	if ((rc = opt_enter(o, call)) != KVF_OK)
		return rc;
	if (o->st->read_only)
		return kvf_fail(KVF_ENOTSUP, "%s: the store %s is open read-only",
				call, o->st->dir);
	if ((rc = check_grad(o, g, &scale)) != KVF_OK)
		return rc;
	for (int attempt = 0;; attempt++) {
		uint32_t want = 1;

		rc = step_once(o, g, params_out, scale, &want);
		if (!make_room(o->st, attempt, want, call, o->name, &rc))
			return rc;
	}
}

kvf_status kvf_opt_read(kvf_opt *o, uint64_t i0, uint64_t n, float *out)
{
	const char *call = "kvf_opt_read";
	kvf_store *st;
	struct seq *seq;
	kvf_status rc = KVF_OK;

	if ((rc = opt_enter(o, call)) != KVF_OK)
		return rc;
	if (out == NULL && n > 0)
		return kvf_fail(KVF_EINVAL, "%s: out is NULL", call);
	st = o->st;
	if (i0 > o->n_params || n > o->n_params - i0)
		return kvf_fail(KVF_ERANGE, "%s: [%llu, %llu) past the %llu parameters",
				call, (unsigned long long)i0,
				(unsigned long long)(i0 + n),
				(unsigned long long)o->n_params);
	pthread_rwlock_rdlock(&st->world);
	seq = seq_get_ns(st, SEQ_NS_OPT, o->seq_id);
	if (seq == NULL) {
		pthread_rwlock_unlock(&st->world);
		return kvf_fail(KVF_ENOENT, "%s: optimizer '%s' was freed", call, o->name);
	}
	pthread_mutex_lock(&seq->lock);
	for (uint64_t c0 = i0 / o->per_chunk; rc == KVF_OK && n > 0 &&
	     c0 <= (i0 + n - 1) / o->per_chunk; c0 += o->batch) {
		uint64_t last = (i0 + n - 1) / o->per_chunk;
		uint32_t cnt = (uint32_t)(last - c0 + 1 < o->batch ? last - c0 + 1
								  : o->batch);
		uint64_t idx[OPT_BATCH];
		struct load_ctx l = { o, 0, ST_PARAM };

		for (uint32_t j = 0; j < cnt; j++)
			idx[j] = c0 + j;
		rc = stream_read_entries(st, seq, &seq->opt[ST_PARAM * 2 + seq->opt_gen],
					 idx, cnt, load_page, &l);
		for (uint32_t j = 0; rc == KVF_OK && j < cnt; j++) {
			uint64_t a = (c0 + j) * o->per_chunk, z = a + o->per_chunk;

			a = a > i0 ? a : i0;
			z = z < i0 + n ? z : i0 + n;
			memcpy(out + (a - i0), o->src[0][ST_PARAM][j] +
						       (a - (c0 + j) * o->per_chunk),
			       (size_t)(z - a) * sizeof(float));
		}
	}
	seq_unlock_put(st, seq);
	pthread_rwlock_unlock(&st->world);
	return rc;
}

kvf_status kvf_opt_steps(kvf_opt *o, uint64_t *steps, uint64_t *n_params)
{
	struct meta_opt m;
	kvf_opt_config cfg;
	kvf_status rc;

	if ((rc = opt_enter(o, "kvf_opt_steps")) != KVF_OK)
		return rc;
	if (steps == NULL)
		return kvf_fail(KVF_EINVAL, "kvf_opt_steps: steps is NULL");
	pthread_rwlock_rdlock(&o->st->world);
	rc = record_get(o->st, o->name, &m, &cfg);
	pthread_rwlock_unlock(&o->st->world);
	if (rc == KVF_ENOENT)
		return kvf_fail(KVF_ENOENT, "kvf_opt_steps: optimizer '%s' was freed",
				o->name);
	if (rc != KVF_OK)
		return rc;
	*steps = m.steps;
	if (n_params)
		*n_params = o->n_params;
	return KVF_OK;
}

kvf_status kvf_opt_close(kvf_opt *o)
{
	struct seq *seq;

	if (o == NULL)
		return KVF_OK;
	if (o->st == NULL) { /* its store was closed: only the handle is left */
		handle_free(o);
		return KVF_OK;
	}
	pthread_rwlock_rdlock(&o->st->world);
	if ((seq = seq_get_ns(o->st, SEQ_NS_OPT, o->seq_id)) != NULL) {
		pthread_mutex_lock(&seq->lock);
		seq->opt_handles--;
		seq_unlock_put(o->st, seq);
	}
	pthread_rwlock_unlock(&o->st->world);
	handle_free(o);
	return KVF_OK;
}

kvf_status kvf_opt_free(kvf_store *st, const char *name)
{
	const char *call = "kvf_opt_free";
	struct catalog_batch *b;
	unsigned char key[9];
	kvf_opt_config cfg;
	struct meta_opt m;
	struct seq *seq;
	kvf_status rc;

	if (st == NULL)
		return kvf_fail(KVF_EINVAL, "%s: store is NULL", call);
	if ((rc = store_check(st, call)) != KVF_OK || (rc = check_name(call, name)) != KVF_OK)
		return rc;
	if (st->read_only)
		return kvf_fail(KVF_ENOTSUP, "%s: the store %s is open read-only",
				call, st->dir);
	pthread_mutex_lock(&st->sync_lock); /* sync_lock, then world */
	pthread_rwlock_rdlock(&st->world);
	rc = record_get(st, name, &m, &cfg);
	if (rc == KVF_ENOENT)
		rc = kvf_fail(KVF_ENOENT, "%s: no optimizer called '%s'", call, name);
	if (rc != KVF_OK)
		goto out;
	if ((seq = seq_get_ns(st, SEQ_NS_OPT, m.seq)) == NULL) {
		rc = kvf_fail(KVF_ECORRUPT, "%s: optimizer '%s' names a missing sequence",
			      call, name);
		goto out;
	}
	pthread_mutex_lock(&seq->lock);
	if (seq->opt_handles > 0) {
		rc = kvf_fail(KVF_EBUSY, "%s: optimizer '%s' has %d open handle(s)",
			      call, name, seq->opt_handles);
		seq_unlock_put(st, seq);
		goto out;
	}
	if ((rc = openseg_flush_all(st, seq)) != KVF_OK) {
		seq_unlock_put(st, seq);
		goto out;
	}
	b = catalog_batch_new();
	if (b == NULL) {
		seq_unlock_put(st, seq);
		rc = kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
		goto out;
	}
	{
		size_t nl = strlen(name);
		unsigned char *okey = kvf_malloc(nl + 1);

		if (okey == NULL) {
			catalog_batch_free(b);
			seq_unlock_put(st, seq);
			rc = kvf_fail(KVF_ENOMEM, "%s: out of memory", call);
			goto out;
		}
		okey[0] = META_TAG_OPT;
		memcpy(okey + 1, name, nl);
		catalog_batch_delete(b, okey, nl + 1);
		kvf_free(okey);
	}
	meta_key_u64(key, META_TAG_OPT_SEQ, seq->id);
	catalog_batch_delete(b, key, sizeof(key));
	rc = catalog_commit(st->cat, b, 0);
	catalog_batch_free(b);
	if (rc != KVF_OK) {
		seq_unlock_put(st, seq);
		rc = store_set_fatal(st, rc, call);
		goto out;
	}
	seq->dead = 1;
	seq_drop_all(st, seq);
	pthread_mutex_unlock(&seq->lock);
	seq_remove(st, seq);
	seq_put(st, seq);
out:
	pthread_rwlock_unlock(&st->world);
	pthread_mutex_unlock(&st->sync_lock);
	return rc;
}

/* ---- recovery ------------------------------------------------------------ */

static int load_record(void *arg, const void *key, size_t klen, const void *val,
		       size_t vlen)
{
	kvf_store *st = arg;
	struct meta_opt m;
	struct seq *seq;
	kvf_status rc;
	uint64_t per;

	(void)key;
	if (vlen != sizeof(m) + sizeof(kvf_opt_config) || klen < 2)
		return kvf_fail(KVF_ECORRUPT, "kvf_open: an optimizer record is malformed (%zu bytes)",
				vlen);
	memcpy(&m, val, sizeof(m));
	per = st->hdr.page_size / sizeof(float);
	/* kvf_opt_create's limits, and a state that fits on the media */
	if (m.cfg_size != sizeof(kvf_opt_config) || m.n_params == 0 ||
	    m.n_params > UINT32_MAX ||
	    (m.n_params + per - 1) / per >
		    (uint64_t)st->n_segments * st->data_per_seg)
		return kvf_fail(KVF_ECORRUPT,
				"kvf_open: an optimizer record is malformed: %llu parameters, %u bytes of configuration",
				(unsigned long long)m.n_params, m.cfg_size);
	if ((seq = seq_get_ns(st, SEQ_NS_OPT, m.seq)) == NULL)
		return 0; /* its sequence went: the record is left over */
	rc = opt_streams_alloc(seq, (m.n_params + per - 1) / per);
	seq->opt_gen = m.gen & 1;
	seq->opt_steps = m.steps;
	if (m.seq >= atomic_load(&st->next_opt_id))
		atomic_store(&st->next_opt_id, m.seq + 1);
	(void)key;
	seq_put(st, seq);
	return rc;
}

kvf_status opt_recovery_load(kvf_store *st)
{
	unsigned char tag = META_TAG_OPT;

	return catalog_scan(st->cat, &tag, 1, load_record, st);
}
