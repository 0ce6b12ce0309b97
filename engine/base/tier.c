/*
 * tier.c - the memory tier and its page cache (engine/base/tier.h).
 */
#include "engine/base/tier.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/base/key.h"
#include "engine/base/store_state.h"

#define HEAT_MAX 3
#define MISSES_PER_HAND_STEP 16u /* read misses that move the hand once:
				  * slow enough that pages hit every step
				  * stay, fast enough that idle ones go */
#define RECENT_SHARE 4u          /* the recent pool: a quarter of it */
#define TIER_MIN_CHUNKS 8u       /* a budget of fewer segments copies pages */
#define TIER_SYNC_GROW (16u << 20) /* cache memory made on the write path
				    * when no stock is ready: a small
				    * cache (a test's, a tiny budget) fills
				    * as it always did; past it, faulting
				    * fresh memory (0.4-1.4 s a GiB on a
				    * VM) is left to the grower */
#define STOCK_MAX 32u            /* buffers the grower keeps ready */
#define WB_AHEAD 16u             /* buffers it may owe the write-back's
				  * carving (carve) */

/* hash_of - Fibonacci hashing: the product's high bits mix every bit of
 * the address (segment and page alike) */
static uint32_t hash_of(const struct tier *t, uint32_t addr)
{
	return (uint32_t)((uint64_t)(addr * 0x9e3779b1u) >> t->hash_shift);
}

static uint64_t held(kvf_store *st)
{
	return atomic_load(&st->tier.fixed) + st->tier.bytes;
}

static void note_peak(kvf_store *st)
{
	uint64_t now = held(st), p = atomic_load(&st->tier.peak);

	while (now > p && !atomic_compare_exchange_weak(&st->tier.peak, &p, now))
		;
}

/* ---- lists and the hash -------------------------------------------------- */

static void list_unlink(struct tier *t, struct tier_list *l, uint32_t i)
{
	struct tier_slot *s = &t->slot[i];

	if (s->prev != TIER_NONE)
		t->slot[s->prev].next = s->next;
	else
		l->head = s->next;
	if (s->next != TIER_NONE)
		t->slot[s->next].prev = s->prev;
	else
		l->tail = s->prev;
	l->n--;
}

/* list_push - i becomes the head (recent: the newest) or, at_tail, the
 * tail (hot: behind the hand) */
static void list_push(struct tier *t, struct tier_list *l, uint32_t i,
		      int at_tail)
{
	struct tier_slot *s = &t->slot[i];

	if (at_tail) {
		s->next = TIER_NONE;
		s->prev = l->tail;
		if (l->tail != TIER_NONE)
			t->slot[l->tail].next = i;
		else
			l->head = i;
		l->tail = i;
	} else {
		s->prev = TIER_NONE;
		s->next = l->head;
		if (l->head != TIER_NONE)
			t->slot[l->head].prev = i;
		else
			l->tail = i;
		l->head = i;
	}
	l->n++;
}

static uint32_t find(const struct tier *t, uint32_t addr)
{
	uint32_t i = t->bucket[hash_of(t, addr)];

	while (i != TIER_NONE && t->slot[i].addr != addr)
		i = t->slot[i].hnext;
	return i;
}

static void hash_remove(struct tier *t, uint32_t i)
{
	uint32_t *p = &t->bucket[hash_of(t, t->slot[i].addr)];

	while (*p != i)
		p = &t->slot[*p].hnext;
	*p = t->slot[i].hnext;
}

/* chunk_done - the last page of chunk c left: its buffer joins the stock
 * (counted there already) or, the stock full, is freed */
static void chunk_done(struct tier *t, uint32_t c)
{
	struct tier_chunk *k = &t->chunk[c];

	if (t->n_stock < t->stock_cap) {
		t->stock[t->n_stock++] = k->buf;
	} else {
		free(k->buf);
		t->bytes -= t->chunk_bytes;
	}
	k->buf = NULL;
	k->next = t->chunk_free;
	t->chunk_free = c;
	t->chunks_live--;
}

/* release_slot - back to the free list; its page is freed (or its
 * chunk's share of it given back) */
static void release_slot(struct tier *t, uint32_t i)
{
	uint32_t c = t->slot[i].chunk;

	if (c == TIER_NONE) {
		kvf_free(t->slot[i].data);
		t->bytes -= t->page_size;
	} else if (c == TIER_LOOSE) {
		t->loose[t->n_loose++] = t->slot[i].data;
	} else if (--t->chunk[c].live == 0) {
		chunk_done(t, c);
	}
	t->slot[i].data = NULL;
	t->slot[i].chunk = TIER_NONE;
	t->slot[i].next = t->free_head;
	t->free_head = i;
	t->used--;
}

/* evict - take slot i out of the cache (a pinned one is freed by its last
 * unpin) */
static void evict(struct tier *t, uint32_t i)
{
	struct tier_slot *s = &t->slot[i];

	hash_remove(t, i);
	list_unlink(t, &t->pool[s->pool], i);
	s->pool = TIER_POOLS; /* doomed */
	if (s->pins == 0)
		release_slot(t, i);
}

/* demote - the recent pool's oldest into the hot pool, cold */
static void demote(struct tier *t)
{
	uint32_t i = t->pool[TIER_RECENT].tail;

	list_unlink(t, &t->pool[TIER_RECENT], i);
	t->slot[i].pool = TIER_HOT;
	t->slot[i].heat = 0;
	list_push(t, &t->pool[TIER_HOT], i, 1);
}

/* hand_step - move the hot pool's CLOCK hand once: a warm page cools and
 * goes behind the hand; a cold unpinned one is evicted.  Return: whether
 * a page went. */
static int hand_step(struct tier *t)
{
	uint32_t i = t->pool[TIER_HOT].head;
	struct tier_slot *s;

	if (i == TIER_NONE)
		return 0;
	s = &t->slot[i];
	if (s->heat == 0 && s->pins == 0) {
		evict(t, i);
		t->evictions++;
		return 1;
	}
	if (s->heat > 0)
		s->heat--;
	list_unlink(t, &t->pool[TIER_HOT], i);
	list_push(t, &t->pool[TIER_HOT], i, 1);
	return 0;
}

/* evict_one - evict a page for room: a cold one of the hot pool by
 * CLOCK, else the recent pool's oldest.  Return: whether one went (none
 * can while every page is pinned). */
static int evict_one(struct tier *t)
{
	uint64_t turns = (uint64_t)(HEAT_MAX + 1) * t->pool[TIER_HOT].n + 1;
	uint32_t i;

	/* HEAT_MAX + 1 turns of the hand cool every unpinned page to 0 */
	for (uint64_t k = 0; k < turns; k++)
		if (hand_step(t))
			return 1;
	i = t->pool[TIER_RECENT].tail;
	if (i == TIER_NONE || t->slot[i].pins != 0)
		return 0;
	evict(t, i);
	t->evictions++;
	return 1;
}

static int ptr_cmp(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)*(unsigned char *const *)a;
	uintptr_t y = (uintptr_t)*(unsigned char *const *)b;

	return x < y ? -1 : x > y;
}

/* carved_of - the carved buffer holding page p (carved sorted) */
static uint32_t carved_of(const struct tier *t, const unsigned char *p)
{
	uint32_t lo = 0, hi = t->n_carved;

	while (hi - lo > 1) {
		uint32_t mid = (lo + hi) / 2;

		if ((uintptr_t)t->carved[mid] <= (uintptr_t)p)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/* loose_compact - free the carved buffers whose every page is loose (none
 * in use): loose memory is otherwise the cache's for good, and a hold
 * that finds nothing else to evict would fail beside it.  Only then: it
 * sorts and scans.  Whether a buffer went. */
static int loose_compact(struct tier *t)
{
	uint32_t per = t->chunk_bytes ? (uint32_t)(t->chunk_bytes / t->page_size) : 0;
	uint32_t *cnt, kept = 0, freed = 0;

	if (per == 0 || t->n_loose < per || t->n_carved == 0)
		return 0;
	if ((cnt = calloc(t->n_carved, sizeof(*cnt))) == NULL)
		return 0;
	qsort(t->carved, t->n_carved, sizeof(*t->carved), ptr_cmp);
	for (uint32_t i = 0; i < t->n_loose; i++)
		cnt[carved_of(t, t->loose[i])]++;
	for (uint32_t i = 0; i < t->n_loose; i++)
		if (cnt[carved_of(t, t->loose[i])] != per)
			t->loose[kept++] = t->loose[i];
	t->n_loose = kept;
	for (uint32_t i = 0, j = 0; i < t->n_carved; i++) {
		if (cnt[i] == per) {
			free(t->carved[i]);
			t->bytes -= t->chunk_bytes;
			freed++;
		} else {
			t->carved[j++] = t->carved[i];
		}
	}
	t->n_carved -= freed;
	free(cnt);
	return freed > 0;
}

/* room_one - give back some cache memory: a stock buffer first, else a
 * page, else carved buffers no page of which is in use; whether anything
 * went */
static int room_one(struct tier *t)
{
	if (t->n_stock > 0) {
		free(t->stock[--t->n_stock]);
		t->bytes -= t->chunk_bytes;
		return 1;
	}
	return evict_one(t) || loose_compact(t);
}

/* make_room - evict until one more page fits under the budget */
/* slot_free - a slot is free: on the free list, or never used (the slot
 * table is touched only as the cache fills: a cache sized for a 1 GiB
 * budget that holds 4.5 MiB keeps its 8 MiB of slots unmapped) */
static int slot_free(const struct tier *t)
{
	return t->free_head != TIER_NONE || t->fresh < t->n_slots;
}

/* slot_next - the free slot slot_add takes next (slot_free(t) holds) */
static uint32_t slot_next(const struct tier *t)
{
	return t->free_head != TIER_NONE ? t->free_head : t->fresh;
}

static int make_room(kvf_store *st)
{
	struct tier *t = &st->tier;

	while ((t->n_loose == 0 && held(st) + st->hdr.page_size > t->budget) ||
	       !slot_free(t))
		if (!room_one(t))
			return 0;
	return 1;
}

/* slot_add - free slot i = slot_next(t) (holding its data) caches addr,
 * at the head of the recent pool */
static void slot_add(kvf_store *st, uint32_t i, uint32_t addr, uint32_t check,
		     uint32_t chunk)
{
	struct tier *t = &st->tier;
	uint32_t h = hash_of(t, addr);
	struct tier_slot *s = &t->slot[i];

	if (i == t->free_head)
		t->free_head = s->next;
	else
		t->fresh++;
	t->used++;
	s->chunk = chunk;
	s->addr = addr;
	s->check = check;
	s->pins = 0;
	s->heat = 0;
	s->pool = TIER_RECENT;
	s->hnext = t->bucket[h];
	t->bucket[h] = i;
	list_push(t, &t->pool[TIER_RECENT], i, 0);
	while (t->pool[TIER_RECENT].n > t->recent_cap)
		demote(t);
	note_peak(st);
}

/* spare_pages - pages of cache memory made and holding no page (loose
 * pages, stock): a page put there takes no more of the budget (lock
 * held) */
static uint64_t spare_pages(const struct tier *t)
{
	return t->n_loose + (uint64_t)t->n_stock * (t->page_size
		? t->chunk_bytes / t->page_size : 0);
}

/* room_for_page - a page read from media can be cached without passing
 * the budget (lock held) */
static int room_for_page(kvf_store *st)
{
	return spare_pages(&st->tier) > 0 ||
	       held(st) + st->hdr.page_size <= st->tier.budget;
}

/* cut - buffer b (chunk_bytes) carved into loose pages, freed at close
 * (lock held) */
static void cut(struct tier *t, unsigned char *b)
{
	uint32_t per = (uint32_t)(t->chunk_bytes / t->page_size);

	t->carved[t->n_carved++] = b;
	for (uint32_t i = per; i-- > 0;)
		t->loose[t->n_loose++] = b + (size_t)i * t->page_size;
}

/* carve_stock - a stock buffer (faulted in by the grower) cut into loose
 * pages, if there is one; nothing is evicted or made (lock held) */
static void carve_stock(kvf_store *st)
{
	struct tier *t = &st->tier;

	if (t->n_stock == 0 || t->n_carved >= t->n_chunks - 1)
		return;
	cut(t, t->stock[--t->n_stock]);
}

/* insert - a copy of addr's page into a free slot, at the head of the
 * recent pool */
static void insert(kvf_store *st, uint32_t addr, uint32_t check,
		   const void *page)
{
	struct tier *t = &st->tier;
	uint32_t i = slot_next(t), kind = TIER_NONE;
	struct tier_slot *s = &t->slot[i];

	if (t->n_loose == 0)
		carve_stock(st);
	if (t->n_loose > 0) { /* warm memory first */
		s->data = t->loose[--t->n_loose];
		kind = TIER_LOOSE;
	} else {
		s->data = kvf_malloc(st->hdr.page_size);
		if (s->data == NULL)
			return; /* a cache page is optional */
		t->bytes += st->hdr.page_size;
	}
	memcpy(s->data, page, st->hdr.page_size);
	slot_add(st, i, addr, check, kind);
}

/* ---- life ------------------------------------------------------------- */

void tier_init(kvf_store *st)
{
	memset(&st->tier, 0, sizeof(st->tier));
	pthread_mutex_init(&st->tier.lock, NULL);
	pthread_cond_init(&st->tier.grow, NULL);
	st->tier.free_head = TIER_NONE;
	for (int p = 0; p < TIER_POOLS; p++)
		st->tier.pool[p] = (struct tier_list){ TIER_NONE, TIER_NONE, 0 };
}

kvf_status tier_start(kvf_store *st)
{
	struct tier *t = &st->tier;
	uint64_t n = st->opts.dram_budget / st->hdr.page_size, tables;

	t->budget = st->opts.dram_budget;
	/* a memory store's pages are in memory already: no cache */
	if (t->budget == 0 || st->hdr.media == KVF_MEDIA_MEMORY)
		return KVF_OK;
	if (n > UINT32_MAX / 2)
		n = UINT32_MAX / 2;
	t->n_buckets = 2;
	t->hash_shift = 31;
	while (t->n_buckets < n) {
		t->n_buckets *= 2;
		t->hash_shift--;
	}
	t->slot = kvf_calloc(n, sizeof(*t->slot));
	t->bucket = kvf_malloc((size_t)t->n_buckets * sizeof(*t->bucket));
	t->seg_drops = kvf_calloc(st->n_segments, sizeof(*t->seg_drops));
	if (t->slot == NULL || t->bucket == NULL || t->seg_drops == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_open: out of memory for the page cache of a %llu-byte dram_budget",
				(unsigned long long)t->budget);
	memset(t->bucket, 0xff, (size_t)t->n_buckets * sizeof(*t->bucket));
	t->n_slots = (uint32_t)n;
	t->fresh = 0; /* slots from fresh on are free, and untouched */
	t->recent_cap = t->n_slots / RECENT_SHARE ? t->n_slots / RECENT_SHARE : 1;
	t->page_size = st->hdr.page_size;
	tables = n * sizeof(*t->slot) + (uint64_t)t->n_buckets * sizeof(*t->bucket) +
		 (uint64_t)st->n_segments * sizeof(*t->seg_drops);
	if (t->budget / st->hdr.segment_size >= TIER_MIN_CHUNKS) {
		uint64_t nc = t->budget / st->hdr.segment_size + 1;

		t->stock_cap = (uint32_t)(nc / 8 < STOCK_MAX ? nc / 8 : STOCK_MAX);
		t->chunk = kvf_calloc(nc, sizeof(*t->chunk));
		t->stock = kvf_calloc(t->stock_cap, sizeof(*t->stock));
		if (t->chunk == NULL || t->stock == NULL)
			return kvf_fail(KVF_ENOMEM, "kvf_open: out of memory for the page cache of a %llu-byte dram_budget",
					(unsigned long long)t->budget);
		t->loose_cap = (uint32_t)(nc * (st->hdr.segment_size / st->hdr.page_size));
		t->loose = kvf_calloc(t->loose_cap, sizeof(*t->loose));
		t->carved = kvf_calloc(nc, sizeof(*t->carved));
		if (t->loose == NULL || t->carved == NULL)
			return kvf_fail(KVF_ENOMEM, "kvf_open: out of memory for the page cache of a %llu-byte dram_budget",
					(unsigned long long)t->budget);
		tables += (uint64_t)t->loose_cap * sizeof(*t->loose) +
			  nc * sizeof(*t->carved);
		t->n_chunks = (uint32_t)nc;
		t->chunk_free = TIER_NONE;
		for (uint32_t c = t->n_chunks; c-- > 0;) {
			t->chunk[c].next = t->chunk_free;
			t->chunk_free = c;
		}
		t->chunk_bytes = st->hdr.segment_size;
		tables += nc * sizeof(*t->chunk) + t->stock_cap * sizeof(*t->stock);
	}
	return tier_hold(st, tables, "the page cache's tables");
}

/* ---- the grower ------------------------------------------------------- */

/* grow_room - whether the grower may make one more buffer: the stock is
 * short and the cache has room for it within 7/8 of what the budget
 * leaves it (the rest stays for holds, which cannot wait for a buffer
 * being made) */
static uint64_t grow_ceiling(const struct tier *t)
{
	return t->budget - t->budget / 8;
}

/* grow_room - whether the grower should make a buffer: the cache is read
 * (a hit since the last buffer made: memory is grown only where it pays;
 * a store only written keeps a small cache that rotates, as a store with
 * no tier keeps no more) and the stock stays within a quarter of what
 * the cache holds (one buffer at least: reading a 4.5 MiB store back made
 * up to 16 MiB of stock, by the grower's timing), or buffers were
 * carved for pages waiting for write-back that none was made for yet
 * (carve; they would fault fresh memory on the appender's path: 36 % of
 * a decode loop's time); the stock is short, and the cache has room */
static int grow_room(kvf_store *st)
{
	struct tier *t = &st->tier;
	uint64_t stock = (uint64_t)(t->n_stock + t->growing) * t->chunk_bytes;
	uint64_t cached = (uint64_t)t->used * t->page_size;

	/* grown while the cache is used: hit, or filled by reads (whose
	 * pages then take stock the grower faulted in, not fresh memory) */
	int reads = t->hits + t->read_puts != t->hits_grown &&
		    (stock == 0 || stock + t->chunk_bytes <= cached / 4);
	/* a buffer carved for pages waiting for write-back: one made
	 * ahead for the next, so that the appender does not fault it */
	int writes = t->wb_grown < t->wb_carves;

	return (reads || writes) && t->n_stock + t->growing < t->stock_cap &&
	       held(st) + t->chunk_bytes <= grow_ceiling(t);
}

/* buffer_new - a segment buffer, its pages faulted in now (the kernel
 * zeroes each page at its first touch: a cost paid here, not by the
 * writer that gets the buffer).  Touched page by page rather than with
 * MADV_POPULATE_WRITE, which holds the process's mmap lock throughout:
 * held by a thread at idle priority, that stalled every mmap of the
 * process behind it, and every fault queued behind those.  Plain
 * posix_memalign, not kvf_alloc: the grower is a background thread and
 * must not take a test's injected failure.  Freed with free() (kvf_free
 * is free()). */
static unsigned char *buffer_new(size_t bytes)
{
	void *p = NULL;

	if (posix_memalign(&p, KVF_MEDIA_ALIGN, bytes) != 0)
		return NULL;
	for (size_t o = 0; o < bytes; o += 4096)
		((volatile unsigned char *)p)[o] = 0;
	return p;
}

static void *grower_main(void *arg)
{
	kvf_store *st = arg;
	struct tier *t = &st->tier;
	struct sched_param sp = { 0 };

	/* only a CPU nothing else wants: appends and reads come first */
	(void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
	pthread_mutex_lock(&t->lock);
	while (!t->grower_stop) {
		unsigned char *p;

		if (!grow_room(st)) {
			pthread_cond_wait(&t->grow, &t->lock);
			continue;
		}
		if (t->wb_grown < t->wb_carves)
			t->wb_grown++;
		t->growing++;
		t->hits_grown = t->hits + t->read_puts;
		t->bytes += t->chunk_bytes;
		pthread_mutex_unlock(&t->lock);
		p = buffer_new(t->chunk_bytes);
		pthread_mutex_lock(&t->lock);
		t->growing--;
		if (p == NULL || t->n_stock >= t->stock_cap) {
			free(p);
			t->bytes -= t->chunk_bytes;
			if (p == NULL) /* wait for the next ring */
				pthread_cond_wait(&t->grow, &t->lock);
			continue;
		}
		t->stock[t->n_stock++] = p;
		note_peak(st);
	}
	pthread_mutex_unlock(&t->lock);
	return NULL;
}

/* grower_ring - ask for stock (lock held); starts the grower the first
 * time */
static void grower_ring(kvf_store *st)
{
	struct tier *t = &st->tier;

	if (!t->grower_on && !t->grower_stop) {
		if (pthread_create(&t->grower, NULL, grower_main, st) != 0)
			return; /* no stock then: pages are cached as they can */
		t->grower_on = 1;
	}
	pthread_cond_signal(&t->grow);
}

void tier_free(kvf_store *st)
{
	struct tier *t = &st->tier;

	pthread_mutex_lock(&t->lock);
	t->grower_stop = 1;
	pthread_cond_signal(&t->grow);
	pthread_mutex_unlock(&t->lock);
	if (t->grower_on)
		pthread_join(t->grower, NULL);
	t->grower_on = 0;
	for (uint32_t i = 0; t->slot && i < t->fresh; i++)
		if (t->slot[i].chunk == TIER_NONE)
			kvf_free(t->slot[i].data);
	for (uint32_t c = 0; c < t->n_chunks; c++)
		free(t->chunk[c].buf);
	while (t->n_carved > 0)
		free(t->carved[--t->n_carved]);
	kvf_free(t->loose);
	kvf_free(t->carved);
	t->loose = NULL;
	t->carved = NULL;
	while (t->n_stock > 0)
		free(t->stock[--t->n_stock]);
	kvf_free(t->chunk);
	kvf_free(t->stock);
	kvf_free(t->slot);
	kvf_free(t->bucket);
	kvf_free(t->seg_drops);
	t->seg_drops = NULL;
	t->chunk = NULL;
	t->stock = NULL;
	t->slot = NULL;
	t->bucket = NULL;
	pthread_cond_destroy(&t->grow);
	pthread_mutex_destroy(&t->lock);
}

/* ---- the budget ------------------------------------------------------- */

kvf_status tier_hold(kvf_store *st, uint64_t bytes, const char *what)
{
	struct tier *t = &st->tier;
	int ok;

	if (t->budget == 0) {
		atomic_fetch_add(&t->fixed, bytes);
		note_peak(st);
		return KVF_OK;
	}
	pthread_mutex_lock(&t->lock);
	ok = atomic_load(&t->fixed) + bytes <= t->budget;
	while (ok && held(st) + bytes > t->budget)
		ok = room_one(t);
	if (ok) {
		atomic_fetch_add(&t->fixed, bytes);
		note_peak(st);
	}
	pthread_mutex_unlock(&t->lock);
	if (!ok)
		return kvf_fail(KVF_ENOMEM,
				"%s (%llu bytes) does not fit in the dram_budget of %llu bytes: %llu are held by group buffers and the index; raise kvf_options.dram_budget, or free sequences",
				what, (unsigned long long)bytes,
				(unsigned long long)t->budget,
				(unsigned long long)atomic_load(&t->fixed));
	return KVF_OK;
}

void tier_release(kvf_store *st, uint64_t bytes)
{
	atomic_fetch_sub(&st->tier.fixed, bytes);
}

uint64_t tier_fixed(kvf_store *st)
{
	return atomic_load(&st->tier.fixed);
}

/* ---- the cache -------------------------------------------------------- */

static int grow_room(kvf_store *st);
static void grower_ring(kvf_store *st);

/* read_grows - a hit: the cache pays, the grower may grow it (lock held) */
static void read_grows(kvf_store *st)
{
	if (st->tier.chunk_bytes && grow_room(st))
		grower_ring(st);
}

/* get_locked - tier_get with the lock held */
static const unsigned char *get_locked(struct tier *t, uint32_t addr,
				       uint32_t check, uint32_t *slot)
{
	const unsigned char *p = NULL;
	uint32_t i = find(t, addr);

	if (i != TIER_NONE && t->slot[i].check != check) {
		/* not the page the index knows: a stale copy, never served */
		evict(t, i);
		i = TIER_NONE;
	}
	if (i == TIER_NONE) {
		t->misses++;
	} else {
		struct tier_slot *s = &t->slot[i];

		t->hits++;
		s->pins++;
		if (s->pool == TIER_RECENT) {
			/* selected again: into the hot pool */
			list_unlink(t, &t->pool[TIER_RECENT], i);
			s->pool = TIER_HOT;
			s->heat = 1;
			list_push(t, &t->pool[TIER_HOT], i, 1);
		} else if (s->heat < HEAT_MAX) {
			s->heat++;
		}
		p = s->data;
		*slot = i;
	}
	return p;
}

const unsigned char *tier_get(kvf_store *st, uint32_t addr, uint32_t check,
			      uint32_t *slot)
{
	struct tier *t = &st->tier;
	const unsigned char *p;

	if (t->n_slots == 0)
		return NULL;
	pthread_mutex_lock(&t->lock);
	p = get_locked(t, addr, check, slot);
	if (p)
		read_grows(st);
	pthread_mutex_unlock(&t->lock);
	return p;
}

void tier_get_many(kvf_store *st, const uint32_t *addr, const uint32_t *check,
		   uint32_t n, const unsigned char **p, uint32_t *slot)
{
	struct tier *t = &st->tier;

	for (uint32_t i = 0; i < n; i++) {
		p[i] = NULL;
		slot[i] = TIER_NONE;
	}
	if (t->n_slots == 0 || n == 0)
		return;
	pthread_mutex_lock(&t->lock);
	for (uint32_t i = 0; i < n; i++)
		p[i] = get_locked(t, addr[i], check[i], &slot[i]);
	read_grows(st);
	pthread_mutex_unlock(&t->lock);
}

static void unpin_locked(struct tier *t, uint32_t slot)
{
	if (--t->slot[slot].pins == 0 && t->slot[slot].pool == TIER_POOLS)
		release_slot(t, slot);
}

void tier_unpin(kvf_store *st, uint32_t slot)
{
	struct tier *t = &st->tier;

	pthread_mutex_lock(&t->lock);
	unpin_locked(t, slot);
	pthread_mutex_unlock(&t->lock);
}

void tier_unpin_many(kvf_store *st, const uint32_t *slot, uint32_t n)
{
	struct tier *t = &st->tier;
	uint32_t k = 0;

	while (k < n && slot[k] == TIER_NONE)
		k++;
	if (k == n)
		return;
	pthread_mutex_lock(&t->lock);
	for (; k < n; k++)
		if (slot[k] != TIER_NONE)
			unpin_locked(t, slot[k]);
	pthread_mutex_unlock(&t->lock);
}

void tier_put_read(kvf_store *st, uint32_t addr, uint32_t check,
		   const void *page)
{
	struct tier *t = &st->tier;

	if (t->n_slots == 0)
		return;
	pthread_mutex_lock(&t->lock);
	if (find(t, addr) == TIER_NONE) {
		int room = slot_free(t) &&
			   room_for_page(st);

		if (!room && ++t->miss_tick >= MISSES_PER_HAND_STEP) {
			t->miss_tick = 0;
			room = hand_step(t) && room_for_page(st);
		}
		if (room) {
			insert(st, addr, check, page);
			t->read_puts++;
			read_grows(st);
		}
	}
	pthread_mutex_unlock(&t->lock);
}

/* seg_gen - the drop count of segment segid (lock held) */
static uint64_t seg_gen(const kvf_store *st, uint32_t segid)
{
	const struct tier *t = &st->tier;

	return (uint64_t)t->drops_all << 32 | t->seg_drops[segid];
}

int tier_put_prefetched(kvf_store *st, uint32_t addr, uint32_t check,
			const void *page, uint64_t gen)
{
	struct tier *t = &st->tier;
	int put = 0;

	if (t->n_slots == 0)
		return 0;
	pthread_mutex_lock(&t->lock);
	if (seg_gen(st, addr_seg(addr, st->page_bits)) == gen &&
	    find(t, addr) == TIER_NONE && slot_free(t) &&
	    room_for_page(st)) {
		uint32_t used = t->used;

		insert(st, addr, check, page);
		put = t->used != used; /* insert gives up without memory */
		/* counted for the grower, but not rung: a hint fills the
		 * room there is, with the stock there is */
		t->read_puts += (uint64_t)put;
	}
	pthread_mutex_unlock(&t->lock);
	return put;
}

uint32_t tier_room_pages(kvf_store *st)
{
	struct tier *t = &st->tier;
	uint64_t h, room;

	if (t->n_slots == 0)
		return 0;
	pthread_mutex_lock(&t->lock);
	h = held(st);
	room = (h < t->budget ? (t->budget - h) / st->hdr.page_size : 0) +
	       spare_pages(t);
	if (room > t->n_slots - t->used)
		room = t->n_slots - t->used;
	pthread_mutex_unlock(&t->lock);
	return (uint32_t)room;
}

void tier_missing(kvf_store *st, const uint32_t *addr, const uint32_t *check,
		  uint32_t n, uint8_t *miss, uint64_t *gen)
{
	struct tier *t = &st->tier;

	if (t->n_slots == 0) {
		memset(miss, 1, n);
		if (gen)
			memset(gen, 0, (size_t)n * sizeof(*gen));
		return;
	}
	pthread_mutex_lock(&t->lock);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t k = find(t, addr[i]);

		miss[i] = k == TIER_NONE || t->slot[k].check != check[i];
		if (gen)
			gen[i] = seg_gen(st, addr_seg(addr[i], st->page_bits));
	}
	pthread_mutex_unlock(&t->lock);
}

/* put_written - a copy of a page just written (lock held) */
static void put_written(kvf_store *st, uint32_t addr, uint32_t check,
			const void *page)
{
	struct tier *t = &st->tier;
	uint32_t i = find(t, addr);

	if (i != TIER_NONE) /* the address was reused: the old bytes go */
		evict(t, i);
	if (t->pool[TIER_RECENT].n >= t->recent_cap && t->pool[TIER_RECENT].n)
		demote(t);
	if (make_room(st))
		insert(st, addr, check, page);
}

/* swap_buffer - a buffer of chunk_bytes for the cache to give (lock
 * held, may drop it to make one); NULL: none.  In order: one of the
 * stock; a fresh one while the cache is small (TIER_SYNC_GROW); the
 * buffer of the oldest chunk, whose pages are evicted for it (a full
 * cache must; one that holds chunks had rather give its oldest written
 * pages than fault fresh memory on the caller's path); a fresh one if
 * `fresh` says so (a caller that would otherwise fault fresh memory page
 * by page) or eviction freed pages of their own but no chunk */
static unsigned char *swap_buffer(kvf_store *st, int fresh)
{
	struct tier *t = &st->tier;
	int full = held(st) + t->chunk_bytes > grow_ceiling(t);
	unsigned char *p;

	if (t->n_stock == 0 && !full && t->bytes < TIER_SYNC_GROW) {
		grower_ring(st); /* a large budget: the grower takes over */
		goto make;
	}
	while (t->n_stock == 0 && (full || t->chunks_live > 0)) {
		if (!evict_one(t))
			return NULL;
		full = held(st) + t->chunk_bytes > grow_ceiling(t);
		fresh |= !full && t->chunks_live == 0;
	}
	if (t->n_stock > 0) {
		p = t->stock[--t->n_stock];
		if (t->n_stock < t->stock_cap / 2)
			grower_ring(st);
		return p;
	}
	grower_ring(st);
	if (!fresh)
		return NULL; /* growing is the grower's job */
make:
	if (held(st) + t->chunk_bytes > t->budget)
		return NULL;
	t->bytes += t->chunk_bytes; /* counted while made */
	pthread_mutex_unlock(&t->lock);
	p = kvf_aligned_alloc(KVF_MEDIA_ALIGN, t->chunk_bytes);
	pthread_mutex_lock(&t->lock);
	if (p == NULL)
		t->bytes -= t->chunk_bytes;
	return p;
}

int tier_put_segment(kvf_store *st, uint32_t segid, unsigned char **buf,
		     uint32_t n, const struct seg_summary_entry *e,
		     uint32_t check_mask)
{
	struct tier *t = &st->tier;
	uint32_t ps = st->hdr.page_size, c, i;
	unsigned char *spare;

	if (t->n_slots == 0 || n == 0)
		return 0;
	pthread_mutex_lock(&t->lock);
	if (t->chunk_bytes == 0) { /* a small budget: copies */
		for (i = 0; i < n; i++)
			put_written(st, addr_make(segid, i, st->page_bits),
				    (uint32_t)e[i].page_hash & check_mask,
				    *buf + (size_t)i * ps);
		pthread_mutex_unlock(&t->lock);
		return 0;
	}
	/* the old bytes of reused addresses go first */
	for (i = 0; i < n; i++) {
		uint32_t j = find(t, addr_make(segid, i, st->page_bits));

		if (j != TIER_NONE)
			evict(t, j);
	}
	while (t->n_slots - t->used < n)
		if (!evict_one(t))
			goto no;
	if (t->chunk_free == TIER_NONE || (spare = swap_buffer(st, 0)) == NULL)
		goto no;
	/* swap_buffer may have dropped the lock: look again */
	if (t->chunk_free == TIER_NONE || t->n_slots - t->used < n) {
		if (t->n_stock < t->stock_cap) {
			t->stock[t->n_stock++] = spare;
		} else {
			free(spare);
			t->bytes -= t->chunk_bytes;
		}
		goto no;
	}
	c = t->chunk_free;
	t->chunk_free = t->chunk[c].next;
	t->chunk[c].buf = *buf;
	t->chunk[c].live = n;
	t->chunks_live++;
	for (i = 0; i < n; i++) {
		uint32_t j = slot_next(t);

		t->slot[j].data = *buf + (size_t)i * ps;
		slot_add(st, j, addr_make(segid, i, st->page_bits),
			 (uint32_t)e[i].page_hash & check_mask, c);
	}
	*buf = spare;
	t->adopted++;
	pthread_mutex_unlock(&t->lock);
	return 1;
no:
	t->not_adopted++;
	pthread_mutex_unlock(&t->lock);
	return 0;
}

/* unplace - a placed page (tier_page_placed) the cache does not keep:
 * a loose page again, or freed if it was a page of its own (lock held) */
static void unplace(struct tier *t, unsigned char *page)
{
	if (t->chunk_bytes) {
		t->loose[t->n_loose++] = page;
	} else {
		kvf_free(page);
		t->bytes -= t->page_size;
	}
}

/* put_taken - page, one tier_page_take gave and tier_page_placed
 * counted as the cache's, just written as addr: cached as it is, or, with
 * no slot to be had, unplaced (lock held) */
static void put_taken(kvf_store *st, uint32_t addr, uint32_t check,
		      unsigned char *page)
{
	struct tier *t = &st->tier;
	uint32_t i;

	atomic_fetch_sub(&t->placed, 1); /* written: cached or let go */
	if ((i = find(t, addr)) != TIER_NONE) /* the address was reused */
		evict(t, i);
	if (t->pool[TIER_RECENT].n >= t->recent_cap && t->pool[TIER_RECENT].n)
		demote(t);
	while (!slot_free(t) && evict_one(t))
		;
	if (slot_free(t)) {
		i = slot_next(t);
		t->slot[i].data = page;
		slot_add(st, i, addr, check, t->chunk_bytes ? TIER_LOOSE : TIER_NONE);
	} else {
		unplace(t, page);
	}
}

void tier_put_held(kvf_store *st, uint32_t segid, const unsigned char *buf,
		   unsigned char **held, uint32_t *n_held, uint32_t n,
		   const struct seg_summary_entry *e, uint32_t check_mask)
{
	struct tier *t = &st->tier;

	if (t->n_slots == 0)
		return; /* the held pages go back with their buffer */
	pthread_mutex_lock(&t->lock);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t addr = addr_make(segid, i, st->page_bits);
		uint32_t check = (uint32_t)e[i].page_hash & check_mask;

		if (held[i]) {
			put_taken(st, addr, check, held[i]);
			held[i] = NULL;
			--*n_held;
		} else {
			put_written(st, addr, check, buf + (size_t)i * t->page_size);
		}
	}
	t->adopted++;
	pthread_mutex_unlock(&t->lock);
}

/* recycle_written - a cache only written (no hit nor read-in since the
 * grower last grew it) that holds TIER_SYNC_GROW or more gives its
 * oldest pages back as loose ones, for pages waiting for write-back,
 * rather than grow: a decode loop's written pages otherwise filled the
 * whole budget with fresh memory, each page faulted and zeroed on the
 * way (a quarter of that loop's CPU), to cache pages nobody read.  As a
 * written segment's chunk rotates (swap_buffer).  Whether a loose page
 * is there now (lock held). */
static int recycle_written(kvf_store *st)
{
	struct tier *t = &st->tier;
	uint32_t per = (uint32_t)(t->chunk_bytes / t->page_size);

	if (t->hits + t->read_puts != t->hits_grown ||
	    (uint64_t)t->used * t->page_size < TIER_SYNC_GROW)
		return 0;
	/* evicting a chunk's page gives no loose page: try a chunk's worth */
	for (uint32_t k = 0; k < 2 * per && t->n_loose == 0; k++)
		if (!evict_one(t))
			break;
	return t->n_loose > 0;
}

/* carve - a buffer to cut into loose pages (lock held; may drop it):
 * whether there are loose pages now */
static int carve(kvf_store *st)
{
	struct tier *t = &st->tier;
	unsigned char *b;

	if (t->n_carved >= t->n_chunks - 1)
		return 0; /* (never: carved memory stays within the budget) */
	if (recycle_written(st))
		return 1;
	b = swap_buffer(st, 1);
	if (b == NULL)
		return t->n_loose > 0;
	cut(t, b);
	/* the grower makes one for the next carve, owing at most WB_AHEAD:
	 * what it could not make while busy is not made after the carving */
	t->wb_carves++;
	if (t->wb_carves - t->wb_grown > WB_AHEAD)
		t->wb_grown = t->wb_carves - WB_AHEAD;
	if (grow_room(st))
		grower_ring(st);
	return 1;
}

kvf_status tier_page_take(kvf_store *st, unsigned char **page)
{
	struct tier *t = &st->tier;
	uint32_t ps = st->hdr.page_size;
	int ok;

	if (t->chunk_bytes == 0) { /* no chunks: a page of its own */
		if (tier_hold(st, ps, "a page waiting for write-back") != KVF_OK)
			return KVF_ENOMEM;
		if ((*page = kvf_malloc(ps)) == NULL) {
			tier_release(st, ps);
			return kvf_fail(KVF_ENOMEM, "out of memory for a page waiting for write-back");
		}
		return KVF_OK;
	}
	pthread_mutex_lock(&t->lock);
	ok = atomic_load(&t->fixed) + ps <= t->budget &&
	     (t->n_loose > 0 || carve(st));
	if (ok) {
		/* its memory moves from the cache's count to the held one */
		*page = t->loose[--t->n_loose];
		t->bytes -= ps;
		atomic_fetch_add(&t->fixed, ps);
		note_peak(st);
	}
	pthread_mutex_unlock(&t->lock);
	if (!ok)
		return kvf_fail(KVF_ENOMEM, "a page waiting for write-back does not fit in the dram_budget of %llu bytes",
				(unsigned long long)t->budget);
	return KVF_OK;
}

int tier_may_place(kvf_store *st)
{
	const struct tier *t = &st->tier;

	return t->chunk_bytes != 0 &&
	       (atomic_load(&t->placed) + 1) * t->page_size <= t->budget / 4;
}

void tier_page_placed(kvf_store *st)
{
	struct tier *t = &st->tier;

	atomic_fetch_add(&t->placed, 1);
	pthread_mutex_lock(&t->lock);
	t->bytes += t->page_size;
	atomic_fetch_sub(&t->fixed, t->page_size);
	pthread_mutex_unlock(&t->lock);
}

void tier_page_return(kvf_store *st, unsigned char *page)
{
	struct tier *t = &st->tier;

	atomic_fetch_sub(&t->placed, 1);
	pthread_mutex_lock(&t->lock);
	unplace(t, page);
	pthread_mutex_unlock(&t->lock);
}

void tier_page_give(kvf_store *st, unsigned char *page)
{
	struct tier *t = &st->tier;
	uint32_t ps = st->hdr.page_size;

	if (t->chunk_bytes == 0) {
		kvf_free(page);
		tier_release(st, ps);
		return;
	}
	pthread_mutex_lock(&t->lock);
	t->loose[t->n_loose++] = page;
	t->bytes += ps;
	atomic_fetch_sub(&t->fixed, ps);
	pthread_mutex_unlock(&t->lock);
}

void tier_drop_segment(kvf_store *st, uint32_t segid)
{
	struct tier *t = &st->tier;

	if (t->n_slots == 0)
		return;
	pthread_mutex_lock(&t->lock);
	t->seg_drops[segid]++;
	for (uint32_t p = 0; p < st->data_per_seg && t->used; p++) {
		uint32_t i = find(t, addr_make(segid, p, st->page_bits));

		if (i != TIER_NONE)
			evict(t, i);
	}
	pthread_mutex_unlock(&t->lock);
}

void tier_drop_all(kvf_store *st)
{
	struct tier *t = &st->tier;

	if (t->n_slots == 0)
		return;
	pthread_mutex_lock(&t->lock);
	t->drops_all++;
	for (int p = 0; p < TIER_POOLS; p++)
		while (t->pool[p].head != TIER_NONE)
			evict(t, t->pool[p].head);
	pthread_mutex_unlock(&t->lock);
}

void tier_figures(kvf_store *st, kvf_stats *s)
{
	struct tier *t = &st->tier;
	uint64_t ps = st->hdr.page_size;

	pthread_mutex_lock(&t->lock);
	s->dram_budget = t->budget;
	s->dram_bytes = held(st);
	s->dram_peak = atomic_load(&t->peak);
	s->cache_bytes = (uint64_t)t->used * ps;
	s->cache_recent_bytes = (uint64_t)t->pool[TIER_RECENT].n * ps;
	s->cache_hot_bytes = (uint64_t)t->pool[TIER_HOT].n * ps;
	s->cache_hits = t->hits;
	s->cache_misses = t->misses;
	s->cache_evictions = t->evictions;
	s->cache_segments = t->adopted;
	s->cache_segments_skipped = t->not_adopted;
	pthread_mutex_unlock(&t->lock);
}
