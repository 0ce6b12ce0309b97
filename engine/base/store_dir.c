/*
 * store_dir.c - the path and directory helpers of the store's lifecycle
 * files (engine/base/store_int.h): joining paths, removing a tree, syncing a
 * directory's entries.  No locking.
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

char *store_path_join(const char *dir, const char *leaf)
{
	size_t n = strlen(dir) + strlen(leaf) + 2;
	char *p = kvf_malloc(n);

	if (p)
		snprintf(p, n, "%s/%s", dir, leaf);
	return p;
}

static int rm_one(const char *path, const struct stat *sb, int flag,
		  struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

void store_remove_tree(const char *path)
{
	nftw(path, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

/* store_dir_is_empty - holds nothing but what kvf_open itself makes (LOCK) */
int store_dir_is_empty(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int empty = 1;

	if (d == NULL)
		return 0;
	while ((e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
		    strcmp(e->d_name, "LOCK"))
			empty = 0;
	closedir(d);
	return empty;
}

/* store_sync_dir - make the directory's entries (creations, renames, unlinks)
 * durable */
void store_sync_dir(const char *dir)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
}
