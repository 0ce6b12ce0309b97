/*
 * proj.h - the K,V projection near the data: rows of X (the layer's
 * input activations, as stored) times the registered weights, then the
 * rotary position embedding on K.  Pure functions over caller buffers, no
 * allocation; the engine (engine/planning/recompute.c) feeds them X read from the
 * store, a bench or example feeds them its own X.
 *
 * Shapes: X is [n][d] with d = n_q_heads * head_dim elements in dtype;
 * W is [d][cols] fp32, row major (K = X W); out is [n][cols] fp32 with
 * cols = n_kv_heads * head_dim.
 *
 * RoPE is the rotate-half form (GPT-NeoX, Llama as most checkpoints are
 * stored): within each head, element i < head_dim/2 pairs with element
 * i + head_dim/2 and the pair turns by pos * theta^(-2i/head_dim).
 */
#ifndef KVF_COMPUTE_PROJ_H
#define KVF_COMPUTE_PROJ_H

#include <stdint.h>

#include "kvflash.h"

/*
 * kvc_project - out[t][c] = sum_j x[t][j] * w[j][c] for t < n.
 * @x: [n][d] rows in dtype; @w: [d][cols] fp32; @out: [n][cols] fp32.
 * @xrow: [d] floats of scratch (one widened row of x).
 * Cost: 2 * d * cols flops per row.
 */
void kvc_project(const void *x, kvf_dtype dtype, uint32_t n, uint32_t d,
		 const float *w, uint32_t cols, float *out, float *xrow);

/*
 * kvc_rope - rotate every head of n rows in place; row t is at token
 * position pos0 + t.  @rows: [n][n_heads][head_dim] fp32, head_dim even.
 * theta 0 leaves the rows as they are.
 */
void kvc_rope(float *rows, uint32_t n, uint32_t n_heads, uint32_t head_dim,
	      uint64_t pos0, float theta);

#endif /* KVF_COMPUTE_PROJ_H */
