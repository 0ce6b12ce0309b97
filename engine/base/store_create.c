/*
 * store_create.c - the directory a store lives in, while kvf_open makes
 * a store there: a creation marker goes in first, and until the header is
 * written (atomically) and the marker removed, whatever the directory
 * holds is the leftover of a creation that did not finish, which the next
 * open removes and starts afresh.  A file of its own: the marker's rules
 * (whose directory it may be written into, when it is ours) are read
 * apart from the open's sequence of steps.  Called by kvf_open and the
 * release of a failed open (store.c); no locking.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/alloc.h"
#include "api/status.h"
#include "engine/base/store_int.h"

/* store_begin_create - mark dir as a store being created: until the marker is
 * gone, whatever else the directory holds is the leftover of a creation
 * that did not finish, which the next open removes and starts afresh.
 * The marker is only ever written into a directory that holds nothing but
 * our LOCK, or holds our own store. */
kvf_status store_begin_create(const char *dir, const char *cpath)
{
	int fd = open(cpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	if (fd < 0 ||
	    write(fd, CREATING_TEXT, sizeof(CREATING_TEXT) - 1) !=
		    (ssize_t)sizeof(CREATING_TEXT) - 1 ||
	    fsync(fd) != 0) {
		int err = errno;

		if (fd >= 0)
			close(fd);
		return kvf_fail_errno(KVF_EIO, err, "kvf_open: creating %s", cpath);
	}
	close(fd);
	store_sync_dir(dir);
	return KVF_OK;
}

/* store_is_creating - cpath is our creation marker: a file of that name that
 * somebody else put there is not, and nothing is removed on its word
 * (store_begin_create may have been cut short between creating and writing it:
 * an empty marker counts, in a directory that holds nothing a creation
 * does not make) */
int store_is_creating(const char *dir, const char *cpath)
{
	char buf[sizeof(CREATING_TEXT)];
	int fd = open(cpath, O_RDONLY | O_CLOEXEC);
	ssize_t n;
	DIR *d;
	struct dirent *e;
	int ours = 1;

	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf));
	close(fd);
	if (n == (ssize_t)sizeof(CREATING_TEXT) - 1 &&
	    memcmp(buf, CREATING_TEXT, (size_t)n) == 0)
		return 1;
	if (n != 0 || (d = opendir(dir)) == NULL)
		return 0;
	while ((e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
		    strcmp(e->d_name, "LOCK") &&
		    strcmp(e->d_name, STORE_CREATING_FILE))
			ours = 0;
	closedir(d);
	return ours;
}

/* store_clear_leftovers - remove all an unfinished creation left in dir: every
 * entry but the LOCK and the marker, which go last */
void store_clear_leftovers(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char p[4096];

	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
		    !strcmp(e->d_name, "LOCK") ||
		    !strcmp(e->d_name, STORE_CREATING_FILE))
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		store_remove_tree(p);
	}
	closedir(d);
	store_sync_dir(dir);
}

/* store_finish_create - the store is whole: its header goes in (atomically), and
 * only then the marker goes */
kvf_status store_finish_create(kvf_store *st, const char *hpath,
				const char *cpath)
{
	kvf_status rc = store_write_header(st->dir, hpath, &st->hdr);

	if (rc != KVF_OK)
		return rc;
	if (unlink(cpath) != 0)
		return kvf_fail_errno(KVF_EIO, errno, "kvf_open: removing %s",
				      cpath);
	store_sync_dir(st->dir);
	return KVF_OK;
}
