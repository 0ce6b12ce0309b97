/*
 * plan.h - the planners' cost models (DESIGN.md, "Planners"): small pure
 * functions over per-token costs in seconds, which the public kvf_plan_*
 * calls (compute/plan.c) derive from a kvf_profile and a model shape.
 *
 * KVPR (Jiang et al., partial recomputation): of s tokens the caller
 * recomputes K,V of [0, l) from X[0, l) while the store streams K,V of
 * [l, s).  X[0, l) crosses first, so with per-token costs x (X bytes over
 * the read path), kv (K+V bytes over it) and rc (the caller's
 * recomputation) a step takes
 *	t(l) = l * x + max(l * rc, (s - l) * kv).
 * t is convex and piecewise linear: it falls with slope x - kv up to the
 * balance point l* = s * kv / (rc + kv) when x < kv, and rises after it,
 * so the best l is l* clamped to the X available, or 0 when x >= kv.
 *
 * HILOS (cooperative X-cache): a share alpha of the tokens is kept as X;
 * the store recomputes their K,V near the data and attends them (cost cs
 * per token) while the caller streams K,V of the rest and attends them
 * (cost cc per token); the two halves run side by side, so
 *	t(alpha) = max(alpha * s * cs, (1 - alpha) * s * cc),
 * smallest at alpha* = cc / (cs + cc).
 *
 * Both splits start a second path from X, which has a fixed cost (the
 * latency of the first X read, one page per query head): the public calls
 * add it to the side that reads X and take the split only when it still
 * beats the caller alone.
 */
#ifndef KVF_COMPUTE_PLAN_H
#define KVF_COMPUTE_PLAN_H

#include <stdint.h>

/* Per-token costs of a KVPR step, in seconds (all >= 0, finite). */
struct kvc_kvpr_costs {
	double x_s;  /* read X of one token and hand it over */
	double kv_s; /* read K and V of one token and hand them over */
	double rc_s; /* the caller recomputes K and V of one token */
};

/* kvc_kvpr_time - t(l) for s tokens (l <= s) */
double kvc_kvpr_time(const struct kvc_kvpr_costs *c, uint64_t s, uint64_t l);

/*
 * kvc_kvpr_split - the l in [0, min(l_max, s)] that minimizes t(l): the
 * balance point, rounded to whichever neighbour is faster, clamped.
 */
uint64_t kvc_kvpr_split(const struct kvc_kvpr_costs *c, uint64_t s,
			uint64_t l_max);

/* kvc_xcache_time - t(alpha) for s tokens, cs and cc per token */
double kvc_xcache_time(double cs, double cc, uint64_t s, double alpha);

/*
 * kvc_xcache_alpha - the alpha in [0, alpha_max] minimizing t(alpha):
 * cc / (cs + cc) clamped (0 when both costs are 0).
 */
double kvc_xcache_alpha(double cs, double cc, double alpha_max);

#endif /* KVF_COMPUTE_PLAN_H */
