/*
 * test_store_faults.c - media faults under a real file store, injected
 * through the sysio seam (ftl/sysio.h) and checked against a model.
 *
 * Each test runs seeded trials on one store.  A trial opens the store with
 * an injecting sysio table, arms one fault (EIO on the Nth read or write
 * transfer, the Nth write cut short, the Nth write torn, ENOSPC on the Nth
 * write or fallocate, the Nth fdatasync failing, or a slow device), and
 * runs a seeded script of creates, appends, forks, frees, syncs and
 * read-backs through the public API.  Every call is checked as it returns:
 *  - before any fault fired, every call succeeds;
 *  - a call that fails answers a status of the media or fatal group
 *    (KVF_EIO, KVF_ECORRUPT, KVF_EFATAL), never another;
 *  - a read that succeeds returns exactly the bytes appended; a read that
 *    fails is tried again once the fault has passed and must then succeed
 *    unless the handle went fatal (the store recovered);
 *  - once a call said KVF_EFATAL, the next calls say so too, and
 *    kvf_close returns KVF_EFATAL.
 * Then the store is closed, the real sysio put back and the store reopened:
 * every sequence that was live at the last successful kvf_sync and not
 * freed since is there with at least the tokens that sync covered, no
 * sequence holds a token different from the one appended (tokens past the
 * sync may come back: the contract allows a longer prefix), and no
 * sequence exists that was never made.
 *
 * Token bytes are a function of (sequence, layer, kind, token, head); a
 * fork's tokens below its fork point are its parent's.  The model keeps,
 * per sequence and layer, the tokens appended (len), the most the store may
 * hold (max: an append that failed fatally may have landed), and the tokens
 * the last successful sync covered (synced).
 *
 * Each test prints one line: faults injected, reopens, tokens checked
 * after reopens (sequence-layer-token, every head's K and V compared) and
 * synced tokens lost (always 0, else the test fails).  KVF_SEED reproduces
 * a run's script and fault points (thread timing may still move which
 * transfer a fault hits).
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ftl/sysio.h"
#include "kvflash.h"
#include "testutil.h"

#define LAYERS 2
#define QH 4
#define KVH 2
#define DIM 64 /* f16: 128 bytes a token of a head, G = 32 */
#define ROW (DIM * 2)
#define G 32
#define MAX_SEQS 512         /* model entries over one test */
#define MAX_LIVE 6           /* live sequences the script keeps */
#define MAX_TOKENS (8 * G)   /* tokens of a layer before it is freed */
#define OPS 60               /* script steps per trial */

/* ---- the fault injector --------------------------------------------------- */

enum fault_kind {
	F_NONE,
	F_EIO_WRITE,    /* Nth write transfer: EIO */
	F_EIO_READ,     /* Nth read transfer: EIO */
	F_ENOSPC_WRITE, /* Nth write transfer: ENOSPC */
	F_SHORT,        /* Nth transfer cut short; the rest goes through */
	F_TORN,         /* Nth write cut short, its rest fails with EIO */
	F_FALLOCATE,    /* Nth fallocate (preallocation or trim) fails */
	F_SYNC,         /* Nth fdatasync: EIO */
	F_SLOW,         /* some transfers and syncs sleep 1..4 ms */
	F_KINDS
};

static const char *const kind_name[F_KINDS] = {
	"mixed", "eio-write", "eio-read", "enospc-write", "short", "torn",
	"fallocate", "fdatasync", "slow"
};

static struct kvf_sysio inject;
static pthread_mutex_t fi_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	_Atomic int kind;             /* what to inject; F_NONE passes */
	_Atomic long countdown;       /* matching events until the fault */
	_Atomic int falloc_errno;     /* F_FALLOCATE: errno to give */
	_Atomic uint64_t rng;         /* cuts and delays */
	size_t align;                 /* cuts are multiples of this (O_DIRECT) */
	int torn_fd;                  /* F_TORN: the continuation to fail; */
	off_t torn_off;               /* fi_lock guards both */
	_Atomic unsigned long fired[F_KINDS]; /* faults injected, by kind */
	_Atomic unsigned long events; /* F_SLOW: transfers seen */
	_Atomic unsigned long xfers[2]; /* transfers seen, by op */
} fi;

static uint64_t mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t fi_random(void)
{
	return mix(atomic_fetch_add(&fi.rng, 0x9e3779b97f4a7c15ull));
}

/* due - this matching event is the armed one (exactly one ever is) */
static int due(void)
{
	return atomic_fetch_sub(&fi.countdown, 1) == 1;
}

static void fired(int kind)
{
	atomic_fetch_add(&fi.fired[kind], 1);
}

static long fired_total(void)
{
	long n = 0;

	for (int k = 1; k < F_KINDS; k++)
		if (k != F_SLOW)
			n += (long)atomic_load(&fi.fired[k]);
	return n;
}

/* cut_of - bytes to let through of a len-byte transfer: 1..len-1, a
 * multiple of fi.align, and most often not on a page boundary */
static size_t cut_of(size_t len)
{
	size_t units = len / fi.align;
	size_t c;

	if (units < 2)
		return 0;
	c = (1 + fi_random() % (units - 1)) * fi.align;
	if (c % 4096 == 0 && c + fi.align < len && fi.align < 4096)
		c += fi.align; /* part of a page */
	return c;
}

static ssize_t fault_hook(enum kvf_sysio_op op, int fd, size_t len, off_t off)
{
	int kind = atomic_load(&fi.kind);
	size_t cut;

	atomic_fetch_add(&fi.xfers[op == KVF_SYSIO_WRITE], 1);
	switch (kind) {
	case F_EIO_WRITE:
	case F_ENOSPC_WRITE:
		if (op == KVF_SYSIO_WRITE && due()) {
			fired(kind);
			return kind == F_EIO_WRITE ? -EIO : -ENOSPC;
		}
		break;
	case F_EIO_READ:
		if (op == KVF_SYSIO_READ && due()) {
			fired(kind);
			return -EIO;
		}
		break;
	case F_SHORT:
		if (len >= 2 * fi.align && due() && (cut = cut_of(len)) > 0) {
			fired(kind);
			return (ssize_t)cut;
		}
		break;
	case F_TORN:
		if (op != KVF_SYSIO_WRITE)
			break;
		pthread_mutex_lock(&fi_lock);
		if (fi.torn_fd == fd && fi.torn_off == off) {
			fi.torn_fd = -1;
			pthread_mutex_unlock(&fi_lock);
			return -EIO; /* the rest of the torn write */
		}
		if (len >= 2 * fi.align && due() && (cut = cut_of(len)) > 0) {
			fi.torn_fd = fd;
			fi.torn_off = off + (off_t)cut;
			pthread_mutex_unlock(&fi_lock);
			fired(kind);
			return (ssize_t)cut;
		}
		pthread_mutex_unlock(&fi_lock);
		break;
	case F_SLOW:
		if (atomic_fetch_add(&fi.events, 1) % 3 == 0) {
			struct timespec ts = {
				0, (long)(1 + fi_random() % 4) * 1000000
			};

			fired(kind);
			nanosleep(&ts, NULL);
		}
		break;
	default:
		break;
	}
	return (ssize_t)len;
}

static int fallocate_hook(int fd, int mode, off_t off, off_t len)
{
	if (atomic_load(&fi.kind) == F_FALLOCATE && due()) {
		fired(F_FALLOCATE);
		errno = atomic_load(&fi.falloc_errno);
		return -1;
	}
	return kvf_sysio_real.fallocate(fd, mode, off, len);
}

static int fdatasync_hook(int fd)
{
	int kind = atomic_load(&fi.kind);

	if (kind == F_SYNC && due()) {
		fired(kind);
		errno = EIO;
		return -1;
	}
	if (kind == F_SLOW) {
		struct timespec ts = { 0, 2 * 1000000 };

		nanosleep(&ts, NULL);
	}
	return kvf_sysio_real.fdatasync(fd);
}

/* fi_arm - inject kind at the nth matching event (1 = the next) */
static void fi_arm(int kind, long n)
{
	pthread_mutex_lock(&fi_lock);
	fi.torn_fd = -1;
	pthread_mutex_unlock(&fi_lock);
	atomic_store(&fi.countdown, n);
	atomic_store(&fi.kind, kind);
}

static void fi_disarm(void)
{
	atomic_store(&fi.kind, F_NONE);
}

/* ---- the model -------------------------------------------------------------- */

struct mseq {
	uint64_t id;
	int live;          /* created and not freed (as far as we know) */
	int live_at_sync;  /* live when the last successful sync ran */
	int parent;        /* model index, -1 for a root */
	uint64_t fork_n[LAYERS]; /* tokens below this are the parent's */
	uint64_t len[LAYERS];    /* tokens appended (as far as we know) */
	uint64_t max[LAYERS];    /* most tokens the store may hold */
	uint64_t synced[LAYERS]; /* tokens the last successful sync covered */
};

struct fx {
	const char *name;
	char *dir;
	char path[4096];
	kvf_options opts;
	uint64_t rng;
	struct mseq seqs[MAX_SEQS];
	int n_seqs;
	uint64_t next_id;
	unsigned char *k, *v, *want; /* MAX_TOKENS rows of all heads */
	/* figures */
	unsigned long reopens, tokens_checked, fatal_handles, recovered;
	unsigned long calls_failed;
	unsigned long enospc;         /* calls refused for space */
	unsigned long failed_by[8];   /* by call, as call_names */
	unsigned long events[2];      /* transfers seen: reads, writes */
	unsigned long cleaned;        /* segments the cleaner emptied */
};

static const char *const call_names[8] = {
	"open", "create", "fork", "free", "append", "read", "sync", "close"
};

static void fill_row(unsigned char *dst, const struct fx *f, int i,
		     uint32_t layer, int kind, uint64_t t, uint32_t h)
{
	uint64_t x;

	while (f->seqs[i].parent >= 0 && t < f->seqs[i].fork_n[layer])
		i = f->seqs[i].parent;
	x = mix(mix(f->seqs[i].id) + layer * 0x100000001b3ull +
		(uint64_t)kind * 0x3c6ef372fe94f82bull +
		h * 0x2545f4914f6cdd1dull) +
	    t * 0x9e3779b97f4a7c15ull;
	for (uint32_t j = 0; j < ROW; j += 8) {
		uint64_t w = mix(x + j);

		memcpy(dst + j, &w, 8);
	}
}

static kvf_options faults_opts(void)
{
	kvf_model m = { LAYERS, QH, KVH, DIM, KVF_DTYPE_F16 };
	kvf_options o;

	kvf_options_init(&o, &m);
	o.segment_size = 64 * 1024; /* 16 pages */
	o.capacity_bytes = 2ull * 24 * 64 * 1024; /* small: the cleaner runs */
	o.n_stripes = 2;
	o.n_threads = 1;
	return o;
}

static void fx_init(struct fx *f, const char *name)
{
	size_t cap = (size_t)MAX_TOKENS * KVH * ROW;

	memset(f, 0, sizeof(*f));
	f->name = name;
	f->dir = tmpdir_make(name);
	cr_assert_not_null(f->dir);
	snprintf(f->path, sizeof(f->path), "%s", tmp_path(f->dir, "s"));
	f->opts = faults_opts();
	f->rng = rng_seed(name);
	atomic_store(&fi.rng, f->rng);
	f->next_id = 100;
	f->k = malloc(cap);
	f->v = malloc(cap);
	f->want = malloc(ROW);
	cr_assert(f->k && f->v && f->want);
	inject = kvf_sysio_real;
	inject.fault = fault_hook;
	inject.fallocate = fallocate_hook;
	inject.fdatasync = fdatasync_hook;
	fi.align = 1;
	for (int k = 0; k < F_KINDS; k++)
		atomic_store(&fi.fired[k], 0);
	atomic_store(&fi.xfers[0], 0);
	atomic_store(&fi.xfers[1], 0);
	fi_disarm();
}

static void fx_done(struct fx *f, int kind)
{
	char by[256];
	size_t at = 0;

	by[0] = '\0';
	for (int c = 0; c < 8; c++)
		if (f->failed_by[c] && at < sizeof(by))
			at += (size_t)snprintf(by + at, sizeof(by) - at, " %s %lu",
					       call_names[c], f->failed_by[c]);
	printf("store_faults %s: faults %lu (%s), reopens %lu, tokens checked %lu, "
	       "lost 0; fatal handles %lu, failed calls %lu (%s), recovered reads %lu, "
	       "transfers %lu read %lu written, segments cleaned %lu, "
	       "refused for space %lu\n",
	       f->name, atomic_load(&fi.fired[kind]), kind_name[kind],
	       f->reopens, f->tokens_checked, f->fatal_handles,
	       f->calls_failed, at ? by + 1 : "none", f->recovered,
	       atomic_load(&fi.xfers[0]), atomic_load(&fi.xfers[1]), f->cleaned,
	       f->enospc);
	fflush(stdout);
	kvf_sysio_set(NULL);
	free(f->k);
	free(f->v);
	free(f->want);
	tmpdir_remove(f->dir);
}

static uint64_t below(struct fx *f, uint64_t n)
{
	return rng_below(&f->rng, n);
}

/* ---- checks ----------------------------------------------------------------- */

/* rows_match - k and v hold tokens [t0, t1) of head h of model seq i */
static int rows_match(struct fx *f, int i, uint32_t layer, uint32_t h,
		      uint64_t t0, uint64_t t1, uint64_t *bad)
{
	for (uint64_t t = t0; t < t1; t++) {
		fill_row(f->want, f, i, layer, 0, t, h);
		if (memcmp(f->k + (t - t0) * ROW, f->want, ROW) != 0)
			goto wrong;
		fill_row(f->want, f, i, layer, 1, t, h);
		if (memcmp(f->v + (t - t0) * ROW, f->want, ROW) != 0)
			goto wrong;
	}
	return 1;
wrong:
	return *bad = t0, 0; /* caller names the range */
}

static int is_media_status(kvf_status rc)
{
	return rc == KVF_EIO || rc == KVF_ECORRUPT || rc == KVF_EFATAL;
}

/* failed_ok - a call failed with rc: allowed only after a fault fired
 * and only with a media or fatal status */
static void failed_ok(struct fx *f, const char *what, kvf_status rc)
{
	f->calls_failed++;
	for (int c = 0; c < 8; c++)
		if (strstr(what, call_names[c]))
			f->failed_by[c]++;
	cr_assert(gt(i64, fired_total(), 0),
		  "%s failed with no fault injected: %s (%s)", what,
		  kvf_strerror(rc), kvf_last_error());
	cr_assert(is_media_status(rc), "%s failed with %s: %s", what,
		  kvf_strerror(rc), kvf_last_error());
}

/*
 * check_read - read [t0, t1) of one head of model seq i and compare.
 * Returns the status; wrong bytes fail the test at once.
 */
static kvf_status check_read(struct fx *f, kvf_store *st, int i,
			     uint32_t layer, uint32_t h, uint64_t t0,
			     uint64_t t1)
{
	kvf_status rc = kvf_read(st, f->seqs[i].id, layer, h, t0, t1, f->k,
				 f->v);
	uint64_t bad;

	if (rc == KVF_OK)
		cr_assert(rows_match(f, i, layer, h, t0, t1, &bad),
			  "%s: sequence %" PRIu64 " layer %u head %u tokens [%"
			  PRIu64 ", %" PRIu64 ") read back wrong",
			  f->name, f->seqs[i].id, layer, h, t0, t1);
	return rc;
}

/* ---- reopen and compare ------------------------------------------------------ */

static int model_find(const struct fx *f, uint64_t id)
{
	for (int i = 0; i < f->n_seqs; i++)
		if (f->seqs[i].id == id)
			return i;
	return -1;
}

/*
 * verify_reopened - the store (opened with the real sysio) against the
 * model; then the model takes what the store holds as its lengths.
 */
static void verify_reopened(struct fx *f, kvf_store *st)
{
	uint64_t ids[MAX_SEQS];
	size_t n_ids = 0;

	cr_assert(eq(int, kvf_seq_list(st, ids, MAX_SEQS, &n_ids), KVF_OK),
		  "%s", kvf_last_error());
	cr_assert(le(u64, n_ids, MAX_SEQS));
	for (size_t j = 0; j < n_ids; j++)
		cr_assert(ge(int, model_find(f, ids[j]), 0),
			  "%s: sequence %" PRIu64 " was never made", f->name,
			  ids[j]);
	for (int i = 0; i < f->n_seqs; i++) {
		struct mseq *s = &f->seqs[i];
		uint64_t n;
		kvf_status rc = kvf_seq_len(st, s->id, 0, &n);

		if (rc == KVF_ENOENT) {
			cr_assert(eq(int, s->live && s->live_at_sync, 0),
				  "%s: sequence %" PRIu64 " synced and never freed is gone (lost %" PRIu64 " synced tokens of layer 0)",
				  f->name, s->id, s->synced[0]);
			s->live = 0;
			s->live_at_sync = 0;
			continue;
		}
		cr_assert(eq(int, rc, KVF_OK), "%s", kvf_last_error());
		for (uint32_t l = 0; l < LAYERS; l++) {
			cr_assert(eq(int, kvf_seq_len(st, s->id, l, &n), KVF_OK));
			if (s->live_at_sync)
				cr_assert(ge(u64, n, s->synced[l]),
					  "%s: sequence %" PRIu64 " layer %u has %" PRIu64 " tokens, the last sync covered %" PRIu64 " (lost %" PRIu64 ")",
					  f->name, s->id, l, n, s->synced[l],
					  s->synced[l] - n);
			cr_assert(le(u64, n, s->max[l]),
				  "%s: sequence %" PRIu64 " layer %u has %" PRIu64 " tokens, only %" PRIu64 " were appended",
				  f->name, s->id, l, n, s->max[l]);
			for (uint32_t h = 0; h < KVH; h++)
				for (uint64_t t0 = 0; t0 < n; t0 += MAX_TOKENS) {
					uint64_t t1 = t0 + MAX_TOKENS < n ? t0 + MAX_TOKENS : n;

					rc = check_read(f, st, i, l, h, t0, t1);
					cr_assert(eq(int, rc, KVF_OK),
						  "%s: after reopen, sequence %" PRIu64 " layer %u head %u: %s",
						  f->name, s->id, l, h,
						  kvf_last_error());
				}
			f->tokens_checked += n;
			if (s->parent >= 0 && s->fork_n[l] > n)
				s->fork_n[l] = n; /* its own tokens start here */
			s->len[l] = n;
			s->max[l] = n;
		}
		s->live = 1;
	}
}

static kvf_store *open_real(struct fx *f)
{
	kvf_store *st = NULL;

	kvf_sysio_set(NULL);
	cr_assert(eq(int, kvf_open(f->path, &f->opts, &st), KVF_OK),
		  "%s: reopen with the real sysio: %s", f->name,
		  kvf_last_error());
	return st;
}

/* reopen_check - reopen with the real sysio, verify, close */
static void reopen_check(struct fx *f)
{
	kvf_store *st = open_real(f);

	f->reopens++;
	verify_reopened(f, st);
	cr_assert(eq(int, kvf_close(st), KVF_OK), "%s", kvf_last_error());
}

/* ---- the script --------------------------------------------------------------- */

struct trial {
	kvf_store *st;
	int fatal;  /* a call said KVF_EFATAL */
};

/* note - a call returned rc; returns 1 if the script may go on */
static int note(struct fx *f, struct trial *tr, const char *what,
		kvf_status rc)
{
	if (rc == KVF_OK) {
		cr_assert(eq(int, tr->fatal, 0), "%s: %s succeeded after KVF_EFATAL",
			  f->name, what);
		return 1;
	}
	if (rc == KVF_ENOSPC && !tr->fatal) {
		f->enospc++; /* the small store is full: the script frees */
		return 1;
	}
	failed_ok(f, what, rc);
	if (rc == KVF_EFATAL) {
		cr_assert(ne(ptr, strstr(kvf_last_error(), "close and reopen"), NULL),
			  "%s: fatal message: %s", f->name, kvf_last_error());
		tr->fatal = 1;
	} else {
		cr_assert(eq(int, tr->fatal, 0), "%s: %s said %s after KVF_EFATAL",
			  f->name, what, kvf_strerror(rc));
	}
	return !tr->fatal;
}

static int pick_live(struct fx *f)
{
	int live[MAX_SEQS], n = 0;

	for (int i = 0; i < f->n_seqs; i++)
		if (f->seqs[i].live)
			live[n++] = i;
	return n ? live[below(f, (uint64_t)n)] : -1;
}

static int n_live(const struct fx *f)
{
	int n = 0;

	for (int i = 0; i < f->n_seqs; i++)
		n += f->seqs[i].live;
	return n;
}

static struct mseq *new_seq(struct fx *f, int parent, uint64_t n)
{
	struct mseq *s;

	cr_assert(lt(int, f->n_seqs, MAX_SEQS), "model full");
	s = &f->seqs[f->n_seqs++];
	memset(s, 0, sizeof(*s));
	s->id = f->next_id++;
	s->parent = parent;
	for (uint32_t l = 0; l < LAYERS; l++)
		s->fork_n[l] = s->len[l] = s->max[l] = n;
	return s;
}

static void op_create(struct fx *f, struct trial *tr)
{
	struct mseq *s = new_seq(f, -1, 0);
	kvf_status rc = kvf_seq_create(tr->st, s->id);

	s->live = rc == KVF_OK;
	note(f, tr, "kvf_seq_create", rc);
}

static void op_fork(struct fx *f, struct trial *tr)
{
	int p = pick_live(f);
	uint64_t n = UINT64_MAX;
	struct mseq *s;
	kvf_status rc;

	if (p < 0)
		return;
	for (uint32_t l = 0; l < LAYERS; l++)
		if (f->seqs[p].len[l] < n)
			n = f->seqs[p].len[l];
	n = below(f, n + 1);
	s = new_seq(f, p, n);
	rc = kvf_seq_fork(tr->st, f->seqs[p].id, s->id, n);
	s->live = rc == KVF_OK;
	note(f, tr, "kvf_seq_fork", rc);
}

static void op_free(struct fx *f, struct trial *tr)
{
	int i = pick_live(f);

	if (i < 0)
		return;
	f->seqs[i].live = 0; /* freed or not: either is allowed on failure */
	note(f, tr, "kvf_seq_free", kvf_seq_free(tr->st, f->seqs[i].id));
}

static void op_append(struct fx *f, struct trial *tr)
{
	int i = pick_live(f);
	uint32_t layer, n;
	struct mseq *s;
	uint64_t t0;
	kvf_status rc;

	if (i < 0)
		return;
	s = &f->seqs[i];
	layer = (uint32_t)below(f, LAYERS);
	t0 = s->len[layer];
	if (t0 >= MAX_TOKENS) {
		op_free(f, tr);
		return;
	}
	n = 1 + (uint32_t)below(f, below(f, 4) ? 5 : 2 * G);
	if (t0 + n > MAX_TOKENS)
		n = (uint32_t)(MAX_TOKENS - t0);
	for (uint32_t j = 0; j < n; j++)
		for (uint32_t h = 0; h < KVH; h++) {
			fill_row(f->k + ((size_t)j * KVH + h) * ROW, f, i, layer,
				 0, t0 + j, h);
			fill_row(f->v + ((size_t)j * KVH + h) * ROW, f, i, layer,
				 1, t0 + j, h);
		}
	rc = kvf_append(tr->st, s->id, layer, n, f->k, f->v);
	if (rc == KVF_OK) {
		s->len[layer] += n;
		if (s->max[layer] < s->len[layer])
			s->max[layer] = s->len[layer];
	} else if (s->max[layer] < t0 + n) {
		s->max[layer] = t0 + n; /* may have landed before it failed */
	}
	if (note(f, tr, "kvf_append", rc) && rc == KVF_ENOSPC)
		op_free(f, tr);
}

static void op_read(struct fx *f, struct trial *tr)
{
	int i = pick_live(f);
	uint32_t layer, h;
	uint64_t len, t0, t1;
	kvf_status rc;

	if (i < 0)
		return;
	layer = (uint32_t)below(f, LAYERS);
	h = (uint32_t)below(f, KVH);
	len = f->seqs[i].len[layer];
	if (len == 0)
		return;
	t0 = below(f, len);
	t1 = t0 + 1 + below(f, len - t0);
	rc = check_read(f, tr->st, i, layer, h, t0, t1);
	if (rc == KVF_OK || !note(f, tr, "kvf_read", rc))
		return;
	/* a media error that did not stop the store: the read works again
	 * once the fault has passed */
	fi_disarm();
	rc = check_read(f, tr->st, i, layer, h, t0, t1);
	cr_assert(rc == KVF_OK || rc == KVF_EFATAL,
		  "%s: a read failed again once the fault had passed: %s",
		  f->name, kvf_last_error());
	if (rc == KVF_OK)
		f->recovered++;
	note(f, tr, "kvf_read (again)", rc);
}

static void op_sync(struct fx *f, struct trial *tr)
{
	kvf_status rc = kvf_sync(tr->st);

	if (rc == KVF_OK) {
		for (int i = 0; i < f->n_seqs; i++) {
			struct mseq *s = &f->seqs[i];

			s->live_at_sync = s->live;
			for (uint32_t l = 0; l < LAYERS; l++)
				s->synced[l] = s->live ? s->len[l] : 0;
		}
	}
	note(f, tr, "kvf_sync", rc);
}

/* run_script - OPS seeded steps, stopping once the handle is fatal */
static void run_script(struct fx *f, struct trial *tr)
{
	for (int op = 0; op < OPS && !tr->fatal; op++) {
		uint64_t r = below(f, 100);

		if (n_live(f) < 2 || (r < 6 && n_live(f) < MAX_LIVE))
			op_create(f, tr);
		else if (r < 12 && n_live(f) < MAX_LIVE)
			op_fork(f, tr);
		else if (r < 16)
			op_free(f, tr);
		else if (r < 24)
			op_sync(f, tr);
		else if (r < 60)
			op_append(f, tr);
		else
			op_read(f, tr);
	}
}

/* close_trial - a fatal handle says so at close, and keeps saying it */
static void close_trial(struct fx *f, struct trial *tr)
{
	kvf_stats stats = { .struct_size = sizeof(stats) };
	kvf_status rc;

	cr_assert(eq(int, kvf_stats_get(tr->st, &stats), KVF_OK));
	f->cleaned += stats.segments_cleaned;
	if (tr->fatal) {
		uint64_t n;

		cr_assert(eq(int, kvf_sync(tr->st), KVF_EFATAL));
		cr_assert(eq(int, kvf_seq_create(tr->st, f->next_id++), KVF_EFATAL));
		cr_assert(eq(int, kvf_seq_x_len(tr->st, f->seqs[0].id, 0, &n),
			     KVF_EFATAL));
	}
	rc = kvf_close(tr->st);
	tr->st = NULL;
	if (tr->fatal)
		cr_assert(eq(int, rc, KVF_EFATAL),
			  "%s: kvf_close of a fatal handle said %s", f->name,
			  kvf_strerror(rc));
	if (rc == KVF_EFATAL) {
		f->fatal_handles++;
		cr_assert(gt(i64, fired_total(), 0), "fatal with no fault");
		return;
	}
	if (rc == KVF_ENOSPC) {
		/* the final sync found the small store full (kvf_close
		 * returns its status): nothing more than the last sync is
		 * promised */
		f->enospc++;
		return;
	}
	if (rc != KVF_OK) {
		failed_ok(f, "kvf_close", rc);
		return;
	}
	/* a close that succeeded synced everything */
	for (int i = 0; i < f->n_seqs; i++) {
		struct mseq *s = &f->seqs[i];

		s->live_at_sync = s->live;
		for (uint32_t l = 0; l < LAYERS; l++)
			s->synced[l] = s->live ? s->len[l] : 0;
	}
}

/*
 * trial - open with the injecting table, arm kind at the nth event, run
 * the script, close, and check after a reopen with the real sysio.
 * `at_open`: arm before the open, so recovery meets the fault.
 */
static void trial(struct fx *f, int kind, long nth, int at_open)
{
	struct trial tr = { 0 };
	kvf_status rc;

	fi_disarm();
	kvf_sysio_set(&inject);
	if (at_open)
		fi_arm(kind, nth);
	rc = kvf_open(f->path, &f->opts, &tr.st);
	if (rc != KVF_OK) {
		/* the fault hit the open: refused cleanly, nothing changed */
		fi_disarm();
		failed_ok(f, "kvf_open", rc);
		cr_assert_null(tr.st);
		reopen_check(f);
		return;
	}
	if (!at_open)
		fi_arm(kind, nth);
	run_script(f, &tr);
	close_trial(f, &tr);
	fi_disarm();
	reopen_check(f);
}

/* first_store - create the store and give it some synced content */
static void first_store(struct fx *f)
{
	struct trial tr = { 0 };

	tr.st = open_real(f);
	run_script(f, &tr);
	close_trial(f, &tr);
	reopen_check(f);
}

/* ---- the tests -------------------------------------------------------------- */

TestSuite(store_faults, .timeout = 120);

/* kind at the nth event, n drawn from 1..span, `trials` times */
static void faults_run(const char *name, int kind, int trials, long span,
		       int direct_io)
{
	struct fx *f = malloc(sizeof(*f));

	cr_assert_not_null(f);
	fx_init(f, name);
	f->opts.direct_io = (uint32_t)direct_io;
	fi.align = direct_io == 2 ? 1 : 512;
	first_store(f);
	for (int t = 0; t < trials; t++)
		trial(f, kind, 1 + (long)below(f, (uint64_t)span), 0);
	cr_assert(gt(u64, atomic_load(&fi.fired[kind]), 0),
		  "%s: no fault fired", name);
	fx_done(f, kind);
	free(f);
}

Test(store_faults, eio_write)
{
	faults_run("eio_write", F_EIO_WRITE, 60, 16, 0);
}

Test(store_faults, enospc_write)
{
	faults_run("enospc_write", F_ENOSPC_WRITE, 40, 16, 0);
}

Test(store_faults, eio_read)
{
	struct fx *f = malloc(sizeof(*f));

	cr_assert_not_null(f);
	fx_init(f, "eio_read");
	first_store(f);
	for (int t = 0; t < 60; t++) {
		/* one trial in four meets the fault while the open recovers */
		int at_open = t % 4 == 3;

		trial(f, F_EIO_READ, 1 + (long)below(f, at_open ? 4 : 50),
		      at_open);
	}
	cr_assert(gt(u64, atomic_load(&fi.fired[F_EIO_READ]), 0));
	fx_done(f, F_EIO_READ);
	free(f);
}

/*
 * The cleaner under faults: a store too small for what the script keeps
 * (appends are refused for space and the script frees), so the cleaner
 * copies live pages while reads and writes fail under it.
 */
Test(store_faults, cleaner)
{
	static const int kinds[3] = { F_EIO_WRITE, F_EIO_READ, F_TORN };
	struct fx *f = malloc(sizeof(*f));
	unsigned long n = 0;

	cr_assert_not_null(f);
	fx_init(f, "cleaner");
	f->opts.capacity_bytes = 2ull * 12 * 64 * 1024;
	fi.align = 512;
	first_store(f);
	for (int t = 0; t < 45; t++)
		trial(f, kinds[t % 3], 1 + (long)below(f, t % 3 == 1 ? 60 : 20), 0);
	for (int k = 0; k < 3; k++)
		n += atomic_load(&fi.fired[kinds[k]]);
	cr_assert(gt(u64, f->cleaned, 0), "the cleaner never ran");
	printf("cleaner: %lu eio-write, %lu eio-read, %lu torn\n",
	       atomic_load(&fi.fired[F_EIO_WRITE]),
	       atomic_load(&fi.fired[F_EIO_READ]), atomic_load(&fi.fired[F_TORN]));
	atomic_store(&fi.fired[F_NONE], n); /* the summary's total */
	fx_done(f, F_NONE);
	free(f);
}

/* short transfers are completed by the media: the store never notices */
Test(store_faults, short_transfer)
{
	struct fx *f = malloc(sizeof(*f));

	cr_assert_not_null(f);
	fx_init(f, "short_transfer");
	first_store(f);
	for (int t = 0; t < 60; t++) {
		f->opts.direct_io = t % 2 ? 2 : 0;
		fi.align = t % 2 ? 1 : 512;
		trial(f, F_SHORT, 1 + (long)below(f, 40), 0);
	}
	cr_assert(eq(u64, f->calls_failed, 0), "a short transfer failed a call");
	cr_assert(eq(u64, f->fatal_handles, 0));
	cr_assert(gt(u64, atomic_load(&fi.fired[F_SHORT]), 0));
	fx_done(f, F_SHORT);
	free(f);
}

/* part of a write reaches the media (part of a page, often), the rest
 * fails: buffered I/O tears at any byte, O_DIRECT at 512-byte sectors */
Test(store_faults, torn_write)
{
	struct fx *f = malloc(sizeof(*f));

	cr_assert_not_null(f);
	fx_init(f, "torn_write");
	first_store(f);
	for (int t = 0; t < 60; t++) {
		f->opts.direct_io = t % 2 ? 2 : 0;
		fi.align = t % 2 ? 1 : 512;
		trial(f, F_TORN, 1 + (long)below(f, 16), 0);
	}
	cr_assert(gt(u64, atomic_load(&fi.fired[F_TORN]), 0));
	fx_done(f, F_TORN);
	free(f);
}

Test(store_faults, fdatasync)
{
	faults_run("fdatasync", F_SYNC, 40, 8, 0);
}

/*
 * fallocate: a create whose preallocation finds no space is refused with
 * KVF_ENOSPC and leaves nothing; trims (trim = 1 punches holes when
 * segments are reused) that fail with ENOSPC or EIO change nothing the
 * caller sees.
 */
Test(store_faults, enospc_fallocate)
{
	struct fx *f = malloc(sizeof(*f));
	unsigned long trims_before;

	cr_assert_not_null(f);
	fx_init(f, "enospc_fallocate");
	kvf_sysio_set(&inject);
	for (int t = 0; t < 6; t++) {
		char sub[4200];
		kvf_store *st = NULL;
		struct stat sb;

		snprintf(sub, sizeof(sub), "%s/new%d", f->dir, t);
		atomic_store(&fi.falloc_errno, ENOSPC);
		fi_arm(F_FALLOCATE, 1 + t % 2); /* stripe 0 or 1 */
		cr_assert(eq(int, kvf_open(sub, &f->opts, &st), KVF_ENOSPC),
			  "%s", kvf_last_error());
		cr_assert_null(st);
		cr_assert(ne(ptr, strstr(kvf_last_error(), "no space"), NULL),
			  "%s", kvf_last_error());
		cr_assert(ne(int, stat(tmp_path(sub, "stripe0"), &sb), 0),
			  "a refused create left stripe0");
		cr_assert(ne(int, stat(tmp_path(sub, "stripe1"), &sb), 0),
			  "a refused create left stripe1");
		fi_disarm();
		/* the same call then creates it */
		cr_assert(eq(int, kvf_open(sub, &f->opts, &st), KVF_OK), "%s",
			  kvf_last_error());
		cr_assert(eq(int, kvf_close(st), KVF_OK));
	}
	trims_before = atomic_load(&fi.fired[F_FALLOCATE]);
	f->opts.trim = 1;
	first_store(f);
	for (int t = 0; t < 40; t++) {
		atomic_store(&fi.falloc_errno, t % 2 ? EIO : ENOSPC);
		trial(f, F_FALLOCATE, 1 + (long)below(f, 6), t % 5 == 4);
	}
	cr_assert(eq(u64, f->fatal_handles, 0), "a failed trim stopped the store");
	printf("enospc_fallocate: %lu refused creates, %lu failed trims\n",
	       trims_before, atomic_load(&fi.fired[F_FALLOCATE]) - trims_before);
	fx_done(f, F_FALLOCATE);
	free(f);
}

/* a slow device: every third transfer and every fdatasync sleeps; nothing
 * fails and nothing waits unboundedly */
Test(store_faults, slow_device)
{
	struct fx *f = malloc(sizeof(*f));
	struct timespec a, b;
	double secs;

	cr_assert_not_null(f);
	fx_init(f, "slow_device");
	first_store(f);
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int t = 0; t < 6; t++)
		trial(f, F_SLOW, 1, 0);
	clock_gettime(CLOCK_MONOTONIC, &b);
	secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
	cr_assert(eq(u64, f->calls_failed, 0));
	cr_assert(eq(u64, f->fatal_handles, 0));
	cr_assert(gt(u64, atomic_load(&fi.fired[F_SLOW]), 0));
	cr_assert(lt(dbl, secs, 60.0), "slow trials took %.1f s", secs);
	printf("slow_device: %.2f s for 6 trials\n", secs);
	fx_done(f, F_SLOW);
	free(f);
}
