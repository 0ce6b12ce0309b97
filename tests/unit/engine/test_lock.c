/*
 * test_lock.c - one writer per store: KVF_EBUSY for a second open, at
 * once, and none after the owner was killed.
 *
 * The stripe files' lock lives on a descriptor of its own, not the one
 * io_uring uses (the kernel may keep that one's open file description a
 * moment after its process died): reopen_after_kill kills a busy owner
 * at random moments and reopens at once; io_descriptor_outlives_owner
 * makes that moment last, with a grandchild holding the I/O descriptor.
 *
 * Processes: a test that forks opens no store itself before its last fork
 * (but the owner forking its keeper, which only closes and pauses), so
 * those tests (suite lock_kill) do not use the filled store.  Random tests
 * print their seed.
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
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store_fixture.h"
#include "testutil.h"

#define REOPEN_TRIALS 100 /* kills of a busy owner, ... */
#define REOPEN_BUDGET_NS (15ull * 1000000000ull) /* ... or this long */
#define REOPEN_MIN_TRIALS 10                     /* fewer: it stalled */
#define BUSY_MAX_NS (300ull * 1000000ull)        /* "at once" for KVF_EBUSY */

TestSuite(lock, .init = fx_setup, .fini = fx_teardown, .timeout = 60);
TestSuite(lock_kill, .timeout = 90);

Test(lock, open_busy)
{
	kvf_options o = fx_filled_opts();
	kvf_store *h = NULL;

	REFUSED(kvf_open(fx.path, &o, &h), KVF_EBUSY, "is open by another handle");
	cr_assert_null(h);
	REFUSED(kvf_open(fx.path, NULL, &h), KVF_EBUSY, "LOCK is locked");
	o.read_only = 1;
	REFUSED(kvf_open(fx.path, &o, &h), KVF_EBUSY, "is open by another handle");
	cr_assert_null(h);
}

/* ---- reopening right after the owner was killed -------------------------- */

/* store_maker - child: fx_make_store's store, in a child (the parent forks) */
static void store_maker(const char *path)
{
	kvf_options o = fx_small_opts();
	kvf_store *st = NULL;

	CHILD_MUST(kvf_open(path, &o, &st));
	CHILD_MUST(kvf_seq_create(st, 1));
	CHILD_MUST(fx_append(st, 1, 1, 0, 0, LEN0));
	CHILD_MUST(fx_append(st, 1, 1, 1, 0, LEN1));
	CHILD_MUST(kvf_close(st));
}

/* busy_seed - the seed busy_writer uses (set before the fork) */
static uint64_t busy_seed;

/* a busy writer appends up to BUSY_BATCH tokens at a time, and starts a
 * new sequence at BUSY_LEN: the store stays well inside its 8 MiB */
#define BUSY_BATCH (4 * G)
#define BUSY_LEN (48 * G)

/*
 * busy_writer - child: open the store and say how that went ("O rc
 * message"); then append, sync and read back wide ranges in a loop until
 * killed, so that io_uring requests (segment writes, page reads) are in
 * flight most of the time; say "R" once they are.  The values are not
 * checked: the process is here to be killed.
 */
static void busy_writer(const char *path)
{
	static unsigned char kv[BUSY_BATCH * KVH * ROW];
	static unsigned char k_out[BUSY_LEN * ROW], v_out[BUSY_LEN * ROW];
	kvf_options o = fx_small_opts();
	kvf_store *st = NULL;
	kvf_status rc = kvf_open(path, &o, &st);
	uint64_t rng = busy_seed, seq, len = 0, ids[8];
	size_t n = 0;

	fx_child_say("O %d %s", rc, rc == KVF_OK ? "" : kvf_last_error());
	if (rc != KVF_OK)
		_exit(0);
	rng_fill(&rng, kv, sizeof(kv));
	CHILD_MUST(kvf_seq_list(st, ids, 8, &n));
	for (size_t i = 0; i < n && i < 8; i++)
		CHILD_MUST(kvf_seq_free(st, ids[i]));
	seq = 100 + rng_below(&rng, 1000);
	CHILD_MUST(kvf_seq_create(st, seq));
	for (unsigned round = 0;; round++) {
		uint32_t k = 1 + (uint32_t)rng_below(&rng, BUSY_BATCH);
		uint64_t t0, t1;

		if (len + k > BUSY_LEN) {
			CHILD_MUST(kvf_seq_free(st, seq));
			CHILD_MUST(kvf_seq_create(st, ++seq));
			len = 0;
		}
		for (uint32_t l = 0; l < LAYERS; l++)
			CHILD_MUST(kvf_append(st, seq, l, k, kv, kv));
		len += k;
		if (round % 8 == 7)
			CHILD_MUST(kvf_sync(st));
		t0 = rng_below(&rng, len);
		t1 = t0 + 1 + rng_below(&rng, len - t0);
		CHILD_MUST(kvf_read(st, seq, round % LAYERS,
				    (uint32_t)rng_below(&rng, KVH), t0, t1,
				    k_out, v_out));
		if (round == 8)
			fx_child_say("R");
	}
}

Test(lock_kill, reopen_after_kill)
{
	uint64_t seed = rng_seed("lock_kill/reopen_after_kill"), rng = seed;
	char *dir = tmpdir_make("open-reopen");
	char *path = strdup(tmp_path(dir, "s"));
	char first_busy[1200] = "", line[1200];
	unsigned trials = 0, busy = 0;
	uint64_t t_start;
	int fd, status, rc;
	pid_t pid;

	fx_run_child(store_maker, path, "making the store");
	t_start = fx_now_ns();
	for (;;) {
		/* the open of trial i is the check of kill i - 1 */
		int last = trials == REOPEN_TRIALS ||
			   fx_now_ns() - t_start > REOPEN_BUDGET_NS;
		char *text;

		busy_seed = rng_next(&rng);
		pid = fx_spawn(&fd);
		if (pid == 0)
			busy_writer(path);
		rc = -1;
		if (!fx_read_line(fd, line, sizeof(line)) ||
		    sscanf(line, "O %d", &rc) != 1 ||
		    (rc != KVF_OK && rc != KVF_EBUSY)) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			cr_fatal("seed %" PRIu64
				 " trial %u: the open after the kill: %s",
				 seed, trials, line);
		}
		if (rc == KVF_EBUSY && busy++ == 0)
			snprintf(first_busy, sizeof(first_busy), "%s", line);
		if (rc == KVF_OK && !last) {
			/* kill it at a random moment of its I/O */
			if (fx_read_line(fd, line, sizeof(line)) &&
			    strcmp(line, "R") == 0)
				fx_sleep_us(rng_below(&rng, 10000));
		}
		kill(pid, SIGKILL);
		text = fx_collect(fd);
		cr_assert(eq(int, waitpid(pid, &status, 0), pid));
		cr_assert(fx_has_error(line) + fx_has_error(text) == 0,
			  "seed %" PRIu64 " trial %u: the writer failed: %s%s",
			  seed, trials, line, text);
		free(text);
		if (last)
			break;
		trials++;
	}
	fprintf(stderr,
		"lock_kill/reopen_after_kill: seed %" PRIu64
		": %u kills in %.1f s, %u reopens found the store busy%s%s\n",
		seed, trials, (double)(fx_now_ns() - t_start) / 1e9, busy,
		busy ? ", the first: " : "", first_busy);
	cr_assert(eq(u32, busy, 0),
		  "seed %" PRIu64
		  ": %u of %u opens right after a kill gave KVF_EBUSY (first: %s)",
		  seed, busy, trials, first_busy);
	cr_assert(trials >= REOPEN_MIN_TRIALS, "only %u trials ran", trials);
	free(path);
	tmpdir_remove(dir);
}

/*
 * The race above, made certain: what the kernel does to a killed owner's
 * io_uring requests (they keep the open file description of the stripe's
 * I/O descriptor a moment after the process is gone) is done here by a
 * grandchild that keeps only that descriptor, inherited at fork, while
 * its parent, the owner, is killed.  A lock held through that description
 * would outlive the owner; a lock held apart does not.  The I/O
 * descriptor is the stripe file's writable one: the lock needs no write
 * access (if the engine ever opens its lock descriptor writable, pick
 * the I/O one by O_DIRECT instead).
 */

/* stripe_io_fds - mark in keep[] this process's writable descriptors of
 * the stripe file; how many */
static int stripe_io_fds(const char *stripe, char *keep, int max_fd)
{
	char want[4096], link[32], target[4096], info[64], buf[512];
	int n = 0;

	if (realpath(stripe, want) == NULL)
		return -1;
	for (int fd = 0; fd < max_fd; fd++) {
		ssize_t len;
		unsigned flags = 0;
		char *f;
		FILE *fi;

		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		len = readlink(link, target, sizeof(target) - 1);
		if (len < 0)
			continue;
		target[len] = '\0';
		if (strcmp(target, want) != 0)
			continue;
		snprintf(info, sizeof(info), "/proc/self/fdinfo/%d", fd);
		if ((fi = fopen(info, "r")) == NULL)
			continue;
		len = (ssize_t)fread(buf, 1, sizeof(buf) - 1, fi);
		fclose(fi);
		buf[len > 0 ? len : 0] = '\0';
		f = strstr(buf, "flags:");
		if (f && sscanf(f, "flags: %o", &flags) == 1 &&
		    (flags & O_ACCMODE) == O_RDWR) {
			keep[fd] = 1;
			n++;
		}
	}
	return n;
}

#define MAX_FD 1024

/* io_keeper_owner - child: open the store, fork a grandchild that keeps
 * only the stripe's I/O descriptors, say "K pid n", then wait to die */
static void io_keeper_owner(const char *path)
{
	static char keep[MAX_FD];
	kvf_options o = fx_small_opts();
	kvf_store *st = NULL;
	pid_t keeper;
	int n;

	CHILD_MUST(kvf_open(path, &o, &st));
	n = stripe_io_fds(tmp_path(path, "stripe-000.kvf"), keep, MAX_FD);
	keeper = fork();
	if (keeper == 0) {
		for (int fd = 0; fd < MAX_FD; fd++)
			if (!keep[fd])
				close(fd);
		for (;;)
			pause();
	}
	fx_child_say("K %d %d", (int)keeper, n);
	for (;;)
		pause();
}

/* opener - child: open the store (options NULL) and say the status */
static void opener(const char *path)
{
	kvf_store *st = NULL;
	kvf_status rc = kvf_open(path, NULL, &st);

	fx_child_say("O %d %s", rc, rc == KVF_OK ? "" : kvf_last_error());
	if (rc == KVF_OK)
		CHILD_MUST(kvf_close(st));
	_exit(0);
}

Test(lock_kill, io_descriptor_outlives_owner)
{
	char *dir = tmpdir_make("open-keep");
	char *path = strdup(tmp_path(dir, "s"));
	char line[1200], *text;
	int fd, ofd, status, keeper = -1, n = -1, rc = -1;
	pid_t owner, op;

	/* the keeper is reparented to this process when its parent dies */
	cr_assert(eq(int, prctl(PR_SET_CHILD_SUBREAPER, 1), 0));
	fx_run_child(store_maker, path, "making the store");
	owner = fx_spawn(&fd);
	if (owner == 0)
		io_keeper_owner(path);
	cr_assert(fx_read_line(fd, line, sizeof(line)), "the owner said nothing");
	kill(owner, SIGKILL);
	text = fx_collect(fd);
	cr_assert(eq(int, waitpid(owner, &status, 0), owner));
	cr_assert(sscanf(line, "K %d %d", &keeper, &n) == 2 && keeper > 0,
		  "the owner: %s%s", line, text);
	free(text);
	if (n < 1) {
		kill(keeper, SIGKILL);
		waitpid(keeper, &status, 0);
		cr_fatal("no writable descriptor of the stripe file found (%d)",
			 n);
	}

	/* the owner is gone, its I/O descriptor lives on in the keeper */
	op = fx_spawn(&ofd);
	if (op == 0)
		opener(path);
	text = fx_collect(ofd);
	cr_assert(eq(int, waitpid(op, &status, 0), op));
	kill(keeper, SIGKILL);
	cr_assert(eq(int, waitpid(keeper, &status, 0), keeper));
	cr_assert(sscanf(text, "O %d", &rc) == 1, "%s", text);
	cr_assert(eq(int, rc, KVF_OK),
		  "open while the dead owner's I/O descriptor (%d of them) is still open: %s",
		  n, text);
	free(text);
	fx_store_intact(path, "after the keeper");
	free(path);
	tmpdir_remove(dir);
}

/* holder - child: open the store, say so, keep it open until the pipe
 * from the parent closes, then close it */
static int holder_in = -1;

static void holder(const char *path)
{
	kvf_options o = fx_small_opts();
	kvf_store *st = NULL;
	char c;

	CHILD_MUST(kvf_open(path, &o, &st));
	fx_child_say("R");
	while (read(holder_in, &c, 1) > 0)
		;
	CHILD_MUST(kvf_close(st));
	_exit(0);
}

/* contender - child: open the held store, writable then read-only; say
 * the status, the time it took and the message */
static void contender(const char *path)
{
	kvf_options o = fx_small_opts();

	for (int ro = 0; ro < 2; ro++) {
		kvf_store *st = NULL;
		uint64_t t0 = fx_now_ns();
		kvf_status rc;

		o.read_only = (uint32_t)ro;
		rc = kvf_open(path, &o, &st);
		fx_child_say("O %d %" PRIu64 " %s", rc, fx_now_ns() - t0,
			  kvf_last_error());
	}
	_exit(0);
}

Test(lock_kill, busy_at_once)
{
	char *dir = tmpdir_make("open-busy");
	char *path = strdup(tmp_path(dir, "s"));
	char line[1200], *text;
	int hold[2], fd, cfd, status, ok;
	pid_t pid, cpid;

	fx_run_child(store_maker, path, "making the store");
	cr_assert(eq(int, pipe(hold), 0));
	pid = fx_spawn(&fd);
	if (pid == 0) {
		close(hold[1]);
		holder_in = hold[0];
		holder(path);
	}
	close(hold[0]);
	cr_assert(fx_read_line(fd, line, sizeof(line)) && !strcmp(line, "R"),
		  "the holder: %s", line);

	cpid = fx_spawn(&cfd);
	if (cpid == 0) {
		close(hold[1]);
		contender(path);
	}
	text = fx_collect(cfd);
	cr_assert(eq(int, waitpid(cpid, &status, 0), cpid));
	for (char *l = text; *l; l = strchr(l, '\n') + 1) {
		int rc = -1;
		unsigned long long ns = 0;

		cr_assert(sscanf(l, "O %d %llu", &rc, &ns) == 2, "%s", text);
		cr_assert(eq(int, rc, KVF_EBUSY), "%s", l);
		cr_assert(strstr(l, "is open by another handle") != NULL, "%s",
			  l);
		cr_assert(ns < BUSY_MAX_NS, "KVF_EBUSY after %llu ms: %s",
			  ns / 1000000, l);
	}
	free(text);

	/* the holder lets go; the store is free and whole */
	close(hold[1]);
	text = fx_collect(fd);
	cr_assert(eq(int, waitpid(pid, &status, 0), pid));
	ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
	cr_assert(ok, "the holder: %s", text);
	free(text);
	fx_store_intact(path, "after the holder closed");
	free(path);
	tmpdir_remove(dir);
}

