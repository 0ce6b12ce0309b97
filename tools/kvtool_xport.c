/*
 * kvtool_xport.c - `kvtool export DIR SEQ FILE` and `kvtool import DIR FILE
 * [SEQ]`: move one sequence between stores (kvf_seq_export,
 * kvf_seq_import).  export opens the store read-only; import checks the
 * file and the id on the store opened read-only, then opens it for
 * writing with its stored settings.  No state, no locking.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kvtool.h"

/* open_rw - DIR for writing, every setting as stored */
static int open_rw(const struct cmd *c, const char *dir, kvf_store **st)
{
	struct stat sb;

	if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
		fprintf(stderr, "kvtool: %s: %s holds no store (%s)\n", c->name,
			dir, stat(dir, &sb) != 0 ? strerror(errno) : "not a directory");
		return EXIT_FAILED;
	}
	if (kvf_open(dir, NULL, st) != KVF_OK) /* as stored */
		return call_failed(c);
	return EXIT_OK;
}

int cmd_export(const struct cmd *c, int argc, char **argv)
{
	kvf_store *st;
	uint64_t seq, len = 0;
	struct stat sb;
	int rc;

	if (argc < 4)
		return usage_error(c, "missing %s", argc < 3 ? "SEQ and FILE"
							     : "FILE");
	if (argc > 4)
		return usage_error(c, "unexpected argument '%s'", argv[4]);
	if (parse_u64(argv[2], &seq) != 0)
		return usage_error(c, "SEQ '%s' is not a number", argv[2]);
	if ((rc = store_open(c, argv[1], &st)) != EXIT_OK)
		return rc;
	if (kvf_seq_export(st, seq, argv[3]) != KVF_OK)
		return store_close(c, st, call_failed(c));
	(void)kvf_seq_len(st, seq, 0, &len);
	printf("exported sequence %llu (%llu tokens a layer) to %s: %lld bytes\n",
	       (unsigned long long)seq, (unsigned long long)len, argv[3],
	       stat(argv[3], &sb) == 0 ? (long long)sb.st_size : -1LL);
	return store_close(c, st, EXIT_OK);
}

int cmd_import(const struct cmd *c, int argc, char **argv)
{
	uint64_t seq = KVF_SEQ_NONE, got = 0;
	kvf_store *st;
	int rc;

	if (argc < 3)
		return usage_error(c, "missing FILE");
	if (argc > 4)
		return usage_error(c, "unexpected argument '%s'", argv[4]);
	if (argc == 4 && (parse_u64(argv[3], &seq) != 0 || seq == KVF_SEQ_NONE))
		return usage_error(c, "SEQ '%s' is not a sequence id", argv[3]);
	/* checked on the store opened read-only first, so that a refused
	 * import leaves it as it was (a writable open and close is a
	 * durable point of its own) */
	if ((rc = store_open(c, argv[1], &st)) != EXIT_OK)
		return rc;
	if (kvf_seq_import(st, argv[2], seq, &got) != KVF_ENOTSUP ||
	    strncmp(kvf_last_error(), "kvf_seq_import: the store ", 26) != 0)
		return store_close(c, st, call_failed(c));
	if ((rc = store_close(c, st, EXIT_OK)) != EXIT_OK)
		return rc;
	if ((rc = open_rw(c, argv[1], &st)) != EXIT_OK)
		return rc;
	if (kvf_seq_import(st, argv[2], seq, &got) != KVF_OK)
		return store_close(c, st, call_failed(c));
	printf("imported %s as sequence %llu\n", argv[2], (unsigned long long)got);
	return store_close(c, st, EXIT_OK);
}
