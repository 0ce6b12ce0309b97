/*
 * tier.c - the memory tier and its page cache (engine/base/tier.h).
 */
#include "engine/base/tier.h"

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

/* hash_of - Fibonacci hashing: the product's high bits mix every bit of
 * the address (segment and page alike) */
static uint32_t hash_of(const struct tier *t, uint32_t addr)
{
	return (uint32_t)((uint64_t)(addr * 0x9e3779b1u) >> t->hash_shift);
}

static uint64_t held(kvf_store *st)
{
	return atomic_load(&st->tier.fixed) +
	       (uint64_t)st->tier.used * st->hdr.page_size;
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

/* slot_free - a slot is free: on the free list, or never used (the slot
 * table is touched only as the cache fills: a cache sized for a 1 GiB
 * budget that holds 4.5 MiB keeps its 8 MiB of slots unmapped) */
static int slot_free(const struct tier *t)
{
	return t->free_head != TIER_NONE || t->fresh < t->n_slots;
}

/* release_slot - back to the free list; its page is freed */
static void release_slot(struct tier *t, uint32_t i)
{
	kvf_free(t->slot[i].data);
	t->slot[i].data = NULL;
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

/* make_room - evict until one more page fits under the budget */
static int make_room(kvf_store *st)
{
	struct tier *t = &st->tier;

	while (held(st) + st->hdr.page_size > t->budget || !slot_free(t))
		if (!evict_one(t))
			return 0;
	return 1;
}

/* insert - addr's page into a free slot, at the head of the recent pool */
static void insert(kvf_store *st, uint32_t addr, uint32_t check,
		   const void *page)
{
	struct tier *t = &st->tier;
	uint32_t i = t->free_head != TIER_NONE ? t->free_head : t->fresh;
	uint32_t h = hash_of(t, addr);
	struct tier_slot *s = &t->slot[i];

	s->data = kvf_malloc(st->hdr.page_size);
	if (s->data == NULL)
		return; /* a cache page is optional */
	if (i == t->free_head)
		t->free_head = s->next;
	else
		t->fresh++;
	t->used++;
	memcpy(s->data, page, st->hdr.page_size);
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

/* ---- life ------------------------------------------------------------- */

void tier_init(kvf_store *st)
{
	memset(&st->tier, 0, sizeof(st->tier));
	pthread_mutex_init(&st->tier.lock, NULL);
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
	if (t->slot == NULL || t->bucket == NULL)
		return kvf_fail(KVF_ENOMEM, "kvf_open: out of memory for the page cache of a %llu-byte dram_budget",
				(unsigned long long)t->budget);
	memset(t->bucket, 0xff, (size_t)t->n_buckets * sizeof(*t->bucket));
	t->n_slots = (uint32_t)n;
	t->fresh = 0; /* slots from fresh on are free, and untouched */
	t->recent_cap = t->n_slots / RECENT_SHARE ? t->n_slots / RECENT_SHARE : 1;
	tables = n * sizeof(*t->slot) + (uint64_t)t->n_buckets * sizeof(*t->bucket);
	return tier_hold(st, tables, "the page cache's tables");
}

void tier_free(kvf_store *st)
{
	struct tier *t = &st->tier;

	for (uint32_t i = 0; t->slot && i < t->fresh; i++)
		kvf_free(t->slot[i].data);
	kvf_free(t->slot);
	kvf_free(t->bucket);
	t->slot = NULL;
	t->bucket = NULL;
	pthread_mutex_destroy(&t->lock);
}

/* ---- the budget ------------------------------------------------------- */

kvf_status tier_hold(kvf_store *st, uint64_t bytes, const char *what)
{
	struct tier *t = &st->tier;
	int ok;

	if (t->budget == 0) {
		atomic_fetch_add(&t->fixed, bytes);
		return KVF_OK;
	}
	pthread_mutex_lock(&t->lock);
	ok = atomic_load(&t->fixed) + bytes <= t->budget;
	while (ok && held(st) + bytes > t->budget)
		ok = evict_one(t);
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
	uint32_t ps = st->hdr.page_size;

	if (t->n_slots == 0)
		return;
	pthread_mutex_lock(&t->lock);
	if (find(t, addr) == TIER_NONE) {
		int room = slot_free(t) && held(st) + ps <= t->budget;

		if (!room && ++t->miss_tick >= MISSES_PER_HAND_STEP) {
			t->miss_tick = 0;
			room = hand_step(t) && held(st) + ps <= t->budget;
		}
		if (room)
			insert(st, addr, check, page);
	}
	pthread_mutex_unlock(&t->lock);
}

void tier_put_written(kvf_store *st, uint32_t addr, uint32_t check,
		      const void *page)
{
	struct tier *t = &st->tier;
	uint32_t i;

	if (t->n_slots == 0)
		return;
	pthread_mutex_lock(&t->lock);
	i = find(t, addr);
	if (i != TIER_NONE) /* the address was reused: the old bytes go */
		evict(t, i);
	if (t->pool[TIER_RECENT].n >= t->recent_cap && t->pool[TIER_RECENT].n)
		demote(t);
	if (make_room(st))
		insert(st, addr, check, page);
	pthread_mutex_unlock(&t->lock);
}

void tier_drop_segment(kvf_store *st, uint32_t segid)
{
	struct tier *t = &st->tier;

	if (t->n_slots == 0)
		return;
	pthread_mutex_lock(&t->lock);
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
	pthread_mutex_unlock(&t->lock);
}
