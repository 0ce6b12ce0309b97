/*
 * replay.c - run a fuzz target over saved inputs without libFuzzer, so the
 * seed corpus and every crasher run as ordinary tests under gcc (zstd's
 * regression_driver.c, lz4's standaloneengine.c).
 *
 *   fuzz_NAME [DIR_OR_FILE...]
 *
 * Each file (each regular file of each directory, in name order) is
 * passed to LLVMFuzzerTestOneInput once.  A finding aborts the process
 * (the target, ASan or UBSan with -fno-sanitize-recover), which fails the
 * test; the last "replay:" line names the input.  Exit 0 after all of
 * them, 77 (skip) when no input was found, 1 when an input is unreadable.
 */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf;
	long n;

	if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) != 0) {
		fprintf(stderr, "replay: cannot read %s\n", path);
		if (f)
			fclose(f);
		return 1;
	}
	/* a copy of exactly n bytes, so ASan sees a read past the input */
	buf = malloc(n ? (size_t)n : 1);
	if (buf == NULL || fread(buf, 1, (size_t)n, f) != (size_t)n) {
		fprintf(stderr, "replay: cannot read %s\n", path);
		free(buf);
		fclose(f);
		return 1;
	}
	fclose(f);
	fprintf(stderr, "replay: %s (%ld bytes)\n", path, n);
	LLVMFuzzerTestOneInput(buf, (size_t)n);
	free(buf);
	return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

int main(int argc, char **argv)
{
	unsigned long done = 0;
	int bad = 0;

	for (int i = 1; i < argc; i++) {
		struct dirent **ents;
		struct stat sb;
		int n;

		if (stat(argv[i], &sb) != 0)
			continue; /* no crashers yet: the directory may be absent */
		if (!S_ISDIR(sb.st_mode)) {
			bad |= run_file(argv[i]);
			done++;
			continue;
		}
		n = scandir(argv[i], &ents, NULL, by_name);
		for (int k = 0; k < n; k++) {
			char path[4096];

			snprintf(path, sizeof(path), "%s/%s", argv[i], ents[k]->d_name);
			if (ents[k]->d_name[0] != '.' && stat(path, &sb) == 0 &&
			    S_ISREG(sb.st_mode)) {
				bad |= run_file(path);
				done++;
			}
			free(ents[k]);
		}
		if (n >= 0)
			free(ents);
	}
	fprintf(stderr, "replay: %lu inputs\n", done);
	if (bad)
		return 1;
	return done ? 0 : 77;
}
