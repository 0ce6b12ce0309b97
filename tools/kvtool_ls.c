/*
 * kvtool_ls.c - `kvtool ls [--json] DIR`: the sequences of a store, by id,
 * with their fork relations, pages and per-layer lengths (kvf_seq_list,
 * kvf_seq_info_get, kvf_seq_len, kvf_seq_x_len), then the store's cached
 * prefixes (kvf_prefix_list), marked "cached" in the PREFIX column.  A
 * cached prefix holds the same whole groups in every layer, so its K/V
 * lengths are its tokens over the layers; its X is shown in all.
 *
 * The table shows per-layer lengths compactly ("100 x32" when all 32
 * layers hold 100 tokens); --json gives the full arrays.  The store is
 * opened read-only and never changed.
 */
#include <stdlib.h>
#include <string.h>

#include "kvtool.h"

#define CELL 64 /* bytes of a formatted number cell */

/* One sequence: what ls prints of it. */
struct seq_row {
	kvf_seq_info info; /* kvf_seq_info_get */
	uint64_t *len;     /* [n_layers] K/V tokens */
	uint64_t *x_len;   /* [n_layers] X tokens */
};

/* lengths_text - lens[0..n) compactly: "N xn" if all equal, "-" if all
 * zero and dash_if_zero, else the numbers separated by spaces; malloc'd */
static char *lengths_text(const uint64_t *lens, uint32_t n, int dash_if_zero)
{
	size_t cap = (size_t)n * 21 + 32;
	char *buf = malloc(cap);
	size_t at = 0;
	int same = 1, zero = 1;

	if (buf == NULL)
		return NULL;
	for (uint32_t i = 0; i < n; i++) {
		same &= lens[i] == lens[0];
		zero &= lens[i] == 0;
	}
	if (zero && dash_if_zero) {
		snprintf(buf, cap, "-");
	} else if (same && n > 1) {
		snprintf(buf, cap, "%llu x%u", (unsigned long long)lens[0], n);
	} else {
		buf[0] = '\0';
		for (uint32_t i = 0; i < n; i++)
			at += (size_t)snprintf(buf + at, cap - at, "%s%llu",
					       i ? " " : "",
					       (unsigned long long)lens[i]);
	}
	return buf;
}

static void json_array(const uint64_t *v, uint32_t n)
{
	putchar('[');
	for (uint32_t i = 0; i < n; i++)
		printf("%s%llu", i ? ", " : "", (unsigned long long)v[i]);
	putchar(']');
}

static int print_json(const struct seq_row *rows, size_t n, uint32_t layers)
{
	fputs("{\"sequences\": [", stdout);
	for (size_t i = 0; i < n; i++) {
		const kvf_seq_info *si = &rows[i].info;

		printf("%s{\"id\": %llu, \"parent\": ", i ? ", " : "",
		       (unsigned long long)si->id);
		if (si->parent == KVF_SEQ_NONE)
			fputs("null", stdout);
		else
			printf("%llu", (unsigned long long)si->parent);
		printf(", \"family\": %llu, \"pages\": %llu, \"shared_pages\": %llu, \"tokens\": %llu, \"x_tokens\": %llu",
		       (unsigned long long)si->family,
		       (unsigned long long)si->pages,
		       (unsigned long long)si->shared_pages,
		       (unsigned long long)si->tokens,
		       (unsigned long long)si->x_tokens);
		printf(", \"prefix\": {\"token_ids\": %llu, \"chunks\": %llu, \"shared_chunks\": %llu, \"hash\": \"%016llx\"}, \"cached\": %s",
		       (unsigned long long)si->prefix_tokens,
		       (unsigned long long)si->prefix_chunks,
		       (unsigned long long)si->prefix_shared_chunks,
		       (unsigned long long)si->prefix_hash,
		       si->cached ? "true" : "false");
		if (si->cached)
			printf(", \"cached_own_chunks\": %llu, \"cached_hits\": %llu",
			       (unsigned long long)si->cached_own_chunks,
			       (unsigned long long)si->cached_hits);
		fputs(", \"len\": ", stdout);
		json_array(rows[i].len, layers);
		fputs(", \"x_len\": ", stdout);
		if (si->cached)
			printf("%llu", (unsigned long long)si->x_tokens);
		else
			json_array(rows[i].x_len, layers);
		putchar('}');
	}
	fputs("]}\n", stdout);
	return EXIT_OK;
}

/* prefix_cell - "-" without token ids; "C chunks" when none is shared;
 * else "S/C @HASH": S of its C chunks shared, the deepest shared one
 * named by the first 8 hex digits of its chain hash, so rows with the
 * same @HASH share that prefix */
static void prefix_cell(char *cell, const kvf_seq_info *si)
{
	if (si->cached) /* its chunks only it holds, and their hits */
		snprintf(cell, CELL, "cached %llu/%llu own, %llu hits",
			 (unsigned long long)si->cached_own_chunks,
			 (unsigned long long)si->prefix_chunks,
			 (unsigned long long)si->cached_hits);
	else if (si->prefix_tokens == 0)
		snprintf(cell, CELL, "-");
	else if (si->prefix_shared_chunks == 0)
		snprintf(cell, CELL, "%llu chunks", (unsigned long long)si->prefix_chunks);
	else
		snprintf(cell, CELL, "%llu/%llu @%08llx",
			 (unsigned long long)si->prefix_shared_chunks,
			 (unsigned long long)si->prefix_chunks,
			 (unsigned long long)(si->prefix_hash >> 32));
}

static int print_text(const struct seq_row *rows, size_t n, uint32_t layers)
{
	static const char *const head[] = { "SEQ", "PARENT", "FAMILY", "PAGES",
					     "SHARED", "PREFIX", "K/V TOKENS",
					     "X TOKENS" };
	struct table t = { .n_cols = 8 };

	table_row(&t, head);
	for (size_t i = 0; i < n; i++) {
		const kvf_seq_info *si = &rows[i].info;
		char id[CELL], parent[CELL], family[CELL], pages[CELL], shared[CELL];
		char prefix[CELL];
		char *kv = lengths_text(rows[i].len, layers, 0);
		char *x = lengths_text(rows[i].x_len, layers, 1);

		if (si->cached && x && si->x_tokens) /* per layer unknown */
			snprintf(x, (size_t)layers * 21 + 32, "%llu in all",
				 (unsigned long long)si->x_tokens);
		const char *cells[8] = { id, parent, family, pages, shared,
					 prefix, kv, x };

		snprintf(id, CELL, "%llu", (unsigned long long)si->id);
		if (si->parent == KVF_SEQ_NONE)
			snprintf(parent, CELL, "-");
		else
			snprintf(parent, CELL, "%llu", (unsigned long long)si->parent);
		snprintf(family, CELL, "%llu", (unsigned long long)si->family);
		snprintf(pages, CELL, "%llu", (unsigned long long)si->pages);
		snprintf(shared, CELL, "%llu", (unsigned long long)si->shared_pages);
		prefix_cell(prefix, si);
		if (kv && x)
			table_row(&t, cells);
		else
			t.oom = 1;
		free(kv);
		free(x);
	}
	return table_print(&t, stdout);
}

/* gather - rows[i] for ids[i]; a sequence freed meanwhile cannot happen
 * (the store is open read-only here), so any failure is reported */
static int gather(const struct cmd *c, kvf_store *st, const uint64_t *ids,
		  size_t n, uint32_t layers, struct seq_row *rows)
{
	for (size_t i = 0; i < n; i++) {
		struct seq_row *r = &rows[i];

		memset(&r->info, 0, sizeof(r->info));
		r->info.struct_size = sizeof(r->info);
		r->len = calloc(layers, sizeof(uint64_t));
		r->x_len = calloc(layers, sizeof(uint64_t));
		if (r->len == NULL || r->x_len == NULL) {
			fprintf(stderr, "kvtool: %s: out of memory\n", c->name);
			return EXIT_FAILED;
		}
		if (kvf_seq_info_get(st, ids[i], &r->info) != KVF_OK)
			return call_failed(c);
		if (r->info.cached) { /* the sequence calls do not see it */
			for (uint32_t l = 0; l < layers; l++)
				r->len[l] = r->info.tokens / layers;
			continue;
		}
		for (uint32_t l = 0; l < layers; l++)
			if (kvf_seq_len(st, ids[i], l, &r->len[l]) != KVF_OK ||
			    kvf_seq_x_len(st, ids[i], l, &r->x_len[l]) != KVF_OK)
				return call_failed(c);
	}
	return EXIT_OK;
}

int cmd_ls(const struct cmd *c, int argc, char **argv)
{
	int json = 0, rc;
	const struct opt_spec opts[] = { { "--json", &json, NULL } };
	kvf_store_info si = { .struct_size = sizeof(si) };
	struct seq_row *rows = NULL;
	uint64_t *ids = NULL;
	size_t n = 0, cap, n_cached;
	const char *dir;
	kvf_store *st;

	if ((rc = parse_store_args(c, argc, argv, opts, 1, &dir)) != EXIT_OK)
		return rc;
	if ((rc = store_open(c, dir, &st)) != EXIT_OK)
		return rc;
	if (kvf_store_info_get(st, &si) != KVF_OK ||
	    kvf_seq_list(st, NULL, 0, &cap) != KVF_OK ||
	    kvf_prefix_list(st, NULL, 0, &n_cached) != KVF_OK)
		return store_close(c, st, call_failed(c));
	cap += n_cached;
	ids = calloc(cap ? cap : 1, sizeof(*ids));
	rows = calloc(cap ? cap : 1, sizeof(*rows));
	if (ids == NULL || rows == NULL) {
		fprintf(stderr, "kvtool: %s: out of memory\n", c->name);
		rc = EXIT_FAILED;
	} else if (kvf_seq_list(st, ids, cap - n_cached, &n) != KVF_OK ||
		   kvf_prefix_list(st, ids + n, n_cached, &n_cached) != KVF_OK) {
		rc = call_failed(c); /* read-only: the counts do not change */
	} else {
		n += n_cached;
		rc = gather(c, st, ids, n, si.model.n_layers, rows);
	}
	if (rc == EXIT_OK && json)
		rc = print_json(rows, n, si.model.n_layers);
	else if (rc == EXIT_OK)
		rc = print_text(rows, n, si.model.n_layers);
	for (size_t i = 0; rows && i < cap; i++) {
		free(rows[i].len);
		free(rows[i].x_len);
	}
	free(rows);
	free(ids);
	return store_close(c, st, rc);
}
