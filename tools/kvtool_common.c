/*
 * kvtool_common.c - what the store commands (info, ls, segments, verify,
 * dump) share: their argument parsing, opening a store read-only, names of
 * the library's enums, byte counts, JSON strings and text tables.
 *
 * The store commands open the store with kvf_options.read_only = 1 and a
 * zero model, which takes every setting as stored, and never change it.
 * A missing DIR is reported before kvf_open, which would otherwise create
 * the directory.  No state, no locking: one run, one thread.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kvtool.h"

/* find_opt - the spec named by arg ("--name" or "--name=value") */
static const struct opt_spec *find_opt(const struct opt_spec *opts,
				       size_t n_opts, const char *arg,
				       const char **inline_value)
{
	for (size_t i = 0; i < n_opts; i++) {
		size_t len = strlen(opts[i].name);

		if (strncmp(arg, opts[i].name, len) != 0)
			continue;
		if (arg[len] == '\0') {
			*inline_value = NULL;
			return &opts[i];
		}
		if (arg[len] == '=') {
			*inline_value = arg + len + 1;
			return &opts[i];
		}
	}
	return NULL;
}

int parse_store_args(const struct cmd *c, int argc, char **argv,
		     const struct opt_spec *opts, size_t n_opts,
		     const char **dir)
{
	int only_args = 0;

	*dir = NULL;
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i], *value;
		const struct opt_spec *o;

		if (!only_args && strcmp(arg, "--") == 0) {
			only_args = 1;
			continue;
		}
		if (only_args || arg[0] != '-' || arg[1] == '\0') {
			if (*dir != NULL)
				return usage_error(c, "unexpected argument '%s'", arg);
			*dir = arg;
			continue;
		}
		o = find_opt(opts, n_opts, arg, &value);
		if (o == NULL)
			return usage_error(c, "unknown option '%s'", arg);
		if (o->flag) {
			if (value != NULL)
				return usage_error(c, "option '%s' takes no value",
						   o->name);
			*o->flag = 1;
			continue;
		}
		if (value == NULL) {
			if (i + 1 == argc)
				return usage_error(c, "option '%s' needs a value",
						   o->name);
			value = argv[++i];
		}
		*o->value = value;
	}
	if (*dir == NULL)
		return usage_error(c, "missing DIR");
	if (**dir == '\0')
		return usage_error(c, "DIR is empty");
	return EXIT_OK;
}

int call_failed(const struct cmd *c)
{
	fprintf(stderr, "kvtool: %s: %s\n", c->name, kvf_last_error());
	return EXIT_FAILED;
}

int store_open(const struct cmd *c, const char *dir, kvf_store **st)
{
	kvf_options o;
	struct stat sb;

	if (stat(dir, &sb) != 0) {
		fprintf(stderr, "kvtool: %s: %s holds no store (%s)\n", c->name,
			dir, strerror(errno));
		return EXIT_FAILED;
	}
	if (!S_ISDIR(sb.st_mode)) {
		fprintf(stderr, "kvtool: %s: %s holds no store (not a directory)\n",
			c->name, dir);
		return EXIT_FAILED;
	}
	kvf_options_init(&o, NULL); /* a zero model: everything as stored */
	o.read_only = 1;
	if (kvf_open(dir, &o, st) != KVF_OK)
		return call_failed(c);
	return EXIT_OK;
}

int store_close(const struct cmd *c, kvf_store *st, int rc)
{
	if (kvf_close(st) != KVF_OK) {
		call_failed(c);
		return EXIT_FAILED;
	}
	return rc;
}

int parse_u64(const char *s, uint64_t *out)
{
	unsigned long long v;
	char *end;

	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || *end != '\0')
		return -1;
	*out = v;
	return 0;
}

const char *human_bytes(char *buf, size_t cap, uint64_t bytes)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB" };
	double v = (double)bytes;
	int u = -1;

	if (bytes < 1024) {
		snprintf(buf, cap, "%llu B", (unsigned long long)bytes);
		return buf;
	}
	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	snprintf(buf, cap, "%.1f %s", v, units[u]);
	return buf;
}

void json_string(FILE *f, const char *s)
{
	putc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		switch (*p) {
		case '"': fputs("\\\"", f); break;
		case '\\': fputs("\\\\", f); break;
		case '\n': fputs("\\n", f); break;
		case '\t': fputs("\\t", f); break;
		default:
			if (*p < 0x20)
				fprintf(f, "\\u%04x", *p);
			else
				putc(*p, f);
		}
	}
	putc('"', f);
}

void table_row(struct table *t, const char *const *cells)
{
	size_t base;

	if (t->oom)
		return;
	if (t->n_rows == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 64;
		char **p = realloc(t->cells, cap * t->n_cols * sizeof(*p));

		if (p == NULL) {
			t->oom = 1;
			return;
		}
		t->cells = p;
		t->cap = cap;
	}
	base = t->n_rows * t->n_cols;
	for (size_t i = 0; i < t->n_cols; i++) {
		t->cells[base + i] = strdup(cells[i]);
		if (t->cells[base + i] == NULL) {
			while (i-- > 0)
				free(t->cells[base + i]);
			t->oom = 1;
			return;
		}
	}
	t->n_rows++;
}

void table_free(struct table *t)
{
	for (size_t k = 0; k < t->n_rows * t->n_cols; k++)
		free(t->cells[k]);
	free(t->cells);
	t->cells = NULL;
	t->n_rows = t->cap = 0;
}

int table_print(struct table *t, FILE *f)
{
	size_t *width = calloc(t->n_cols ? t->n_cols : 1, sizeof(*width));
	int rc = EXIT_OK;

	if (width == NULL || t->oom) {
		fputs("kvtool: out of memory for the output table\n", stderr);
		rc = EXIT_FAILED;
	}
	for (size_t r = 0; r < t->n_rows && rc == EXIT_OK; r++)
		for (size_t i = 0; i < t->n_cols; i++) {
			size_t w = strlen(t->cells[r * t->n_cols + i]);

			if (w > width[i])
				width[i] = w;
		}
	for (size_t r = 0; r < t->n_rows && rc == EXIT_OK; r++)
		for (size_t i = 0; i < t->n_cols; i++) {
			const char *cell = t->cells[r * t->n_cols + i];

			if (i + 1 == t->n_cols)
				fprintf(f, "%s\n", cell);
			else
				fprintf(f, "%-*s  ", (int)width[i], cell);
		}
	table_free(t);
	free(width);
	return rc;
}
