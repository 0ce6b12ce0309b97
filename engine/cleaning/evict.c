/*
 * evict.c - eviction of whole sequences by policy when live data fills
 * the media (engine/cleaning/evict.h; docs/store.md, "Eviction").
 *
 * Scoring a sequence walks its index: a page only it references is given
 * back by its eviction; a page it shares (a fork family's prefix) is not.
 * For the endurance-aware policy the segments holding its own pages are
 * looked at too: their other live pages are what the cleaner must copy
 * before the segment can be reused, the write that eviction causes.
 *
 * Locking: evictor.lock for a whole run; world shared while the
 * sequences are scored, each under its lock (segtab.lock inside, per
 * page); then each victim is freed by seq_free_id, which takes dur.lock,
 * world and its lock.
 */
#include "engine/cleaning/evict.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/base/key.h"
#include "engine/segments/openseg.h"
#include "engine/segments/segtable.h"
#include "engine/sequences/prefix.h"
#include "engine/sequences/seq.h"
#include "engine/sequences/seq_state.h"
#include "engine/sequences/seq_stream.h"
#include "engine/base/store_state.h"

kvf_status evict_init(kvf_store *st)
{
	struct evictor *e = &st->evict;

	pthread_mutex_init(&e->lock, NULL);
	e->log = kvf_calloc(EVICT_LOG_CAP, sizeof(*e->log));
	if (e->log == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_open: out of memory for the eviction log");
	return KVF_OK;
}

void evict_free(kvf_store *st)
{
	if (st->evict.log == NULL)
		return;
	kvf_free(st->evict.log);
	st->evict.log = NULL;
	pthread_mutex_destroy(&st->evict.lock);
}

/* live_pages - pages referenced, plus those waiting for write-back (their
 * room is promised) */
static uint64_t live_pages(kvf_store *st)
{
	uint64_t n = 0;

	pthread_mutex_lock(&st->segtab.lock);
	for (uint32_t i = 0; i < st->n_segments; i++)
		if (st->segtab.info[i].state != SEG_FREE)
			n += st->segtab.info[i].live;
	for (uint32_t s = 0; s < st->hdr.n_stripes; s++)
		n += st->segtab.promised[s];
	pthread_mutex_unlock(&st->segtab.lock);
	return n;
}

static uint64_t data_pages(kvf_store *st)
{
	return (uint64_t)st->n_segments * st->data_per_seg;
}

double evict_live_share(kvf_store *st)
{
	return (double)live_pages(st) / (double)data_pages(st);
}

uint64_t evict_pages_over_low(kvf_store *st)
{
	uint64_t live = live_pages(st);
	uint64_t low = (uint64_t)((double)st->opts.evict_low * (double)data_pages(st));

	return live > low ? live - low : 0;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int evict_over_high(kvf_store *st)
{
	return st->opts.evict_policy != KVF_EVICT_NONE && !st->read_only &&
	       now_ns() >= atomic_load(&st->evict.quiet_until) &&
	       evict_live_share(st) > (double)st->opts.evict_high;
}

/* ---- scoring -------------------------------------------------------------- */

struct cand {
	uint64_t id;
	int cached;      /* a cached prefix: goes before any sequence */
	uint64_t hits;   /* a cached prefix's worth (prefix_cached_value) */
	uint64_t hit_ns; /* and its last use */
	uint64_t rank;   /* place in the policy's order (sequences) */
	uint64_t last_use, uses;
	uint64_t pages;  /* given back by its eviction */
	uint64_t copy;   /* other live pages in the segments of those */
	double key;      /* the policy's order: lowest goes first */
};

struct scan {
	kvf_store *st;
	uint32_t policy;
	uint64_t keep;
	struct cand *c;
	uint32_t n, cap;
	uint32_t *seg_own;   /* [n_segments] pages of this sequence alone */
	uint32_t *touched;   /* segments with seg_own > 0 */
	uint32_t n_touched;
	int nomem;
};

/* own_page - a page only seq references: count it, and its segment */
static void own_page(struct scan *sc, uint32_t addr)
{
	uint32_t segid = addr_seg(addr, sc->st->page_bits);

	if (sc->seg_own[segid]++ == 0)
		sc->touched[sc->n_touched++] = segid;
}

/* score_pages - the pages seq gives back, and where they lie (caller
 * holds seq->lock) */
static uint64_t score_pages(struct scan *sc, struct seq *seq)
{
	kvf_store *st = sc->st;
	uint32_t n = seq_n_streams(st);
	uint64_t pages = 0;

	for (uint32_t i = 0; i < n; i++) {
		uint32_t sid;
		struct stream *s = seq_stream_at(st, seq, i, &sid);

		if (s == NULL)
			continue;
		for (uint32_t g = 0; g < s->n_groups; g++) {
			uint32_t a = stream_page(s, g).addr;

			if (a == ADDR_NONE) {
				pages += stream_waiting(s, g) != NULL;
			} else if (openseg_page(st, seq, a) != NULL) {
				pages++; /* in its open segment: its own */
			} else if (seg_page_refs(st, a) == 1) {
				pages++;
				own_page(sc, a);
			}
		}
	}
	return pages;
}

/* copy_pages - the live pages of others in the segments seq's own pages
 * lie in (what the cleaner copies to reclaim them); resets the marks */
static uint64_t copy_pages(struct scan *sc)
{
	kvf_store *st = sc->st;
	uint64_t copy = 0;

	pthread_mutex_lock(&st->segtab.lock);
	for (uint32_t i = 0; i < sc->n_touched; i++) {
		uint32_t segid = sc->touched[i];
		uint32_t live = st->segtab.info[segid].live;

		if (live > sc->seg_own[segid])
			copy += live - sc->seg_own[segid];
		sc->seg_own[segid] = 0;
	}
	pthread_mutex_unlock(&st->segtab.lock);
	sc->n_touched = 0;
	return copy;
}

static void score_one(kvf_store *st, struct seq *seq, void *arg)
{
	struct scan *sc = arg;
	struct cand c = { .id = seq->id };
	if (sc->nomem || seq->ns != SEQ_NS_USER || seq->id == sc->keep)
		return;
	/* without a policy only the cache gives way */
	if (sc->policy == KVF_EVICT_NONE && !seq->cached)
		return;
	pthread_mutex_lock(&seq->lock);
	if (!seq->dead && seq->pins == 0) {
		c.pages = score_pages(sc, seq);
		c.copy = copy_pages(sc);
	}
	if (seq->cached) {
		struct prefix_cached_info v;

		prefix_cached_value(st, seq, &v);
		c.cached = 1;
		c.hits = v.hits;
		c.hit_ns = v.last_use_ns;
	}
	pthread_mutex_unlock(&seq->lock);
	if (c.pages == 0)
		return; /* pinned, freed, or every page shared: nothing to gain */
	c.last_use = atomic_load(&seq->last_use);
	c.uses = atomic_load(&seq->uses);
	if (sc->n == sc->cap) {
		uint32_t cap = sc->cap ? 2 * sc->cap : 64;
		struct cand *nc = kvf_realloc(sc->c, (size_t)cap * sizeof(*nc));

		if (nc == NULL) {
			sc->nomem = 1;
			return;
		}
		sc->c = nc;
		sc->cap = cap;
	}
	sc->c[sc->n++] = c;
}

static int by_last_use(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	return (x->last_use > y->last_use) - (x->last_use < y->last_use);
}

static int by_uses(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->uses != y->uses)
		return (x->uses > y->uses) - (x->uses < y->uses);
	return by_last_use(a, b);
}

static int by_key(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->key != y->key)
		return (x->key > y->key) - (x->key < y->key);
	return by_last_use(a, b);
}

/* by_worth - cached prefixes first, the least valuable first (fewer
 * hits on the chunks only they hold, then used longer ago); then the
 * sequences in the policy's order */
static int by_worth(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->cached != y->cached)
		return y->cached - x->cached;
	if (!x->cached)
		return (x->rank > y->rank) - (x->rank < y->rank);
	if (x->hits != y->hits)
		return (x->hits > y->hits) - (x->hits < y->hits);
	return (x->hit_ns > y->hit_ns) - (x->hit_ns < y->hit_ns);
}

/* order_policy - the sequences' order by the policy */
static void order_policy(struct scan *sc, uint32_t policy)
{
	qsort(sc->c, sc->n, sizeof(*sc->c), by_last_use);
	if (policy == KVF_EVICT_LFU) {
		qsort(sc->c, sc->n, sizeof(*sc->c), by_uses);
	} else if (policy == KVF_EVICT_ENDURANCE) {
		/* the LRU rank in [0, 1), plus the share of the segments'
		 * live pages the cleaner would rewrite: a sequence whose
		 * segments others keep half live goes as late as one used
		 * half a store's worth of calls more recently */
		for (uint32_t i = 0; i < sc->n; i++) {
			struct cand *c = &sc->c[i];

			c->key = (double)i / sc->n +
				 (double)c->copy / (double)(c->pages + c->copy);
		}
		qsort(sc->c, sc->n, sizeof(*sc->c), by_key);
	}
}

/* order - sort the candidates, first to go first */
static void order(struct scan *sc, uint32_t policy)
{
	if (sc->n == 0)
		return;
	order_policy(sc, policy);
	for (uint32_t i = 0; i < sc->n; i++)
		sc->c[i].rank = i;
	qsort(sc->c, sc->n, sizeof(*sc->c), by_worth);
}

/* ---- a run ---------------------------------------------------------------- */

static void log_victim(kvf_store *st, const struct cand *c, uint32_t policy,
		       uint32_t reason, uint64_t now)
{
	struct evictor *e = &st->evict;
	kvf_evict_event *ev;
	uint64_t ps = st->hdr.page_size;

	if (e->log_n == EVICT_LOG_CAP) {
		e->log_head = (e->log_head + 1) % EVICT_LOG_CAP;
		e->log_n--;
		e->lost++;
	}
	ev = &e->log[(e->log_head + e->log_n++) % EVICT_LOG_CAP];
	memset(ev, 0, sizeof(*ev));
	ev->seq = c->id;
	ev->reason = reason;
	ev->policy = policy;
	ev->bytes = c->pages * ps;
	ev->copy_bytes = c->copy * ps;
	ev->uses = c->uses;
	ev->idle = now > c->last_use ? now - c->last_use : 0;
	atomic_fetch_add(&e->seqs, 1);
	atomic_fetch_add(&e->bytes, ev->bytes);
	atomic_fetch_add(&e->copy_bytes, ev->copy_bytes);
}

uint64_t evict_run(kvf_store *st, uint32_t policy, uint64_t want_pages,
		   uint32_t reason, uint64_t keep)
{
	struct scan sc = { .st = st, .policy = policy, .keep = keep };
	uint64_t freed = 0, now;
	kvf_status rc;

	pthread_mutex_lock(&st->evict.lock);
	if (want_pages == 0)
		want_pages = evict_pages_over_low(st);
	if (want_pages == 0)
		goto out;
	sc.seg_own = kvf_calloc(st->n_segments, sizeof(uint32_t));
	sc.touched = kvf_calloc(st->n_segments, sizeof(uint32_t));
	if (sc.seg_own == NULL || sc.touched == NULL)
		goto out; /* out of memory: evict nothing (the caller's
			   * KVF_ENOSPC stands) */
	/* world shared: the cleaner moves pages and their references with
	 * it held exclusive, so no index is scored half moved */
	pthread_rwlock_rdlock(&st->world);
	rc = seq_foreach(st, score_one, &sc);
	pthread_rwlock_unlock(&st->world);
	if (rc != KVF_OK || sc.nomem)
		goto out;
	order(&sc, policy);
	atomic_fetch_add(&st->evict.runs, 1);
	if (reason == KVF_EVICTED_FULL)
		atomic_fetch_add(&st->evict.runs_full, 1);
	else if (reason == KVF_EVICTED_WATERMARK)
		atomic_fetch_add(&st->evict.runs_watermark, 1);
	now = atomic_load(&st->seqtab.use_clock);
	for (uint32_t i = 0; i < sc.n && freed < want_pages; i++) {
		/* pinned since it was scored: it stays (KVF_EBUSY); freed
		 * meanwhile: nothing to do (KVF_ENOENT).  A use since the
		 * scoring does not save it: the run keeps the order it
		 * scored, and the freeing counts no use (seq_find_locked) */
		if (seq_free_id(st, "eviction", sc.c[i].id, SEQ_FREE_EVICT) != KVF_OK)
			continue;
		freed += sc.c[i].pages;
		log_victim(st, &sc.c[i], policy, reason, now);
	}
	if (freed == 0 && reason == KVF_EVICTED_WATERMARK)
		atomic_store(&st->evict.quiet_until, now_ns() + 1000000000ull);
out:
	pthread_mutex_unlock(&st->evict.lock);
	kvf_free(sc.c);
	kvf_free(sc.seg_own);
	kvf_free(sc.touched);
	return freed;
}

uint32_t evict_log_take(kvf_store *st, kvf_evict_event *out, uint32_t cap,
			uint64_t *lost)
{
	struct evictor *e = &st->evict;
	uint32_t n = 0;

	pthread_mutex_lock(&e->lock);
	while (n < cap && e->log_n > 0) {
		out[n++] = e->log[e->log_head];
		e->log_head = (e->log_head + 1) % EVICT_LOG_CAP;
		e->log_n--;
	}
	if (lost)
		*lost = e->lost;
	e->lost = 0;
	pthread_mutex_unlock(&e->lock);
	return n;
}

void evict_stats(kvf_store *st, kvf_stats *s)
{
	s->evict_runs = atomic_load(&st->evict.runs);
	s->evict_runs_full = atomic_load(&st->evict.runs_full);
	s->evict_runs_watermark = atomic_load(&st->evict.runs_watermark);
	s->evicted_seqs = atomic_load(&st->evict.seqs);
	s->evicted_bytes = atomic_load(&st->evict.bytes);
	s->evict_copy_bytes = atomic_load(&st->evict.copy_bytes);
	s->live_share = evict_live_share(st);
}
