/*
 * test_store_crash.c - crash tests: a writer process killed at seeded
 * points, and a store whose catalog commit fails.
 *
 * Kill tests.  Each round forks a writer child that opens the store and
 * runs a seeded script (append, append_x, sync, read-back checks,
 * create/fork/free, and steps of an optimizer kept in the store) against a
 * copy of the reference it inherited, in a store small enough that the
 * cleaner runs.  Creations register token ids of their own, so a free
 * leaves a cached prefix behind (docs/prefix.md): the cleaner, recovery and
 * the checks run with cached prefixes in the store, which the model never
 * sees (crash_rounds.c, create_with_ids).  Around every kvf_sync it tells the parent through a pipe:
 * "sync N begins", "sync N done" (and "step N begins", "step N done"
 * around optimizer steps, each durable on return).  The child is
 * SIGKILLed at a seeded moment: by the parent after a seeded delay, or by
 * itself before a seeded operation.
 * The parent then replays the same script on its own reference (the
 * script depends only on the seed and the reference) to get the state of
 * the last sync it was told about, and forks a checker child that reopens
 * the store and compares every sequence, length and token with it.
 *
 * A sync may have completed right before the kill without the parent
 * hearing "done": when a "begins" has no "done", the state of that sync
 * is accepted too (and only those two).  Nothing else is: no sequence,
 * token or X row past the accepted state may be visible.
 *
 * The parent never opens a store itself (the checker does), so no RocksDB
 * thread exists in the process that forks.
 *
 * Power cuts (test_store_power.c) run the same rounds and cut the power
 * under the store before the check.  The model, the checks and the rounds
 * are in crash_model.c and crash_rounds.c.
 *
 * KVF_CRASH_TRIALS and KVF_POWER_TRIALS set the rounds of a long run
 * (tests/crash/crash-loop.sh).
 *
 * kvf_seq_create, kvf_seq_fork and kvf_seq_free commit to the catalog at
 * once, so a kill before the next sync may leave them visible (and a
 * forked child without its partial tail group): more than the synced
 * state, which the contract allows but these exact checks do not.  The
 * script therefore runs those calls only right after a sync, each followed
 * by its own sync inside one "begins"/"done" pair, and forks only at group
 * boundaries.  KVF_CRASH_META_ANYWHERE=1 lifts that.
 *
 * Fatal test.  catalog_fail_commits (engine/base/catalog.h, reached through
 * engine/lifecycle/store.h) makes the next catalog commit fail inside each call that
 * commits; afterwards every call on the handle answers KVF_EFATAL until it
 * is closed, and the reopened store holds the last sync's state.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <string.h>

#include "crash_model.h"
#include "engine/base/catalog.h"
#include "engine/base/store_state.h"
#include "kvflash.h"
#include "powercut.h"
#include "testutil.h"

TestSuite(store_crash, .timeout = 300);

Test(store_crash, killed_writer)
{
	crash_rounds("store_crash/killed_writer",
		     trials("KVF_CRASH_TRIALS", SEEDS * ROUNDS), 0,
		     KVF_MEDIA_FILE);
}

Test(store_crash, flash_killed_writer)
{
	crash_rounds("store_crash/flash_killed_writer",
		     trials("KVF_CRASH_TRIALS", 60), 0, KVF_MEDIA_FLASH);
}

/* Killed writers of stores with a codec, every codec in turn (see
 * store_power's codec_cuts) */
Test(store_crash, codec_killed_writer)
{
	static const kvf_codec codecs[] = { KVF_CODEC_FP8, KVF_CODEC_INT8,
					    KVF_CODEC_INT4 };

	for (size_t i = 0; i < 3; i++) {
		crash_codec_set(codecs[i]);
		crash_rounds(kvf_codec_name(codecs[i]),
			     trials("KVF_CRASH_TRIALS", 30), 0, KVF_MEDIA_FILE);
	}
}

/* ---- a failed catalog commit -------------------------------------------- */

/* append_model - append n tokens to (seq i, layer) of the store and of m */
static kvf_status append_model(kvf_store *st, struct model *m, uint32_t i,
			       uint32_t layer, uint32_t n)
{
	struct track *t = &m->seqs[i].kv[layer];
	uint64_t tag = ++m->next_tag;
	kvf_status rc;

	for (uint32_t j = 0; j < n; j++)
		for (uint32_t h = 0; h < KVH; h++) {
			size_t off = ((size_t)j * KVH + h) * ROW;

			fill_row(buf_a + off, tag, layer, 0, t->len + j, h);
			fill_row(buf_b + off, tag, layer, 1, t->len + j, h);
		}
	rc = kvf_append(st, seq_id(i), layer, n, buf_a, buf_b);
	if (rc == KVF_OK)
		track_push(t, n, tag);
	return rc;
}

static kvf_status append_x_model(kvf_store *st, struct model *m, uint32_t i,
				 uint32_t layer, uint32_t n)
{
	struct track *t = &m->seqs[i].x[layer];
	uint64_t tag = ++m->next_tag;
	kvf_status rc;

	for (uint32_t j = 0; j < n; j++)
		for (uint32_t q = 0; q < QH; q++)
			fill_row(buf_a + ((size_t)j * QH + q) * ROW, tag, layer,
				 2, t->len + j, q);
	rc = kvf_append_x(st, seq_id(i), layer, n, buf_a);
	if (rc == KVF_OK)
		track_push(t, n, tag);
	return rc;
}


/* every call on a fatal handle answers KVF_EFATAL and says to reopen */
#define FATAL(call)                                                           \
	do {                                                                  \
		kvf_status rc_ = (call);                                      \
                                                                              \
		cr_assert(eq(int, rc_, KVF_EFATAL), "%s gave %d (%s)", #call, \
			  rc_, kvf_last_error());                             \
		cr_assert(strstr(kvf_last_error(), "close and reopen") !=     \
				  NULL,                                       \
			  "%s: %s", #call, kvf_last_error());                 \
	} while (0)

enum fatal_at {
	AT_CREATE,
	AT_FORK,
	AT_FREE,
	AT_SYNC,
	AT_APPEND
};

/*
 * fatal_case - sync a state, change more without syncing, make the next
 * catalog commit fail inside the call `at`; then every call is refused
 * until close, and the reopened store holds the synced state.
 */
static void fatal_case(enum fatal_at at)
{
	char *dir = tmpdir_make("fatal");
	char *path = strdup(tmp_path(dir, "s"));
	kvf_options o = crash_opts();
	struct model m = { 0 }, synced = { 0 };
	kvf_store *st = NULL;
	char why[256];
	uint64_t n;
	kvf_status rc;

	bufs_alloc();
	OK(kvf_open(path, &o, &st));
	OK(kvf_seq_create(st, seq_id(0)));
	m.seqs[0].live = 1;
	OK(append_model(st, &m, 0, 0, 100));
	OK(append_model(st, &m, 0, 1, 3 * G));
	OK(append_x_model(st, &m, 0, 0, 40));
	OK(kvf_seq_create(st, seq_id(1)));
	m.seqs[1].live = 1;
	OK(append_model(st, &m, 1, 0, 7));
	OK(kvf_sync(st));
	model_copy(&synced, &m);
	/* unsynced: in group buffers, and sealed pages in open segments */
	OK(append_model(st, &m, 0, 0, 2 * G + 5));
	OK(append_model(st, &m, 1, 1, G));

	catalog_fail_commits(st->cat, 1);
	switch (at) {
	case AT_CREATE:
		rc = kvf_seq_create(st, seq_id(2));
		break;
	case AT_FORK:
		rc = kvf_seq_fork(st, seq_id(0), seq_id(2), 50);
		break;
	case AT_FREE:
		rc = kvf_seq_free(st, seq_id(1));
		break;
	case AT_SYNC:
		rc = kvf_sync(st);
		break;
	default:
		/* enough pages to fill and flush open segments; a segment
		 * may be committed after the call returns (by a writer
		 * thread), so its failure may show only at the sync */
		rc = append_model(st, &m, 0, 1, 20 * G);
		if (rc == KVF_OK)
			rc = kvf_sync(st);
		break;
	}
	cr_assert(eq(int, rc, KVF_EFATAL), "%s", kvf_last_error());
	cr_assert(strstr(kvf_last_error(), "injected failure") != NULL &&
			  strstr(kvf_last_error(),
				 "now unusable: close and reopen it") != NULL,
		  "%s", kvf_last_error());

	FATAL(kvf_seq_create(st, seq_id(3)));
	FATAL(kvf_seq_fork(st, seq_id(0), seq_id(3), 1));
	FATAL(kvf_seq_free(st, seq_id(0)));
	FATAL(kvf_seq_len(st, seq_id(0), 0, &n));
	FATAL(append_model(st, &m, 0, 0, 1));
	FATAL(append_model(st, &m, 0, 0, 3 * G));
	FATAL(append_x_model(st, &m, 0, 0, 1));
	FATAL(kvf_read(st, seq_id(0), 0, 0, 0, 1, buf_a, buf_b));
	FATAL(kvf_read_x(st, seq_id(0), 0, 0, 1, buf_a));
	FATAL(kvf_sync(st));
	cr_assert(strncmp(kvf_last_error(), "kvf_sync: ", 10) == 0, "%s",
		  kvf_last_error());
	/* close releases the handle and says its last writes may be lost */
	FATAL(kvf_close(st));

	OK(kvf_open(path, &o, &st));
	cr_assert(eq(int, state_differs(st, &synced, why, sizeof(why)), 0),
		  "after a failed commit the reopened store is not the last sync's: %s",
		  why);
	/* and it works again */
	OK(append_model(st, &synced, 0, 0, G + 1));
	OK(kvf_close(st));
	OK(kvf_open(path, &o, &st));
	cr_assert(eq(int, state_differs(st, &synced, why, sizeof(why)), 0),
		  "%s", why);
	OK(kvf_close(st));
	model_free(&m);
	model_free(&synced);
	free(path);
	tmpdir_remove(dir);
}

Test(store_crash, commit_fails_in_create)
{
	fatal_case(AT_CREATE);
}

Test(store_crash, commit_fails_in_fork)
{
	fatal_case(AT_FORK);
}

Test(store_crash, commit_fails_in_free)
{
	fatal_case(AT_FREE);
}

Test(store_crash, commit_fails_in_sync)
{
	fatal_case(AT_SYNC);
}

Test(store_crash, commit_fails_in_append)
{
	fatal_case(AT_APPEND);
}

/* ---- a fork, then a kill before any sync --------------------------------- */

#define FORK_AT 100 /* not a group boundary: the child has a partial tail */

static void fork_then_die(const char *path, uint64_t journal_arg)
{
	kvf_options o = crash_opts();
	kvf_store *st = NULL;

	if (mkdir(path, 0755) != 0 ||
	    powercut_arm((const char *)(uintptr_t)journal_arg, path) != 0)
		fail("powercut_arm");
	must(kvf_open(path, &o, &st), "kvf_open", 0);
	must(kvf_seq_create(st, seq_id(0)), "kvf_seq_create", 0);
	for (uint32_t l = 0; l < LAYERS; l++) {
		for (uint32_t i = 0; i < FORK_AT; i++)
			for (uint32_t h = 0; h < KVH; h++) {
				size_t at = ((size_t)i * KVH + h) * ROW;

				fill_row(buf_a + at, 7, l, 0, i, h);
				fill_row(buf_b + at, 7, l, 1, i, h);
			}
		must(kvf_append(st, seq_id(0), l, FORK_AT, buf_a, buf_b),
		     "kvf_append", 0);
	}
	must(kvf_sync(st), "kvf_sync", 0);
	must(kvf_seq_fork(st, seq_id(0), seq_id(1), FORK_AT), "kvf_seq_fork", 0);
	_exit(0); /* no sync, no close: a crash right after the fork, then
		   * (in the parent) a power cut that loses the data written
		   * since the sync and keeps the catalog's log */
}

static void fork_check(const char *path, uint64_t unused)
{
	kvf_options o = crash_opts();
	kvf_store *st = NULL;
	struct track t = { 0 };
	char why[256];
	uint64_t n;

	(void)unused;
	must(kvf_open(path, &o, &st), "reopen", 0);
	track_push(&t, FORK_AT, 7);
	if (kvf_seq_len(st, seq_id(1), 0, &n) == KVF_OK) {
		/* the child may come back: then a prefix, every token right */
		if (n > FORK_AT)
			fail("the child has %" PRIu64 " tokens", n);
		for (uint32_t h = 0; h < KVH; h++) {
			must(kvf_read(st, seq_id(1), 0, h, 0, n, buf_a, buf_b),
			     "kvf_read", 0);
			if (check_rows(&t, 0, 0, h, 0, n, buf_a, ROW, why,
				       sizeof(why)) ||
			    check_rows(&t, 0, 1, h, 0, n, buf_b, ROW, why,
				       sizeof(why)))
				fail("the child: %s", why);
		}
	}
	free(t.runs);
	must(kvf_close(st), "kvf_close", 0);
}

/* A fork commits its child's length when it returns, but the child's
 * partial tail group is durable only at the next sync: after a power cut
 * the child comes back without that group (recovery's clip_lost), never
 * with zeros in its place. */
Test(store_crash, fork_then_power_cut)
{
	char *dir = tmpdir_make("forkcut");
	char *path = strdup(tmp_path(dir, "s"));
	char *journal = strdup(tmp_path(dir, "journal"));
	struct powercut_stats cs;
	char why[300];

	crash_media = KVF_MEDIA_FILE;
	bufs_alloc();
	run_child(fork_then_die, path, (uint64_t)(uintptr_t)journal);
	powercut_lose_data_keep_logs(1);
	if (powercut_apply(journal, 1, &cs, why, sizeof(why)) != 0)
		fail("%s", why);
	powercut_lose_data_keep_logs(0);
	cr_assert(cs.reverted > (0), "the cut lost nothing");
	run_child(fork_check, path, 0);
	free(journal);
	free(path);
	tmpdir_remove(dir);
}
