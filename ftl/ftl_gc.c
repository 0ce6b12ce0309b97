/*
 * ftl_gc.c - the victim index (see ftl_gc.h) and the analytic models of
 * write amplification under uniform random writes.
 *
 * The valid-count lists are kept only for greedy and cost-benefit, so
 * FIFO and d-choices pay nothing per invalidated page.  The models are derived in
 * docs/ftl.md; the code follows the numbered steps there.
 */
#include "ftl/ftl_gc.h"

#include <math.h>
#include <string.h>

#include "api/alloc.h"
#include "api/status.h"

#define DEFAULT_SEED 0x6b76666c617368ull /* "kvflash" */

kvf_status gc_init(struct gc_index *g, enum kvf_flash_gc_policy policy,
		   uint32_t n_blocks, uint32_t ppb, uint32_t d, uint64_t seed)
{
	memset(g, 0, sizeof(*g));
	g->policy = policy;
	g->n_blocks = n_blocks;
	g->ppb = ppb;
	g->d = d;
	g->rng = seed ? seed : DEFAULT_SEED;
	g->fifo_head = g->fifo_tail = GC_NONE;
	g->valid = kvf_calloc(n_blocks, sizeof(uint32_t));
	g->seal_time = kvf_calloc(n_blocks, sizeof(uint64_t));
	g->pos = kvf_malloc((size_t)n_blocks * sizeof(uint32_t));
	g->set = kvf_malloc((size_t)n_blocks * sizeof(uint32_t));
	g->fnext = kvf_malloc((size_t)n_blocks * sizeof(uint32_t));
	g->fprev = kvf_malloc((size_t)n_blocks * sizeof(uint32_t));
	if (!g->valid || !g->seal_time || !g->pos || !g->set || !g->fnext ||
	    !g->fprev)
		goto out_nomem;
	if (policy == KVF_FLASH_GC_GREEDY ||
	    policy == KVF_FLASH_GC_COST_BENEFIT) {
		g->bnext = kvf_malloc((size_t)n_blocks * sizeof(uint32_t));
		g->bprev = kvf_malloc((size_t)n_blocks * sizeof(uint32_t));
		g->bhead = kvf_malloc(((size_t)ppb + 1) * sizeof(uint32_t));
		if (!g->bnext || !g->bprev || !g->bhead)
			goto out_nomem;
		for (uint32_t v = 0; v <= ppb; v++)
			g->bhead[v] = GC_NONE;
		g->min_hint = ppb;
	}
	if (policy == KVF_FLASH_GC_COST_BENEFIT) {
		g->cb_weight = kvf_malloc(((size_t)ppb + 1) * sizeof(double));
		if (g->cb_weight == NULL)
			goto out_nomem;
		g->cb_weight[0] = 0.0; /* unused: an empty block wins at once */
		for (uint32_t v = 1; v <= ppb; v++)
			g->cb_weight[v] = (double)(ppb - v) / (2.0 * v);
	}
	for (uint32_t b = 0; b < n_blocks; b++)
		g->pos[b] = GC_NONE;
	return KVF_OK;

out_nomem:
	gc_release(g);
	return kvf_fail(KVF_ENOMEM,
			"kvf_media_open: flash: cannot allocate the GC index of %u blocks",
			n_blocks);
}

void gc_release(struct gc_index *g)
{
	kvf_free(g->valid);
	kvf_free(g->seal_time);
	kvf_free(g->pos);
	kvf_free(g->set);
	kvf_free(g->fnext);
	kvf_free(g->fprev);
	kvf_free(g->bnext);
	kvf_free(g->bprev);
	kvf_free(g->bhead);
	kvf_free(g->cb_weight);
	memset(g, 0, sizeof(*g));
}

static void bucket_link(struct gc_index *g, uint32_t b, uint32_t v)
{
	uint32_t h = g->bhead[v];

	g->bprev[b] = GC_NONE;
	g->bnext[b] = h;
	if (h != GC_NONE)
		g->bprev[h] = b;
	g->bhead[v] = b;
	if (v < g->min_hint)
		g->min_hint = v;
}

static void bucket_unlink(struct gc_index *g, uint32_t b, uint32_t v)
{
	uint32_t p = g->bprev[b], n = g->bnext[b];

	if (p != GC_NONE)
		g->bnext[p] = n;
	else
		g->bhead[v] = n;
	if (n != GC_NONE)
		g->bprev[n] = p;
}

void gc_greedy_move(struct gc_index *g, uint32_t b, uint32_t old)
{
	bucket_unlink(g, b, old);
	bucket_link(g, b, g->valid[b]);
}

void gc_seal(struct gc_index *g, uint32_t b, uint64_t now)
{
	g->seal_time[b] = now;
	g->pos[b] = g->n_sealed;
	g->set[g->n_sealed++] = b;
	g->fnext[b] = GC_NONE;
	g->fprev[b] = g->fifo_tail;
	if (g->fifo_tail != GC_NONE)
		g->fnext[g->fifo_tail] = b;
	else
		g->fifo_head = b;
	g->fifo_tail = b;
	if (g->bhead)
		bucket_link(g, b, g->valid[b]);
}

void gc_reseal(struct gc_index *g, uint32_t b, uint64_t sealed_at)
{
	uint32_t after = GC_NONE, next = g->fifo_head;

	gc_seal(g, b, sealed_at);
	if (g->fprev[b] == GC_NONE || g->seal_time[g->fprev[b]] <= sealed_at)
		return;
	/* unlink from the tail, then insert before the first later block */
	g->fifo_tail = g->fprev[b];
	g->fnext[g->fifo_tail] = GC_NONE;
	while (next != GC_NONE && g->seal_time[next] <= sealed_at) {
		after = next;
		next = g->fnext[next];
	}
	g->fprev[b] = after;
	g->fnext[b] = next;
	if (after != GC_NONE)
		g->fnext[after] = b;
	else
		g->fifo_head = b;
	if (next != GC_NONE)
		g->fprev[next] = b;
	else
		g->fifo_tail = b;
}

void gc_unseal(struct gc_index *g, uint32_t b)
{
	uint32_t i = g->pos[b], last = g->set[--g->n_sealed];

	g->set[i] = last;
	g->pos[last] = i;
	g->pos[b] = GC_NONE;
	if (g->fprev[b] != GC_NONE)
		g->fnext[g->fprev[b]] = g->fnext[b];
	else
		g->fifo_head = g->fnext[b];
	if (g->fnext[b] != GC_NONE)
		g->fprev[g->fnext[b]] = g->fprev[b];
	else
		g->fifo_tail = g->fprev[b];
	if (g->bhead)
		bucket_unlink(g, b, g->valid[b]);
}

static uint64_t next_rand(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint32_t pick_greedy(struct gc_index *g)
{
	while (g->min_hint <= g->ppb && g->bhead[g->min_hint] == GC_NONE)
		g->min_hint++;
	if (g->min_hint > g->ppb) {
		g->min_hint = g->ppb;
		return GC_NONE;
	}
	return g->bhead[g->min_hint];
}

/*
 * Cost-benefit (Rosenblum and Ousterhout's LFS cleaner, as SSD studies
 * use it): benefit/cost = (1 - u) * age / (2u).  A block with no valid
 * page costs nothing to clean and wins at once.  The walk goes from the
 * oldest sealed block (the FIFO list is in seal order) and stops when
 * even the fewest valid pages any block has could not make a younger
 * block win: exact, and it seldom looks far.
 */
static uint32_t pick_cost_benefit(struct gc_index *g, uint64_t now)
{
	uint32_t best = pick_greedy(g), min_v;
	double best_score = -1.0, top;

	if (best == GC_NONE || g->valid[best] == 0)
		return best;
	min_v = g->valid[best];
	top = g->cb_weight[min_v];
	best = GC_NONE;
	for (uint32_t b = g->fifo_head; b != GC_NONE; b = g->fnext[b]) {
		double age = (double)(now - g->seal_time[b] + 1);
		double score;

		if (age * top <= best_score)
			break;
		score = age * g->cb_weight[g->valid[b]];
		if (score > best_score) {
			best_score = score;
			best = b;
		}
	}
	return best;
}

static uint32_t pick_dchoices(struct gc_index *g)
{
	uint32_t best = GC_NONE;

	if (g->n_sealed == 0)
		return GC_NONE;
	for (uint32_t k = 0; k < g->d; k++) {
		uint32_t b = g->set[next_rand(&g->rng) % g->n_sealed];

		if (best == GC_NONE || g->valid[b] < g->valid[best] ||
		    (g->valid[b] == g->valid[best] &&
		     g->seal_time[b] < g->seal_time[best]))
			best = b;
	}
	return best;
}

uint32_t gc_pick(struct gc_index *g, uint64_t now)
{
	switch (g->policy) {
	case KVF_FLASH_GC_GREEDY:
		return pick_greedy(g);
	case KVF_FLASH_GC_COST_BENEFIT:
		return pick_cost_benefit(g, now);
	case KVF_FLASH_GC_FIFO:
		return g->fifo_head;
	case KVF_FLASH_GC_DCHOICES:
		return pick_dchoices(g);
	}
	return GC_NONE;
}

static kvf_status broken(const char *what, uint32_t b)
{
	return kvf_fail(KVF_ECORRUPT, "flash: GC index check: %s (block %u)",
			what, b);
}

kvf_status gc_check(const struct gc_index *g)
{
	uint32_t n = 0, prev = GC_NONE;

	for (uint32_t i = 0; i < g->n_sealed; i++)
		if (g->pos[g->set[i]] != i)
			return broken("sealed set and positions disagree",
				      g->set[i]);
	for (uint32_t b = g->fifo_head; b != GC_NONE; b = g->fnext[b]) {
		if (g->pos[b] == GC_NONE)
			return broken("an unsealed block is in the FIFO list", b);
		if (g->fprev[b] != prev)
			return broken("FIFO back link is wrong", b);
		if (prev != GC_NONE && g->seal_time[prev] > g->seal_time[b])
			return broken("FIFO list is out of seal order", b);
		if (++n > g->n_sealed)
			return broken("FIFO list has a cycle", b);
		prev = b;
	}
	if (n != g->n_sealed || g->fifo_tail != prev)
		return broken("FIFO list does not hold every sealed block", prev);
	if (g->bhead == NULL)
		return KVF_OK;
	n = 0;
	for (uint32_t v = 0; v <= g->ppb; v++) {
		prev = GC_NONE;
		for (uint32_t b = g->bhead[v]; b != GC_NONE; b = g->bnext[b]) {
			if (g->valid[b] != v)
				return broken("block is in the wrong valid-count list",
					      b);
			if (g->pos[b] == GC_NONE)
				return broken("an unsealed block is in a valid-count list",
					      b);
			if (g->bprev[b] != prev)
				return broken("valid-count back link is wrong", b);
			if (v < g->min_hint)
				return broken("a block sits below the greedy hint", b);
			if (++n > g->n_sealed)
				return broken("valid-count lists have a cycle", b);
			prev = b;
		}
	}
	if (n != g->n_sealed)
		return broken("valid-count lists miss a sealed block", GC_NONE);
	return KVF_OK;
}

/* ---- models (docs/ftl.md, "Validation against analytic models") ---- */

/* lambert_w0 - principal branch of w e^w = x for x in [-1/e, 0) */
static double lambert_w0(double x)
{
	double lo = -1.0, hi = 0.0;

	for (int i = 0; i < 200; i++) {
		double mid = 0.5 * (lo + hi);

		if (mid * exp(mid) < x)
			lo = mid;
		else
			hi = mid;
	}
	return 0.5 * (lo + hi);
}

double gc_model_fifo_wa(double sf)
{
	double alpha = 1.0 - sf, u;

	if (!(sf > 0.0 && sf < 1.0))
		return 0.0;
	/* step F2: u = -alpha W0(-e^(-1/alpha) / alpha) */
	u = -alpha * lambert_w0(-exp(-1.0 / alpha) / alpha);
	return 1.0 / (1.0 - u);
}

double gc_model_greedy_wa(double sf, uint32_t b)
{
	double m = (1.0 - sf) * b; /* mean valid pages per block */
	double hb = 0.0, hj, x, r, lam, jbar;
	uint32_t j;

	if (!(sf > 0.0 && sf < 1.0) || b < 2)
		return 0.0;
	for (uint32_t i = 1; i <= b; i++)
		hb += 1.0 / i;
	/* step G3: the lowest level j whose 1/i profile above it holds
	 * more than m valid pages per block on average */
	hj = 0.0;
	for (j = 0; j < b; j++) {
		if ((b - j) / (hb - hj) > m)
			break;
		hj += 1.0 / (j + 1);
	}
	if (j == b)
		return 0.0;
	/* step G4: the fraction x of blocks waiting at level j */
	x = ((hb - hj) * m - (b - j)) / (j * (hb - hj) - (double)(b - j));
	if (j == 0)
		x = 0.0;
	r = x * j / m;             /* victims taken at level j - 1 */
	lam = (1.0 - r) / (b - j); /* victims per host write */
	jbar = j - r / lam;        /* mean valid pages of a victim */
	return b / (b - jbar);
}

/*
 * dchoices_excess - step D2: for a victim rate lam, fill the levels from
 * b down to 1; returns (sum of i x_i) - m, the valid pages per block the
 * profile holds beyond the m it must hold.
 */
static double dchoices_excess(double lam, double m, uint32_t b, uint32_t d)
{
	double f = 0.0, pages = 0.0;

	for (uint32_t i = b; i >= 1; i--) {
		double c = lam * m / i, lo = 0.0, hi = 1.0 - f;

		if (hi <= 0.0)
			continue; /* every block holds more: the rest are empty */
		for (int k = 0; k < 80; k++) {
			double mid = 0.5 * (lo + hi);

			if (mid - c * (1.0 - pow(f + mid, d)) < 0.0)
				lo = mid;
			else
				hi = mid;
		}
		f += 0.5 * (lo + hi);
		pages += i * 0.5 * (lo + hi);
	}
	return pages - m;
}

double gc_model_dchoices_wa(double sf, uint32_t b, uint32_t d)
{
	double m = (1.0 - sf) * b, lo = 0.0, hi = 1.0, lam;

	if (!(sf > 0.0 && sf < 1.0) || b < 2 || d < 1)
		return 0.0;
	/* step D3: the victim rate that holds exactly m pages per block */
	for (int k = 0; k < 100; k++) {
		double mid = 0.5 * (lo + hi);

		if (dchoices_excess(mid, m, b, d) < 0.0)
			lo = mid;
		else
			hi = mid;
	}
	lam = 0.5 * (lo + hi);
	/* free pages per victim, b - jbar, are 1 / lam host writes */
	return b * lam;
}
