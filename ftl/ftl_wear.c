/*
 * ftl_wear.c - the erase-count histogram and the free-block pool (see
 * ftl_wear.h for the invariants).
 *
 * The histogram grows by doubling as erase counts rise, so a P/E limit of
 * a million costs nothing until blocks get there.  The pool's heaps order
 * by (erase count, block id), so ties go to the lower block and runs are
 * reproducible.
 */
#include "ftl/ftl_wear.h"

#include <string.h>

#include "api/alloc.h"
#include "api/status.h"

#define HIST_INITIAL_CAP 64u /* histogram entries before the first growth */

kvf_status wear_hist_init(struct wear_hist *h, uint64_t n_blocks)
{
	memset(h, 0, sizeof(*h));
	h->count = kvf_calloc(HIST_INITIAL_CAP, sizeof(uint64_t));
	if (h->count == NULL)
		return kvf_fail(KVF_ENOMEM,
				"kvf_media_open: flash: cannot allocate the erase histogram");
	h->cap = HIST_INITIAL_CAP;
	h->count[0] = n_blocks;
	h->n = n_blocks;
	return KVF_OK;
}

void wear_hist_release(struct wear_hist *h)
{
	kvf_free(h->count);
	memset(h, 0, sizeof(*h));
}

kvf_status wear_hist_load(struct wear_hist *h, const uint32_t *ec,
			  const uint8_t *live, uint32_t n)
{
	uint32_t max = 0, min = UINT32_MAX;
	kvf_status rc;

	for (uint32_t b = 0; b < n; b++)
		if (live[b] && ec[b] > max)
			max = ec[b];
	if ((rc = wear_hist_reserve(h, max + 1)) != KVF_OK)
		return rc;
	memset(h->count, 0, (size_t)h->cap * sizeof(uint64_t));
	h->n = h->sum = h->sum_sq = 0;
	for (uint32_t b = 0; b < n; b++) {
		if (!live[b])
			continue;
		h->count[ec[b]]++;
		h->n++;
		h->sum += ec[b];
		h->sum_sq += (uint64_t)ec[b] * ec[b];
		min = ec[b] < min ? ec[b] : min;
	}
	h->min_ec = h->n ? min : 0;
	h->max_ec = h->n ? max : 0;
	return KVF_OK;
}

kvf_status wear_hist_reserve(struct wear_hist *h, uint32_t ec)
{
	uint32_t cap = h->cap;
	uint64_t *grown;

	if (ec < h->cap)
		return KVF_OK;
	while (cap <= ec)
		cap *= 2;
	grown = kvf_realloc(h->count, (size_t)cap * sizeof(uint64_t));
	if (grown == NULL)
		return kvf_fail(KVF_ENOMEM,
				"flash: cannot grow the erase histogram to %u entries",
				cap);
	memset(grown + h->cap, 0, (size_t)(cap - h->cap) * sizeof(uint64_t));
	h->count = grown;
	h->cap = cap;
	return KVF_OK;
}

void wear_hist_erased(struct wear_hist *h, uint32_t old_ec)
{
	uint32_t ec = old_ec + 1;

	h->count[old_ec]--;
	h->count[ec]++;
	h->sum++;
	h->sum_sq += 2 * (uint64_t)old_ec + 1;
	if (ec > h->max_ec)
		h->max_ec = ec;
	while (h->min_ec < h->max_ec && h->count[h->min_ec] == 0)
		h->min_ec++;
}

void wear_hist_retire(struct wear_hist *h, uint32_t ec)
{
	h->count[ec]--;
	h->n--;
	h->sum -= ec;
	h->sum_sq -= (uint64_t)ec * ec;
	if (h->n == 0) {
		h->min_ec = h->max_ec = 0;
		return;
	}
	while (h->count[h->min_ec] == 0)
		h->min_ec++;
	while (h->count[h->max_ec] == 0)
		h->max_ec--;
}

double wear_evenness(uint64_t n, uint64_t sum, uint64_t sum_sq)
{
	if (n == 0 || sum_sq == 0)
		return 1.0;
	return ((double)sum * (double)sum) / ((double)n * (double)sum_sq);
}

kvf_status pool_init(struct free_pool *p, uint32_t n_blocks, uint32_t n_dies,
		     const uint32_t *ec, int least_worn)
{
	memset(p, 0, sizeof(*p));
	p->n_dies = n_dies;
	p->cap = (n_blocks + n_dies - 1) / n_dies;
	p->ec = ec;
	p->least_worn = least_worn;
	p->slot = kvf_calloc((size_t)p->cap * n_dies, sizeof(uint32_t));
	p->size = kvf_calloc(n_dies, sizeof(uint32_t));
	p->head = kvf_calloc(n_dies, sizeof(uint32_t));
	if (!p->slot || !p->size || !p->head) {
		pool_release(p);
		return kvf_fail(KVF_ENOMEM,
				"kvf_media_open: flash: cannot allocate the free-block pool");
	}
	return KVF_OK;
}

void pool_release(struct free_pool *p)
{
	kvf_free(p->slot);
	kvf_free(p->size);
	kvf_free(p->head);
	memset(p, 0, sizeof(*p));
}

/* before - does block a come out of a min-heap before block b? */
static int before(const struct free_pool *p, uint32_t a, uint32_t b)
{
	return p->ec[a] < p->ec[b] || (p->ec[a] == p->ec[b] && a < b);
}

static void sift_up(const struct free_pool *p, uint32_t *h, uint32_t i)
{
	uint32_t x = h[i];

	while (i > 0) {
		uint32_t parent = (i - 1) / 2;

		if (!before(p, x, h[parent]))
			break;
		h[i] = h[parent];
		i = parent;
	}
	h[i] = x;
}

static void sift_down(const struct free_pool *p, uint32_t *h, uint32_t n,
		      uint32_t i)
{
	uint32_t x = h[i];

	for (;;) {
		uint32_t c = 2 * i + 1;

		if (c >= n)
			break;
		if (c + 1 < n && before(p, h[c + 1], h[c]))
			c++;
		if (!before(p, h[c], x))
			break;
		h[i] = h[c];
		i = c;
	}
	h[i] = x;
}

void pool_put(struct free_pool *p, uint32_t block)
{
	uint32_t die = block % p->n_dies;
	uint32_t *s = p->slot + (size_t)die * p->cap;

	if (p->least_worn) {
		s[p->size[die]] = block;
		sift_up(p, s, p->size[die]);
	} else {
		s[(p->head[die] + p->size[die]) % p->cap] = block;
	}
	p->size[die]++;
	p->n_free++;
}

/* take_at - remove the i-th entry (heap index or ring offset) of die */
static uint32_t take_at(struct free_pool *p, uint32_t die, uint32_t i)
{
	uint32_t *s = p->slot + (size_t)die * p->cap;
	uint32_t n = --p->size[die];
	uint32_t block;

	p->n_free--;
	if (p->least_worn) {
		block = s[i];
		if (i != n) {
			s[i] = s[n];
			sift_down(p, s, n, i);
			sift_up(p, s, i);
		}
		return block;
	}
	/* ring: move the head entry into the hole, then advance the head */
	i = (p->head[die] + i) % p->cap;
	block = s[i];
	s[i] = s[p->head[die]];
	p->head[die] = (p->head[die] + 1) % p->cap;
	return block;
}

uint32_t pool_take(struct free_pool *p, uint32_t die, enum pool_pick pick)
{
	uint32_t best = 0;

	if (p->n_free == 0)
		return WEAR_NONE;
	die %= p->n_dies;
	if (p->size[die] == 0) {
		for (uint32_t d = 0; d < p->n_dies; d++)
			if (p->size[d] > p->size[die])
				die = d;
	}
	if (pick == POOL_MOST_WORN) {
		/* wear before parallelism: search every die */
		uint32_t best_ec = 0;

		for (uint32_t d = 0; d < p->n_dies; d++) {
			const uint32_t *s = p->slot + (size_t)d * p->cap;

			for (uint32_t i = 0; i < p->size[d]; i++) {
				uint32_t b = s[p->least_worn ? i :
					       (p->head[d] + i) % p->cap];

				if (p->size[die] == 0 || p->ec[b] > best_ec) {
					die = d;
					best = i;
					best_ec = p->ec[b];
				}
			}
		}
	}
	return take_at(p, die, best);
}

uint32_t pool_max_ec(const struct free_pool *p)
{
	uint32_t max = 0;

	for (uint32_t d = 0; d < p->n_dies; d++) {
		const uint32_t *s = p->slot + (size_t)d * p->cap;

		for (uint32_t i = 0; i < p->size[d]; i++) {
			uint32_t b = s[p->least_worn ? i :
				       (p->head[d] + i) % p->cap];

			if (p->ec[b] > max)
				max = p->ec[b];
		}
	}
	return max;
}
