/* tmpdir.c - per-test temporary directories (see testutil.h). */
#include "testutil.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

char *tmpdir_make(const char *name)
{
	const char *base = getenv("KVF_TEST_DIR");
	char *path;
	size_t cap;

	if (base == NULL || *base == '\0')
		base = getenv("TMPDIR");
	if (base == NULL || *base == '\0')
		base = "/tmp";
	cap = strlen(base) + strlen(name) + 32;
	path = malloc(cap);
	if (path == NULL)
		return NULL;
	snprintf(path, cap, "%s/kvf-%s-XXXXXX", base, name);
	if (mkdtemp(path) == NULL) {
		free(path);
		return NULL;
	}
	return path;
}

static int remove_one(const char *path, const struct stat *st, int flag,
		      struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

void tmpdir_remove(char *path)
{
	if (path == NULL)
		return;
	nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS);
	free(path);
}

const char *tmp_path(const char *dir, const char *leaf)
{
	static char buf[4096];

	snprintf(buf, sizeof(buf), "%s/%s", dir, leaf);
	return buf;
}
