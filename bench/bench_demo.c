/*
 * bench_demo.c - `kvbench demo`: the main job.  A synthetic decode
 * workload for a Llama-8B-shaped model on a store in a local directory.
 *
 * A batch of slots (8 by default) each holds one sequence.  A sequence
 * starts with a prompt (prefill: one kvf_append per layer of the whole
 * prompt) and then decodes one token per layer per step until its budget
 * of decode tokens is spent; then it is freed and a new sequence, with a
 * new prompt, takes its slot.  Prompt lengths and budgets are drawn from a
 * seeded generator, so a run is repeatable.  Every --sync-every steps the
 * store is synced (which also makes the space of freed sequences reusable)
 * and two heads of live sequences are read back whole and compared.  At
 * the end the store is synced, its figures are printed, it is closed,
 * reopened (cold: the store reads with O_DIRECT), every live sequence's
 * lengths and one head each are checked again, and it is closed for good
 * and left in the directory for `kvtool info`.
 *
 * Data: the K or V row of (sequence, layer, kind, token, head) is a
 * function of those five numbers alone (row_fill), so a reader checks a
 * row without keeping what was written.  Only the kvflash calls are timed;
 * generating and comparing rows is not.  One thread, no locking.
 *
 * The figures are printed by bench_demo_report.c (bench_demo_int.h is
 * what the two files share).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench/bench_common.h"
#include "bench/bench_demo_int.h"
#include "kvflash.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvbench demo [--dir DIR] [--seqs N] [--steps N] [--min-prompt N]\n"
		"                    [--max-prompt N] [--min-decode N] [--max-decode N]\n"
		"                    [--sync-every N] [--size BYTES] [--stripes N]\n"
		"                    [--segment BYTES] [--layers N] [--q-heads N]\n"
		"                    [--kv-heads N] [--head-dim N] [--seed N] [--json]\n"
		"  --dir DIR          the store directory; it must not hold a store yet\n"
		"                     (default ./kvflash-demo)\n"
		"  --seqs N           sequences decoding at once (default 8)\n"
		"  --steps N          decode steps of the batch (default 1024)\n"
		"  --min-prompt N     shortest prompt, tokens (default 128)\n"
		"  --max-prompt N     longest prompt, tokens (default 2048)\n"
		"  --min-decode N     fewest decode tokens of a sequence (default 32)\n"
		"  --max-decode N     most decode tokens of a sequence (default 384)\n"
		"  --sync-every N     decode steps between kvf_syncs (default 64)\n"
		"  --size BYTES       store capacity, K/M/G suffixes (default 4G)\n"
		"  --stripes N        stripes (files) (default 1)\n"
		"  --segment BYTES    segment size per stripe (default 1M)\n"
		"  --layers N, --q-heads N, --kv-heads N, --head-dim N\n"
		"                     the model (default 32, 32, 8, 128: Llama-3-8B), f16\n"
		"  --seed N           workload seed (default 1)\n"
		"  --json             JSON instead of text\n");
}

static int parse_args(int argc, char **argv, struct demo_args *a)
{
	const struct bench_opt opts[] = {
		BENCH_STR("--dir", a->dir),
		BENCH_U32("--seqs", a->n_slots, 1, MAX_SLOTS),
		BENCH_U32("--steps", a->steps, 0, 1u << 24),
		BENCH_U32("--min-prompt", a->min_prompt, 1, 1u << 20),
		BENCH_U32("--max-prompt", a->max_prompt, 1, 1u << 20),
		BENCH_U32("--min-decode", a->min_decode, 1, 1u << 24),
		BENCH_U32("--max-decode", a->max_decode, 1, 1u << 24),
		BENCH_U32("--sync-every", a->sync_every, 1, 1u << 24),
		BENCH_U32("--stripes", a->n_stripes, 1, 64),
		BENCH_MODEL_OPTS(a->model),
		BENCH_U64("--size", a->capacity_bytes, 1, UINT64_MAX),
		BENCH_U64("--segment", a->segment_bytes, 1, UINT64_MAX),
		BENCH_U64("--seed", a->seed, 0, UINT64_MAX),
		BENCH_BOOL("--json", a->json),
		{ 0 }
	};
	int rc;

	*a = (struct demo_args){ .dir = "kvflash-demo",
				 .model = BENCH_MODEL_DEFAULT,
				 .n_slots = 8,
				 .steps = 1024,
				 .min_prompt = 128,
				 .max_prompt = 2048,
				 .min_decode = 32,
				 .max_decode = 384,
				 .sync_every = 64,
				 .n_stripes = 1,
				 .segment_bytes = MIB,
				 .capacity_bytes = 4ull << 30,
				 .seed = 1 };
	rc = bench_parse_opts("demo", usage, opts, argc, argv);
	if (rc != 0)
		return rc;
	if (bench_check_heads("demo", &a->model) != 0)
		return 2;
	if (a->min_prompt > a->max_prompt || a->min_decode > a->max_decode)
		return bench_usage_error(
			"demo", "a --min- value is above its --max- value");
	return 0;
}

/* ---- data -------------------------------------------------------------- */

/* rng_below - the next draw of the workload generator, in [lo, hi] */
static uint32_t rng_between(struct demo *d, uint32_t lo, uint32_t hi)
{
	d->rng = bench_mix64(d->rng + 0x9e3779b97f4a7c15ull);
	return lo + (uint32_t)(d->rng % ((uint64_t)hi - lo + 1));
}

/* row_fill - the K (kind 0) or V (kind 1) row of one token of one head:
 * finite f16 values (top exponent bit clear) from the five numbers */
static void row_fill(uint16_t *dst, uint32_t n, uint64_t seq, uint32_t layer,
		     int kind, uint64_t token, uint32_t head)
{
	uint64_t h = bench_mix64(bench_mix64(seq ^ 0x6b76666c617368ull) ^
			   ((uint64_t)layer << 48) ^ ((uint64_t)kind << 47) ^
			   ((uint64_t)head << 32) ^ token);
	uint32_t a = (uint32_t)h, b = (uint32_t)(h >> 32) | 1u;

	for (uint32_t i = 0; i < n; i++)
		dst[i] = (uint16_t)((a + i * b) >> 9) & 0xbfffu;
}

/* fill_tokens - K and V of tokens [t0, t0 + n) of one layer, all heads,
 * in the [n][n_kv_heads][head_dim] layout kvf_append takes */
static void fill_tokens(struct demo *d, uint64_t seq, uint32_t layer,
			uint64_t t0, uint32_t n)
{
	uint32_t H = d->a->model.n_kv_heads, D = d->row_elts;

	for (uint32_t t = 0; t < n; t++)
		for (uint32_t h = 0; h < H; h++) {
			size_t at = ((size_t)t * H + h) * D;

			row_fill(d->k + at, D, seq, layer, 0, t0 + t, h);
			row_fill(d->v + at, D, seq, layer, 1, t0 + t, h);
		}
}

/* ---- the workload ------------------------------------------------------ */

/* start_seqs - new sequences in the n slots listed, their prompts
 * appended layer by layer across them (a batched prefill) */
static int start_seqs(struct demo *d, const uint32_t *which, uint32_t n)
{
	const struct demo_args *a = d->a;
	uint64_t t0;
	kvf_status rc;

	for (uint32_t i = 0; i < n; i++) {
		struct slot *s = &d->slots[which[i]];

		s->id = d->next_id++;
		s->prompt = rng_between(d, a->min_prompt, a->max_prompt);
		s->budget = rng_between(d, a->min_decode, a->max_decode);
		s->decoded = 0;
		t0 = bench_now_ns();
		rc = kvf_seq_create(d->st, s->id);
		d->t.other_ns += bench_now_ns() - t0;
		if (rc != KVF_OK)
			return bench_fail("demo", "kvf_seq_create", rc);
		d->t.seqs_created++;
		d->t.prefill_tokens += s->prompt;
	}
	for (uint32_t l = 0; l < a->model.n_layers; l++)
		for (uint32_t i = 0; i < n; i++) {
			struct slot *s = &d->slots[which[i]];

			fill_tokens(d, s->id, l, 0, s->prompt);
			t0 = bench_now_ns();
			rc = kvf_append(d->st, s->id, l, s->prompt, d->k, d->v);
			d->t.prefill_ns += bench_now_ns() - t0;
			if (rc != KVF_OK)
				return bench_fail("demo",
						  "kvf_append (prefill)", rc);
		}
	return 0;
}

/* decode_step - one token per layer for every slot, layer by layer */
static int decode_step(struct demo *d)
{
	const struct demo_args *a = d->a;
	uint32_t H = a->model.n_kv_heads, D = d->row_elts;

	for (uint32_t l = 0; l < a->model.n_layers; l++)
		for (uint32_t i = 0; i < a->n_slots; i++) {
			struct slot *s = &d->slots[i];
			uint64_t t = (uint64_t)s->prompt + s->decoded, t0;
			kvf_status rc;

			for (uint32_t h = 0; h < H; h++) {
				row_fill(d->k + (size_t)h * D, D, s->id, l, 0,
					 t, h);
				row_fill(d->v + (size_t)h * D, D, s->id, l, 1,
					 t, h);
			}
			t0 = bench_now_ns();
			rc = kvf_append(d->st, s->id, l, 1, d->k, d->v);
			d->t.decode_ns += bench_now_ns() - t0;
			if (rc != KVF_OK)
				return bench_fail("demo",
						  "kvf_append (decode)", rc);
		}
	for (uint32_t i = 0; i < a->n_slots; i++)
		d->slots[i].decoded++;
	d->t.decode_tokens += a->n_slots;
	return 0;
}

/* retire - free the sequences whose budget is spent and start new ones */
static int retire(struct demo *d)
{
	uint32_t done[MAX_SLOTS], n = 0;

	for (uint32_t i = 0; i < d->a->n_slots; i++) {
		struct slot *s = &d->slots[i];
		uint64_t t0;
		kvf_status rc;

		if (s->decoded < s->budget)
			continue;
		t0 = bench_now_ns();
		rc = kvf_seq_free(d->st, s->id);
		d->t.other_ns += bench_now_ns() - t0;
		if (rc != KVF_OK)
			return bench_fail("demo", "kvf_seq_free", rc);
		d->t.seqs_freed++;
		done[n++] = i;
	}
	return n ? start_seqs(d, done, n) : 0;
}

static int sync_store(struct demo *d)
{
	uint64_t t0 = bench_now_ns();
	kvf_status rc = kvf_sync(d->st);

	t0 = bench_now_ns() - t0;
	d->t.sync_ns += t0;
	if (t0 > d->t.sync_max_ns)
		d->t.sync_max_ns = t0;
	d->t.n_syncs++;
	return rc == KVF_OK ? 0 : bench_fail("demo", "kvf_sync", rc);
}

/* check_head - read tokens [0, len) of one head back and compare every
 * row; adds the bytes and the time in kvf_read to *bytes and *ns */
static int check_head(struct demo *d, const struct slot *s, uint32_t layer,
		      uint32_t head, uint64_t *bytes, uint64_t *ns)
{
	uint64_t len = (uint64_t)s->prompt + s->decoded, t0;
	uint32_t D = d->row_elts;
	kvf_status rc;

	t0 = bench_now_ns();
	rc = kvf_read(d->st, s->id, layer, head, 0, len, d->rk, d->rv);
	*ns += bench_now_ns() - t0;
	if (rc != KVF_OK)
		return bench_fail("demo", "kvf_read", rc);
	for (uint64_t t = 0; t < len; t++)
		for (int kind = 0; kind < 2; kind++) {
			const uint16_t *got = (kind ? d->rv : d->rk) + t * D;

			row_fill(d->want, D, s->id, layer, kind, t, head);
			if (memcmp(got, d->want, (size_t)D * 2) != 0) {
				fprintf(stderr,
					"kvbench demo: sequence %llu layer %u head %u: %s of token %llu read back wrong\n",
					(unsigned long long)s->id, layer, head,
					kind ? "V" : "K",
					(unsigned long long)t);
				return -1;
			}
		}
	*bytes += 2 * len * D * 2;
	return 0;
}

/* spot_check - after a periodic sync, read a few heads back */
static int spot_check(struct demo *d)
{
	const struct demo_args *a = d->a;

	for (uint32_t i = 0; i < CHECKS_PER_SYNC; i++) {
		const struct slot *s =
			&d->slots[rng_between(d, 0, a->n_slots - 1)];
		uint32_t l = rng_between(d, 0, a->model.n_layers - 1);
		uint32_t h = rng_between(d, 0, a->model.n_kv_heads - 1);

		if (check_head(d, s, l, h, &d->t.check_bytes, &d->t.check_ns) !=
		    0)
			return -1;
		d->t.check_heads++;
	}
	return 0;
}

static int run_workload(struct demo *d)
{
	const struct demo_args *a = d->a;
	uint32_t all[MAX_SLOTS];
	uint64_t t0 = bench_now_ns();

	for (uint32_t i = 0; i < a->n_slots; i++)
		all[i] = i;
	if (start_seqs(d, all, a->n_slots) != 0)
		return -1;
	for (uint32_t step = 1; step <= a->steps; step++) {
		if (decode_step(d) != 0 || retire(d) != 0)
			return -1;
		if (step % a->sync_every == 0 &&
		    (sync_store(d) != 0 || spot_check(d) != 0))
			return -1;
	}
	if (sync_store(d) != 0)
		return -1;
	d->t.wall_ns = bench_now_ns() - t0;
	d->stats.struct_size = sizeof(d->stats);
	if (kvf_stats_get(d->st, &d->stats) != KVF_OK)
		return bench_fail("demo", "kvf_stats_get", KVF_EINVAL);
	return 0;
}

/* cold_check - close, reopen, and check every live sequence's lengths
 * and one head of each, read from media */
static int cold_check(struct demo *d)
{
	const struct demo_args *a = d->a;
	uint64_t t0;
	kvf_status rc = kvf_close(d->st);

	d->st = NULL;
	if (rc != KVF_OK)
		return bench_fail("demo", "kvf_close", rc);
	t0 = bench_now_ns();
	if ((rc = kvf_open(a->dir, NULL, &d->st)) != KVF_OK)
		return bench_fail("demo", "kvf_open (reopen)", rc);
	d->t.reopen_ms = (double)(bench_now_ns() - t0) / 1e6;
	for (uint32_t i = 0; i < a->n_slots; i++) {
		const struct slot *s = &d->slots[i];
		uint64_t want = (uint64_t)s->prompt + s->decoded;

		for (uint32_t l = 0; l < a->model.n_layers; l++) {
			uint64_t n;

			if ((rc = kvf_seq_len(d->st, s->id, l, &n)) != KVF_OK)
				return bench_fail("demo", "kvf_seq_len", rc);
			if (n != want) {
				fprintf(stderr,
					"kvbench demo: after reopen sequence %llu layer %u has %llu tokens, expected %llu\n",
					(unsigned long long)s->id, l,
					(unsigned long long)n,
					(unsigned long long)want);
				return -1;
			}
		}
		if (check_head(d, s, (uint32_t)(s->id % a->model.n_layers),
			       (uint32_t)(s->id % a->model.n_kv_heads),
			       &d->t.cold_bytes, &d->t.cold_ns) != 0)
			return -1;
		d->t.cold_heads++;
	}
	rc = kvf_close(d->st);
	d->st = NULL;
	return rc == KVF_OK ? 0 : bench_fail("demo", "kvf_close", rc);
}

/* ---- main -------------------------------------------------------------- */

static int demo_setup(struct demo *d)
{
	const struct demo_args *a = d->a;
	size_t max_tok;
	struct stat sb;
	char *hdr;
	kvf_options o;
	kvf_status rc;
	int exists;

	d->row_elts = a->model.head_dim;
	d->tok_elts = a->model.n_kv_heads * a->model.head_dim;
	d->max_tokens = (uint64_t)a->max_prompt + a->max_decode;
	max_tok = (size_t)d->max_tokens;
	d->k = malloc((size_t)a->max_prompt * d->tok_elts * 2);
	d->v = malloc((size_t)a->max_prompt * d->tok_elts * 2);
	d->rk = malloc(max_tok * d->row_elts * 2);
	d->rv = malloc(max_tok * d->row_elts * 2);
	d->want = malloc((size_t)d->row_elts * 2);
	hdr = malloc(strlen(a->dir) + 16);
	if (!d->k || !d->v || !d->rk || !d->rv || !d->want || !hdr) {
		free(hdr);
		fprintf(stderr, "kvbench demo: out of memory\n");
		return -1;
	}
	snprintf(hdr, strlen(a->dir) + 16, "%s/KVFLASH", a->dir);
	exists = stat(hdr, &sb) == 0;
	free(hdr);
	if (exists) {
		fprintf(stderr,
			"kvbench demo: %s already holds a kvflash store (from an earlier run?); remove it or choose another --dir\n",
			a->dir);
		return -1;
	}
	bench_store_options(&o, &a->model, a->n_stripes, a->segment_bytes,
			    a->capacity_bytes);
	rc = bench_open_direct(a->dir, &o, &d->st, &d->t.direct_io);
	if (rc != KVF_OK)
		return bench_fail("demo", "kvf_open", rc);
	d->next_id = 1;
	d->rng = a->seed;
	return 0;
}

int bench_demo_main(int argc, char **argv)
{
	struct demo_args a;
	struct demo *d;
	int rc;

	if ((rc = parse_args(argc, argv, &a)) != 0)
		return rc == 1 ? 0 : rc;
	d = calloc(1, sizeof(*d));
	if (d == NULL) {
		fprintf(stderr, "kvbench demo: out of memory\n");
		return 1;
	}
	d->a = &a;
	rc = 1;
	if (demo_setup(d) == 0 && run_workload(d) == 0 && cold_check(d) == 0) {
		if (a.json)
			demo_print_json(d);
		else
			demo_print_text(d);
		rc = 0;
	}
	if (d->st && kvf_close(d->st) != KVF_OK)
		fprintf(stderr, "kvbench demo: kvf_close: %s\n",
			kvf_last_error());
	free(d->k);
	free(d->v);
	free(d->rk);
	free(d->rv);
	free(d->want);
	free(d);
	return rc;
}
