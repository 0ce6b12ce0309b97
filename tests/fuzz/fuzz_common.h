/*
 * fuzz_common.h - what the fuzz targets share: a small file store made once
 * per process (the template), a fresh copy of it per input (the work
 * store), and the exercise that opens a store whose bytes were fuzzed and
 * reads everything in it.
 *
 * The exercise's contract is the one the issue asks of every parser of
 * stored bytes: whatever the bytes, kvf_open and every call after it return
 * a status that says what happened (KVF_OK, KVF_ECORRUPT, KVF_EVERSION, ...
 * never KVF_EINVAL for damage, never KVF_EFATAL on a read), with a message
 * for every failure; nothing crashes, nothing leaks (the sanitizers check
 * that).  A status outside the contract aborts, so the fuzzer keeps the
 * input as a crasher.
 *
 * The template (2 stripes of 8 segments of 64 KiB, 4 KiB pages, f16,
 * 2 layers, 2 query heads, 1 KV head, head_dim 64) holds:
 *   sequence 1   100 tokens on each layer;
 *   sequence 2   a fork of 1 at 70 tokens, then 30 more per layer;
 *   sequence 3   40 tokens on layer 0, and 40 X rows on layer 1;
 *   sequence 4   filled, synced, then freed;
 *   optimizer "opt", 3000 Adam parameters, two steps.
 * It lives under $KVF_TEST_DIR, else /dev/shm, else $TMPDIR or /tmp, and
 * is removed at exit.  One thread: a fuzz process runs one input at a time.
 */
#ifndef KVF_TESTS_FUZZ_COMMON_H
#define KVF_TESTS_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "kvflash.h"

#define FZ_LAYERS 2
#define FZ_QH 2
#define FZ_KVH 1
#define FZ_DIM 64
#define FZ_PAGE 4096u
#define FZ_SEG (64u * 1024)
#define FZ_STRIPES 2u
#define FZ_CAPACITY (1u << 20)
#define FZ_OPTIM_NAME "opt"
#define FZ_OPTIM_PARAMS 3000u
#define FZ_MAX_SEGS 64u

/* What the template holds, for targets that aim at one of its parts. */
struct fz_template {
	char *dir;               /* the template store */
	char *work;              /* the work copy (fz_work) */
	uint64_t store_id;       /* from kvf_store_info_get */
	uint32_t n_segments;     /* segments of the store */
	uint32_t pages_per_seg;  /* FZ_SEG / FZ_PAGE */
	uint32_t n_sealed;       /* sealed segments, listed in sealed[] */
	uint32_t sealed[FZ_MAX_SEGS];     /* their ids */
	uint32_t data_pages[FZ_MAX_SEGS]; /* their data pages */
	uint64_t seqnos[FZ_MAX_SEGS];     /* their seqnos */
};

/* fz_template - the template, made on the first call (aborts if it cannot
 * be made: no input can be judged without it) */
const struct fz_template *fz_template(void);

/* fz_work - the work store made afresh as a copy of the template; its
 * path (fz_template()->work) */
const char *fz_work(void);

/* fz_write - write len bytes at off of dir/leaf; trunc = cut the file to
 * off + len first.  Aborts on an I/O error (the test, not the store). */
void fz_write(const char *dir, const char *leaf, const void *buf, size_t len,
	      uint64_t off, int trunc);

/* fz_read - up to cap bytes at off of dir/leaf into buf; bytes read */
size_t fz_read(const char *dir, const char *leaf, void *buf, size_t cap,
	       uint64_t off);

/* fz_options - the options the template was made with (read_only 0) */
void fz_options(kvf_options *o);

enum {
	FZ_RO = 1u << 0,    /* open read-only, read and verify everything */
	FZ_RW = 1u << 1,    /* open read-write, read, write a little, sync */
	FZ_REPAIR = 1u << 2 /* kvf_repair first (then the opens) */
};

/* fz_exercise - the exercise above on the store in dir; aborts (so the
 * input becomes a crasher) on a status outside the contract */
void fz_exercise(const char *dir, unsigned what);

/* fz_check - abort unless rc is in the allowed mask (bit rc of
 * allowed; KVF_OK is always allowed) and a failure has a message */
void fz_check(const char *call, kvf_status rc, uint64_t allowed);

/* FZ_ST - the mask bit of one status */
#define FZ_ST(s) (1ull << (unsigned)(s))

#endif /* KVF_TESTS_FUZZ_COMMON_H */
