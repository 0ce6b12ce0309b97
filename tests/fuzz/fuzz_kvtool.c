/*
 * fuzz_kvtool.c - kvtool's command line, over a copy of the template
 * store: what kvtool reads besides the store (which the other targets
 * fuzz) is its arguments.
 *
 * Input: the arguments after "kvtool", separated by NUL bytes (at most
 * 16, each at most 256 bytes); an argument "@" is the store's directory.
 * kvtool must return 0, 1 or 2 (tools/kvtool.h) and crash on nothing.
 * Its output goes to /dev/null; its error lines stay on stderr.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int kvtool_main(int argc, char **argv);

#define MAX_ARGS 16
#define MAX_ARG 256

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char args[MAX_ARGS][MAX_ARG + 1];
	static int quiet;
	char *argv[MAX_ARGS + 2];
	const char *dir = NULL;
	int argc = 1, rc;
	size_t i = 0;

	if (!quiet) {
		if (freopen("/dev/null", "w", stdout) == NULL)
			abort();
		quiet = 1;
	}
	argv[0] = "kvtool";
	while (i < size && argc <= MAX_ARGS) {
		const uint8_t *end = memchr(data + i, 0, size - i);
		size_t n = end ? (size_t)(end - (data + i)) : size - i;

		if (n > MAX_ARG)
			return 0;
		memcpy(args[argc - 1], data + i, n);
		args[argc - 1][n] = '\0';
		argv[argc] = args[argc - 1];
		if (strcmp(argv[argc], "@") == 0) {
			if (dir == NULL)
				dir = fz_work();
			argv[argc] = (char *)dir;
		}
		argc++;
		i += n + 1;
	}
	if (i < size)
		return 0;
	argv[argc] = NULL;
	rc = kvtool_main(argc, argv);
	if (rc < 0 || rc > 2) {
		fprintf(stderr, "fuzz: kvtool exited %d\n", rc);
		abort();
	}
	return 0;
}
