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
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "kvflash.h"
#include "store_faults.h"
#include "testutil.h"

/* ---- the tests -------------------------------------------------------------- */

TestSuite(store_faults, .timeout = 120);

/* kind at the nth event, n drawn from 1..span, `trials` times */
static void faults_run(const char *name, int kind, int trials, long span,
		       int direct_io)
{
	struct faults *f = malloc(sizeof(*f));

	cr_assert_not_null(f);
	faults_init(f, name);
	f->opts.direct_io = (uint32_t)direct_io;
	fi.align = direct_io == 2 ? 1 : 512;
	faults_first_store(f);
	for (int t = 0; t < trials; t++)
		faults_trial(f, kind, 1 + (long)faults_below(f, (uint64_t)span),
			     0);
	cr_assert(atomic_load(&fi.fired[kind]) > (0),
		  "%s: no fault fired", name);
	faults_done(f, kind);
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
	struct faults *f = malloc(sizeof(*f));

	cr_assert_not_null(f);
	faults_init(f, "eio_read");
	faults_first_store(f);
	for (int t = 0; t < 60; t++) {
		/* one trial in four meets the fault while the open recovers */
		int at_open = t % 4 == 3;

		faults_trial(f, F_EIO_READ,
			     1 + (long)faults_below(f, at_open ? 4 : 50),
			     at_open);
	}
	cr_assert(atomic_load(&fi.fired[F_EIO_READ]) > (0));
	faults_done(f, F_EIO_READ);
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
	struct faults *f = malloc(sizeof(*f));
	unsigned long n = 0;

	cr_assert_not_null(f);
	faults_init(f, "cleaner");
	f->opts.capacity_bytes = 2ull * 12 * 64 * 1024;
	fi.align = 512;
	faults_first_store(f);
	/* the script is random and a fault can end a trial early, so a
	 * run of 45 trials sometimes leaves too little garbage to clean:
	 * trials go on (at most 180) until the cleaner has run */
	for (int t = 0; t < 45 || (f->cleaned == 0 && t < 180); t++)
		faults_trial(f, kinds[t % 3],
			     1 + (long)faults_below(f, t % 3 == 1 ? 60 : 20),
			     0);
	for (int k = 0; k < 3; k++)
		n += atomic_load(&fi.fired[kinds[k]]);
	cr_assert(f->cleaned > (0), "the cleaner never ran");
	printf("cleaner: %lu eio-write, %lu eio-read, %lu torn\n",
	       atomic_load(&fi.fired[F_EIO_WRITE]),
	       atomic_load(&fi.fired[F_EIO_READ]),
	       atomic_load(&fi.fired[F_TORN]));
	atomic_store(&fi.fired[F_NONE], n); /* the summary's total */
	faults_done(f, F_NONE);
	free(f);
}

/* short transfers are completed by the media: the store never notices */
Test(store_faults, short_transfer)
{
	struct faults *f = malloc(sizeof(*f));

	cr_assert_not_null(f);
	faults_init(f, "short_transfer");
	faults_first_store(f);
	for (int t = 0; t < 60; t++) {
		f->opts.direct_io = t % 2 ? 2 : 0;
		fi.align = t % 2 ? 1 : 512;
		faults_trial(f, F_SHORT, 1 + (long)faults_below(f, 40), 0);
	}
	cr_assert(eq(u64, f->calls_failed, 0),
		  "a short transfer failed a call");
	cr_assert(eq(u64, f->fatal_handles, 0));
	cr_assert(atomic_load(&fi.fired[F_SHORT]) > (0));
	faults_done(f, F_SHORT);
	free(f);
}

/* part of a write reaches the media (part of a page, often), the rest
 * fails: buffered I/O tears at any byte, O_DIRECT at 512-byte sectors */
Test(store_faults, torn_write)
{
	struct faults *f = malloc(sizeof(*f));

	cr_assert_not_null(f);
	faults_init(f, "torn_write");
	faults_first_store(f);
	for (int t = 0; t < 60; t++) {
		f->opts.direct_io = t % 2 ? 2 : 0;
		fi.align = t % 2 ? 1 : 512;
		faults_trial(f, F_TORN, 1 + (long)faults_below(f, 16), 0);
	}
	cr_assert(atomic_load(&fi.fired[F_TORN]) > (0));
	faults_done(f, F_TORN);
	free(f);
}

Test(store_faults, fdatasync)
{
	faults_run("fdatasync", F_SYNC, 40, 8, 0);
}

/*
 * fallocate: a create allocates nothing (so a full file system does not
 * refuse it, and its stripes hold no block); trims (punched holes when
 * segments are reclaimed) and allocations that fail with ENOSPC or EIO
 * change nothing the caller sees.
 */
Test(store_faults, enospc_fallocate)
{
	struct faults *f = malloc(sizeof(*f));
	unsigned long trims_before;

	cr_assert_not_null(f);
	faults_init(f, "enospc_fallocate");
	kvf_sysio_set(&inject);
	for (int t = 0; t < 6; t++) {
		char sub[4200];
		kvf_store *st = NULL;
		struct stat sb;
		unsigned long fired0 = atomic_load(&fi.fired[F_FALLOCATE]);

		snprintf(sub, sizeof(sub), "%s/new%d", f->dir, t);
		atomic_store(&fi.falloc_errno, ENOSPC);
		fi_arm(F_FALLOCATE, 1 + t % 2); /* stripe 0 or 1 */
		/* a new store allocates nothing: a full file system does
		 * not stop its creation, and its stripes hold no block */
		cr_assert(eq(int, kvf_open(sub, &f->opts, &st), KVF_OK), "%s",
			  kvf_last_error());
		cr_assert(eq(long, (long)atomic_load(&fi.fired[F_FALLOCATE]),
			     (long)fired0), "creating a store called fallocate");
		for (int s = 0; s < 2; s++) {
			char name[32];

			snprintf(name, sizeof(name), "stripe-%03d.kvf", s);
			cr_assert(eq(int, stat(tmp_path(sub, name), &sb), 0),
				  "no %s", name);
			cr_assert(eq(long, (long)sb.st_blocks, 0L),
				  "a new %s holds %ld blocks", name,
				  (long)sb.st_blocks);
		}
		fi_disarm();
		cr_assert(eq(int, kvf_close(st), KVF_OK));
	}
	trims_before = atomic_load(&fi.fired[F_FALLOCATE]);
	f->opts.trim = 1;
	faults_first_store(f);
	for (int t = 0; t < 40; t++) {
		atomic_store(&fi.falloc_errno, t % 2 ? EIO : ENOSPC);
		faults_trial(f, F_FALLOCATE, 1 + (long)faults_below(f, 6),
			     t % 5 == 4);
	}
	cr_assert(eq(u64, f->fatal_handles, 0),
		  "a failed trim stopped the store");
	printf("enospc_fallocate: %lu refused creates, %lu failed trims\n",
	       trims_before,
	       atomic_load(&fi.fired[F_FALLOCATE]) - trims_before);
	faults_done(f, F_FALLOCATE);
	free(f);
}

/* a slow device: every third transfer and every fdatasync sleeps; nothing
 * fails and nothing waits unboundedly */
Test(store_faults, slow_device)
{
	struct faults *f = malloc(sizeof(*f));
	struct timespec a, b;
	double secs;

	cr_assert_not_null(f);
	faults_init(f, "slow_device");
	faults_first_store(f);
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int t = 0; t < 6; t++)
		faults_trial(f, F_SLOW, 1, 0);
	clock_gettime(CLOCK_MONOTONIC, &b);
	secs = (double)(b.tv_sec - a.tv_sec) +
	       (double)(b.tv_nsec - a.tv_nsec) / 1e9;
	cr_assert(eq(u64, f->calls_failed, 0));
	cr_assert(eq(u64, f->fatal_handles, 0));
	cr_assert(atomic_load(&fi.fired[F_SLOW]) > (0));
	cr_assert(lt(dbl, secs, 60.0), "slow trials took %.1f s", secs);
	printf("slow_device: %.2f s for 6 trials\n", secs);
	faults_done(f, F_SLOW);
	free(f);
}
