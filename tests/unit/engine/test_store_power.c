/*
 * test_store_power.c - power cuts: the rounds of test_store_crash.c (see
 * there), but the writer journals its writes (powercut.h) and, once it is
 * dead, the parent cuts the power under the store: pages written since
 * their file's last fdatasync keep their old bytes, their new ones or a
 * torn mix, the flash emulator's image loses or tears its unsynced
 * writes, and the catalog's logs lose a random part of what was never
 * synced.  The checker then holds the store to the same two states.  And
 * syncs beside appends: see below.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "crash_model.h"
#include "kvflash.h"
#include "powercut.h"
#include "testutil.h"

/* Power cuts: 1000 per run over the suite, in 4 tests so that they run
 * in parallel. */
TestSuite(store_power, .timeout = 600);

Test(store_power, cuts_a)
{
	crash_rounds("store_power/cuts_a", trials("KVF_POWER_TRIALS", 250), 1,
		     KVF_MEDIA_FILE);
}

Test(store_power, cuts_b)
{
	crash_rounds("store_power/cuts_b", trials("KVF_POWER_TRIALS", 250), 1,
		     KVF_MEDIA_FILE);
}

Test(store_power, cuts_c)
{
	crash_rounds("store_power/cuts_c", trials("KVF_POWER_TRIALS", 250), 1,
		     KVF_MEDIA_FILE);
}

Test(store_power, cuts_d)
{
	crash_rounds("store_power/cuts_d", trials("KVF_POWER_TRIALS", 250), 1,
		     KVF_MEDIA_FILE);
}

/* Stores with a codec (docs/compression.md, "What a crash leaves"): the
 * same rounds, values compared within each codec's error; the other
 * tests run with one when $KVF_CRASH_CODEC names it. */
Test(store_power, codec_cuts)
{
	static const kvf_codec codecs[] = { KVF_CODEC_FP8, KVF_CODEC_INT8,
					    KVF_CODEC_INT4 };

	for (size_t i = 0; i < 3; i++) {
		crash_codec_set(codecs[i]);
		crash_rounds(kvf_codec_name(codecs[i]),
			     trials("KVF_POWER_TRIALS", 60), 1, KVF_MEDIA_FILE);
	}
}

/* A flash store: the emulated device's image is cut like a disk's. */
Test(store_power, flash_cuts)
{
	crash_rounds("store_power/flash_cuts", trials("KVF_POWER_TRIALS", 150),
		     1, KVF_MEDIA_FLASH);
}

/* ---- syncs beside appends ------------------------------------------------ */

/*
 * A thread appends to sequence CONC_SEQ in pieces of a few tokens, sealing
 * groups and segments all the time, while the main thread appends a little
 * to a few other sequences and syncs, so that each sync has partial groups
 * to seal and segments to write for them.  The writer is killed at a
 * random moment and the power cut.  CONC_SEQ's synced length lies between
 * its length before and after the last completed sync, so the check is:
 * it reads back whole, every token right, at least as long as before that
 * sync began.  (A segment the appender sealed during a sync but wrote
 * after the sync's media flush must not count as written before it.)
 */
#define CONC_SEQ 1                /* the appended sequence */
#define CONC_OTHERS 4             /* sequences 2.. synced beside it */
#define CONC_TOKENS (96 * G)      /* the appender stops there */

static _Atomic uint64_t conc_len; /* CONC_SEQ's tokens appended so far */

static void *conc_appender(void *arg)
{
	kvf_store *st = arg;
	unsigned char *k = malloc((size_t)G * KVH * ROW);
	unsigned char *v = malloc((size_t)G * KVH * ROW);
	uint64_t rng = 12345, t = 0;

	if (k == NULL || v == NULL)
		fail("out of memory");
	while (t < CONC_TOKENS) {
		uint32_t n = (uint32_t)(1 + rng_below(&rng, G));

		if (t + n > CONC_TOKENS)
			n = (uint32_t)(CONC_TOKENS - t);
		for (uint32_t i = 0; i < n; i++)
			for (uint32_t h = 0; h < KVH; h++) {
				fill_row(k + ((size_t)i * KVH + h) * ROW, 1, 0, 0,
					 t + i, h);
				fill_row(v + ((size_t)i * KVH + h) * ROW, 1, 0, 1,
					 t + i, h);
			}
		must(kvf_append(st, CONC_SEQ, 0, n, k, v), "kvf_append", 0);
		t += n;
		atomic_store(&conc_len, t);
	}
	free(k);
	free(v);
	return NULL;
}

/* conc_writer - the child: syncs beside the appender until killed */
static void conc_writer(const char *path, const char *journal)
{
	kvf_options o = crash_opts();
	kvf_store *st = NULL;
	pthread_t th;
	uint64_t rng = 777;

	if (powercut_arm(journal, path) != 0)
		fail("powercut_arm %s: %s", journal, strerror(errno));
	must(kvf_open(path, &o, &st), "kvf_open", 0);
	if (pthread_create(&th, NULL, conc_appender, st) != 0)
		fail("pthread_create");
	for (;;) {
		uint64_t before = atomic_load(&conc_len);

		for (uint32_t s = 0; s < CONC_OTHERS; s++) {
			uint32_t n = (uint32_t)(1 + rng_below(&rng, 3));

			memset(buf_a, (int)s, (size_t)n * KVH * ROW);
			must(kvf_append(st, 2 + s, 0, n, buf_a, buf_a),
			     "kvf_append", 0);
		}
		announce('B', (unsigned)before);
		must(kvf_sync(st), "kvf_sync", 0);
		announce('D', (unsigned)before);
	}
}

/* conc_check - the checker: CONC_SEQ whole and at least `least` long */
static void conc_check(const char *path, uint64_t least)
{
	kvf_options o = crash_opts();
	kvf_store *st = NULL;
	struct track t = { 0 };
	char why[256];
	uint64_t n;

	must(kvf_open(path, &o, &st), "reopen", 0);
	must(kvf_seq_len(st, CONC_SEQ, 0, &n), "kvf_seq_len", 0);
	if (n < least || n > CONC_TOKENS)
		fail("sequence %d has %" PRIu64
		     " tokens; the last sync began at %" PRIu64,
		     CONC_SEQ, n, least);
	track_push(&t, n, 1);
	for (uint32_t h = 0; h < KVH; h++) {
		must(kvf_read(st, CONC_SEQ, 0, h, 0, n, buf_a, buf_b),
		     "kvf_read", 0);
		if (check_rows(&t, 0, 0, h, 0, n, buf_a, ROW, why, sizeof(why)) ||
		    check_rows(&t, 0, 1, h, 0, n, buf_b, ROW, why, sizeof(why)))
			fail("%s", why);
	}
	free(t.runs);
	must(kvf_close(st), "kvf_close", 0);
}

/* conc_create - a store with CONC_SEQ and the others, empty */
static void conc_create(const char *path, uint64_t unused)
{
	kvf_options o = crash_opts();
	kvf_store *st = NULL;

	(void)unused;
	must(kvf_open(path, &o, &st), "kvf_open (create)", 0);
	for (uint32_t s = 0; s <= CONC_OTHERS; s++)
		must(kvf_seq_create(st, CONC_SEQ + s), "kvf_seq_create", 0);
	must(kvf_close(st), "kvf_close", 0);
}

Test(store_power, syncs_beside_appends)
{
	uint64_t rng = rng_seed("store_power/syncs_beside_appends");
	unsigned n = trials("KVF_POWER_TRIALS", 100);
	struct powercut_stats total = { 0 };

	crash_media = KVF_MEDIA_FILE;
	bufs_alloc();
	for (unsigned r = 0; r < n; r++) {
		char *dir = tmpdir_make("conc");
		char *path = strdup(tmp_path(dir, "s"));
		char *journal = strdup(tmp_path(dir, "journal"));
		uint64_t least = 0;
		struct powercut_stats cs;
		char why[300], *text, *line;
		int fd, status;
		pid_t pid;

		atomic_store(&conc_len, 0);
		run_child(conc_create, path, 0);
		pid = spawn(&fd);
		if (pid == 0)
			conc_writer(path, journal);
		fx_sleep_us(2000 + rng_below(&rng, 40000));
		kill(pid, SIGKILL);
		text = fx_collect(fd);
		cr_assert(eq(int, waitpid(pid, &status, 0), pid));
		if (strstr(text, "E ") != NULL)
			fail("writer (round %u): %s", r, strstr(text, "E ") + 2);
		for (line = text; *line; line = strchr(line, '\n') + 1) {
			char what;
			unsigned v;

			if (sscanf(line, "%c %u", &what, &v) != 2)
				break;
			if (what == 'D')
				least = v;
		}
		free(text);
		if (powercut_apply(journal, rng_next(&rng), &cs, why,
				   sizeof(why)) != 0)
			fail("round %u: %s", r, why);
		total.pages += cs.pages;
		total.reverted += cs.reverted;
		total.torn += cs.torn;
		run_child(conc_check, path, least);
		free(journal);
		free(path);
		tmpdir_remove(dir);
	}
	fprintf(stderr,
		"store_power/syncs_beside_appends: %u trials, every synced token back; %" PRIu64
		" unsynced pages (%" PRIu64 " reverted, %" PRIu64 " torn)\n",
		n, total.pages, total.reverted, total.torn);
}
