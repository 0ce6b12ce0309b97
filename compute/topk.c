/*
 * topk.c - top-k selection: the k largest of n floats, and the top-r |q|
 * head dims of SparF.
 *
 * A bounded heap kept in the caller's output array: idx[0..k) holds the
 * best k seen so far with the lowest-ranked at the root, so each later
 * element costs one comparison, and O(log k) more when it enters.  Total
 * O(n log k), no allocation.  The survivors are then heap-sorted by index,
 * in place.  The rank order is total (value, then lower index first; NaN
 * below everything), so the selection is deterministic whatever the input.
 */
#include <math.h>

#include "compute/kernels.h"

/* ranks_above - does element a rank above element b? */
static int ranks_above(const float *x, uint32_t a, uint32_t b)
{
	float xa = x[a], xb = x[b];
	int na = isnan(xa), nb = isnan(xb);

	if (na || nb)
		return na == nb ? a < b : nb;
	if (xa != xb)
		return xa > xb;
	return a < b;
}

/* sift_down - restore the min-rank heap below slot i of h[0..k). */
static void sift_down(const float *x, uint32_t *h, uint32_t k, uint32_t i)
{
	for (;;) {
		uint32_t lo = i, c = 2 * i + 1;

		if (c < k && ranks_above(x, h[lo], h[c]))
			lo = c;
		if (c + 1 < k && ranks_above(x, h[lo], h[c + 1]))
			lo = c + 1;
		if (lo == i)
			return;
		uint32_t t = h[i];

		h[i] = h[lo];
		h[lo] = t;
		i = lo;
	}
}

/* sift_max - restore the max-heap (by value) below slot p of v[0..end). */
static void sift_max(uint32_t *v, uint32_t end, uint32_t p)
{
	for (;;) {
		uint32_t c = 2 * p + 1, hi = p, t;

		if (c < end && v[c] > v[hi])
			hi = c;
		if (c + 1 < end && v[c + 1] > v[hi])
			hi = c + 1;
		if (hi == p)
			return;
		t = v[p];
		v[p] = v[hi];
		v[hi] = t;
		p = hi;
	}
}

/* sort_indices - heap sort of v[0..k) ascending, in place. */
static void sort_indices(uint32_t *v, uint32_t k)
{
	for (uint32_t i = k / 2; i-- > 0;)
		sift_max(v, k, i);
	for (uint32_t end = k; end > 1; end--) {
		uint32_t t = v[0];

		v[0] = v[end - 1];
		v[end - 1] = t;
		sift_max(v, end - 1, 0);
	}
}

uint32_t kvc_topk(const float *x, uint32_t n, uint32_t k, uint32_t *idx)
{
	if (k >= n) {
		for (uint32_t i = 0; i < n; i++)
			idx[i] = i;
		return n;
	}
	if (k == 0)
		return 0;
	for (uint32_t i = 0; i < k; i++)
		idx[i] = i;
	for (uint32_t i = k / 2; i-- > 0;)
		sift_down(x, idx, k, i);
	for (uint32_t i = k; i < n; i++) {
		if (ranks_above(x, i, idx[0])) {
			idx[0] = i;
			sift_down(x, idx, k, 0);
		}
	}
	sort_indices(idx, k);
	return k;
}

uint32_t kvc_topr_dims(const float *q, uint32_t n_q, uint32_t head_dim,
		       uint32_t r, uint32_t *dims, float *key_scratch)
{
	for (uint32_t d = 0; d < head_dim; d++) {
		float s = 0.0f;

		for (uint32_t h = 0; h < n_q; h++)
			s += fabsf(q[(size_t)h * head_dim + d]);
		key_scratch[d] = s;
	}
	return kvc_topk(key_scratch, head_dim, r, dims);
}
