/*
 * optim.h - optimizer update kernels: Adam, AdamW, SGD (momentum,
 * dampening, Nesterov, weight decay) and AdaGrad over fp32 chunks of
 * optimizer state, with dense (f16, bf16, f32) or Top-K sparse gradients,
 * and the gradient checks a step needs first (global norm for clipping, a
 * NaN/Inf test).  The near-data half of Smart-Infinity's SmartUpdate and
 * SmartComp; the engine streams the state through these kernels chunk by
 * chunk (kvf_opt_step).
 *
 * Semantics are torch.optim's, for the same hyper-parameters, step counts
 * and bias corrections: the algorithm boxes of the PyTorch documentation
 *	https://pytorch.org/docs/stable/generated/torch.optim.Adam.html
 *	https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html
 *	https://pytorch.org/docs/stable/generated/torch.optim.SGD.html
 *	https://pytorch.org/docs/stable/generated/torch.optim.Adagrad.html
 * (amsgrad and maximize off), evaluated in fp32 in the operation order of
 * PyTorch 2.x's single-tensor code (torch/optim/adam.py, sgd.py,
 * adagrad.py).  With g the gradient times grad_scale, for element i:
 *
 *   Adam:    g += wd * p;  m = lerp(m, g, 1 - b1);  v = b2 v + (1 - b2) g g;
 *            p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 *   AdamW:   p *= 1 - lr wd;  then Adam without the "g += wd * p"
 *   SGD:     g += wd * p;  if momentum != 0:
 *                buf = (t == 1) ? g : momentum buf + (1 - dampening) g;
 *                g = nesterov ? g + momentum buf : buf;
 *            p -= lr g
 *   AdaGrad: g += wd * p;  sum += g g;
 *            p -= (lr / (1 + (t - 1) lr_decay)) * g / (sqrt(sum) + eps)
 *
 * m is Adam's first moment (torch's exp_avg) or SGD's momentum buffer; v
 * is Adam's second moment (exp_avg_sq) or AdaGrad's sum (state_sum, which
 * starts at initial_accumulator_value: kvc_optim_state_init).  "g += wd * p"
 * happens only when weight_decay != 0, as in PyTorch.  lerp(m, g, w) is
 * torch.lerp: m + w (g - m) for w < 0.5, else g - (g - m)(1 - w); it equals
 * b1 m + (1 - b1) g of the documentation up to rounding.  SGD's t == 1
 * rule is PyTorch's "buf is None": the first step copies the gradient into
 * the buffer, without dampening; the caller's t is the step count PyTorch
 * keeps per parameter, so t == 1 must be the first step ever taken.
 * Constants that PyTorch computes in Python (double) are computed in
 * double here too (bias corrections, lr / (1 - b1^t), 1 - lr wd, 1 -
 * dampening, AdaGrad's clr) and rounded to fp32 where PyTorch hands them
 * to a float32 tensor op; see kvc_optim_step_prepare for how the fp32
 * hyper-parameters of kvf_opt_config become those doubles.  The results
 * are PyTorch's to fp32 rounding: PyTorch's own vectorized CPU path fuses
 * some multiply-adds, so no implementation matches it bit for bit on every
 * machine.  tests/golden/gen_optim.py writes the formulas out and makes
 * the known answers the tests check.
 *
 * Sparse gradients: a Top-K gradient is the dense gradient with every
 * element it does not list equal to zero.  Every element of the chunk is
 * updated, listed or not: a zero gradient still decays m and v, still
 * moves p by Adam's m / sqrt(v) and by weight decay, still advances SGD's
 * momentum.  The sparse kernel gives bit for bit what the dense kernel
 * gives for the gradient with the zeros filled in; it saves the caller's
 * bytes and the gradient traffic, not the state traffic.
 *
 * Chunks: a kernel updates the elements [i0, i0 + n) of one tensor, in
 * place, given pointers to that chunk of param (and m, v when the rule
 * keeps them) and the chunk's gradient; the _from kernels read the chunk
 * from one place and write it to another in the same pass.  Chunks are
 * independent: updating a tensor in any split of chunks, in any order, on
 * any threads, gives the same bits as one call over the whole tensor.
 *
 * A step, for the engine (see tests/unit/compute/test_optim_*.c):
 *	k = kvc_optim();
 *	sumsq = sum over chunks of kvc_optim_grad_sumsq(k, grad chunk, ...);
 *	if (!isfinite(sumsq)) refuse the step, nothing changed;
 *	kvc_optim_step_prepare(&s, cfg, t, unscale * kvc_optim_clip_coef(
 *			     sqrt(sumsq) * unscale, max_norm));
 *	for each chunk: kvc_optim_dense(k, &s, p, m, v, n, g, dtype, out) or
 *		kvc_optim_grad_span + kvc_optim_sparse(k, &s, ...);
 *
 * Purity: no I/O, no allocation (a 1 KiB block on the stack), no global
 * state beyond the dispatch choice; the kernels keep no pointer after they
 * return.  Inputs are trusted: the engine validates what callers give it
 * (kvc_optim_config_check and kvc_optim_grad_check help); preconditions are
 * asserted.  Any thread may call anything here concurrently, on disjoint
 * chunks.
 *
 * Dispatch (STYLE rule 17): the kernels exist as a portable scalar variant
 * (optim.c) and an AVX2+FMA+F16C variant (optim_avx2.c).  kvc_optim()
 * picks one once per process from the CPU features; KVF_SIMD=scalar in the
 * environment forces scalar; kvc_optim_scalar() and kvc_optim_avx2() name
 * a variant explicitly (tests compare them).  The two give identical bits
 * for the updates, params_out and the NaN/Inf check: both round every
 * operation to fp32 in the same order, neither contracts a multiply-add
 * (compute/CMakeLists.txt builds both with -ffp-contract=off), and
 * division and square root are correctly rounded in both.  Sums of
 * squares differ only in the order of double additions (relative
 * difference below n * 2^-53).
 */
#ifndef KVF_COMPUTE_OPTIM_H
#define KVF_COMPUTE_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvflash.h"

/* One variant (ISA) of the optimizer kernels; opaque. */
struct kvc_optim;

/*
 * kvc_optim - the variant this process uses: chosen on the first call from
 * the CPU features (AVX2, FMA and F16C: avx2; else scalar), or scalar when
 * the environment has KVF_SIMD=scalar; the same answer ever after.
 */
const struct kvc_optim *kvc_optim(void);

/* kvc_optim_scalar - the portable variant, always there (the oracle). */
const struct kvc_optim *kvc_optim_scalar(void);

/* kvc_optim_avx2 - the AVX2 variant, or NULL when the CPU or build lacks it. */
const struct kvc_optim *kvc_optim_avx2(void);

/* kvc_optim_name - "scalar" or "avx2" (static string). */
const char *kvc_optim_name(const struct kvc_optim *k);

/* ---- configuration and state -------------------------------------------- */

/*
 * kvc_optim_config_check - whether cfg is a configuration PyTorch accepts,
 * with the same rules as the constructors of torch.optim (ValueError
 * there): lr >= 0; Adam/AdamW: 0 <= beta1 < 1, 0 <= beta2 < 1, eps >= 0,
 * weight_decay >= 0; SGD: momentum >= 0, weight_decay >= 0, nesterov 0 or
 * 1 and, when 1, momentum > 0 and dampening == 0; AdaGrad: lr_decay >= 0,
 * weight_decay >= 0, initial_accumulator_value >= 0, eps >= 0.  Every
 * value the kind uses must also be finite, kind and out_dtype must be
 * known.  Fields a kind does not use are not looked at.
 * @why: NULL, or why_cap bytes that receive a message naming the field,
 *       its value and the rule on failure ("beta2 1 out of range [0, 1)").
 * Return: true when usable.
 */
bool kvc_optim_config_check(const kvf_opt_config *cfg, char *why,
			    size_t why_cap);

/* What kvc_optim_states reports: which state arrays an update rule keeps. */
enum kvc_optim_state_flags {
	KVC_OPTIM_M = 1u << 0, /* m: Adam first moment or SGD momentum buffer */
	KVC_OPTIM_V = 1u << 1  /* v: Adam second moment or AdaGrad sum */
};

/*
 * kvc_optim_states - the state arrays cfg's rule keeps besides param:
 * Adam, AdamW: M | V; SGD: M when momentum != 0, else none; AdaGrad: V.
 * A kernel reads and writes exactly these (others may be NULL).
 */
unsigned kvc_optim_states(const kvf_opt_config *cfg);

/*
 * kvc_optim_state_init - the state before step 1 for n elements: m = 0, and
 * v = initial_accumulator_value for AdaGrad (torch.full_like), else 0.
 * Arrays the rule does not keep (kvc_optim_states) may be NULL and are not
 * written.
 */
void kvc_optim_state_init(const kvf_opt_config *cfg, float *m, float *v,
			  size_t n);

/* ---- one step ------------------------------------------------------------ */

/*
 * The constants of one step, shared by every chunk of it: made by
 * kvc_optim_step_prepare, read-only afterwards (any number of threads may
 * use one).  Fields a rule does not use hold 0.  Plain data: may be
 * copied.
 */
struct kvc_optim_step {
	kvf_opt_kind kind;     /* update rule */
	kvf_dtype out_dtype;   /* element type of params_out */
	uint64_t t;            /* step number, 1 = first step */
	float grad_scale;      /* multiplies each raw gradient element */
	float l2;              /* weight decay added to g (not AdamW); 0 off */
	float decay;           /* AdamW: p *= decay (1 - lr wd); else 1 */
	float lr;              /* SGD: learning rate */
	float beta2;           /* Adam: second-moment decay */
	float one_minus_beta2; /* Adam: 1 - beta2 (computed in double) */
	float lerp_w;          /* Adam: torch.lerp weight, 1 - beta1 */
	float lerp_w_c;        /* Adam: 1 - lerp_w, in fp32 */
	uint32_t lerp_small;   /* Adam: 1 when lerp_w < 0.5 (lerp's form) */
	float step_size;       /* Adam: lr / (1 - beta1^t) */
	float bc2_sqrt;        /* Adam: sqrt(1 - beta2^t) */
	float eps;             /* Adam, AdaGrad: denominator term */
	float momentum;        /* SGD: momentum factor; 0 = no buffer */
	float one_minus_damp;  /* SGD: 1 - dampening (computed in double) */
	uint32_t nesterov;     /* SGD: 1 = Nesterov momentum */
	uint32_t first;        /* SGD: 1 when t == 1 (buffer := g) */
	float clr;             /* AdaGrad: lr / (1 + (t - 1) lr_decay) */
};

/*
 * kvc_optim_step_prepare - the constants of step t of cfg's rule.
 * @cfg: a configuration kvc_optim_config_check accepts.
 * @t: the step number, >= 1: 1 for the first step, then 2, 3, ...; the
 *     bias corrections, SGD's first-step rule and AdaGrad's decay use it.
 * @grad_scale: finite, > 0: every raw gradient element is widened to fp32
 *     and multiplied by it (in fp32) before anything else, so it carries
 *     gradient clipping (kvc_optim_clip_coef) and loss unscaling (1 / loss
 *     scale) on the fly; 1 for neither.  This is the fp32-master-weights
 *     order: the gradient is cast to fp32, then unscaled and clipped.
 * kvf_opt_config holds the hyper-parameters as floats, PyTorch as Python
 * doubles; a caller writes 0.999 in both.  So each float is read back as
 * the shortest decimal that rounds to it (0.999f -> "0.999" -> the double
 * 0.999), and the derived constants are computed in double from those, as
 * Python computes them.  A float that came from no short decimal is used as
 * the double nearest (it is exact).
 */
void kvc_optim_step_prepare(struct kvc_optim_step *s, const kvf_opt_config *cfg,
			    uint64_t t, float grad_scale);

/*
 * kvc_optim_dense - one step of s's rule over one chunk, dense gradient.
 * @k: the variant (kvc_optim()).
 * @param: [n] fp32, the chunk's parameters; updated in place.
 * @m, @v: [n] fp32 state; updated in place; those the rule does not keep
 *         (kvc_optim_states) may be NULL.  None may overlap another array.
 * @grad: [n] elements of grad_dtype (unaligned is fine); NULL when n = 0.
 * @params_out: NULL, or [n] elements of s->out_dtype: the updated params,
 *              rounded to nearest even (compute/half.h).
 * Non-finite gradients or state give non-finite results, as in PyTorch;
 * the engine refuses such steps first (kvc_optim_grad_nonfinite).
 */
void kvc_optim_dense(const struct kvc_optim *k, const struct kvc_optim_step *s,
		     float *param, float *m, float *v, size_t n,
		     const void *grad, kvf_dtype grad_dtype, void *params_out);

/* Which array of a chunk: params, m, v (struct kvc_optim_chunk). */
enum { KVC_CHUNK_P = 0, KVC_CHUNK_M = 1, KVC_CHUNK_V = 2 };

/*
 * The fp32 state of one chunk for the _from kernels: the step reads in[]
 * and writes out[] (indexed by KVC_CHUNK_P, _M, _V), n elements each.  An
 * out array may be its own in array (the update is then in place, as
 * kvc_optim_dense's), but may overlap nothing else; arrays the rule does
 * not keep (kvc_optim_states) are NULL in both.
 */
struct kvc_optim_chunk {
	const float *in[3]; /* read: the state before the step */
	float *out[3];      /* written: the state after it */
};

/*
 * kvc_optim_dense_from / kvc_optim_sparse_from - kvc_optim_dense and
 * kvc_optim_sparse reading the chunk's state from c->in and writing the
 * updated state to c->out: the same bits as copying in to out first and
 * updating in place, in one pass over the data (the engine updates a
 * committed chunk straight into its new place).
 */
void kvc_optim_dense_from(const struct kvc_optim *k,
			  const struct kvc_optim_step *s,
			  const struct kvc_optim_chunk *c, size_t n,
			  const void *grad, kvf_dtype grad_dtype,
			  void *params_out);

/*
 * kvc_optim_sparse - kvc_optim_dense for a Top-K gradient: the same bits as
 * kvc_optim_dense with a gradient that holds val[j] at idx[j] - i0 and zero
 * everywhere else.  Every one of the n elements is updated (see the file
 * comment).
 * @i0: the tensor index of param[0].
 * @idx: [nnz] strictly ascending tensor indices, each in [i0, i0 + n): the
 *       part of the step's index list that falls in this chunk
 *       (kvc_optim_grad_span); NULL when nnz = 0.
 * @val: [nnz] values of grad_dtype, val[j] for idx[j] (the same part of
 *       the value list: values + first * element size).
 * Indices outside that contract are never written through (the kernel
 * stays in bounds) but their values are lost; assert()s catch them in
 * debug builds.
 */
void kvc_optim_sparse(const struct kvc_optim *k, const struct kvc_optim_step *s,
		      float *param, float *m, float *v, size_t n, uint64_t i0,
		      const uint32_t *idx, const void *val, size_t nnz,
		      kvf_dtype grad_dtype, void *params_out);
void kvc_optim_sparse_from(const struct kvc_optim *k,
			   const struct kvc_optim_step *s,
			   const struct kvc_optim_chunk *c, size_t n,
			   uint64_t i0, const uint32_t *idx, const void *val,
			   size_t nnz, kvf_dtype grad_dtype, void *params_out);

/* ---- gradient checks ----------------------------------------------------- */

/*
 * kvc_optim_grad_check - whether a Top-K index list fits a tensor of
 * n_params elements: strictly ascending, each below n_params.
 * Return: nnz when it does; else the position of the first index that
 * breaks a rule (not above its predecessor, or >= n_params).
 */
size_t kvc_optim_grad_check(const uint32_t *idx, size_t nnz, uint64_t n_params);

/*
 * kvc_optim_grad_span - the part of an ascending index list that falls in
 * the chunk [i0, i0 + n), by binary search (O(log nnz)).
 * @first: receives the position of the first index >= i0.
 * @count: receives how many indices from there are < i0 + n.
 */
void kvc_optim_grad_span(const uint32_t *idx, size_t nnz, uint64_t i0,
			 uint64_t n, size_t *first, size_t *count);

/*
 * kvc_optim_grad_sumsq - sum of g[i]^2 over n elements of dtype, in double:
 * each square of an fp32 value is exact in double and the sum of 2^32 of
 * them cannot overflow, so the result is finite exactly when every element
 * is (a NaN or Inf gives NaN or Inf: one pass serves the norm and the
 * check).  The global norm is sqrt of the sum over all chunks.  For a
 * Top-K gradient pass the value list: the zeros add nothing.  Raw values
 * (grad_scale is not applied).
 */
double kvc_optim_grad_sumsq(const struct kvc_optim *k, const void *g, size_t n,
			    kvf_dtype dtype);

/*
 * kvc_optim_grad_nonfinite - whether any of the n elements of dtype is NaN
 * or +-Inf (an exponent-bits test, no arithmetic).  For a Top-K gradient
 * pass the value list.
 */
bool kvc_optim_grad_nonfinite(const struct kvc_optim *k, const void *g,
			      size_t n, kvf_dtype dtype);

/*
 * kvc_optim_clip_coef - torch.nn.utils.clip_grad_norm_'s factor:
 * min(1, max_norm / (total_norm + 1e-6)), in fp32 as PyTorch computes it
 * (its norm is an fp32 tensor).  Note that, like PyTorch, it scales by a
 * hair even when total_norm is a little below max_norm (within 1e-6).
 * @total_norm: finite, >= 0 (sqrt of the summed kvc_optim_grad_sumsq).
 * @max_norm: > 0.
 */
float kvc_optim_clip_coef(double total_norm, double max_norm);

#endif /* KVF_COMPUTE_OPTIM_H */
