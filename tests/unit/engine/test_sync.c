/*
 * test_sync.c - kvf_sync, kvf_close and the fatal state: NULL handles, and
 * closing a handle that went fatal (KVF_EFATAL from kvf_close, which still
 * releases everything; the reopened store has the last sync's state and
 * works again).  A sync refused for space (suite sync_space) keeps the
 * lengths it did not write, and they are there after a reopen.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <dirent.h>
#include <stdint.h>
#include <string.h>

#include "engine/base/catalog.h"
#include "engine/base/store_state.h"
#include "store_fixture.h"
#include "testutil.h"

TestSuite(sync, .init = fx_setup, .fini = fx_teardown, .timeout = 60);
TestSuite(sync_fatal, .timeout = 90);
TestSuite(sync_space, .init = fx_setup_dir, .fini = fx_teardown,
	  .timeout = 120);

Test(sync, sync_and_close_null)
{
	REFUSED(kvf_sync(NULL), KVF_EINVAL, "kvf_sync: store is NULL");
	cr_assert(eq(int, kvf_close(NULL), KVF_OK));
}

/* ---- closing a handle that went fatal ------------------------------------ */

/* open_fds - descriptors this process has open */
static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	cr_assert_not_null(d);
	while ((e = readdir(d)) != NULL)
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1; /* the one opendir holds */
}

Test(sync_fatal, close_fatal)
{
	char *dir = tmpdir_make("open-fatal");
	char *path = strdup(tmp_path(dir, "s"));
	kvf_options o = fx_small_opts();
	kvf_store *st = NULL;
	int fds;

	fx_make_store(path);
	fds = open_fds();
	OK(kvf_open(path, &o, &st));
	/* unsynced: a full group and a partial one beyond the last sync */
	OK(fx_append(st, 1, 1, 0, LEN0, G + 7));
	OK(fx_append(st, 1, 1, 1, LEN1, 5));
	catalog_fail_commits(st->cat, 1);
	cr_assert(eq(int, kvf_sync(st), KVF_EFATAL), "%s", kvf_last_error());

	kvf_clear_error();
	cr_assert(eq(int, kvf_close(st), KVF_EFATAL),
		  "kvf_close of a fatal handle: %s", kvf_last_error());
	cr_assert(strstr(kvf_last_error(), "kvf_close: ") != NULL &&
			  strstr(kvf_last_error(), path) != NULL &&
			  strstr(kvf_last_error(), "close and reopen it"),
		  "%s", kvf_last_error());
	st = NULL;
	/* released: its descriptors (and locks) are gone; LSan would report
	 * any memory it kept */
	cr_assert(eq(int, open_fds(), fds), "kvf_close left descriptors open");

	/* the last sync's state, and a store that works again */
	fx_store_intact(path, "reopened after the fatal close");
	OK(kvf_open(path, &o, &st));
	OK(fx_append(st, 1, 1, 0, LEN0, 3));
	OK(kvf_close(st));
	OK(kvf_open(path, &o, &st));
	cr_assert(fx_data_ok(st, 1, 0, LEN0 + 3) && fx_data_ok(st, 1, 1, LEN1));
	OK(kvf_close(st));
	free(path);
	tmpdir_remove(dir);
}

/* A sync refused for space must not forget which lengths it did not
 * write: they once stayed marked as synced and were lost at reopen. */
Test(sync_space, sync_refused_for_space_keeps_lengths)
{
	kvf_model m1 = { 1, 1, 1, 64, KVF_DTYPE_F16 };
	kvf_options o = fx_options_for(&m1, 16 * 1024, 4 * 16 * 1024, 1);
	uint16_t k[64], v[64];
	kvf_store *st = NULL;
	kvf_status rc = KVF_OK;
	uint64_t n, id;

	memset(k, 1, sizeof(k));
	memset(v, 2, sizeof(v));
	cr_assert(eq(int, kvf_open(fx.path, &o, &st), KVF_OK), "%s",
		  kvf_last_error());
	for (id = 0; id < 6; id++) {
		cr_assert(eq(int, kvf_seq_create(st, id), KVF_OK));
		cr_assert(eq(int, kvf_append(st, id, 0, 1, k, v), KVF_OK));
	}
	rc = kvf_sync(st);
	/* free sequences until a sync succeeds */
	for (id = 5; rc != KVF_OK && id > 0; id--) {
		cr_assert(eq(int, rc, KVF_ENOSPC), "%s", kvf_last_error());
		cr_assert(eq(int, kvf_seq_free(st, id), KVF_OK));
		rc = kvf_sync(st);
	}
	cr_assert(eq(int, rc, KVF_OK), "%s", kvf_last_error());
	cr_assert(eq(int, kvf_close(st), KVF_OK));
	st = NULL;
	cr_assert(eq(int, kvf_open(fx.path, NULL, &st), KVF_OK));
	for (uint64_t s = 0; s <= id; s++) {
		cr_assert(eq(int, kvf_seq_len(st, s, 0, &n), KVF_OK), "seq %llu: %s",
			  (unsigned long long)s, kvf_last_error());
		cr_assert(eq(u64, n, 1), "seq %llu lost its length", (unsigned long long)s);
	}
	kvf_close(st);
}
