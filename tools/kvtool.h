/*
 * kvtool.h - what kvtool's commands share: the command table's row, exit
 * statuses, usage errors (tools/kvtool.c), and the helpers of the store
 * commands (tools/kvtool_common.c): argument parsing, opening a store
 * read-only, byte counts and JSON strings (names of enums: kvflash.h).
 *
 * kvtool is a client of the public API: these files include kvflash.h and
 * the C library, nothing of the engine.  One run, one thread, no locking.
 */
#ifndef KVF_TOOLS_KVTOOL_H
#define KVF_TOOLS_KVTOOL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kvflash.h"

enum {
	EXIT_OK = 0,     /* the command did what was asked */
	EXIT_FAILED = 1, /* the command ran and failed (verify: damage found) */
	EXIT_USAGE = 2   /* the command line was wrong; nothing was done */
};

/* One subcommand: one row of cmds[] in kvtool.c. */
struct cmd {
	const char *name;    /* as typed after kvtool */
	const char *args;    /* usage after the name, "" when none */
	const char *summary; /* one line for the command list */
	const char *details; /* more lines for `kvtool help CMD`, or NULL */
	/* run - do the command; argv[0] is its name; returns an exit status */
	int (*run)(const struct cmd *c, int argc, char **argv);
};

/*
 * usage_error - report bad usage as one line on stderr and return
 * EXIT_USAGE.  With a command c the line names it and ends with its usage
 * line; without, it ends with a pointer to --help.
 */
int usage_error(const struct cmd *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* bad_arg - usage error for an argument c does not take */
int bad_arg(const struct cmd *c, const char *arg);

/* the store commands, one file each */
int cmd_info(const struct cmd *c, int argc, char **argv);
int cmd_ls(const struct cmd *c, int argc, char **argv);
int cmd_segments(const struct cmd *c, int argc, char **argv);
int cmd_verify(const struct cmd *c, int argc, char **argv);
int cmd_dump(const struct cmd *c, int argc, char **argv);
int cmd_repair(const struct cmd *c, int argc, char **argv);
int cmd_export(const struct cmd *c, int argc, char **argv);
int cmd_import(const struct cmd *c, int argc, char **argv);

/* ---- kvtool_common.c ---------------------------------------------------- */

/* One option a store command accepts: a flag, or one with a value. */
struct opt_spec {
	const char *name;   /* "--json" */
	int *flag;          /* a flag: set to 1 when given; else NULL */
	const char **value; /* an option with a value ("--seq S" or
			     * "--seq=S"): receives it; else NULL */
};

/*
 * parse_store_args - argv[1..] of command c: the options in opts (in any
 * order, before or after DIR) and exactly one DIR.
 * Return: EXIT_OK, or EXIT_USAGE after one line on stderr.
 */
int parse_store_args(const struct cmd *c, int argc, char **argv,
		     const struct opt_spec *opts, size_t n_opts,
		     const char **dir);

/*
 * store_open - open the store in dir read-only, everything as stored.
 * Return: EXIT_OK and *st, or EXIT_FAILED after one line on stderr (the
 * library's message).  A missing directory is reported, never created.
 */
int store_open(const struct cmd *c, const char *dir, kvf_store **st);

/* store_close - close st; EXIT_FAILED (one line on stderr) if that fails,
 * else rc */
int store_close(const struct cmd *c, kvf_store *st, int rc);

/* call_failed - one line "kvtool: CMD: <kvf_last_error()>" on stderr;
 * returns EXIT_FAILED */
int call_failed(const struct cmd *c);

/* parse_u64 - s is a decimal number that fits; 0 on success, -1 if not */
int parse_u64(const char *s, uint64_t *out);


/* human_bytes - "1.5 MiB" into buf (cap >= 32) */
const char *human_bytes(char *buf, size_t cap, uint64_t bytes);

/* json_string - s as a JSON string literal, quotes included */
void json_string(FILE *f, const char *s);

/* A text table: rows of cells, printed with aligned columns. */
struct table {
	size_t n_cols;  /* cells per row */
	size_t n_rows;  /* rows added */
	size_t cap;     /* rows the cells array has room for */
	char **cells;   /* n_rows * n_cols strings, malloc'd */
	int oom;        /* a row could not be added */
};

/* table_row - add a row of t->n_cols cells formatted from the strings
 * given (copied); on out of memory t->oom is set */
void table_row(struct table *t, const char *const *cells);
/* table_print - the rows with each column padded to its widest cell (the
 * last column not padded), two spaces between columns; frees the rows.
 * Return: EXIT_OK, or EXIT_FAILED after a message if t->oom. */
int table_print(struct table *t, FILE *f);
/* table_free - drop the rows without printing them */
void table_free(struct table *t);

#endif /* KVF_TOOLS_KVTOOL_H */
