/*
 * test_sync.c - kvf_sync, kvf_close and the fatal state: NULL handles, and
 * closing a handle that went fatal (KVF_EFATAL from kvf_close, which still
 * releases everything; the reopened store has the last sync's state and
 * works again).
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <dirent.h>
#include <stdint.h>
#include <string.h>

#include "engine/catalog.h"
#include "engine/store_state.h"
#include "store_fixture.h"
#include "testutil.h"

TestSuite(sync, .init = fx_setup, .fini = fx_teardown, .timeout = 60);
TestSuite(sync_fatal, .timeout = 90);

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
