/*
 * kvtool.c - the kvflash command-line tool: `kvtool [OPTIONS] CMD [ARGS]`.
 *
 * This file holds main(), the global options, the subcommand table and the
 * usage text.  kvtool is an ordinary client of the library: it includes only
 * the public header kvflash.h and links libkvflash, so everything it shows
 * is something any embedding program can get too.
 *
 * Exit status: 0 success; 1 the command ran and failed (this includes an
 * error writing its output); 2 bad usage.  A usage error prints exactly one
 * line on stderr, "kvtool: PROBLEM (HINT)", and nothing on stdout, so that
 * scripts can tell a typo from a failed command.
 *
 * Adding a command: write tools/kvtool_<cmd>.c defining
 * `int cmd_<cmd>(const struct cmd *c, int argc, char **argv)`, declare it
 * in tools/kvtool.h, add the file to tools/CMakeLists.txt and add one row
 * to cmds[] below with its usage line and summary.  `kvtool help CMD` and
 * `kvtool CMD --help` then describe it with no further code.  A command
 * receives argv[0] = its name and reports bad arguments with usage_error().
 * The store commands (info, ls, segments, verify, dump) share their
 * argument parsing and store opening in tools/kvtool_common.c.
 *
 * No state, no locking: one run, one thread.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kvtool.h"

static int cmd_help(const struct cmd *c, int argc, char **argv);
static int cmd_version(const struct cmd *c, int argc, char **argv);

/*
 * The subcommands, in the order --help lists them.  New commands go here,
 * one row each, with their code in tools/kvtool_<cmd>.c (see the top of
 * this file).
 */
static const struct cmd cmds[] = {
	{ "help", "[CMD]", "describe kvtool, or one command",
	  "With no CMD, the same as `kvtool --help`.\n", cmd_help },
	{ "version", "", "print the library and header versions",
	  "Prints three lines: the version of kvtool, the version of the\n"
	  "libkvflash it runs with (kvf_version_string, kvf_version_number),\n"
	  "and the version of the kvflash.h it was compiled against.\n",
	  cmd_version },
	{ "info", "[--json] DIR", "show a store's configuration and use",
	  "Shows the model shape, the format and library versions, the page,\n"
	  "segment and stripe layout, the capacity, the number of sequences,\n"
	  "the segments by state and the live pages, and the byte counts and\n"
	  "write amplification of kvf_stats_get (counted since this open, so\n"
	  "zero for the read-only open kvtool makes).  --json prints one JSON\n"
	  "object instead.  The store is opened read-only and not changed.\n",
	  cmd_info },
	{ "ls", "[--json] DIR", "list a store's sequences",
	  "One row per sequence, by id: its parent (if forked) and family, the\n"
	  "pages its index names and how many of them it shares with forks, and\n"
	  "its K/V and X tokens per layer (\"N xL\" when all L layers hold N).\n"
	  "--json prints one JSON object with the full per-layer lengths.\n"
	  "The store is opened read-only and not changed.\n",
	  cmd_ls },
	{ "segments", "[--all] [--json] DIR", "list a store's segments",
	  "One row per segment that is not free (--all: every segment): its\n"
	  "stripe and index on the stripe, state, data and live pages, the\n"
	  "sequence it was filled for, its commit number, its age and its erase\n"
	  "count; then a line of totals by state.  --json prints one JSON\n"
	  "object.  The store is opened read-only and not changed.\n",
	  cmd_segments },
	{ "verify", "[--json] DIR", "check every page of a store",
	  "Reads every page the index names and checks it against its checksum,\n"
	  "and checks that the index and the segment summaries agree (keys,\n"
	  "page hashes, summary headers).  Prints one line per damaged page or\n"
	  "summary, then the totals.  Exit status 0 when the store is clean, 1\n"
	  "when damage was found or the check could not run.  --json prints one\n"
	  "JSON object.  The store is opened read-only and not changed.\n",
	  cmd_verify },
	{ "dump", "[--json] DIR --seq S --layer L --head H --tokens A:B [--kind k|v|x]",
	  "print stored K, V or X values",
	  "Prints tokens A to B-1 of one head of one layer of sequence S as\n"
	  "floats, one line per token: K and V by default, or one --kind.  For\n"
	  "--kind x, H is the query-head slice of the X row.  A: or :B leave\n"
	  "that end open (the start, or the sequence's length).  --json prints\n"
	  "one JSON object with an array of rows per kind.  The store is opened\n"
	  "read-only and not changed.\n",
	  cmd_dump },
	{ "repair", "[--dry-run] [--json] DIR",
	  "salvage a store whose catalog lost records",
	  "For a store that kvf_open (and so every other command) refuses\n"
	  "because its catalog lost records of completed syncs (a damaged\n"
	  "write-ahead log in DIR/meta).  Keeps every catalog record that is\n"
	  "still whole, then reads every segment and rebuilds, from their\n"
	  "summaries, the records of segments written in the lost syncs, and\n"
	  "gives sequences back the whole token groups those prove (the last,\n"
	  "partial group of a sequence, X rows, fork links and optimizer steps\n"
	  "of the lost syncs stay lost).  Prints what it did; --dry-run only\n"
	  "counts.  Never run implicitly; the store must not be open.  Exit\n"
	  "status 0 when done (or nothing to do), 1 when it could not run.\n",
	  cmd_repair },
	{ "export", "DIR SEQ FILE", "write one sequence to a file",
	  "Writes sequence SEQ of the store in DIR to FILE: its K and V of\n"
	  "every layer, its X if it has any, and the token ids it registered\n"
	  "for prefix reuse, in a versioned file with an XXH3 checksum per\n"
	  "chunk, each chunk lz4-compressed only where that saves bytes\n"
	  "(kvf_seq_export).  FILE is replaced only when the export succeeds.\n"
	  "The store is opened read-only and not changed.\n",
	  cmd_export },
	{ "import", "DIR FILE [SEQ]", "make a sequence from an export file",
	  "Checks the whole of FILE (written by `kvtool export` or\n"
	  "kvf_seq_export), then makes it a sequence of the store in DIR, with\n"
	  "id SEQ or, without SEQ, the id it had (kvf_seq_import).  A damaged\n"
	  "file, one of another format version, or one of another model shape\n"
	  "is refused and the store is left as it was.\n",
	  cmd_import },
};

#define N_CMDS (sizeof(cmds) / sizeof(cmds[0]))

static const struct cmd *find_cmd(const char *name)
{
	for (size_t i = 0; i < N_CMDS; i++)
		if (strcmp(cmds[i].name, name) == 0)
			return &cmds[i];
	return NULL;
}

static int is_help_opt(const char *arg)
{
	return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0;
}

int usage_error(const struct cmd *c, const char *fmt, ...)
{
	va_list ap;

	fputs("kvtool: ", stderr);
	if (c)
		fprintf(stderr, "%s: ", c->name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (c)
		fprintf(stderr, " (usage: kvtool %s%s%s)\n", c->name,
			*c->args ? " " : "", c->args);
	else
		fputs(" (kvtool --help lists options)\n", stderr);
	return EXIT_USAGE;
}

/* unknown_cmd - the one message for a command name not in cmds[]. */
static int unknown_cmd(const char *name)
{
	fprintf(stderr,
		"kvtool: unknown command '%s' (kvtool --help lists commands)\n",
		name);
	return EXIT_USAGE;
}

static int missing_cmd(void)
{
	fputs("kvtool: missing command (kvtool --help lists commands)\n",
	      stderr);
	return EXIT_USAGE;
}

int bad_arg(const struct cmd *c, const char *arg)
{
	if (arg[0] == '-' && arg[1] != '\0')
		return usage_error(c, "unknown option '%s'", arg);
	return usage_error(c, "unexpected argument '%s'", arg);
}

/* The usage of `kvtool --help`, around the list of commands. */
static const char usage_head[] =
	"usage: kvtool [-h | --help] [--version] CMD [ARGS]\n"
	"\n"
	"kvtool is the command-line tool of kvflash, a flash-aware\n"
	"KV-cache store.\n"
	"\n"
	"commands:\n";
static const char usage_tail[] =
	"\n"
	"options:\n"
	"  -h, --help  print this help and exit\n"
	"  --version   print \"kvtool VERSION\" and exit\n"
	"\n"
	"`kvtool help CMD` or `kvtool CMD --help` describes one command.\n"
	"Exit status: 0 success, 1 the command failed, 2 bad usage.\n";

/* usage lines wider than this (name and args) get their summary on the
 * next line, so one long command does not push every summary right */
#define USAGE_WIDTH_MAX 32

static void usage(FILE *f)
{
	int width = 0;

	for (size_t i = 0; i < N_CMDS; i++) {
		int w = (int)(strlen(cmds[i].name) + 1 + strlen(cmds[i].args));

		if (w > width && w <= USAGE_WIDTH_MAX)
			width = w;
	}
	fputs(usage_head, f);
	for (size_t i = 0; i < N_CMDS; i++) {
		int pad = width - (int)strlen(cmds[i].name) - 1;

		if (pad < (int)strlen(cmds[i].args))
			fprintf(f, "  %s %s\n  %*s  %s\n", cmds[i].name,
				cmds[i].args, width, "", cmds[i].summary);
		else
			fprintf(f, "  %s %-*s  %s\n", cmds[i].name, pad,
				cmds[i].args, cmds[i].summary);
	}
	fputs(usage_tail, f);
}

static void cmd_usage(const struct cmd *c, FILE *f)
{
	fprintf(f, "kvtool %s - %s\n\nusage: kvtool %s%s%s\n", c->name,
		c->summary, c->name, *c->args ? " " : "", c->args);
	if (c->details)
		fprintf(f, "\n%s", c->details);
}

static int cmd_help(const struct cmd *c, int argc, char **argv)
{
	const struct cmd *about;

	if (argc > 2)
		return usage_error(c, "too many arguments");
	if (argc == 1) {
		usage(stdout);
		return EXIT_OK;
	}
	if (argv[1][0] == '-' && argv[1][1] != '\0')
		return bad_arg(c, argv[1]);
	about = find_cmd(argv[1]);
	if (about == NULL)
		return unknown_cmd(argv[1]);
	cmd_usage(about, stdout);
	return EXIT_OK;
}

static int cmd_version(const struct cmd *c, int argc, char **argv)
{
	if (argc > 1)
		return bad_arg(c, argv[1]);
	printf("kvtool %s\n", kvf_version_string());
	printf("libkvflash %s (version number %u), loaded at run time\n",
	       kvf_version_string(), kvf_version_number());
	printf("kvflash.h %d.%d.%d (version number %u), compiled in\n",
	       KVF_VERSION_MAJOR, KVF_VERSION_MINOR, KVF_VERSION_PATCH,
	       (unsigned)KVF_VERSION_NUMBER);
	return EXIT_OK;
}

/*
 * flush_stdout - make a failed write visible: `kvtool --help > /dev/full`
 * must not exit 0.  Returns rc, or EXIT_FAILED if stdout could not be
 * written and rc was a success.
 */
static int flush_stdout(int rc)
{
	int err = 0;

	if (fflush(stdout) != 0)
		err = errno;
	else if (ferror(stdout))
		err = EIO; /* an earlier write failed; its errno is gone */
	if (err == 0 || rc != EXIT_OK)
		return rc;
	fprintf(stderr, "kvtool: error writing to standard output: %s\n",
		strerror(err));
	return EXIT_FAILED;
}

/*
 * run - parse the global options, then hand the rest to one command.
 * The options are all read before any acts, so an unknown option is
 * reported even after --help or --version.
 */
static int run(int argc, char **argv)
{
	int want_help = 0, want_version = 0;
	const struct cmd *c;
	int i;

	for (i = 1; i < argc && argv[i][0] == '-' && argv[i][1] != '\0'; i++) {
		if (strcmp(argv[i], "--") == 0) {
			i++;
			break;
		}
		if (is_help_opt(argv[i]))
			want_help = 1;
		else if (strcmp(argv[i], "--version") == 0)
			want_version = 1;
		else
			return usage_error(NULL, "unknown option '%s'",
					   argv[i]);
	}
	if (want_help) /* `kvtool --help [CMD]` is `kvtool help [CMD]` */
		return cmd_help(find_cmd("help"), argc - i + 1, argv + i - 1);
	if (want_version) {
		if (i < argc)
			return usage_error(
				NULL,
				"unexpected argument '%s' after --version",
				argv[i]);
		printf("kvtool %s\n", kvf_version_string());
		return EXIT_OK;
	}
	if (i == argc)
		return missing_cmd();
	c = find_cmd(argv[i]);
	if (c == NULL)
		return unknown_cmd(argv[i]);
	if (argc - i > 1 && is_help_opt(argv[i + 1])) {
		if (argc - i > 2)
			return bad_arg(c, argv[i + 2]);
		cmd_usage(c, stdout);
		return EXIT_OK;
	}
	return c->run(c, argc - i, argv + i);
}

int main(int argc, char **argv)
{
	return flush_stdout(run(argc, argv));
}
