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
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench/bench_common.h"
#include "kvflash.h"

#define MIB (1ull << 20)
#define MAX_SLOTS 256u
#define CHECKS_PER_SYNC 2u /* heads read back after each periodic sync */

struct demo_args {
	const char *dir;                 /* the store directory */
	kvf_model model;                 /* the store's shape */
	uint32_t n_slots;                /* sequences decoding at once */
	uint32_t steps;                  /* decode steps of the whole batch */
	uint32_t min_prompt, max_prompt; /* prompt tokens, uniform */
	uint32_t min_decode, max_decode; /* decode tokens per sequence */
	uint32_t sync_every;             /* steps between kvf_syncs */
	uint32_t n_stripes;              /* store stripes */
	uint64_t segment_bytes;          /* bytes per segment per stripe */
	uint64_t capacity_bytes;         /* store capacity */
	uint64_t seed;                   /* workload generator seed */
	int json;                        /* JSON instead of text */
};

struct slot {
	uint64_t id;      /* its sequence */
	uint32_t prompt;  /* prompt tokens */
	uint32_t budget;  /* decode tokens to produce */
	uint32_t decoded; /* decode tokens so far */
};

/* What the run did and how long the calls took. */
struct demo_totals {
	uint64_t seqs_created, seqs_freed;
	uint64_t prefill_tokens, prefill_ns; /* prompt tokens, in kvf_append */
	uint64_t decode_tokens, decode_ns; /* sequence-tokens, in kvf_append */
	uint64_t n_syncs, sync_ns;         /* periodic and final syncs */
	uint64_t sync_max_ns;              /* the longest of them */
	uint64_t other_ns;                 /* seq create/free */
	uint64_t check_heads, check_bytes, check_ns; /* reads while running */
	uint64_t cold_heads, cold_bytes, cold_ns;    /* reads after reopen */
	uint64_t wall_ns; /* the workload, wall clock */
	double reopen_ms; /* kvf_open of the closed store */
	int direct_io;    /* O_DIRECT forced on and granted */
};

struct demo {
	const struct demo_args *a;
	kvf_store *st;
	struct slot slots[MAX_SLOTS];
	uint64_t next_id;    /* the next sequence id */
	uint64_t rng;        /* workload generator state */
	uint32_t row_elts;   /* head_dim */
	uint32_t tok_elts;   /* n_kv_heads * head_dim: one token, all heads */
	uint16_t *k, *v;     /* append buffers: max_prompt tokens */
	uint16_t *rk, *rv;   /* read buffers: the longest sequence, one head */
	uint16_t *want;      /* one expected row */
	uint64_t max_tokens; /* the longest a sequence gets */
	struct demo_totals t;
	kvf_stats stats; /* at the end, before close */
};

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

/* ---- output ------------------------------------------------------------ */

static double per_s(uint64_t n, uint64_t ns)
{
	return ns ? (double)n / ((double)ns / 1e9) : 0;
}

static double pct(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0;
}

static uint64_t token_bytes(const struct demo *d)
{
	return 2ull * d->a->model.n_layers * d->tok_elts * 2;
}

static void print_json(const struct demo *d)
{
	const struct demo_args *a = d->a;
	const struct demo_totals *t = &d->t;
	const kvf_stats *s = &d->stats;
	uint64_t tb = token_bytes(d);
	uint64_t all_ns = t->prefill_ns + t->decode_ns + t->sync_ns;
	struct bench_json j = { .f = stdout };

	bench_json_begin(&j, NULL);
	bench_json_str(&j, "bench", "demo");
	bench_json_str(&j, "dir", a->dir);
	bench_json_model(&j, &a->model);
	bench_json_u64(&j, "seqs", a->n_slots);
	bench_json_u64(&j, "steps", a->steps);
	bench_json_u64(&j, "sync_every", a->sync_every);
	bench_json_u64(&j, "seed", a->seed);
	bench_json_u64(&j, "capacity_bytes", a->capacity_bytes);
	bench_json_u64(&j, "direct_io", (uint64_t)t->direct_io);
	bench_json_begin(&j, "prefill");
	bench_json_u64(&j, "tokens", t->prefill_tokens);
	bench_json_double(&j, "seconds", (double)t->prefill_ns / 1e9);
	bench_json_double(&j, "tokens_per_s",
			  per_s(t->prefill_tokens, t->prefill_ns));
	bench_json_double(&j, "mb_per_s",
			  per_s(t->prefill_tokens * tb, t->prefill_ns) / 1e6);
	bench_json_end(&j);
	bench_json_begin(&j, "decode");
	bench_json_u64(&j, "tokens", t->decode_tokens);
	bench_json_double(&j, "seconds", (double)t->decode_ns / 1e9);
	bench_json_double(&j, "tokens_per_s",
			  per_s(t->decode_tokens, t->decode_ns));
	bench_json_double(&j, "mb_per_s",
			  per_s(t->decode_tokens * tb, t->decode_ns) / 1e6);
	bench_json_end(&j);
	bench_json_begin(&j, "overall");
	bench_json_u64(&j, "tokens", t->prefill_tokens + t->decode_tokens);
	bench_json_double(&j, "seconds", (double)all_ns / 1e9);
	bench_json_double(&j, "tokens_per_s",
			  per_s(t->prefill_tokens + t->decode_tokens, all_ns));
	bench_json_double(&j, "mb_per_s", per_s(s->user_bytes, all_ns) / 1e6);
	bench_json_end(&j);
	bench_json_u64(&j, "syncs", t->n_syncs);
	bench_json_double(&j, "sync_seconds", (double)t->sync_ns / 1e9);
	bench_json_double(&j, "sync_max_seconds", (double)t->sync_max_ns / 1e9);
	bench_json_double(&j, "wall_seconds", (double)t->wall_ns / 1e9);
	bench_json_u64(&j, "seqs_created", t->seqs_created);
	bench_json_u64(&j, "seqs_freed", t->seqs_freed);
	bench_json_begin(&j, "bytes");
	bench_json_u64(&j, "user", s->user_bytes);
	bench_json_u64(&j, "host_written", s->host_bytes_written);
	bench_json_double(&j, "host_wa", s->host_wa);
	bench_json_double(&j, "device_wa", s->device_wa);
	bench_json_double(&j, "total_wa", s->total_wa);
	bench_json_u64(&j, "data", s->data_bytes);
	bench_json_u64(&j, "padding", s->padding_bytes);
	bench_json_u64(&j, "summaries", s->summary_bytes);
	bench_json_u64(&j, "cleaner_copies", s->cleaner_bytes);
	bench_json_u64(&j, "kt", s->kt_bytes);
	bench_json_u64(&j, "metadata", s->metadata_bytes);
	bench_json_u64(&j, "read", s->bytes_read);
	bench_json_end(&j);
	bench_json_begin(&j, "segments");
	bench_json_u64(&j, "total", s->segments_total);
	bench_json_u64(&j, "free", s->segments_free);
	bench_json_u64(&j, "open", s->segments_open);
	bench_json_u64(&j, "sealed", s->segments_sealed);
	bench_json_u64(&j, "dying", s->segments_dying);
	bench_json_u64(&j, "corrupt", s->segments_corrupt);
	bench_json_u64(&j, "written", s->segments_written);
	bench_json_u64(&j, "cleaned", s->segments_cleaned);
	bench_json_u64(&j, "reclaimed", s->segments_reclaimed);
	bench_json_end(&j);
	bench_json_u64(&j, "index_bytes", s->index_bytes);
	bench_json_u64(&j, "live_pages", s->live_pages);
	bench_json_begin(&j, "checks");
	bench_json_u64(&j, "heads", t->check_heads);
	bench_json_u64(&j, "bytes", t->check_bytes);
	bench_json_double(&j, "mb_per_s",
			  per_s(t->check_bytes, t->check_ns) / 1e6);
	bench_json_u64(&j, "cold_heads", t->cold_heads);
	bench_json_u64(&j, "cold_bytes", t->cold_bytes);
	bench_json_double(&j, "cold_mb_per_s",
			  per_s(t->cold_bytes, t->cold_ns) / 1e6);
	bench_json_double(&j, "reopen_ms", t->reopen_ms);
	bench_json_end(&j);
	bench_json_end(&j);
}

static void bytes_row(const char *what, uint64_t b, uint64_t user)
{
	printf("  %-30s %10.1f MiB %7.2f%%\n", what, (double)b / MIB,
	       pct(b, user));
}

static void print_text(const struct demo *d)
{
	const struct demo_args *a = d->a;
	const struct demo_totals *t = &d->t;
	const kvf_stats *s = &d->stats;
	uint64_t tb = token_bytes(d);
	uint64_t all_ns = t->prefill_ns + t->decode_ns + t->sync_ns;

	printf("kvbench demo: decode workload, %u layers x %u q heads / %u kv heads x %u dims, f16\n",
	       a->model.n_layers, a->model.n_q_heads, a->model.n_kv_heads,
	       a->model.head_dim);
	printf("  store %s: %u stripe(s), %llu KiB segments, %llu MiB capacity, O_DIRECT %s\n",
	       a->dir, a->n_stripes,
	       (unsigned long long)(a->segment_bytes >> 10),
	       (unsigned long long)(a->capacity_bytes >> 20),
	       t->direct_io ? "on" : "off (fallback)");
	printf("  %u sequences at a time; prompts %u..%u tokens; %u..%u decode tokens each;\n"
	       "  %u decode steps; kvf_sync every %u steps; seed %llu\n\n",
	       a->n_slots, a->min_prompt, a->max_prompt, a->min_decode,
	       a->max_decode, a->steps, a->sync_every,
	       (unsigned long long)a->seed);

	printf("%-28s %10s %10s %10s %12s %10s\n", "appends (time in kvflash)",
	       "tokens", "MiB", "seconds", "tokens/s", "MB/s");
	printf("%-28s %10llu %10.1f %10.2f %12.0f %10.1f\n",
	       "prefill (whole prompts)", (unsigned long long)t->prefill_tokens,
	       (double)(t->prefill_tokens * tb) / MIB,
	       (double)t->prefill_ns / 1e9,
	       per_s(t->prefill_tokens, t->prefill_ns),
	       per_s(t->prefill_tokens * tb, t->prefill_ns) / 1e6);
	printf("%-28s %10llu %10.1f %10.2f %12.0f %10.1f\n",
	       "decode (1 token per step)",
	       (unsigned long long)t->decode_tokens,
	       (double)(t->decode_tokens * tb) / MIB,
	       (double)t->decode_ns / 1e9,
	       per_s(t->decode_tokens, t->decode_ns),
	       per_s(t->decode_tokens * tb, t->decode_ns) / 1e6);
	printf("%-28s %10llu %10.1f %10.2f %12.0f %10.1f\n",
	       "both, with the kvf_syncs",
	       (unsigned long long)(t->prefill_tokens + t->decode_tokens),
	       (double)s->user_bytes / MIB, (double)all_ns / 1e9,
	       per_s(t->prefill_tokens + t->decode_tokens, all_ns),
	       per_s(s->user_bytes, all_ns) / 1e6);
	printf("  a token is %llu KiB of K/V over all layers; %llu kvf_syncs (they wait for queued\n"
	       "  segment writes and trim freed segments) took %.2f s (longest %.2f s);\n"
	       "  sequences: %llu created, %llu finished and freed, %u live at the end;\n"
	       "  workload wall time %.1f s (data generation and checks included)\n\n",
	       (unsigned long long)(tb >> 10), (unsigned long long)t->n_syncs,
	       (double)t->sync_ns / 1e9, (double)t->sync_max_ns / 1e9,
	       (unsigned long long)t->seqs_created,
	       (unsigned long long)t->seqs_freed, a->n_slots,
	       (double)t->wall_ns / 1e9);

	printf("where the bytes went: host WA %.4f (device WA %.2f)\n",
	       s->host_wa, s->device_wa);
	printf("  %-30s %10.1f MiB\n", "user bytes (K/V appended)",
	       (double)s->user_bytes / MIB);
	bytes_row("full token-group pages", s->data_bytes, s->user_bytes);
	bytes_row("padding (partial pages, sync)", s->padding_bytes,
		  s->user_bytes);
	bytes_row("segment summaries", s->summary_bytes, s->user_bytes);
	bytes_row("cleaner copies", s->cleaner_bytes, s->user_bytes);
	bytes_row("K^T pages", s->kt_bytes, s->user_bytes);
	bytes_row("= written to media", s->host_bytes_written, s->user_bytes);
	bytes_row("catalog (RocksDB; not in WA)", s->metadata_bytes,
		  s->user_bytes);
	printf("\nsegments (%llu KiB per stripe): %u total: %u free, %u open, %u sealed, %u dying, %u corrupt;\n"
	       "  %llu written, %llu reclaimed after frees, %llu emptied by the cleaner\n",
	       (unsigned long long)(a->segment_bytes >> 10), s->segments_total,
	       s->segments_free, s->segments_open, s->segments_sealed,
	       s->segments_dying, s->segments_corrupt,
	       (unsigned long long)s->segments_written,
	       (unsigned long long)s->segments_reclaimed,
	       (unsigned long long)s->segments_cleaned);
	printf("index memory %.1f KiB for %.1f MiB of live pages (%.3f%%)\n\n",
	       (double)s->index_bytes / 1024,
	       (double)s->live_pages * 4096 / MIB,
	       pct(s->index_bytes, s->live_pages * 4096));
	printf("read-back checks (whole heads, K and V, every value compared): all match\n"
	       "  while running: %llu heads, %.1f MiB, %.1f MB/s\n"
	       "  after close and reopen (%.1f ms; cold, O_DIRECT): lengths of every layer of %u sequences,\n"
	       "  %llu heads, %.1f MiB, %.1f MB/s\n\n",
	       (unsigned long long)t->check_heads, (double)t->check_bytes / MIB,
	       per_s(t->check_bytes, t->check_ns) / 1e6, t->reopen_ms,
	       a->n_slots, (unsigned long long)t->cold_heads,
	       (double)t->cold_bytes / MIB,
	       per_s(t->cold_bytes, t->cold_ns) / 1e6);
	printf("the store is closed and left in %s\n", a->dir);
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
			print_json(d);
		else
			print_text(d);
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
