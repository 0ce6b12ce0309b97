/*
 * kvtool_dump.c - `kvtool dump [--json] DIR --seq S --layer L --head H
 * --tokens A:B [--kind k|v|x]`: stored values of one head as floats.
 *
 * K and V come from kvf_read (H is a KV head), X from kvf_read_x (H is the
 * query-head slice of the X row).  Values are read in chunks of
 * DUMP_CHUNK tokens and converted to float here: f16 and bf16 by the small
 * converters below, since kvtool sees only the public header.  In the
 * range A:B either end may be left out (the start; the sequence's length).
 * The store is opened read-only and never changed.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvtool.h"

#define DUMP_CHUNK 1024u /* tokens read per call */

/* What to dump, from the command line. */
struct dump_args {
	const char *dir;
	uint64_t seq;        /* --seq */
	uint64_t layer;      /* --layer */
	uint64_t head;       /* --head */
	uint64_t t0, t1;     /* --tokens A:B, half open */
	int t0_set, t1_set;  /* the ends given */
	int kinds;           /* bit k set: dump kind k (kvf_kind) */
	int json;            /* --json */
};

/* f16_to_float - IEEE binary16 to float, subnormals, inf and NaN too */
static float f16_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, bits;
	float f;

	if (exp == 0) { /* zero or subnormal: mant * 2^-24, exact in float */
		f = (float)mant * 5.9604644775390625e-8f;
		return sign ? -f : f;
	}
	if (exp == 31)
		bits = sign | 0x7f800000u | (mant << 13);
	else
		bits = sign | ((exp + 112) << 23) | (mant << 13);
	memcpy(&f, &bits, sizeof(f));
	return f;
}

/* bf16_to_float - bfloat16 is the upper half of a float */
static float bf16_to_float(uint16_t h)
{
	uint32_t bits = (uint32_t)h << 16;
	float f;

	memcpy(&f, &bits, sizeof(f));
	return f;
}

/* value - element i of buf, which holds elements of dtype d */
static float value(const unsigned char *buf, size_t i, kvf_dtype d)
{
	uint16_t h;
	float f;

	if (d == KVF_DTYPE_F32) {
		memcpy(&f, buf + i * 4, sizeof(f));
		return f;
	}
	memcpy(&h, buf + i * 2, sizeof(h));
	return d == KVF_DTYPE_F16 ? f16_to_float(h) : bf16_to_float(h);
}

/* parse_tokens - "A:B", "A:" or ":B" */
static int parse_tokens(const char *s, struct dump_args *a)
{
	const char *colon = strchr(s, ':');
	char first[32];
	size_t n;

	if (colon == NULL || (n = (size_t)(colon - s)) >= sizeof(first))
		return -1;
	memcpy(first, s, n);
	first[n] = '\0';
	a->t0_set = n > 0;
	a->t1_set = colon[1] != '\0';
	if ((a->t0_set && parse_u64(first, &a->t0)) ||
	    (a->t1_set && parse_u64(colon + 1, &a->t1)))
		return -1;
	return 0;
}

static int parse(const struct cmd *c, int argc, char **argv,
		 struct dump_args *a)
{
	const char *seq = NULL, *layer = NULL, *head = NULL, *tokens = NULL;
	const char *kind = NULL;
	const struct opt_spec opts[] = {
		{ "--json", &a->json, NULL }, { "--seq", NULL, &seq },
		{ "--layer", NULL, &layer },  { "--head", NULL, &head },
		{ "--tokens", NULL, &tokens }, { "--kind", NULL, &kind },
	};
	int rc;

	if ((rc = parse_store_args(c, argc, argv, opts, 6, &a->dir)) != EXIT_OK)
		return rc;
	if (seq == NULL || layer == NULL || head == NULL || tokens == NULL)
		return usage_error(c, "missing %s",
				   !seq ? "--seq" : !layer ? "--layer" :
				   !head ? "--head" : "--tokens");
	if (parse_u64(seq, &a->seq))
		return usage_error(c, "--seq '%s' is not a sequence id", seq);
	if (parse_u64(layer, &a->layer) || a->layer > UINT32_MAX)
		return usage_error(c, "--layer '%s' is not a layer number", layer);
	if (parse_u64(head, &a->head) || a->head > UINT32_MAX)
		return usage_error(c, "--head '%s' is not a head number", head);
	if (parse_tokens(tokens, a))
		return usage_error(c, "--tokens '%s' is not A:B, A: or :B", tokens);
	if (a->t0_set && a->t1_set && a->t0 > a->t1)
		return usage_error(c, "--tokens '%s' is reversed", tokens);
	if (kind == NULL)
		a->kinds = 1 << KVF_KIND_K | 1 << KVF_KIND_V;
	else if (strcmp(kind, "k") == 0)
		a->kinds = 1 << KVF_KIND_K;
	else if (strcmp(kind, "v") == 0)
		a->kinds = 1 << KVF_KIND_V;
	else if (strcmp(kind, "x") == 0)
		a->kinds = 1 << KVF_KIND_X;
	else
		return usage_error(c, "--kind '%s' is not k, v or x", kind);
	return EXIT_OK;
}

/* resolve_range - fill in open ends; check them and the head against the
 * store.  Return EXIT_OK or EXIT_FAILED after a message. */
static int resolve_range(const struct cmd *c, kvf_store *st,
			 const kvf_store_info *si, struct dump_args *a)
{
	int x = a->kinds == 1 << KVF_KIND_X;
	uint64_t len;
	kvf_status rc;

	if (x && a->head >= si->model.n_q_heads) {
		fprintf(stderr, "kvtool: %s: --head %llu out of range for X (store has %u query heads)\n",
			c->name, (unsigned long long)a->head, si->model.n_q_heads);
		return EXIT_FAILED;
	}
	rc = x ? kvf_seq_x_len(st, a->seq, (uint32_t)a->layer, &len)
	       : kvf_seq_len(st, a->seq, (uint32_t)a->layer, &len);
	if (rc != KVF_OK)
		return call_failed(c);
	if (!a->t1_set)
		a->t1 = len;
	if (!a->t0_set)
		a->t0 = 0;
	if (a->t0 > a->t1) {
		fprintf(stderr, "kvtool: %s: token range [%llu, %llu) is reversed (sequence %llu layer %llu has %llu tokens)\n",
			c->name, (unsigned long long)a->t0,
			(unsigned long long)a->t1, (unsigned long long)a->seq,
			(unsigned long long)a->layer, (unsigned long long)len);
		return EXIT_FAILED;
	}
	/* checked before anything is printed, as the start is: a range
	 * past the end printed the rows up to it, then failed */
	if (a->t1 > len) {
		fprintf(stderr, "kvtool: %s: token range [%llu, %llu) is past the end of sequence %llu layer %llu (%llu %stokens)\n",
			c->name, (unsigned long long)a->t0,
			(unsigned long long)a->t1, (unsigned long long)a->seq,
			(unsigned long long)a->layer, (unsigned long long)len,
			x ? "X " : "");
		return EXIT_FAILED;
	}
	return EXIT_OK;
}

/* read_chunk - tokens [t, t + n) of kind into out ([n][head_dim] of the
 * store's dtype); row is a scratch buffer for X rows */
static kvf_status read_chunk(kvf_store *st, const kvf_store_info *si,
			     const struct dump_args *a, kvf_kind kind,
			     uint64_t t, uint32_t n, unsigned char *out,
			     unsigned char *xrows)
{
	size_t elt = si->model.dtype == KVF_DTYPE_F32 ? 4 : 2;
	size_t hrow = (size_t)si->model.head_dim * elt;
	size_t xrow = hrow * si->model.n_q_heads;
	kvf_status rc;

	if (kind != KVF_KIND_X)
		return kvf_read(st, a->seq, (uint32_t)a->layer, (uint32_t)a->head,
				t, t + n, kind == KVF_KIND_K ? out : NULL,
				kind == KVF_KIND_V ? out : NULL);
	rc = kvf_read_x(st, a->seq, (uint32_t)a->layer, t, t + n, xrows);
	if (rc == KVF_OK)
		for (uint32_t i = 0; i < n; i++)
			memcpy(out + i * hrow, xrows + i * xrow + a->head * hrow,
			       hrow);
	return rc;
}

static void print_row(const unsigned char *row, const kvf_store_info *si,
		      int json)
{
	for (uint32_t d = 0; d < si->model.head_dim; d++) {
		float f = value(row, d, si->model.dtype);

		if (json && !isfinite(f))
			printf("%snull", d ? ", " : "");
		else if (json)
			printf("%s%.9g", d ? ", " : "", (double)f);
		else
			printf(" %g", (double)f);
	}
}

/* dump_kind - every token of the range for one kind */
static int dump_kind(const struct cmd *c, kvf_store *st,
		     const kvf_store_info *si, const struct dump_args *a,
		     kvf_kind kind, unsigned char *buf, unsigned char *xrows)
{
	size_t hrow = (size_t)si->model.head_dim *
		      (si->model.dtype == KVF_DTYPE_F32 ? 4 : 2);
	const char *label = kind == KVF_KIND_K ? "K" : kind == KVF_KIND_V ? "V" : "X";

	for (uint64_t t = a->t0; t < a->t1; t += DUMP_CHUNK) {
		uint32_t n = a->t1 - t < DUMP_CHUNK ? (uint32_t)(a->t1 - t) : DUMP_CHUNK;

		if (read_chunk(st, si, a, kind, t, n, buf, xrows) != KVF_OK)
			return call_failed(c);
		for (uint32_t i = 0; i < n; i++) {
			if (a->json) {
				printf("%s[", t + i > a->t0 ? ", " : "");
				print_row(buf + i * hrow, si, 1);
				putchar(']');
			} else {
				printf("%s %llu:", label, (unsigned long long)(t + i));
				print_row(buf + i * hrow, si, 0);
				putchar('\n');
			}
		}
	}
	return EXIT_OK;
}

static int dump(const struct cmd *c, kvf_store *st, const kvf_store_info *si,
		const struct dump_args *a)
{
	size_t hrow = (size_t)si->model.head_dim *
		      (si->model.dtype == KVF_DTYPE_F32 ? 4 : 2);
	unsigned char *buf = malloc(DUMP_CHUNK * hrow);
	unsigned char *xrows = malloc(DUMP_CHUNK * hrow * si->model.n_q_heads);
	int rc = EXIT_OK;

	if (buf == NULL || xrows == NULL) {
		fprintf(stderr, "kvtool: %s: out of memory\n", c->name);
		rc = EXIT_FAILED;
		goto out;
	}
	/* read the first chunk of each kind before printing anything, so
	 * that the usual failures (range, head, a damaged page) leave stdout
	 * empty */
	for (int k = KVF_KIND_K; k <= KVF_KIND_X && a->t1 > a->t0; k++)
		if ((a->kinds & 1 << k) &&
		    read_chunk(st, si, a, (kvf_kind)k, a->t0,
			       a->t1 - a->t0 < DUMP_CHUNK ? (uint32_t)(a->t1 - a->t0)
							  : DUMP_CHUNK,
			       buf, xrows) != KVF_OK) {
			rc = call_failed(c);
			goto out;
		}
	if (a->json) {
		fputs("{\"store\": ", stdout);
		json_string(stdout, a->dir);
		printf(", \"seq\": %llu, \"layer\": %llu, \"head\": %llu, \"tokens\": [%llu, %llu], \"dtype\": \"%s\", \"head_dim\": %u",
		       (unsigned long long)a->seq, (unsigned long long)a->layer,
		       (unsigned long long)a->head, (unsigned long long)a->t0,
		       (unsigned long long)a->t1, kvf_dtype_name(si->model.dtype),
		       si->model.head_dim);
	} else {
		printf("# sequence %llu layer %llu %s %llu, tokens [%llu, %llu), %s, head_dim %u\n",
		       (unsigned long long)a->seq, (unsigned long long)a->layer,
		       a->kinds == 1 << KVF_KIND_X ? "X slice" : "KV head",
		       (unsigned long long)a->head, (unsigned long long)a->t0,
		       (unsigned long long)a->t1, kvf_dtype_name(si->model.dtype),
		       si->model.head_dim);
	}
	for (int k = KVF_KIND_K; k <= KVF_KIND_X && rc == EXIT_OK; k++) {
		if (!(a->kinds & 1 << k))
			continue;
		if (a->json)
			printf(", \"%s\": [", kvf_kind_name((kvf_kind)k));
		rc = dump_kind(c, st, si, a, (kvf_kind)k, buf, xrows);
		if (a->json)
			putchar(']');
	}
	if (a->json)
		fputs("}\n", stdout);
out:
	free(buf);
	free(xrows);
	return rc;
}

int cmd_dump(const struct cmd *c, int argc, char **argv)
{
	struct dump_args a = { 0 };
	kvf_store_info si = { .struct_size = sizeof(si) };
	kvf_store *st;
	int rc;

	if ((rc = parse(c, argc, argv, &a)) != EXIT_OK)
		return rc;
	if ((rc = store_open(c, a.dir, &st)) != EXIT_OK)
		return rc;
	if (kvf_store_info_get(st, &si) != KVF_OK)
		return store_close(c, st, call_failed(c));
	if ((rc = resolve_range(c, st, &si, &a)) == EXIT_OK)
		rc = dump(c, st, &si, &a);
	return store_close(c, st, rc);
}
