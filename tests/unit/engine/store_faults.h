/*
 * store_faults.h - what the files of the store_faults tests share
 * (test_store_faults.c says what they check): the fault kinds, the
 * injector's state and calls (store_faults_inject.c), and the model, its
 * figures and one trial (store_faults_model.c).  The store's shape is the
 * fixture's (store_fixture.h).
 */
#ifndef KVF_TEST_STORE_FAULTS_H
#define KVF_TEST_STORE_FAULTS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "ftl/sysio.h"
#include "kvflash.h"
#include "store_fixture.h"

#define MAX_SEQS 512       /* model entries over one test */
#define MAX_LIVE 6         /* live sequences the script keeps */
#define MAX_TOKENS (8 * G) /* tokens of a layer before it is freed */
#define OPS 60             /* script steps per trial */

/* ---- the fault injector (store_faults_inject.c) -------------------------- */

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
extern const char *const kind_name[F_KINDS];

/* the injector's state: the store's threads read it through the hooks */
struct fault_injector {
	_Atomic int kind;         /* what to inject; F_NONE passes */
	_Atomic long countdown;   /* matching events until the fault */
	_Atomic int falloc_errno; /* F_FALLOCATE: errno to give */
	_Atomic uint64_t rng;     /* cuts and delays */
	size_t align;             /* cuts are multiples of this (O_DIRECT) */
	int torn_fd;              /* F_TORN: the continuation to fail; */
	off_t torn_off;           /* fi_lock guards both */
	_Atomic unsigned long fired[F_KINDS]; /* faults injected, by kind */
	_Atomic unsigned long events;         /* F_SLOW: transfers seen */
	_Atomic unsigned long xfers[2];       /* transfers seen, by op */
};

extern struct fault_injector fi;
/* inject - the real sysio with the hooks below: kvf_sysio_set(&inject) */
extern struct kvf_sysio inject;

static inline uint64_t faults_mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* fired_total - faults injected so far, of every kind but F_SLOW */
long fired_total(void);
/* fi_arm - inject kind at the nth matching event (1 = the next) */
void fi_arm(int kind, long n);
void fi_disarm(void);
ssize_t fault_hook(enum kvf_sysio_op op, int fd, size_t len, off_t off);
int fallocate_hook(int fd, int mode, off_t off, off_t len);
int fdatasync_hook(int fd);

/* ---- the model and one trial (store_faults_model.c) ---------------------- */

struct mseq {
	uint64_t id;
	int live;                /* created and not freed (as far as we know) */
	int live_at_sync;        /* live when the last successful sync ran */
	int parent;              /* model index, -1 for a root */
	uint64_t fork_n[LAYERS]; /* tokens below this are the parent's */
	uint64_t len[LAYERS];    /* tokens appended (as far as we know) */
	uint64_t max[LAYERS];    /* most tokens the store may hold */
	uint64_t synced[LAYERS]; /* tokens the last successful sync covered */
};
struct faults {
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
	unsigned long enospc;       /* calls refused for space */
	unsigned long failed_by[8]; /* by call, as call_names */
	unsigned long events[2];    /* transfers seen: reads, writes */
	unsigned long cleaned;      /* segments the cleaner emptied */
};
struct trial {
	kvf_store *st;
	int fatal; /* a call said KVF_EFATAL */
};
/* faults_init - a test's model, store path and injector, seeded by name */
void faults_init(struct faults *f, const char *name);
/* faults_done - print the test's line of figures, put the real sysio
 * back, free f's buffers and remove its directory */
void faults_done(struct faults *f, int kind);
/* faults_below - the test's generator: uniform in [0, n) */
uint64_t faults_below(struct faults *f, uint64_t n);
/* faults_trial - open with the injecting table, arm kind at the nth
 * event, run the script, close, and check after a reopen with the real
 * sysio.  at_open: arm before the open, so recovery meets the fault. */
void faults_trial(struct faults *f, int kind, long nth, int at_open);
/* faults_first_store - create the store and give it some synced content */
void faults_first_store(struct faults *f);

#endif /* KVF_TEST_STORE_FAULTS_H */
