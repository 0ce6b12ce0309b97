/*
 * bench_evict.c - `kvbench evict`: eviction policies on a chat workload
 * over a store smaller than the conversations it serves, side by side in
 * one run: hit rate, the history recomputed after misses, and the bytes
 * that reach the NAND.
 *
 * The workload (seeded, the same for every system): --conversations slots,
 * each a conversation that returns with Zipf(--zipf) popularity by slot
 * rank.  A turn picks a slot; if its sequence is still in the store (a
 * hit) it appends --turn-tokens tokens to every layer; if it was evicted
 * (a miss) the history is lost and is prefilled again (its tokens are
 * recomputed: counted), then the turn is appended.  A conversation that
 * would pass --max-tokens ends: its sequence is freed and a new one starts
 * in the slot.  Every --sync-every turns the store is synced, as a server
 * makes durable points.
 *
 * The systems, each on a fresh store on the emulated NAND device
 * (KVF_MEDIA_FLASH, 7% spare, no memory tier so that every page reaches
 * the device):
 *  - caller-fifo: no eviction in the store; on KVF_ENOSPC the caller
 *    frees its oldest live conversation and retries (what an engine does
 *    without a policy in the store);
 *  - lru, lfu, endurance: kvf_options.evict_policy, evict_high/low at
 *    their defaults; the store evicts, the caller never sees KVF_ENOSPC.
 * Reported per system: hit rate of returning conversations, tokens
 * recomputed, sequences evicted (or freed by the caller for room), bytes
 * appended (user), host and device write amplification, NAND bytes
 * written (host bytes times device WA) and per token appended, and the
 * wall time.  Benchmarks never pass or fail.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/alloc.h"
#include "bench/bench_common.h"
#include "kvflash.h"

struct evict_args {
	const char *dir;
	kvf_model model;
	uint32_t conversations, turns, turn_tokens, max_tokens, sync_every;
	uint64_t capacity, seed;
	double zipf;
	int json, keep;
};

struct slot {
	uint64_t id;     /* its sequence now */
	uint64_t tokens; /* history so far */
	int live;        /* its sequence was made and not freed by the caller
			  * (the store may have evicted it) */
};

struct result {
	const char *name;
	uint64_t turns, returns, hits, recomputed, dropped;
	uint64_t user_bytes, host_bytes, evict_copy;
	double host_wa, device_wa, nand_bytes, seconds;
};

enum { SYS_FIFO, SYS_LRU, SYS_LFU, SYS_ENDURANCE, N_SYS };
static const char *const sys_names[N_SYS] = { "caller-fifo", "lru", "lfu", "endurance" };
static const uint32_t sys_policy[N_SYS] = { KVF_EVICT_NONE, KVF_EVICT_LRU, KVF_EVICT_LFU,
					    KVF_EVICT_ENDURANCE };

/* ---- the workload ---------------------------------------------------------- */

struct workload {
	const struct evict_args *a;
	double *cdf;            /* [conversations] Zipf, cumulative */
	unsigned char *kv;      /* max_tokens tokens of K (and V), f16 */
	uint64_t rng;
};

static uint64_t next_rand(struct workload *w)
{
	w->rng += 0x9e3779b97f4a7c15ull;
	return bench_mix64(w->rng);
}

static uint32_t pick_slot(struct workload *w)
{
	double u = (double)(next_rand(w) >> 11) / (double)(1ull << 53);
	uint32_t lo = 0, hi = w->a->conversations - 1;

	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;

		if (w->cdf[mid] < u)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* ---- one system ------------------------------------------------------------ */

struct sys_run {
	struct workload *w;
	kvf_store *st;
	int fifo;               /* the caller frees on KVF_ENOSPC */
	struct slot *slots;
	uint64_t next_id;
	uint64_t dropped;       /* freed by the caller for room */
};

/* free_oldest - caller-fifo: free the live conversation started first
 * (lowest id), other than keep; 0 if there was none */
static int free_oldest(struct sys_run *r, uint64_t keep)
{
	uint32_t best = UINT32_MAX;

	for (uint32_t i = 0; i < r->w->a->conversations; i++)
		if (r->slots[i].id != keep && r->slots[i].live &&
		    (best == UINT32_MAX || r->slots[i].id < r->slots[best].id))
			best = i;
	if (best == UINT32_MAX || kvf_seq_free(r->st, r->slots[best].id) != KVF_OK)
		return 0;
	r->slots[best].live = 0; /* its history is gone: a miss next time */
	r->dropped++;
	return 1;
}

/* append_all - n tokens to every layer of seq; the caller-fifo system
 * frees for room and retries */
static kvf_status append_all(struct sys_run *r, uint64_t seq, uint64_t n)
{
	const struct evict_args *a = r->w->a;

	for (uint32_t l = 0; l < a->model.n_layers; l++) {
		for (uint64_t done = 0; done < n;) {
			uint32_t chunk = (uint32_t)(n - done < a->max_tokens ? n - done : a->max_tokens);
			kvf_status rc = kvf_append(r->st, seq, l, chunk, r->w->kv, r->w->kv);

			if (rc == KVF_ENOSPC && r->fifo && free_oldest(r, seq))
				continue;
			if (rc != KVF_OK)
				return rc;
			done += chunk;
		}
	}
	return KVF_OK;
}

static int run_turn(struct sys_run *r, struct result *res)
{
	const struct evict_args *a = r->w->a;
	struct slot *s = &r->slots[pick_slot(r->w)];
	uint64_t len, todo = a->turn_tokens;
	int present;
	kvf_status rc;

	present = s->live && kvf_seq_len(r->st, s->id, 0, &len) == KVF_OK;
	if (s->tokens + a->turn_tokens > a->max_tokens) {
		/* the conversation ends; a new one takes the slot */
		if (present && (rc = kvf_seq_free(r->st, s->id)) != KVF_OK)
			return bench_fail("evict", "kvf_seq_free", rc);
		s->tokens = 0;
		present = 0;
	}
	if (s->tokens > 0) {
		res->returns++;
		if (present) {
			res->hits++;
		} else {
			res->recomputed += s->tokens; /* prefilled again */
			todo += s->tokens;
		}
	}
	if (!present) {
		s->id = r->next_id++;
		if ((rc = kvf_seq_create(r->st, s->id)) != KVF_OK)
			return bench_fail("evict", "kvf_seq_create", rc);
		s->live = 1;
	}
	if ((rc = append_all(r, s->id, todo)) != KVF_OK)
		return bench_fail("evict", "kvf_append", rc);
	s->tokens += a->turn_tokens;
	res->turns++;
	return 0;
}

static int run_system(struct workload *w, int sys, struct result *res)
{
	const struct evict_args *a = w->a;
	struct sys_run r = { .w = w, .fifo = sys == SYS_FIFO, .next_id = 1 };
	char path[4096];
	kvf_options o;
	kvf_stats s;
	kvf_status rc;
	uint64_t t0;
	int ret = -1;

	memset(res, 0, sizeof(*res));
	res->name = sys_names[sys];
	w->rng = a->seed;
	snprintf(path, sizeof(path), "%s/%s", a->dir, sys_names[sys]);
	if (bench_remove_store(path) != 0)
		return -1;
	bench_store_options(&o, &a->model, 1, 1u << 20, a->capacity);
	o.media = KVF_MEDIA_FLASH;
	o.flash_spare = 0.07f;
	o.dram_budget = 0;
	o.evict_policy = sys_policy[sys];
	if ((rc = kvf_open(path, &o, &r.st)) != KVF_OK)
		return bench_fail("evict", "kvf_open", rc);
	r.slots = kvf_calloc(a->conversations, sizeof(*r.slots));
	if (r.slots == NULL) {
		fprintf(stderr, "kvbench evict: out of memory\n");
		goto out;
	}
	t0 = bench_now_ns();
	for (uint32_t t = 0; t < a->turns; t++) {
		if (run_turn(&r, res) != 0)
			goto out;
		if ((t + 1) % a->sync_every == 0 && (rc = kvf_sync(r.st)) != KVF_OK) {
			bench_fail("evict", "kvf_sync", rc);
			goto out;
		}
		if (!a->json && (t + 1) % 256 == 0)
			fprintf(stderr, "\r  %-12s turn %u of %u", res->name, t + 1, a->turns);
	}
	if ((rc = kvf_sync(r.st)) != KVF_OK) {
		bench_fail("evict", "kvf_sync", rc);
		goto out;
	}
	res->seconds = (double)(bench_now_ns() - t0) / 1e9;
	if (!a->json)
		fprintf(stderr, "\r%60s\r", "");
	memset(&s, 0, sizeof(s));
	s.struct_size = sizeof(s);
	if ((rc = kvf_stats_get(r.st, &s)) != KVF_OK) {
		bench_fail("evict", "kvf_stats_get", rc);
		goto out;
	}
	res->dropped = r.dropped + s.evicted_seqs;
	res->user_bytes = s.user_bytes;
	res->host_bytes = s.host_bytes_written;
	res->host_wa = s.host_wa;
	res->device_wa = s.device_wa;
	res->nand_bytes = (double)s.host_bytes_written * s.device_wa;
	res->evict_copy = s.evict_copy_bytes;
	ret = 0;
out:
	kvf_free(r.slots);
	rc = kvf_close(r.st);
	if (ret == 0 && rc != KVF_OK)
		ret = bench_fail("evict", "kvf_close", rc);
	if (!a->keep)
		(void)bench_remove_store(path);
	return ret;
}

/* ---- report ---------------------------------------------------------------- */

static uint64_t token_bytes(const kvf_model *m)
{
	return (uint64_t)m->n_layers * 2 * m->n_kv_heads * m->head_dim * 2;
}

static void print_table(const struct evict_args *a, const struct result *r)
{
	double tb = (double)token_bytes(&a->model);

	printf("kvbench evict: %u turns of %u tokens over %u conversations (Zipf %.2f, at most %u tokens each),\n"
	       "a %.0f MiB store on the emulated NAND device (7%% spare), %.0f KiB a token\n\n",
	       a->turns, a->turn_tokens, a->conversations, a->zipf, a->max_tokens,
	       (double)a->capacity / 1048576.0, tb / 1024.0);
	printf("%-12s %8s %10s %8s %9s %8s %8s %8s %10s %9s %7s\n", "system", "hit rate",
	       "recomputed", "dropped", "user MiB", "host WA", "dev WA", "total WA",
	       "NAND MiB", "NAND/turn", "time s");
	for (int i = 0; i < N_SYS; i++) {
		const struct result *x = &r[i];
		double turn_bytes = (double)a->turn_tokens * tb;

		printf("%-12s %7.1f%% %10llu %8llu %9.1f %8.3f %8.3f %8.3f %10.1f %8.2fx %7.2f\n",
		       x->name, x->returns ? 100.0 * (double)x->hits / (double)x->returns : 0.0,
		       (unsigned long long)x->recomputed, (unsigned long long)x->dropped,
		       (double)x->user_bytes / 1048576.0, x->host_wa, x->device_wa,
		       x->host_wa * x->device_wa, x->nand_bytes / 1048576.0,
		       x->turns ? x->nand_bytes / (double)x->turns / turn_bytes : 0.0,
		       x->seconds);
	}
	printf("\nNAND/turn: NAND bytes written per turn over the bytes of the turn's own tokens\n"
	       "(1.00x = only the new tokens reach the NAND; misses add their history again).\n"
	       "recomputed: history tokens prefilled again after their sequence was dropped.\n");
}

static void print_json(const struct evict_args *a, const struct result *r)
{
	struct bench_json j = { .f = stdout };

	bench_json_begin(&j, NULL);
	bench_json_str(&j, "benchmark", "evict");
	bench_json_model(&j, &a->model);
	bench_json_u64(&j, "conversations", a->conversations);
	bench_json_u64(&j, "turns", a->turns);
	bench_json_u64(&j, "turn_tokens", a->turn_tokens);
	bench_json_u64(&j, "max_tokens", a->max_tokens);
	bench_json_double(&j, "zipf", a->zipf);
	bench_json_u64(&j, "capacity_bytes", a->capacity);
	for (int i = 0; i < N_SYS; i++) {
		const struct result *x = &r[i];

		bench_json_begin(&j, x->name);
		bench_json_double(&j, "hit_rate",
				  x->returns ? (double)x->hits / (double)x->returns : 0.0);
		bench_json_u64(&j, "returns", x->returns);
		bench_json_u64(&j, "hits", x->hits);
		bench_json_u64(&j, "recomputed_tokens", x->recomputed);
		bench_json_u64(&j, "dropped_seqs", x->dropped);
		bench_json_u64(&j, "user_bytes", x->user_bytes);
		bench_json_u64(&j, "host_bytes_written", x->host_bytes);
		bench_json_double(&j, "host_wa", x->host_wa);
		bench_json_double(&j, "device_wa", x->device_wa);
		bench_json_double(&j, "nand_bytes", x->nand_bytes);
		bench_json_u64(&j, "evict_copy_bytes", x->evict_copy);
		bench_json_double(&j, "seconds", x->seconds);
		bench_json_end(&j);
	}
	bench_json_end(&j);
	fputc('\n', stdout);
}

/* ---- main ------------------------------------------------------------------ */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvbench evict [--dir DIR] [--conversations N] [--turns N]\n"
		"                     [--turn-tokens N] [--max-tokens N] [--zipf S]\n"
		"                     [--capacity BYTES] [--sync-every N] [--seed N]\n"
		"                     [--layers N] [--q-heads N] [--kv-heads N] [--head-dim N]\n"
		"                     [--json] [--keep]\n"
		"  --dir DIR            directory for the stores (default ./kvbench-evict)\n"
		"  --conversations N    conversation slots (default 256)\n"
		"  --turns N            turns in all (default 2000)\n"
		"  --turn-tokens N      tokens a turn appends (default 64)\n"
		"  --max-tokens N       a conversation ends before passing this (default 1024)\n"
		"  --zipf S             popularity exponent of the slots (default 1.0)\n"
		"  --capacity BYTES     the store's media, K/M/G (default 128M)\n"
		"  --sync-every N       turns between kvf_sync calls (default 16)\n"
		"  --seed N             the workload's seed (default 1)\n"
		"  --layers N ...       the model (default 8 layers, 8 query and 2 KV\n"
		"                       heads of 128 f16 dims: 8 KiB a token)\n"
		"  --json               one JSON object instead of a table\n"
		"  --keep               leave the stores in DIR\n");
}

static int parse_args(int argc, char **argv, struct evict_args *a)
{
	const struct bench_opt opts[] = {
		BENCH_STR("--dir", a->dir),
		BENCH_U32("--conversations", a->conversations, 1, 1u << 20),
		BENCH_U32("--turns", a->turns, 1, 1u << 30),
		BENCH_U32("--turn-tokens", a->turn_tokens, 1, 1u << 16),
		BENCH_U32("--max-tokens", a->max_tokens, 1, 1u << 20),
		BENCH_DOUBLE("--zipf", a->zipf),
		BENCH_U64("--capacity", a->capacity, 4u << 20, 1ull << 40),
		BENCH_U32("--sync-every", a->sync_every, 1, 1u << 30),
		BENCH_U64("--seed", a->seed, 0, UINT64_MAX),
		BENCH_MODEL_OPTS(a->model),
		BENCH_BOOL("--json", a->json),
		BENCH_BOOL("--keep", a->keep),
		{ 0 }
	};
	int rc;

	*a = (struct evict_args){ .dir = "kvbench-evict",
				  .model = { .n_layers = 8, .n_q_heads = 8, .n_kv_heads = 2,
					     .head_dim = 128, .dtype = KVF_DTYPE_F16 },
				  .conversations = 256, .turns = 2000, .turn_tokens = 64,
				  .max_tokens = 1024, .zipf = 1.0, .capacity = 128ull << 20,
				  .sync_every = 16, .seed = 1 };
	rc = bench_parse_opts("evict", usage, opts, argc, argv);
	if (rc != 0)
		return rc;
	if (bench_check_heads("evict", &a->model) != 0)
		return 2;
	if (!(a->zipf >= 0 && a->zipf <= 8))
		return bench_usage_error("evict", "--zipf %g out of range [0, 8]", a->zipf);
	if (a->turn_tokens > a->max_tokens)
		return bench_usage_error("evict", "--turn-tokens %u is more than --max-tokens %u",
					 a->turn_tokens, a->max_tokens);
	return 0;
}

int bench_evict_main(int argc, char **argv)
{
	struct evict_args a;
	struct workload w = { .a = &a };
	struct result res[N_SYS];
	uint64_t kv_bytes;
	double sum = 0;
	int rc, made = 0;

	if ((rc = parse_args(argc, argv, &a)) != 0)
		return rc == 1 ? 0 : rc;
	rc = 1;
	kv_bytes = (uint64_t)a.max_tokens * a.model.n_kv_heads * a.model.head_dim * 2;
	w.cdf = kvf_calloc(a.conversations, sizeof(double));
	w.kv = kvf_malloc(kv_bytes);
	if (w.cdf == NULL || w.kv == NULL) {
		fprintf(stderr, "kvbench evict: out of memory\n");
		goto out;
	}
	for (uint32_t i = 0; i < a.conversations; i++)
		sum += 1.0 / pow((double)(i + 1), a.zipf);
	for (uint32_t i = 0; i < a.conversations; i++)
		w.cdf[i] = (i ? w.cdf[i - 1] : 0.0) + 1.0 / pow((double)(i + 1), a.zipf) / sum;
	w.cdf[a.conversations - 1] = 1.0;
	for (uint64_t i = 0; i < kv_bytes / 2; i++) /* small f16 values */
		((uint16_t *)w.kv)[i] = (uint16_t)(0x3000 | (bench_mix64(i) & 0x0fff));
	if (bench_make_dir("evict", a.dir, &made) != 0)
		goto out;
	for (int s = 0; s < N_SYS; s++)
		if (run_system(&w, s, &res[s]) != 0)
			goto out;
	if (a.json)
		print_json(&a, res);
	else
		print_table(&a, res);
	rc = 0;
out:
	kvf_free(w.cdf);
	kvf_free(w.kv);
	return rc;
}
