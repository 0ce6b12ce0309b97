/*
 * bench_prefix.c - `kvbench prefix`: a chat workload with shared system
 * prompts and multi-turn conversations, run three times on fresh file
 * stores, side by side: without prefix reuse (kvf_seq_create), with reuse
 * (kvf_seq_create_tokens) and the cache off (kvf_options.
 * prefix_cache_bytes 0: a chunk lives while a live sequence holds it), and
 * with reuse and cached prefixes (the default budget: a freed sequence's
 * chunks stay).
 *
 * --convs conversations, each on one of --prompts system prompts of
 * --system tokens, take --turns turns, round by round: a turn's prompt is
 * the system prompt, then every earlier user message and reply, then the
 * new user message (--user tokens); its reply is --reply tokens.  A turn
 * makes a new sequence for its prompt, prefills it (kvf_append of the
 * tokens the store does not hold, layer by layer, each followed by the
 * prefill attention of those tokens: kvf_attend_multi, causal), which is
 * its time to first token on the store's side; then decodes its reply
 * (one kvf_append a token and layer) and registers the reply's ids
 * (kvf_seq_add_tokens, reuse only); then the conversation's previous
 * sequence is freed.  kvf_sync ends each round.  Without reuse the same
 * turn appends and attends every prompt token.
 *
 * --serial runs the conversations one after another instead: each takes
 * all its turns, then ends (its last sequence is freed) before the next
 * starts, so a conversation on a system prompt always starts after the
 * earlier ones on it have ended: only cached prefixes can serve its first
 * turn.  That is the workload the cache is for.
 *
 * Reported per run: prompt tokens, tokens reused and the hit rate, K/V
 * bytes appended, bytes written to media (kvf_stats host_bytes_written),
 * bytes not rewritten (prefix_bytes_saved), time to first token (median,
 * mean, and its sum over turns) and the whole run's time; then the
 * ratios.  The model's own prefill work (the projections and MLPs) is not
 * run: the time saved here is the store's part (appends and attention),
 * and the tokens reused are the ones the model would not recompute.
 *
 * Data: a token's K/V is a slice of a fixed block of noise chosen by a
 * hash of (token id, position), so equal prefixes have equal K/V.  At the
 * end the last turn of the conversation still live (0; the last one with
 * --serial) is read back and compared with the values its ids give, in
 * every run.  Each row also gives the hit rate of first turns alone,
 * the turns only a system prompt held elsewhere can serve; the cache row
 * adds the cache's own counts (kvf_stats prefix_cache_*).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/alloc.h"
#include "bench/bench_common.h"
#include "kvflash.h"

#define NOISE_BYTES (1u << 20)

struct args {
	const char *dir;
	kvf_model model;
	uint32_t prompts, system, convs, turns, user, reply, threads;
	int json, keep, serial;
};

#define RUNS 3 /* no reuse; reuse without the cache; reuse with it */

/* One run's figures. */
struct run {
	uint64_t prompt_tokens, reused_tokens, lookups, hits;
	uint64_t user_bytes, host_bytes, saved_bytes;
	uint64_t cache_hits, cached_bytes, cache_kept, cache_dropped;
	uint64_t first_prompt, first_reused; /* of first turns only */
	double first_ttft_ms, later_ttft_ms;  /* mean TTFT of first turns,
					       * and of the others */
	double ttft_median_ms, ttft_mean_ms, ttft_sum_s, total_s;
	int verified;
};

struct ctx {
	const struct args *a;
	kvf_store *st;
	unsigned char *noise;   /* NOISE_BYTES + one token's row */
	unsigned char *k, *v;   /* [max tokens][n_kv_heads][head_dim] */
	float *q, *out;         /* [max tokens][n_q_heads][head_dim] */
	uint64_t *pos;          /* [max tokens] */
	uint32_t *ids;          /* a conversation's ids so far */
	size_t row;             /* bytes of one token of one layer, K or V */
	uint64_t max_tokens;
};

/* token ids: system prompt p, or turn t's user (part 0) / reply (part 1)
 * of conversation c */
static uint32_t sys_id(uint32_t p, uint32_t i)
{
	return 1000000u * (p + 1) + i;
}

static uint32_t turn_id(uint32_t c, uint32_t t, int part, uint32_t i)
{
	return (uint32_t)(bench_mix64(((uint64_t)c << 40) ^ ((uint64_t)t << 20) ^
				      ((uint64_t)part << 18) ^ i) >> 36) + 100000000u;
}

/* kv_rows - K and V of tokens ids[t0, t0 + n) at positions t0.. for one
 * layer into c->k, c->v */
static void kv_rows(struct ctx *c, const uint32_t *ids, uint64_t t0,
		    uint64_t n, uint32_t layer)
{
	for (uint64_t j = 0; j < n; j++) {
		uint64_t h = bench_mix64((uint64_t)ids[t0 + j] * 0x9e3779b97f4a7c15ull ^
					 (t0 + j) ^ ((uint64_t)layer << 48));
		size_t off = (size_t)(h % (NOISE_BYTES / 2)) & ~(size_t)1;

		memcpy(c->k + j * c->row, c->noise + off, c->row);
		memcpy(c->v + j * c->row, c->noise + off + NOISE_BYTES / 2 - c->row,
		       c->row);
	}
}

/* prefill - append ids[t0, n) and attend them, layer by layer */
static kvf_status prefill(struct ctx *c, uint64_t seq, const uint32_t *ids,
			  uint64_t t0, uint64_t n)
{
	kvf_status rc = KVF_OK;

	for (uint64_t j = t0; j < n; j++)
		c->pos[j - t0] = j;
	for (uint32_t l = 0; l < c->a->model.n_layers && rc == KVF_OK; l++) {
		kv_rows(c, ids, t0, n - t0, l);
		if (n > t0 && (rc = kvf_append(c->st, seq, l, (uint32_t)(n - t0),
					       c->k, c->v)) == KVF_OK)
			rc = kvf_attend_multi(c->st, seq, l, (uint32_t)(n - t0),
					      c->pos, c->q, c->out, NULL);
	}
	return rc;
}

/* decode - append the reply ids[t0, n) a token at a time */
static kvf_status decode(struct ctx *c, uint64_t seq, const uint32_t *ids,
			 uint64_t t0, uint64_t n)
{
	kvf_status rc = KVF_OK;

	for (uint64_t t = t0; t < n && rc == KVF_OK; t++)
		for (uint32_t l = 0; l < c->a->model.n_layers && rc == KVF_OK; l++) {
			kv_rows(c, ids, t, 1, l);
			rc = kvf_append(c->st, seq, l, 1, c->k, c->v);
		}
	return rc;
}

/* conv_ids - conversation cv's ids through turn t's user message (and,
 * with reply, its reply); their count */
static uint64_t conv_ids(const struct args *a, uint32_t cv, uint32_t t,
			 int reply, uint32_t *ids)
{
	uint64_t n = 0;

	for (uint32_t i = 0; i < a->system; i++)
		ids[n++] = sys_id(cv % a->prompts, i);
	for (uint32_t k = 0; k <= t; k++) {
		for (uint32_t i = 0; i < a->user; i++)
			ids[n++] = turn_id(cv, k, 0, i);
		if (k < t || reply)
			for (uint32_t i = 0; i < a->reply; i++)
				ids[n++] = turn_id(cv, k, 1, i);
	}
	return n;
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return (a > b) - (a < b);
}

/* verify - the last turn t of conversation cv reads back as its ids give */
static int verify(struct ctx *c, uint32_t cv, uint64_t seq, uint32_t t)
{
	uint64_t n = conv_ids(c->a, cv, t, 1, c->ids), len = 0;
	size_t hrow = (size_t)c->a->model.head_dim * 2;
	unsigned char *got = kvf_malloc(n * hrow + 1);
	int ok = got != NULL && kvf_seq_len(c->st, seq, 0, &len) == KVF_OK &&
		 len == n;

	for (uint32_t l = 0; ok && l < c->a->model.n_layers; l++) {
		if (kvf_read(c->st, seq, l, 0, 0, n, got, NULL) != KVF_OK) {
			ok = 0;
			break;
		}
		for (uint64_t j = 0; j < n && ok; j += 64) {
			kv_rows(c, c->ids, j, 1, l);
			ok = memcmp(got + j * hrow, c->k, hrow) == 0;
		}
	}
	kvf_free(got);
	return ok;
}

/* turn - conversation cv's turn t as sequence seq: create (sharing when
 * reuse), prefill (timed: *ttft_ms), decode, register the reply, free
 * the previous turn */
static kvf_status turn(struct ctx *c, int reuse, uint32_t cv, uint32_t t,
		       struct run *r, double *ttft_ms)
{
	const struct args *a = c->a;
	uint64_t seq = (uint64_t)cv * 1000 + t, reused = 0;
	uint64_t n = conv_ids(a, cv, t, 0, c->ids);
	uint64_t n_all = n + a->reply, t0 = bench_now_ns();
	kvf_status rc;

	for (uint32_t i = 0; i < a->reply; i++)
		c->ids[n + i] = turn_id(cv, t, 1, i);
	if (reuse)
		rc = kvf_seq_create_tokens(c->st, seq, c->ids, n, &reused);
	else
		rc = kvf_seq_create(c->st, seq);
	if (rc == KVF_OK)
		rc = prefill(c, seq, c->ids, reused, n);
	*ttft_ms = (double)(bench_now_ns() - t0) / 1e6;
	r->prompt_tokens += n;
	r->reused_tokens += reused;
	if (t == 0) {
		r->first_prompt += n;
		r->first_reused += reused;
		r->first_ttft_ms += *ttft_ms / a->convs;
	} else {
		r->later_ttft_ms += *ttft_ms / ((double)a->convs * (a->turns - 1));
	}
	if (rc == KVF_OK)
		rc = decode(c, seq, c->ids, n, n_all);
	if (rc == KVF_OK && reuse)
		rc = kvf_seq_add_tokens(c->st, seq, c->ids + n, a->reply);
	if (rc == KVF_OK && t > 0)
		rc = kvf_seq_free(c->st, seq - 1);
	return rc;
}

static const char *const run_name[RUNS] = { "no reuse", "reuse, no cache",
					    "reuse + cache" };
static const char *const run_key[RUNS] = { "no_reuse", "reuse", "reuse_cache" };

static int run_one(struct ctx *c, int mode, struct run *r)
{
	const struct args *a = c->a;
	uint32_t n_turns = a->convs * a->turns, last;
	double *ttft = kvf_calloc(n_turns, sizeof(*ttft));
	kvf_stats s = { .struct_size = sizeof(s) };
	uint64_t t_start = bench_now_ns();
	int reuse = mode > 0;
	uint32_t k = 0;
	kvf_status rc = KVF_OK;

	if (ttft == NULL)
		return bench_fail("prefix", "out of memory", KVF_ENOMEM);
	memset(r, 0, sizeof(*r));
	if (a->serial) {
		/* one conversation at a time; each ends before the next */
		for (uint32_t cv = 0; cv < a->convs && rc == KVF_OK; cv++) {
			for (uint32_t t = 0; t < a->turns && rc == KVF_OK; t++)
				rc = turn(c, reuse, cv, t, r, &ttft[k++]);
			if (rc == KVF_OK && cv + 1 < a->convs)
				rc = kvf_seq_free(c->st, (uint64_t)cv * 1000 +
							     a->turns - 1);
			if (rc == KVF_OK)
				rc = kvf_sync(c->st);
		}
	} else {
		for (uint32_t t = 0; t < a->turns && rc == KVF_OK; t++) {
			for (uint32_t cv = 0; cv < a->convs && rc == KVF_OK; cv++)
				rc = turn(c, reuse, cv, t, r, &ttft[k++]);
			if (rc == KVF_OK)
				rc = kvf_sync(c->st);
		}
	}
	if (rc != KVF_OK) {
		kvf_free(ttft);
		return bench_fail("prefix", run_name[mode], rc);
	}
	r->total_s = (double)(bench_now_ns() - t_start) / 1e9;
	for (uint32_t i = 0; i < n_turns; i++) {
		r->ttft_mean_ms += ttft[i] / n_turns;
		r->ttft_sum_s += ttft[i] / 1e3;
	}
	qsort(ttft, n_turns, sizeof(*ttft), cmp_double);
	r->ttft_median_ms = ttft[n_turns / 2];
	kvf_free(ttft);
	if ((rc = kvf_stats_get(c->st, &s)) != KVF_OK)
		return bench_fail("prefix", "kvf_stats_get", rc);
	r->lookups = s.prefix_lookups;
	r->hits = s.prefix_hits;
	r->user_bytes = s.user_bytes;
	r->host_bytes = s.host_bytes_written;
	r->saved_bytes = s.prefix_bytes_saved;
	r->cache_hits = s.prefix_cache_hits;
	r->cached_bytes = s.prefix_cached_bytes;
	r->cache_kept = s.prefix_cache_kept;
	r->cache_dropped = s.prefix_cache_dropped;
	/* the conversation still live at the end: 0, or the last (serial) */
	last = a->serial ? a->convs - 1 : 0;
	r->verified = verify(c, last, (uint64_t)last * 1000 + a->turns - 1,
			     a->turns - 1);
	return 0;
}

static int open_store(struct ctx *c, const char *name, int cache)
{
	char path[4096];
	kvf_options o;
	int direct;
	kvf_status rc;

	snprintf(path, sizeof(path), "%s/%s", c->a->dir, name);
	if (bench_remove_store(path) != 0)
		return -1;
	bench_store_options(&o, &c->a->model, 0, 1u << 20,
			    (uint64_t)c->a->convs * 2 * c->max_tokens * c->row * 2 *
				    c->a->model.n_layers + (256ull << 20));
	if (c->a->threads)
		o.n_threads = c->a->threads;
	if (!cache)
		o.prefix_cache_bytes = 0;
	if ((rc = bench_open_direct(path, &o, &c->st, &direct)) != KVF_OK)
		return bench_fail("prefix", "kvf_open", rc);
	return 0;
}

static double pct(uint64_t part, uint64_t all)
{
	return all ? 100.0 * (double)part / (double)all : 0;
}

static double ratio(double x, double y)
{
	return y > 0 ? x / y : 0;
}

static void report(const struct args *a, const struct run *r)
{
	if (a->json) {
		struct bench_json j = { .f = stdout };

		bench_json_begin(&j, NULL);
		bench_json_model(&j, &a->model);
		bench_json_u64(&j, "prompts", a->prompts);
		bench_json_u64(&j, "system_tokens", a->system);
		bench_json_u64(&j, "conversations", a->convs);
		bench_json_u64(&j, "turns", a->turns);
		bench_json_u64(&j, "serial", (uint64_t)a->serial);
		for (int i = 0; i < RUNS; i++) {
			bench_json_begin(&j, run_key[i]);
			bench_json_u64(&j, "prompt_tokens", r[i].prompt_tokens);
			bench_json_u64(&j, "reused_tokens", r[i].reused_tokens);
			bench_json_double(&j, "hit_rate", pct(r[i].reused_tokens,
							      r[i].prompt_tokens) / 100);
			bench_json_double(&j, "first_turn_hit_rate",
					  pct(r[i].first_reused, r[i].first_prompt) / 100);
			bench_json_u64(&j, "lookups", r[i].lookups);
			bench_json_u64(&j, "hits", r[i].hits);
			bench_json_u64(&j, "cache_hits", r[i].cache_hits);
			bench_json_u64(&j, "cache_kept", r[i].cache_kept);
			bench_json_u64(&j, "cache_dropped", r[i].cache_dropped);
			bench_json_u64(&j, "prefix_cached_bytes", r[i].cached_bytes);
			bench_json_u64(&j, "user_bytes", r[i].user_bytes);
			bench_json_u64(&j, "host_bytes_written", r[i].host_bytes);
			bench_json_u64(&j, "bytes_not_rewritten", r[i].saved_bytes);
			bench_json_double(&j, "ttft_median_ms", r[i].ttft_median_ms);
			bench_json_double(&j, "ttft_mean_ms", r[i].ttft_mean_ms);
			bench_json_double(&j, "ttft_sum_s", r[i].ttft_sum_s);
			bench_json_double(&j, "ttft_first_turns_ms", r[i].first_ttft_ms);
			bench_json_double(&j, "ttft_later_turns_ms", r[i].later_ttft_ms);
			bench_json_double(&j, "total_s", r[i].total_s);
			bench_json_u64(&j, "verified", (uint64_t)r[i].verified);
			bench_json_end(&j);
		}
		bench_json_double(&j, "ttft_ratio", ratio(r[0].ttft_mean_ms,
							  r[1].ttft_mean_ms));
		bench_json_double(&j, "host_bytes_ratio",
				  ratio((double)r[0].host_bytes, (double)r[1].host_bytes));
		bench_json_double(&j, "cache_ttft_ratio",
				  ratio(r[1].ttft_mean_ms, r[2].ttft_mean_ms));
		bench_json_end(&j);
		fputc('\n', stdout);
		return;
	}
	printf("kvbench prefix: %u conversations x %u turns%s, %u system prompts of %u tokens, user %u, reply %u tokens\n",
	       a->convs, a->turns,
	       a->serial ? ", one after another (each ends before the next starts)" : ", round by round",
	       a->prompts, a->system, a->user, a->reply);
	printf("model: %u layers, %u query / %u KV heads, head_dim %u, f16\n\n",
	       a->model.n_layers, a->model.n_q_heads, a->model.n_kv_heads,
	       a->model.head_dim);
	printf("%-15s %10s %10s %7s %9s %11s %11s %11s %9s %9s %9s %8s %s\n", "run",
	       "prompt tok", "reused", "hit", "1st turn", "appended", "written",
	       "not rewr.", "TTFT med", "TTFT mean", "TTFT sum", "total",
	       "read back");
	for (int i = 0; i < RUNS; i++)
		printf("%-15s %10llu %10llu %6.1f%% %8.1f%% %8.1f MiB %8.1f MiB %8.1f MiB %6.2f ms %6.2f ms %7.2f s %6.2f s %s\n",
		       run_name[i], (unsigned long long)r[i].prompt_tokens,
		       (unsigned long long)r[i].reused_tokens,
		       pct(r[i].reused_tokens, r[i].prompt_tokens),
		       pct(r[i].first_reused, r[i].first_prompt),
		       r[i].user_bytes / 1048576.0, r[i].host_bytes / 1048576.0,
		       r[i].saved_bytes / 1048576.0, r[i].ttft_median_ms,
		       r[i].ttft_mean_ms, r[i].ttft_sum_s, r[i].total_s,
		       r[i].verified ? "exact" : "DIFFERS");
	printf("\nmean TTFT of first turns / later turns:");
	for (int i = 0; i < RUNS; i++)
		printf("%s %s %.2f / %.2f ms", i ? ";" : "", run_name[i],
		       r[i].first_ttft_ms, r[i].later_ttft_ms);
	printf("\nreuse vs none: time to first token %.2fx shorter (mean), bytes written %.2fx fewer, whole run %.2fx faster\n",
	       ratio(r[0].ttft_mean_ms, r[1].ttft_mean_ms),
	       ratio((double)r[0].host_bytes, (double)r[1].host_bytes),
	       ratio(r[0].total_s, r[1].total_s));
	printf("cache vs no cache (both with reuse): hit rate %.1f%% -> %.1f%% (first turns %.1f%% -> %.1f%%), time to first token %.2fx shorter (mean), bytes written %.2fx fewer, whole run %.2fx faster\n",
	       pct(r[1].reused_tokens, r[1].prompt_tokens),
	       pct(r[2].reused_tokens, r[2].prompt_tokens),
	       pct(r[1].first_reused, r[1].first_prompt),
	       pct(r[2].first_reused, r[2].first_prompt),
	       ratio(r[1].ttft_mean_ms, r[2].ttft_mean_ms),
	       ratio((double)r[1].host_bytes, (double)r[2].host_bytes),
	       ratio(r[1].total_s, r[2].total_s));
	printf("the cache: %llu cached prefixes kept, %llu dropped, %llu creations hit only on them; %.1f MiB only they hold at the end\n",
	       (unsigned long long)r[2].cache_kept,
	       (unsigned long long)r[2].cache_dropped,
	       (unsigned long long)r[2].cache_hits, r[2].cached_bytes / 1048576.0);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvbench prefix [--dir DIR] [--prompts N] [--system N] [--convs N]\n"
		"                      [--turns N] [--user N] [--reply N]\n"
		"                      [--layers N] [--q-heads N] [--kv-heads N] [--head-dim N]\n"
		"                      [--threads N] [--serial] [--json] [--keep]\n"
		"  --dir DIR        directory for the three stores (default ./kvbench-prefix)\n"
		"  --prompts N      distinct system prompts (default 4)\n"
		"  --system N       tokens of a system prompt (default 512)\n"
		"  --convs N        conversations (default 8)\n"
		"  --turns N        turns of each (default 4)\n"
		"  --user N         tokens of a user message (default 64)\n"
		"  --reply N        tokens of a reply (default 64)\n"
		"  --layers N       layers (default 4); --q-heads (16), --kv-heads (4),\n"
		"                   --head-dim (128): the model, f16\n"
		"  --threads N      threads the store computes with (default: online CPUs)\n"
		"  --serial         conversations one after another, each ended (freed)\n"
		"                   before the next starts (default: round by round)\n"
		"  --json           one JSON object instead of a table\n"
		"  --keep           leave the stores in DIR\n");
}

int bench_prefix_main(int argc, char **argv)
{
	struct args a = { .dir = "./kvbench-prefix", .prompts = 4, .system = 512,
			  .convs = 8, .turns = 4, .user = 64, .reply = 64,
			  .model = { 4, 16, 4, 128, KVF_DTYPE_F16 } };
	const struct bench_opt opts[] = {
		BENCH_STR("--dir", a.dir),
		BENCH_U32("--prompts", a.prompts, 1, 1u << 16),
		BENCH_U32("--system", a.system, 0, 1u << 20),
		BENCH_U32("--convs", a.convs, 1, 1u << 16),
		BENCH_U32("--turns", a.turns, 1, 999),
		BENCH_U32("--user", a.user, 1, 1u << 16),
		BENCH_U32("--reply", a.reply, 1, 1u << 16),
		BENCH_MODEL_OPTS(a.model),
		BENCH_U32("--threads", a.threads, 0, 1024),
		BENCH_BOOL("--serial", a.serial),
		BENCH_BOOL("--json", a.json),
		BENCH_BOOL("--keep", a.keep),
		{ .name = NULL }
	};
	struct ctx c = { .a = &a };
	struct run r[RUNS];
	int rc, made;

	if ((rc = bench_parse_opts("prefix", usage, opts, argc, argv)) != 0)
		return rc == 1 ? 0 : rc;
	if ((rc = bench_check_heads("prefix", &a.model)) != 0)
		return rc;
	c.max_tokens = (uint64_t)a.system + (uint64_t)a.turns * (a.user + a.reply);
	c.row = (size_t)a.model.n_kv_heads * a.model.head_dim * 2;
	c.noise = kvf_malloc(NOISE_BYTES);
	c.k = kvf_malloc(c.max_tokens * c.row);
	c.v = kvf_malloc(c.max_tokens * c.row);
	c.q = kvf_calloc(c.max_tokens * a.model.n_q_heads * a.model.head_dim,
			 sizeof(float));
	c.out = kvf_malloc(c.max_tokens * a.model.n_q_heads * a.model.head_dim *
			   sizeof(float));
	c.pos = kvf_malloc(c.max_tokens * sizeof(uint64_t));
	c.ids = kvf_malloc(c.max_tokens * sizeof(uint32_t));
	rc = 1;
	if (!c.noise || !c.k || !c.v || !c.q || !c.out || !c.pos || !c.ids ||
	    c.row > NOISE_BYTES / 4) {
		fprintf(stderr, "kvbench prefix: out of memory (or a token row over %u bytes)\n",
			NOISE_BYTES / 4);
		goto out;
	}
	for (size_t i = 0; i < NOISE_BYTES / 8; i++) {
		uint64_t x = bench_mix64(i + 1) & 0x3fff3fff3fff3fffull; /* finite f16 */

		memcpy(c.noise + i * 8, &x, 8);
	}
	for (size_t i = 0; i < c.max_tokens * a.model.n_q_heads * a.model.head_dim; i++)
		c.q[i] = (float)((bench_mix64(i) >> 40) & 0xff) / 256.0f - 0.5f;
	if (bench_make_dir("prefix", a.dir, &made) != 0)
		goto out;
	for (int mode = 0; mode < RUNS; mode++) {
		static const char *const store[RUNS] = { "none", "reuse", "cache" };
		char path[4096];

		if (open_store(&c, store[mode], mode == 2) != 0)
			goto out;
		if (run_one(&c, mode, &r[mode]) != 0) {
			kvf_close(c.st);
			goto out;
		}
		if (kvf_close(c.st) != KVF_OK) {
			bench_fail("prefix", "kvf_close", KVF_EIO);
			goto out;
		}
		snprintf(path, sizeof(path), "%s/%s", a.dir, store[mode]);
		if (!a.keep)
			bench_remove_store(path);
	}
	report(&a, r);
	rc = 0;
	if (!a.keep && made)
		(void)rmdir(a.dir); /* only if empty */
out:
	kvf_free(c.noise);
	kvf_free(c.k);
	kvf_free(c.v);
	kvf_free(c.q);
	kvf_free(c.out);
	kvf_free(c.pos);
	kvf_free(c.ids);
	return rc;
}
