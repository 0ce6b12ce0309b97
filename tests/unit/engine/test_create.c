/*
 * test_create.c - creating a store: atomic, and its leftovers (issue 12).
 *
 * Creation is atomic: kvf_open writes DIR/CREATING first and DIR/KVFLASH
 * last, then removes the marker; a directory holding the marker and no
 * header is the leftover of a creation that did not finish, which the
 * next open clears before it creates afresh.  create_killed forks a child
 * that creates a store and SIGKILLs it after a seeded delay within the
 * measured creation time; a checker child must then open the same way and
 * find an empty store it can append to, sync and reopen.  A stale marker
 * beside a whole store, a CREATING file kvf_open did not write, and an
 * open that cannot create (no options, bad ones) remove nothing.
 *
 * Processes: a test that forks opens no store itself before its last
 * fork.  Children report through a pipe (store_fixture.h).  Random tests
 * print their seed (KVF_SEED=S repeats the choices; the kill timing also
 * depends on the machine).
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/base/store_state.h"
#include "store_fixture.h"
#include "testutil.h"

/* the creation marker's name is part of the on-disk format: spelled out
 * here, so that renaming it in the engine shows up as a failing test */
#define MARKER "CREATING"

/* the kill loop; it prints its seed */
#define CREATE_TRIALS 50 /* kills during a creation */
#define CREATE_MIN_MID 5 /* of those, at least this many mid-creation */

TestSuite(create, .timeout = 90);

/* put_marker - the creation marker kvf_open writes (CREATING_TEXT) */
static void put_marker(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	cr_assert(fd >= 0, "%s: %s", path, strerror(errno));
	cr_assert(eq(int, (int)write(fd, CREATING_TEXT, strlen(CREATING_TEXT)),
		     (int)strlen(CREATING_TEXT)));
	close(fd);
}

/* ---- creation is atomic -------------------------------------------------- */

/* creator - child: create the store and say how that went */
static void creator(const char *path)
{
	kvf_options o = fx_small_opts();
	kvf_store *st = NULL;
	kvf_status rc = kvf_open(path, &o, &st);

	fx_child_say("O %d %s", rc, rc == KVF_OK ? "" : kvf_last_error());
	_exit(0);
}

/*
 * fresh_checker - child: the same kvf_open as the creator's must succeed
 * and give an empty store that takes an append, a sync and a reopen, with
 * no marker left
 */
static void fresh_checker(const char *path)
{
	kvf_options o = fx_small_opts();
	kvf_store *st = NULL;
	size_t n = 1;

	CHILD_MUST(kvf_open(path, &o, &st));
	CHILD_MUST(kvf_seq_list(st, NULL, 0, &n));
	if (n != 0) {
		fx_child_say("E the store holds %zu sequences, not none", n);
		_exit(3);
	}
	CHILD_MUST(kvf_seq_create(st, 1));
	CHILD_MUST(fx_append(st, 1, 1, 0, 0, G + 5));
	CHILD_MUST(kvf_sync(st));
	CHILD_MUST(kvf_close(st));
	CHILD_MUST(kvf_open(path, &o, &st));
	if (!fx_data_ok(st, 1, 0, G + 5) || !fx_data_ok(st, 1, 1, 0)) {
		fx_child_say("E the reopened store lost what was synced");
		_exit(3);
	}
	CHILD_MUST(kvf_close(st));
	if (fx_path_exists(tmp_path(path, MARKER))) {
		fx_child_say("E %s is still there after the open", MARKER);
		_exit(3);
	}
	_exit(0);
}

/* create_time_ns - how long a creating kvf_open takes, seen from the
 * fork that starts it (the middle one of three) */
static uint64_t create_time_ns(const char *dir)
{
	uint64_t t[3], lo, hi;

	for (int i = 0; i < 3; i++) {
		char p[4096], line[1200];
		int fd, status, rc = -1;
		uint64_t t0 = fx_now_ns();
		pid_t pid;

		snprintf(p, sizeof(p), "%s/measure%d", dir, i);
		pid = fx_spawn(&fd);
		if (pid == 0)
			creator(p);
		cr_assert(fx_read_line(fd, line, sizeof(line)));
		t[i] = fx_now_ns() - t0;
		close(fd);
		cr_assert(eq(int, waitpid(pid, &status, 0), pid));
		cr_assert(sscanf(line, "O %d", &rc) == 1 && rc == KVF_OK, "%s",
			  line);
		fx_rm_tree(p);
	}
	lo = t[0] < t[1] ? t[0] : t[1];
	hi = t[0] < t[1] ? t[1] : t[0];
	return t[2] < lo ? lo : t[2] > hi ? hi : t[2];
}

enum kill_point {
	KILL_NO_DIR,    /* before the directory was made */
	KILL_NO_MARKER, /* directory, no marker, no header */
	KILL_MID,       /* the marker is there: mid-creation */
	KILL_DONE,      /* header and no marker: the store was whole */
	N_KILL_POINTS
};

static const char *const kill_point_names[N_KILL_POINTS] = {
	"before the directory", "before the marker", "mid-creation",
	"after the creation"
};

static enum kill_point kill_point_of(const char *path)
{
	if (!fx_path_exists(path))
		return KILL_NO_DIR;
	if (fx_path_exists(tmp_path(path, MARKER)))
		return KILL_MID;
	if (fx_path_exists(tmp_path(path, STORE_HEADER_FILE)))
		return KILL_DONE;
	return KILL_NO_MARKER;
}

Test(create, create_killed)
{
	uint64_t seed = rng_seed("create/create_killed"), rng = seed;
	char *dir = tmpdir_make("open-kill");
	unsigned counts[N_KILL_POINTS] = { 0 };
	uint64_t span_us;

	cr_assert_not_null(dir);
	span_us = create_time_ns(dir) / 1000 + 1;
	fprintf(stderr,
		"create/create_killed: a creation takes %" PRIu64 " us\n",
		span_us);
	for (unsigned i = 0; i < CREATE_TRIALS; i++) {
		uint64_t delay_us = rng_below(&rng, span_us);
		enum kill_point at;
		char p[4096], what[200], *text;
		int fd, status;
		pid_t pid;

		snprintf(p, sizeof(p), "%s/s%u", dir, i);
		pid = fx_spawn(&fd);
		if (pid == 0)
			creator(p);
		fx_sleep_us(delay_us);
		kill(pid, SIGKILL);
		text = fx_collect(fd);
		cr_assert(eq(int, waitpid(pid, &status, 0), pid));
		cr_assert(text[0] == '\0' || strncmp(text, "O 0 ", 4) == 0,
			  "seed %" PRIu64 " trial %u: the creation failed: %s",
			  seed, i, text);
		free(text);
		at = kill_point_of(p);
		counts[at]++;
		snprintf(what, sizeof(what),
			 "seed %" PRIu64 " trial %u: killed after %" PRIu64
			 " us, %s",
			 seed, i, delay_us, kill_point_names[at]);
		fx_run_child(fresh_checker, p, what);
		fx_rm_tree(p);
	}
	fprintf(stderr,
		"create/create_killed: seed %" PRIu64
		": %u kills %s, %u %s, %u %s, %u %s\n",
		seed, counts[KILL_NO_DIR], kill_point_names[KILL_NO_DIR],
		counts[KILL_NO_MARKER], kill_point_names[KILL_NO_MARKER],
		counts[KILL_MID], kill_point_names[KILL_MID], counts[KILL_DONE],
		kill_point_names[KILL_DONE]);
	cr_assert(counts[KILL_MID] >= CREATE_MIN_MID,
		  "seed %" PRIu64 ": only %u of %u kills landed mid-creation",
		  seed, counts[KILL_MID], CREATE_TRIALS);
	tmpdir_remove(dir);
}

/* make_leftovers - what a creation killed part way leaves: the marker,
 * a catalog directory with junk, a stripe file, a header being written */
static void make_leftovers(const char *path)
{
	char meta[4096];

	cr_assert(eq(int, mkdir(path, 0755), 0));
	put_marker(tmp_path(path, MARKER));
	snprintf(meta, sizeof(meta), "%s/meta", path);
	cr_assert(eq(int, mkdir(meta, 0755), 0));
	fx_put_file(tmp_path(meta, "000003.log"), 0x33, 1000);
	fx_put_file(tmp_path(path, "stripe-000.kvf"), 0x5a, 3 * 4096);
	fx_put_file(tmp_path(path, STORE_HEADER_FILE ".tmp"), 0x4b, 40);
}

Test(create, create_clears_leftovers)
{
	char *dir = tmpdir_make("open-left");
	char *path = strdup(tmp_path(dir, "s"));
	kvf_options o = fx_small_opts();
	kvf_store *st = NULL;
	size_t n = 1;

	make_leftovers(path);
	/* read-only makes nothing: refused, and the leftovers stay */
	o.read_only = 1;
	fx_refused(path, &o, KVF_ENOENT, "holds no store", "did not finish",
		"read-only open of an unfinished creation");
	o.read_only = 0;

	/* a writer clears them and creates afresh */
	OK(kvf_open(path, &o, &st));
	cr_assert(fx_path_gone(tmp_path(path, MARKER)), "the marker stayed");
	cr_assert(fx_path_gone(tmp_path(path, STORE_HEADER_FILE ".tmp")));
	cr_assert(fx_path_gone(tmp_path(path, "meta/000003.log")),
		  "the old catalog's file stayed");
	cr_assert(fx_path_exists(tmp_path(path, STORE_HEADER_FILE)));
	OK(kvf_seq_list(st, NULL, 0, &n));
	cr_assert(eq(sz, n, 0), "the new store is not empty");
	OK(kvf_seq_create(st, 1));
	OK(fx_append(st, 1, 1, 0, 0, LEN0));
	OK(fx_append(st, 1, 1, 1, 0, LEN1));
	OK(kvf_close(st));
	fx_store_intact(path, "the store made over the leftovers");
	free(path);
	tmpdir_remove(dir);
}

Test(create, stale_marker_on_whole_store)
{
	char *dir = tmpdir_make("open-stale");
	char *path = strdup(tmp_path(dir, "s"));
	kvf_options o = fx_small_opts();
	kvf_store *st = NULL;

	/* killed between writing the header and removing the marker */
	fx_make_store(path);
	put_marker(tmp_path(path, MARKER));

	/* a reader takes the store as it is and changes nothing */
	memset(&o.model, 0, sizeof(o.model));
	o.read_only = 1;
	OK(kvf_open(path, &o, &st));
	cr_assert(fx_data_ok(st, 1, 0, LEN0) && fx_data_ok(st, 1, 1, LEN1));
	OK(kvf_close(st));
	cr_assert(fx_path_exists(tmp_path(path, MARKER)),
		  "a read-only open removed the marker");

	/* a writer keeps the data and removes the marker */
	o = fx_small_opts();
	OK(kvf_open(path, &o, &st));
	cr_assert(fx_data_ok(st, 1, 0, LEN0) && fx_data_ok(st, 1, 1, LEN1),
		  "the store lost its data");
	cr_assert(fx_path_gone(tmp_path(path, MARKER)),
		  "the stale marker was not removed");
	OK(kvf_close(st));
	fx_store_intact(path, "after the stale marker");
	free(path);
	tmpdir_remove(dir);
}

/* A file called CREATING that kvf_open did not write is not its marker:
 * nothing beside it is removed on its word. */
Test(create, foreign_marker_removes_nothing)
{
	char *dir = tmpdir_make("open-foreign");
	char *path = strdup(tmp_path(dir, "s"));
	kvf_options o = fx_small_opts();

	cr_assert(eq(int, mkdir(path, 0755), 0));
	fx_put_file(tmp_path(path, MARKER), 'x', 10);
	fx_put_file(tmp_path(path, "precious.txt"), 'p', 100);
	fx_refused(path, &o, KVF_EINVAL, "not a kvflash store", "not empty",
		"create beside a foreign CREATING");
	cr_assert(fx_path_exists(tmp_path(path, "precious.txt")),
		  "a foreign file was removed");
	cr_assert(fx_path_exists(tmp_path(path, MARKER)));
	free(path);
	tmpdir_remove(dir);
}

/* Leftovers of a creation stay when the open that finds them cannot
 * create: no options, or bad ones. */
Test(create, leftovers_stay_on_a_refused_create)
{
	char *dir = tmpdir_make("open-leftbad");
	char *path = strdup(tmp_path(dir, "s"));
	kvf_options o = fx_small_opts();
	kvf_store *st = NULL;

	make_leftovers(path);
	cr_assert(eq(int, kvf_open(path, NULL, &st), KVF_EINVAL));
	cr_assert(fx_path_exists(tmp_path(path, "stripe-000.kvf")),
		  "an open without options removed the leftovers");
	o.model.head_dim = 2000;
	cr_assert(eq(int, kvf_open(path, &o, &st), KVF_EINVAL));
	cr_assert(fx_path_exists(tmp_path(path, "stripe-000.kvf")),
		  "an open with a bad model removed the leftovers");
	free(path);
	tmpdir_remove(dir);
}
