/*
 * prefetch.c - a layer's pages into the memory tier ahead of attention
 * (prefetch.h says what may be read and cached, and why it is safe
 * without the sequence's lock).
 */
#include "engine/reads/prefetch.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/base/group.h"
#include "engine/base/jobs.h"
#include "engine/base/key.h"
#include "engine/base/store_state.h"
#include "engine/base/tier.h"
#include "engine/segments/openseg.h"
#include "engine/segments/segtable.h"
#include "engine/sequences/dropmark.h"
#include "engine/sequences/seq_state.h"
#include "engine/reads/readpath.h"
#include "engine/sequences/seq_stream.h"

#define PREFETCH_BATCH 256u /* pages per media read (1 MiB of 4 KiB): at
			     * most KVF_MEDIA_ASYNC_IO requests */

void (*_Atomic prefetch_test_hook)(kvf_store *st, int done);

struct prefetch_job {
	kvf_store *st;
	uint64_t seq_id;
	uint32_t layer;
	uint32_t n;             /* pages */
	struct page_ref *ref;   /* [n], in stream order */
	uint64_t *gen;          /* [n]: the drop count of each page's
				 * segment when its address was taken */
};

/* ---- the store's list of prefetches ------------------------------------ */

void prefetch_init(kvf_store *st)
{
	pthread_mutex_init(&st->prefetch.lock, NULL);
	pthread_cond_init(&st->prefetch.done, NULL);
	st->prefetch.n = 0;
	st->prefetch.closing = 0;
}

void prefetch_free(kvf_store *st)
{
	pthread_cond_destroy(&st->prefetch.done);
	pthread_mutex_destroy(&st->prefetch.lock);
}

/* busy_add - list j (to be queued as job id): 1; 2 when the same layer
 * is listed already (it is being read); 0 when the list is full or the
 * store closes (the hint is dropped) */
static int busy_add(kvf_store *st, const struct prefetch_job *j, uint64_t id)
{
	struct prefetch_busy *b = &st->prefetch;
	int got;

	pthread_mutex_lock(&b->lock);
	got = b->n < PREFETCH_JOBS_MAX && !b->closing;
	for (uint32_t i = 0; i < b->n; i++)
		if (b->seq[i] == j->seq_id && b->layer[i] == j->layer)
			got = 2;
	if (got == 1) {
		b->job[b->n] = j;
		b->jid[b->n] = id;
		b->seq[b->n] = j->seq_id;
		b->layer[b->n] = j->layer;
		b->stop[b->n] = 0;
		b->running[b->n++] = 0;
	}
	pthread_mutex_unlock(&b->lock);
	return got;
}

/* busy_find - j's place in the list, or b->n (lock held) */
static uint32_t busy_find(const struct prefetch_busy *b, const void *j)
{
	uint32_t i = 0;

	while (i < b->n && b->job[i] != j)
		i++;
	return i;
}

/* busy_drop - take entry i off (lock held) */
static void busy_drop(struct prefetch_busy *b, uint32_t i)
{
	b->n--;
	b->job[i] = b->job[b->n];
	b->jid[i] = b->jid[b->n];
	b->seq[i] = b->seq[b->n];
	b->layer[i] = b->layer[b->n];
	b->running[i] = b->running[b->n];
	b->stop[i] = b->stop[b->n];
	pthread_cond_broadcast(&b->done);
}

/* busy_start - j is about to read: 0 if a waiter took it off meanwhile
 * or the store closes */
static int busy_start(kvf_store *st, const struct prefetch_job *j)
{
	struct prefetch_busy *b = &st->prefetch;
	uint32_t i;
	int on;

	pthread_mutex_lock(&b->lock);
	i = busy_find(b, j);
	on = i < b->n && !b->closing;
	if (on)
		b->running[i] = 1;
	pthread_mutex_unlock(&b->lock);
	return on;
}

/* busy_stopped - j is to read no further batch (a waiter or the close
 * asked) */
static int busy_stopped(kvf_store *st, const struct prefetch_job *j)
{
	struct prefetch_busy *b = &st->prefetch;
	uint32_t i;
	int stop;

	pthread_mutex_lock(&b->lock);
	i = busy_find(b, j);
	stop = i >= b->n || b->stop[i] || b->closing;
	pthread_mutex_unlock(&b->lock);
	return stop;
}

static void busy_end(kvf_store *st, const struct prefetch_job *j)
{
	struct prefetch_busy *b = &st->prefetch;
	uint32_t i;

	pthread_mutex_lock(&b->lock);
	if ((i = busy_find(b, j)) < b->n)
		busy_drop(b, i);
	pthread_mutex_unlock(&b->lock);
}

void prefetch_wait(kvf_store *st, uint64_t seq_id, uint32_t layer)
{
	struct prefetch_busy *b = &st->prefetch;

	pthread_mutex_lock(&b->lock);
	for (;;) {
		uint32_t i = 0;

		while (i < b->n && !(b->seq[i] == seq_id && b->layer[i] == layer))
			i++;
		if (i == b->n)
			break;
		if (!b->running[i]) {
			uint64_t id = b->jid[i];

			/* off the list (should it start now, it finds itself
			 * off and stops), then off its queue: its drop frees
			 * it, taking this lock */
			busy_drop(b, i);
			pthread_mutex_unlock(&b->lock);
			(void)async_cancel(id);
			pthread_mutex_lock(&b->lock);
			continue;
		}
		/* the caller reads the rest faster itself than it waits for
		 * the prefetch to: it ends with the batch in flight */
		b->stop[i] = 1;
		pthread_cond_wait(&b->done, &b->lock);
	}
	pthread_mutex_unlock(&b->lock);
}

void prefetch_close(kvf_store *st)
{
	pthread_mutex_lock(&st->prefetch.lock);
	st->prefetch.closing = 1;
	pthread_mutex_unlock(&st->prefetch.lock);
}

/* ---- taking a layer's addresses (under the sequence's lock) ------------ */

/* media_kept - the media keeps pages in memory (nothing to prefetch) */
static int media_kept(kvf_store *st, uint32_t addr)
{
	uint32_t segid = addr_seg(addr, st->page_bits);

	return kvf_media_map(st->media, seg_stripe(st, segid),
			     seg_in_stripe(st, segid),
			     addr_page(addr, st->page_bits)) != NULL;
}

/* The pages a prefetch takes, found in stream order and kept when the
 * tier has not got them, up to cap. */
struct take {
	struct prefetch_job *j;
	uint32_t cap;
	uint32_t n;                        /* staged */
	uint32_t addr[PREFETCH_BATCH], check[PREFETCH_BATCH];
};

/* take_flush - of the staged pages, those the tier has not got now into
 * the job, each with its segment's drop count (taken now: under the
 * sequence's lock, with the addresses) */
static void take_flush(kvf_store *st, struct take *t)
{
	struct prefetch_job *j = t->j;
	uint64_t gen[PREFETCH_BATCH];
	uint8_t miss[PREFETCH_BATCH];

	tier_missing(st, t->addr, t->check, t->n, miss, gen);
	for (uint32_t i = 0; i < t->n && j->n < t->cap; i++)
		if (miss[i]) {
			j->ref[j->n] = (struct page_ref){ .addr = t->addr[i],
							  .check = t->check[i] };
			j->gen[j->n++] = gen[i];
		}
	t->n = 0;
}

/* take_stream - the media pages of the sealed groups of s (a K or V
 * stream of lane, `tokens` long) from the one holding token `first` on;
 * 0, or -1 when the media keeps pages in memory */
static int take_stream(kvf_store *st, struct seq *seq, uint32_t lane,
		       struct stream *s, uint64_t tokens, uint64_t first,
		       struct take *t)
{
	uint32_t P = group_sealed_pages(st, s), G = st->group_tokens;
	int drops = dropmark_any(st, seq, lane);

	for (uint64_t g = first / G; g < tokens / G && t->j->n < t->cap; g++) {
		uint64_t e0 = group_sealed_entry(st, s, g);

		/* a dropped group's pages are given up: not worth reading */
		if (drops && dropmark_first(st, seq, lane, g * G, (g + 1) * G) !=
				     UINT64_MAX)
			continue;
		for (uint64_t e = e0; e < e0 + P && e < s->n_groups; e++) {
			struct page_ref r = stream_page(s, e);

			if (r.addr == ADDR_NONE || stream_waiting(s, e) ||
			    openseg_page(st, seq, r.addr))
				continue;
			if (media_kept(st, r.addr))
				return -1;
			t->addr[t->n] = r.addr;
			t->check[t->n++] = r.check;
			if (t->n == PREFETCH_BATCH)
				take_flush(st, t);
		}
	}
	return 0;
}

static kvf_status prefetch_run(void *arg);

static void job_free(struct prefetch_job *j)
{
	if (j) {
		kvf_free(j->ref);
		kvf_free(j->gen);
	}
	kvf_free(j);
}

/* prefetch_drop - a queued job taken off (async_cancel, jobs_drain) */
static void prefetch_drop(void *arg)
{
	struct prefetch_job *j = arg;

	busy_end(j->st, j);
	job_free(j);
}

kvf_status prefetch_locked(kvf_store *st, struct seq *seq, uint32_t layer,
			   uint64_t first, int *queued)
{
	uint32_t room = tier_room_pages(st), H = st->hdr.n_kv_heads;
	uint64_t all = 0;
	struct prefetch_job *j;
	struct take *t;
	uint64_t id;
	kvf_status rc;
	int got;

	if (queued)
		*queued = 0;
	if (room == 0 || seq->ns != SEQ_NS_USER)
		return KVF_OK;
	for (uint32_t h = 0; h < H && all < room; h++)
		for (int kind = 0; kind < 2; kind++)
			all += seq_kv_stream(st, seq, layer, (enum kv_kind)kind,
					     h)->n_groups;
	if (all == 0)
		return KVF_OK;
	room = all < room ? (uint32_t)all : room; /* the most it keeps */
	j = kvf_calloc(1, sizeof(*j));
	t = kvf_malloc(sizeof(*t));
	if (j == NULL || t == NULL ||
	    (j->ref = kvf_malloc((size_t)room * sizeof(*j->ref))) == NULL ||
	    (j->gen = kvf_malloc((size_t)room * sizeof(*j->gen))) == NULL) {
		kvf_free(t);
		job_free(j);
		return kvf_fail(KVF_ENOMEM, "prefetch: out of memory");
	}
	j->st = st;
	j->seq_id = seq->id;
	j->layer = layer;
	*t = (struct take){ .j = j, .cap = room };
	for (uint32_t h = 0; h < H; h++)
		for (int kind = 0; kind < 2; kind++)
			if (take_stream(st, seq, dropmark_lane(st, layer, h),
					seq_kv_stream(st, seq, layer,
						      (enum kv_kind)kind, h),
					seq->len[layer], first, t) < 0) {
				t->n = j->n = 0;
				h = H;
				break;
			}
	take_flush(st, t);
	kvf_free(t);
	id = async_id();
	got = j->n ? busy_add(st, j, id) : 0;
	if (got != 1) {
		job_free(j);
		if (queued)
			*queued = got == 2; /* read by the one listed */
		return KVF_OK;
	}
	if ((rc = async_detach(st, "prefetch", prefetch_run, prefetch_drop, j,
			       id)) != KVF_OK) {
		busy_end(st, j);
		job_free(j);
		return rc;
	}
	if (queued)
		*queued = 1;
	return KVF_OK;
}

/* ---- the job: reading, checking, caching ------------------------------- */

/* One batch of a prefetch: pages not cached when looked at, their
 * requests (adjacent pages merged) and the read in flight. */
struct pf_batch {
	unsigned char *buf;                   /* PREFETCH_BATCH pages */
	struct page_ref want[PREFETCH_BATCH];
	uint64_t gen[PREFETCH_BATCH];
	uint32_t m;                           /* pages */
	struct kvf_media_io io[PREFETCH_BATCH];
	uint32_t n_io;
	struct kvf_media_read_op op;
	int started;                          /* op holds a started read */
};

/* pf_fill - the pages of j's [i0, i0 + n) the tier has not got now */
static void pf_fill(kvf_store *st, struct pf_batch *b,
		    const struct prefetch_job *j, uint32_t i0, uint32_t n)
{
	uint32_t addr[PREFETCH_BATCH] = { 0 }, check[PREFETCH_BATCH] = { 0 };
	uint32_t ps = st->hdr.page_size;
	uint8_t miss[PREFETCH_BATCH];

	for (uint32_t i = 0; i < n; i++) {
		addr[i] = j->ref[i0 + i].addr;
		check[i] = j->ref[i0 + i].check;
	}
	tier_missing(st, addr, check, n, miss, NULL);
	b->m = b->n_io = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (!miss[i])
			continue;
		read_io_add(st, b->io, &b->n_io, addr[i],
			    b->buf + (size_t)b->m * ps);
		b->gen[b->m] = j->gen[i0 + i];
		b->want[b->m++] = j->ref[i0 + i];
	}
}

/* pf_start - b's read in flight (a failed one leaves b empty: a hint not
 * taken; the attention that needs the pages reads them itself and
 * reports what it finds) */
static void pf_start(kvf_store *st, struct pf_batch *b)
{
	b->started = 0;
	if (b->m == 0)
		return;
	if (kvf_media_read_start(st->media, b->io, b->n_io, &b->op) != KVF_OK) {
		b->m = 0;
		return;
	}
	b->started = 1;
}

/* pf_finish - wait for b's read; 0 if it failed (counted if not) */
static int pf_finish(kvf_store *st, struct pf_batch *b)
{
	if (!b->started)
		return 0;
	b->started = 0;
	if (kvf_media_read_finish(st->media, &b->op) != KVF_OK)
		return 0;
	atomic_fetch_add(&st->c.bytes_read, (uint64_t)b->m * st->hdr.page_size);
	atomic_fetch_add(&st->c.pages_read, b->m);
	return 1;
}

/* pf_put - b's pages checked and offered to the tier */
static void pf_put(kvf_store *st, struct pf_batch *b)
{
	uint32_t ps = st->hdr.page_size, put = 0;

	for (uint32_t i = 0; i < b->m; i++) {
		const unsigned char *p = b->buf + (size_t)i * ps;

		/* a page that does not match was moved since: skipped */
		if (page_check(p, ps) == b->want[i].check &&
		    tier_put_prefetched(st, b->want[i].addr, b->want[i].check,
					p, b->gen[i]))
			put++;
	}
	atomic_fetch_add(&st->c.prefetch_pages, put);
}

/* prefetch_run - the job: the pages not cached by now, in batches, the
 * next batch's read in flight while this one is checked and cached; no
 * more than the tier's room, and none once stopped */
static kvf_status prefetch_run(void *arg)
{
	struct prefetch_job *j = arg;
	kvf_store *st = j->st;
	void (*hook)(kvf_store *, int) = prefetch_test_hook;
	struct pf_batch *b = NULL;
	uint32_t i0 = 0, room;
	int cur = 0;

	if (hook)
		hook(st, 0);
	if (busy_start(st, j) && (b = kvf_calloc(2, sizeof(*b))) != NULL &&
	    ((b[0].buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN,
			(size_t)2 * PREFETCH_BATCH * st->hdr.page_size)) != NULL)) {
		b[1].buf = b[0].buf + (size_t)PREFETCH_BATCH * st->hdr.page_size;
		/* b[cur] holds the read in flight, if any */
		for (;;) {
			struct pf_batch *now = &b[cur], *next = &b[!cur];

			/* the next batch with a page to read (the tier may
			 * have got them all meanwhile) */
			next->m = 0;
			while (next->m == 0 && i0 < j->n && !busy_stopped(st, j) &&
			       (room = tier_room_pages(st)) > now->m) {
				uint32_t n = j->n - i0 < PREFETCH_BATCH
						     ? j->n - i0 : PREFETCH_BATCH;

				/* no more than the room left once the
				 * batch in flight is in */
				n = n < room - now->m ? n : room - now->m;
				pf_fill(st, next, j, i0, n);
				i0 += n;
			}
			if (pf_finish(st, now))
				pf_put(st, now);
			/* a stop that came meanwhile: nothing more read */
			if (next->m == 0 || busy_stopped(st, j))
				break;
			pf_start(st, next);
			cur = !cur;
		}
	}
	if (b) {
		kvf_free(b[0].buf);
		kvf_free(b);
	}
	if (hook)
		hook(st, 1);
	busy_end(st, j);
	job_free(j);
	return KVF_OK;
}
