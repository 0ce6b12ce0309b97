/*
 * kvflash.h - the public interface of kvflash, a flash-aware KV-cache store.
 *
 * This is the only public header.  Everything here is prefixed kvf_/KVF_;
 * anything not declared here is private and may change.  A call is declared
 * here only once it is implemented.
 *
 * Conventions, for every call:
 *  - Fallible calls return kvf_status; KVF_OK (0) is success.  The numeric
 *    values of the codes are pinned and never renumbered.
 *  - On failure kvf_last_error() returns a message naming the call, the bad
 *    value and the limit.  Output parameters are written only on success.
 *  - Structs that cross the API start with struct_size and only grow at the
 *    end.  Their _init functions fill every field with its default; zero in
 *    a field always means "the default".
 *  - The caller owns every buffer it passes; the library keeps no pointer
 *    to it after the call returns.
 */
#ifndef KVFLASH_H
#define KVFLASH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(KVF_BUILDING_LIBRARY) && defined(__GNUC__)
#define KVF_API __attribute__((visibility("default")))
#else
#define KVF_API
#endif

/* ---- versions --------------------------------------------------------- */

/* The library version.  CMake parses these three lines; keep their form. */
#define KVF_VERSION_MAJOR 0
#define KVF_VERSION_MINOR 1
#define KVF_VERSION_PATCH 0

#define KVF_VERSION_NUMBER \
	(KVF_VERSION_MAJOR * 10000 + KVF_VERSION_MINOR * 100 + KVF_VERSION_PATCH)

/*
 * kvf_version_number - the library version of the code actually linked.
 * Return: MAJOR * 10000 + MINOR * 100 + PATCH.
 * Concurrency: any thread, any time.
 */
KVF_API unsigned kvf_version_number(void);

/*
 * kvf_version_string - the same version as "MAJOR.MINOR.PATCH".
 * Return: a static string, never NULL.
 * Concurrency: any thread, any time.
 */
KVF_API const char *kvf_version_string(void);

/* ---- status codes ----------------------------------------------------- */

/*
 * Status codes, grouped by what the caller should do.  Values are pinned:
 * new codes take unused values inside their group, none is renumbered.
 */
typedef enum {
	KVF_OK = 0,

	/* 10..29: the call was wrong; fix the argument.  Nothing changed. */
	KVF_EINVAL = 10,   /* malformed argument: NULL, misaligned, bad enum */
	KVF_ERANGE = 11,   /* a number past its limit: layer, token, segment */
	KVF_ENOENT = 12,   /* the named object does not exist */
	KVF_EEXIST = 13,   /* the object to create exists already */
	KVF_EMISMATCH = 14, /* options contradict the stored configuration */
	KVF_EVERSION = 15, /* struct or format newer than this library */
	KVF_ECLOSED = 16,  /* the handle was closed */
	KVF_ENOTSUP = 17,  /* valid, but not supported by this build/media */

	/* 30..39: out of a resource; free something and retry. */
	KVF_ENOMEM = 30,   /* memory allocation failed */
	KVF_ENOSPC = 31,   /* the media is full of live data */
	KVF_EBUSY = 32,    /* held by another handle or process */

	/* 40..49: the data or the device failed; the rest stays usable. */
	KVF_EIO = 40,      /* the operating system reported an I/O error */
	KVF_ECORRUPT = 41, /* stored data failed verification; not returned */

	/* 50: sticky.  Every later call on the handle returns it; reopen. */
	KVF_EFATAL = 50
} kvf_status;

/*
 * kvf_strerror - a short static description of a status code.
 * Return: never NULL.  An unknown code gives "unknown status N" in a
 * thread-local buffer that the next unknown code on the thread reuses.
 * Concurrency: any thread, any time.
 */
KVF_API const char *kvf_strerror(kvf_status status);

/*
 * kvf_last_error - the message of the last failed kvf_ call on this thread.
 * Return: a thread-local string, "" when no call has failed on this thread.
 * It stays valid until the next failing kvf_ call on the same thread.
 * Concurrency: each thread sees only its own message.
 */
KVF_API const char *kvf_last_error(void);

/* ---- model, options --------------------------------------------------- */

typedef enum { KVF_DTYPE_F16, KVF_DTYPE_BF16, KVF_DTYPE_F32 } kvf_dtype;

typedef enum {
	KVF_MEDIA_FILE,   /* one file or block device per stripe */
	KVF_MEDIA_MEMORY, /* process memory; gone at close */
	KVF_MEDIA_FLASH   /* emulated NAND flash device */
} kvf_media_kind;

/* The model shape a store is created for. */
typedef struct {
	uint32_t n_layers;   /* transformer layers */
	uint32_t n_q_heads;  /* query heads per layer */
	uint32_t n_kv_heads; /* key/value heads; n_q_heads % n_kv_heads == 0 */
	uint32_t head_dim;   /* elements per head vector */
	kvf_dtype dtype;     /* element type of stored K/V */
} kvf_model;

/* Store options.  Fill with kvf_options_init, then change what you need. */
typedef struct {
	size_t struct_size;       /* sizeof(kvf_options), set by _init */
	kvf_model model;          /* the shape the store holds */
	kvf_media_kind media;     /* default KVF_MEDIA_FILE */
	uint32_t page_size;       /* bytes per page; default 4096 */
	uint32_t n_threads;       /* worker threads; 0 = online CPUs */
	uint32_t kt_pages;        /* 1 = also keep K^T pages for SparF */
	uint64_t segment_size;    /* bytes per segment per stripe; 1 MiB */
	uint64_t capacity_bytes;  /* media bytes over all stripes; 4 GiB */
	uint32_t n_stripes;       /* stripes; 0 = n_device_paths or 1 */
	uint32_t queue_depth;     /* I/O requests in flight per ring; 32 */
	const char *const *device_paths; /* NULL = files in the store dir */
	uint32_t n_device_paths;  /* entries in device_paths */
	uint32_t direct_io;       /* 0 = default (on), 1 = on, 2 = off */
} kvf_options;

/* Fills *o with defaults for model m; use kvf_options_init. */
KVF_API void kvf_options_init_sized(kvf_options *o, const kvf_model *m,
				    size_t struct_size);

/*
 * kvf_options_init - fill every field of *o with its default, for model m.
 * m may be NULL (the model is then zero and must be set before use).
 * Concurrency: any thread; *o is the caller's.
 */
static inline void kvf_options_init(kvf_options *o, const kvf_model *m)
{
	kvf_options_init_sized(o, m, sizeof(*o));
}

/* Options of one attention call. */
typedef struct {
	size_t struct_size; /* sizeof(kvf_attn_opts), set by _init */
	float scale;        /* softmax scale; 0 = 1/sqrt(head_dim) */
	uint32_t sparse;    /* 0 dense, 1 SparF */
	uint32_t top_r;     /* SparF: head dims used for approximate scores */
	uint32_t top_k;     /* SparF: tokens attended exactly */
	float *lse;         /* NULL, or [n_q_heads] log-sum-exp out */
} kvf_attn_opts;

/* Fills *o with defaults; use kvf_attn_opts_init. */
KVF_API void kvf_attn_opts_init_sized(kvf_attn_opts *o, size_t struct_size);

/*
 * kvf_attn_opts_init - dense attention, default scale, no LSE output.
 * Concurrency: any thread; *o is the caller's.
 */
static inline void kvf_attn_opts_init(kvf_attn_opts *o)
{
	kvf_attn_opts_init_sized(o, sizeof(*o));
}

/* Figures of one store; read them with kvf_stats_get (coming with the
 * store).  Byte counts are totals since the store was created. */
typedef struct {
	size_t struct_size;          /* sizeof(kvf_stats), set by the caller */
	uint64_t user_bytes;         /* bytes handed to kvf_append */
	uint64_t host_bytes_written; /* bytes written to media, all causes */
	double host_wa;              /* host_bytes_written / user_bytes */
	double device_wa;            /* NAND programs / host page writes */
	double total_wa;             /* host_wa * device_wa */
	uint64_t bytes_read;         /* bytes read from media */
	uint64_t index_bytes;        /* memory held by the index */
} kvf_stats;

/* ---- optimizer configuration ------------------------------------------ */

typedef enum {
	KVF_OPT_ADAM,
	KVF_OPT_ADAMW,
	KVF_OPT_SGD,
	KVF_OPT_ADAGRAD
} kvf_opt_kind;

/* Hyper-parameters of one optimizer; the meanings are torch.optim's. */
typedef struct {
	size_t struct_size;   /* sizeof(kvf_opt_config), set by _init */
	kvf_opt_kind kind;    /* which update rule */
	float lr;             /* learning rate */
	float beta1;          /* Adam/AdamW: first-moment decay */
	float beta2;          /* Adam/AdamW: second-moment decay */
	float eps;            /* Adam/AdamW/AdaGrad: denominator term */
	float weight_decay;   /* L2 (Adam, SGD, AdaGrad) or decoupled (AdamW) */
	float momentum;       /* SGD: momentum factor */
	float dampening;      /* SGD: dampening of the momentum */
	uint32_t nesterov;    /* SGD: 1 = Nesterov momentum */
	float lr_decay;       /* AdaGrad: learning-rate decay */
	float initial_accumulator_value; /* AdaGrad: start of sum of g^2 */
	kvf_dtype out_dtype;  /* dtype written to params_out */
} kvf_opt_config;

/* Fills *c with PyTorch's defaults for kind; use kvf_opt_config_init. */
KVF_API void kvf_opt_config_init_sized(kvf_opt_config *c, kvf_opt_kind kind,
				       size_t struct_size);

/*
 * kvf_opt_config_init - PyTorch's defaults for kind: Adam lr 1e-3, betas
 * (0.9, 0.999), eps 1e-8; AdamW the same with weight_decay 1e-2; SGD lr
 * 1e-3, no momentum; AdaGrad lr 1e-2, eps 1e-10.  out_dtype is f32.
 * Concurrency: any thread; *c is the caller's.
 */
static inline void kvf_opt_config_init(kvf_opt_config *c, kvf_opt_kind kind)
{
	kvf_opt_config_init_sized(c, kind, sizeof(*c));
}

/* A gradient handed to an optimizer step. */
typedef struct {
	kvf_dtype dtype;         /* of values */
	const void *values;      /* dense: n_params values; sparse: n values */
	const uint32_t *indices; /* NULL = dense; else n ascending indices */
	uint64_t n;              /* entries in values (and indices) */
} kvf_grad;

#ifdef __cplusplus
}
#endif
#endif /* KVFLASH_H */
