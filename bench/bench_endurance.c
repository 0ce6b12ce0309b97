/*
 * bench_endurance.c - `kvbench endurance`: NAND bytes per generated token,
 * write amplification at the host, in the file system and in the device,
 * erase counts, requests per PBW and drive lifetime for LLM workloads,
 * kvflash against RocksDB (default and tuned), file-per-block and
 * per-token writes, all on the same footing.
 *
 * For each workload (offline, online, chat; bench_endurance_work.c) and
 * each system, one run: the system stores the workload's K/V in its own
 * directory under --dir, its block-level write trace is taken (kvflash's
 * from its media seam, the others' from a file system model fed with what
 * they write; bench_endurance_trace.c), and the trace is replayed on a
 * fresh emulated SSD (ftl/, as `kvbench ftl`) of the same size, spare
 * factor and block size for every system.  Every system gets a sync
 * point every --sync-every steps.  The figures and why they are measured
 * so are in docs/endurance.md.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench_common.h"
#include "bench/bench_endurance_int.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvbench endurance [options]\n"
		"  --dir DIR              work directory (default ./kvbench-endurance)\n"
		"  --systems LIST         kvflash,rocksdb,rocksdb-tuned,file-per-block,per-token,\n"
		"                         kvflash-admit or all (default all)\n"
		"  --admit-tokens N       kvflash-admit: sequences stay in DRAM until N tokens (512)\n"
		"  --codec LIST           none,fp8,int8,int4 or all (default none): kvflash and\n"
		"                         kvflash-admit run once per codec (rows kvflash-int4,\n"
		"                         kvflash-admit-int4, ...; not on train); the other\n"
		"                         systems store the K/V uncompressed, as given\n"
		"  --dram-budget BYTES    kvflash's memory tier (default 1G)\n"
		"  --workloads LIST       offline,online,chat,train or all (default all)\n"
		"  --layers N --q-heads N --kv-heads N --head-dim N   model (default 4 layers, 32/8 heads of 128, f16)\n"
		"  --seed N               workload seed (default 1)\n"
		"  --sync-every N         steps between sync points (default 64; 0: none)\n"
		"  --spare F              SSD spare factor (default 0.07)\n"
		"  --util F               peak live KV / SSD capacity (default 0.25)\n"
		"  --block-pages N        pages per erase block (default 256: 1 MiB)\n"
		"  offline: --batch N --rounds N --prompt N --gen N (default 8, 2, 1024, 128)\n"
		"  online:  --steps N --rate F --max-batch N --on-prompt N --on-gen N\n"
		"           (default 1000 steps, 0.08 arrivals a step, 32, mean 256 and 192)\n"
		"  chat:    --convs N --turns N --chat-prompt N --chat-gen N --think N --chat-batch N\n"
		"           (default 24, 4, mean 96 and 160, 150 steps, 32)\n"
		"  train:   --train-params N --train-steps N --train-steps-per-s F\n"
		"           (Adam on 4M fp32 parameters, 16 steps; 1 step/s for the lifetime)\n"
		"  drive:   --capacity BYTES (3.84T) --pe N (3000) --dwpd F (1) --warranty Y (5)\n"
		"           --tokens-per-s F (10000): the lifetime figures\n"
		"  --plot DIR             gnuplot PNGs: WA vs spare and utilization, erase\n"
		"                         histograms, NAND bytes per token\n"
		"  --json                 one JSON object per system and workload\n"
		"  --quiet                no progress line\n");
}

static int parse_capacity(const char *flag, const char *text, void *out)
{
	double v;
	char *end;

	v = strtod(text, &end);
	if (end == text)
		return bench_usage_error("endurance", "%s %s: not a number", flag, text);
	if (*end == 'T' || *end == 't')
		v *= 1e12, end++;
	else if (*end == 'G' || *end == 'g')
		v *= 1e9, end++;
	if (*end || !(v > 0))
		return bench_usage_error("endurance", "%s %s: use bytes, or a number with T or G", flag, text);
	*(double *)out = v;
	return 0;
}

static int in_list(const char *list, const char *name)
{
	size_t n = strlen(name);

	if (strcmp(list, "all") == 0)
		return 1;
	for (const char *p = list; p && *p;) {
		const char *c = strchr(p, ',');
		size_t k = c ? (size_t)(c - p) : strlen(p);

		if (k == n && strncmp(p, name, n) == 0)
			return 1;
		p = c ? c + 1 : NULL;
	}
	return 0;
}

/* check_list - every name of list is known */
static int check_list(const char *flag, const char *list,
		      const char *const *names, int n)
{
	char buf[256];
	int named = 0;

	if (strcmp(list, "all") == 0)
		return 0;
	snprintf(buf, sizeof(buf), "%s", list);
	for (char *save = NULL, *t = strtok_r(buf, ",", &save); t;
	     t = strtok_r(NULL, ",", &save)) {
		int ok = 0;

		named++;
		for (int i = 0; i < n; i++)
			ok |= strcmp(t, names[i]) == 0;
		if (!ok)
			return bench_usage_error("endurance", "%s: unknown name '%s'", flag, t);
	}
	/* an empty list would measure nothing, and say so with exit 0 */
	if (named == 0)
		return bench_usage_error("endurance", "%s '%s' names nothing", flag, list);
	return 0;
}

/* progress - one line on stderr, at most twice a second, on a terminal */
static void progress(const struct end_args *a, const char *wl, const char *sys,
		     size_t done, size_t total)
{
	static uint64_t last;
	uint64_t now = bench_now_ns();

	if (a->quiet || !isatty(2) || (now - last < 500000000ull && done < total))
		return;
	last = now;
	fprintf(stderr, "\r  %-8s %-15s %5.1f%%", wl, sys,
		total ? 100.0 * (double)done / (double)total : 100.0);
	if (done >= total)
		fputc('\n', stderr);
}

static int run_ops(struct end_sys *s, const struct end_workload *w,
		   const char *wl)
{
	const struct end_args *a = s->a;
	uint64_t steps = 0;
	uint64_t lbytes = end_token_layer_bytes(&a->model) * a->model.n_layers;

	for (size_t i = 0; i < w->n_ops; i++) {
		const struct end_op *o = &w->ops[i];
		int rc = 0;

		switch (o->kind) {
		case OP_PREFILL:
		case OP_DECODE: {
			uint32_t n = o->kind == OP_PREFILL ? o->n : 1;

			rc = s->ops->append(s, o->seq, n);
			s->tokens[o->seq] += n;
			s->user_bytes += n * lbytes;
			break;
		}
		case OP_END:
			rc = s->ops->end_seq(s, o->seq);
			break;
		case OP_TRAIN:
			rc = s->ops->train_step(s);
			s->user_bytes += 12 * a->train_params;
			progress(a, wl, s->name, i, w->n_ops);
			break;
		case OP_STEP:
			rc = s->ops->step(s);
			steps++;
			if (rc == 0 && a->sync_every && steps % a->sync_every == 0)
				rc = s->ops->sync(s);
			if ((steps & 15) == 0)
				progress(a, wl, s->name, i, w->n_ops);
			break;
		default:
			break;
		}
		if (rc)
			return -1;
	}
	progress(a, wl, s->name, w->n_ops, w->n_ops);
	return 0;
}

static int remove_tree(const char *dir)
{
	char cmd[700];

	if (access(dir, F_OK) != 0)
		return 0;
	snprintf(cmd, sizeof(cmd), "rm -rf -- '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

int end_run_system(const struct end_args *a, const struct end_workload *w,
		   enum end_sys_kind k, const unsigned char *pool, size_t pool_bytes,
		   uint64_t n_lpn, struct end_result *r, struct end_trace **keep)
{
	return end_run_codec(a, w, k, KVF_CODEC_NONE, pool, pool_bytes, n_lpn,
			     r, keep);
}

int end_run_codec(const struct end_args *a, const struct end_workload *w,
		  enum end_sys_kind k, kvf_codec c, const unsigned char *pool,
		  size_t pool_bytes, uint64_t n_lpn, struct end_result *r,
		  struct end_trace **keep)
{
	struct end_sys *s = calloc(1, sizeof(*s));
	struct end_replay rep;
	uint64_t t0 = bench_now_ns();
	int rc;

	memset(r, 0, sizeof(*r));
	r->wl = w->wl;
	r->sys = k;
	r->codec = end_sys_kvflash(k) ? c : KVF_CODEC_NONE;
	end_sys_name(k, r->codec, r->name, sizeof(r->name));
	if (s == NULL || (s->tokens = calloc(w->n_seqs + 1, sizeof(uint64_t))) == NULL) {
		free(s);
		snprintf(r->error, sizeof(r->error), "out of memory");
		return 0;
	}
	s->ops = end_sys_ops(k);
	s->kind = k;
	s->codec = r->codec;
	memcpy(s->name, r->name, sizeof(s->name));
	s->a = a;
	s->n_seqs = w->n_seqs;
	s->pool = pool;
	s->pool_bytes = pool_bytes;
	snprintf(s->dir, sizeof(s->dir), "%s/%s-%s", a->dir, end_wl_name(w->wl),
		 s->name);
	end_trace_init(&s->tr, n_lpn);
	rc = remove_tree(s->dir) || bench_make_dir("endurance", s->dir, NULL);
	s->wchar0 = end_wchar();
	if (rc == 0)
		rc = s->ops->open(s);
	if (rc == 0)
		rc = run_ops(s, w, end_wl_name(w->wl));
	if (s->ops->close(s) && rc == 0)
		rc = -1;
	fsm_free(&s->fs);
	if (rc == 0 && end_trace_check(&s->tr))
		rc = end_sys_fail(s, "the block trace is not well formed");
	if (rc == 0 && end_replay_run(&s->tr, a->spare, 0.0, a->block_pages, 1, &rep))
		rc = end_sys_fail(s, "replaying the trace on the emulated SSD");
	r->wall_s = (double)(bench_now_ns() - t0) / 1e9;
	if (rc == 0) {
		end_figures(a, s, w, &rep, r);
		r->ok = 1;
	} else {
		snprintf(r->error, sizeof(r->error), "%s",
			 s->error[0] ? s->error : "failed");
		fprintf(stderr, "kvbench endurance: %s on %s: %s\n", s->name,
			end_wl_name(w->wl), r->error);
	}
	remove_tree(s->dir);
	if (rc == 0 && keep && (*keep = malloc(sizeof(**keep))) != NULL) {
		**keep = s->tr; /* the lock is re-made: never locked here */
		pthread_mutex_init(&(*keep)->lock, NULL);
		pthread_mutex_destroy(&s->tr.lock);
	} else {
		end_trace_free(&s->tr);
	}
	free(s->tokens);
	free(s);
	return 0;
}

static int parse_args(int argc, char **argv, struct end_args *a)
{
	static const char *const sys_names[] = { "kvflash", "rocksdb", "rocksdb-tuned",
						 "file-per-block", "per-token",
						 "kvflash-admit" };
	static const char *const wl_names[] = { "offline", "online", "chat", "train" };
	static const char *const codec_names[] = { "none", "fp8", "int8", "int4" };
	const struct bench_opt opts[] = {
		BENCH_STR("--dir", a->dir), BENCH_STR("--plot", a->plot_dir),
		BENCH_STR("--systems", a->systems),
		BENCH_STR("--workloads", a->workloads),
		BENCH_MODEL_OPTS(a->model),
		BENCH_U64("--seed", a->seed, 0, UINT64_MAX),
		BENCH_U32("--sync-every", a->sync_every, 0, 1u << 30),
		BENCH_DOUBLE("--spare", a->spare), BENCH_DOUBLE("--util", a->util),
		BENCH_U32("--block-pages", a->block_pages, 16, 65536),
		BENCH_U32("--batch", a->off_batch, 1, 4096),
		BENCH_U32("--rounds", a->off_rounds, 1, 1u << 20),
		BENCH_U32("--prompt", a->off_prompt, 1, 1u << 20),
		BENCH_U32("--gen", a->off_gen, 1, 1u << 20),
		BENCH_U32("--steps", a->on_steps, 1, 1u << 24),
		BENCH_DOUBLE("--rate", a->on_rate),
		BENCH_U32("--max-batch", a->on_max_batch, 1, 4096),
		BENCH_U32("--on-prompt", a->on_prompt, 4, 1u << 20),
		BENCH_U32("--on-gen", a->on_gen, 1, 1u << 20),
		BENCH_U32("--convs", a->chat_convs, 1, 1u << 20),
		BENCH_U32("--turns", a->chat_turns, 1, 1024),
		BENCH_U32("--chat-prompt", a->chat_prompt, 4, 1u << 20),
		BENCH_U32("--chat-gen", a->chat_gen, 1, 1u << 20),
		BENCH_U32("--think", a->chat_think, 0, 1u << 24),
		BENCH_U32("--chat-batch", a->chat_max_batch, 1, 4096),
		BENCH_U64("--train-params", a->train_params, 1024, 1ull << 30),
		BENCH_U32("--train-steps", a->train_steps, 1, 1u << 24),
		BENCH_DOUBLE("--train-steps-per-s", a->train_steps_per_s),
		BENCH_FUNC("--capacity", parse_capacity, &a->drive.capacity_bytes),
		BENCH_DOUBLE("--pe", a->drive.pe_cycles),
		BENCH_DOUBLE("--dwpd", a->drive.dwpd),
		BENCH_DOUBLE("--warranty", a->drive.warranty_years),
		BENCH_DOUBLE("--tokens-per-s", a->drive.tokens_per_s),
		BENCH_U64("--admit-tokens", a->admit_tokens, 1, UINT64_MAX),
		BENCH_STR("--codec", a->codecs),
		BENCH_U64("--dram-budget", a->dram_budget, 0, UINT64_MAX),
		BENCH_BOOL("--json", a->json), BENCH_BOOL("--quiet", a->quiet),
		{ .name = NULL },
	};
	int rc = bench_parse_opts("endurance", usage, opts, argc, argv);

	if (rc)
		return rc == 1 ? 1 : 2;
	if (bench_check_heads("endurance", &a->model))
		return 2;
	if (check_list("--systems", a->systems, sys_names, 6) ||
	    check_list("--workloads", a->workloads, wl_names, 4) ||
	    check_list("--codec", a->codecs, codec_names, 4))
		return 2;
	a->n_codecs = 0;
	for (int c = KVF_CODEC_NONE; c <= KVF_CODEC_INT4; c++)
		if (in_list(a->codecs, codec_names[c]))
			a->codec[a->n_codecs++] = (kvf_codec)c;
	if (!(a->spare > 0.0 && a->spare < 0.9))
		return bench_usage_error("endurance", "--spare %g: use a value in (0, 0.9)", a->spare);
	if (!(a->util > 0.0 && a->util <= 0.95))
		return bench_usage_error("endurance", "--util %g: use a value in (0, 0.95]", a->util);
	if (!(a->on_rate > 0.0 && a->on_rate < 100.0))
		return bench_usage_error("endurance", "--rate %g: use a value in (0, 100)", a->on_rate);
	if (!(a->drive.pe_cycles >= 1 && a->drive.dwpd > 0 &&
	      a->drive.warranty_years > 0 && a->drive.tokens_per_s > 0 &&
	      a->train_steps_per_s > 0))
		return bench_usage_error("endurance", "--pe, --dwpd, --warranty, --tokens-per-s and --train-steps-per-s must be positive");
	return 0;
}

void end_args_default(struct end_args *a)
{
	*a = (struct end_args){
		.model = { .n_layers = 4, .n_q_heads = 32, .n_kv_heads = 8,
			   .head_dim = 128, .dtype = KVF_DTYPE_F16 },
		.dir = "kvbench-endurance", .systems = "all", .workloads = "all",
		.seed = 1, .sync_every = 64, .spare = 0.07, .util = 0.25,
		.admit_tokens = 512, .dram_budget = 1ull << 30, .codecs = "none",
		.block_pages = 256,
		.off_batch = 8, .off_rounds = 2, .off_prompt = 1024, .off_gen = 128,
		.on_steps = 1000, .on_rate = 0.08, .on_max_batch = 32,
		.on_prompt = 256, .on_gen = 192,
		.chat_convs = 24, .chat_turns = 4, .chat_prompt = 96,
		.chat_gen = 160, .chat_think = 150, .chat_max_batch = 32,
		.train_params = 4u << 20, .train_steps = 16, .train_steps_per_s = 1.0,
		.drive = { .capacity_bytes = 3.84e12, .pe_cycles = 3000,
			   .spare = 0.07, .dwpd = 1.0, .warranty_years = 5,
			   .tokens_per_s = 10000 },
	};
}

int bench_endurance_main(int argc, char **argv)
{
	struct end_args a;
	/* the kvflash rows once per codec */
	struct end_result res[WL_COUNT * (SYS_COUNT + 2 * KVF_CODEC_INT4)];
	struct end_trace *online[SYS_COUNT] = { NULL };
	size_t n_res = 0, pool_bytes;
	unsigned char *pool;
	int rc;

	end_args_default(&a);
	if ((rc = parse_args(argc, argv, &a)) != 0)
		return rc == 1 ? 0 : 2;
	a.drive.spare = a.spare;
	if (bench_make_dir("endurance", a.dir, NULL))
		return 1;
	/* test data: random values (f16 K/V hardly compress; no system
	 * compresses but kvflash's codec rows, whose size does not depend
	 * on the values); the largest single write is the longest prompt of
	 * one layer, or a block file */
	{
		uint64_t most = a.off_prompt;

		if (8ull * a.on_prompt > most)
			most = 8ull * a.on_prompt;
		if (8ull * a.chat_prompt > most)
			most = 8ull * a.chat_prompt;
		if ((uint64_t)END_BLOCK_TOKENS * a.model.n_layers > most)
			most = (uint64_t)END_BLOCK_TOKENS * a.model.n_layers;
		pool_bytes = (size_t)(1u << 20) +
			     (size_t)most * end_token_layer_bytes(&a.model);
	}
	if ((pool = malloc(pool_bytes)) == NULL) {
		fprintf(stderr, "kvbench endurance: out of memory\n");
		return 1;
	}
	for (size_t i = 0; i < pool_bytes / 8; i++) {
		/* bit 14 of each 16-bit value clear: an exponent below the
		 * top half, so every f16 or bf16 value is finite (below 2),
		 * which a codec store requires of what it encodes */
		uint64_t v = bench_mix64(i + a.seed * 0x9e3779b97f4a7c15ull) &
			     ~0x4000400040004000ull;

		memcpy(pool + 8 * i, &v, 8);
	}
	for (int wl = 0; wl < WL_COUNT; wl++) {
		struct end_workload w;
		uint64_t lbytes = end_token_layer_bytes(&a.model) * a.model.n_layers;
		uint64_t n_lpn;

		if (!in_list(a.workloads, end_wl_name((enum end_wl)wl)))
			continue;
		if (end_workload_make(&a, (enum end_wl)wl, &w)) {
			free(pool);
			return 1;
		}
		/* one device for every system: the peak of live K/V at
		 * --util, whole erase blocks */
		n_lpn = (uint64_t)(((double)w.peak_live_tokens * (double)lbytes +
				    2.0 * (double)w.state_bytes) /
				   a.util / END_PAGE);
		n_lpn = (n_lpn / a.block_pages + 16) * a.block_pages;
		for (int k = 0; k < SYS_COUNT; k++) {
			const struct end_sys_ops *ops = end_sys_ops((enum end_sys_kind)k);
			int kv = end_sys_kvflash((enum end_sys_kind)k);

			if (!in_list(a.systems, ops->name) ||
			    (wl == WL_TRAIN && ops->train_step == NULL))
				continue;
			/* kvflash once per codec (the train workload keeps no
			 * K/V: it has no codec rows); the others once */
			for (uint32_t c = 0; c < (kv ? a.n_codecs : 1); c++) {
				kvf_codec cd = kv ? a.codec[c] : KVF_CODEC_NONE;

				if (wl == WL_TRAIN && cd != KVF_CODEC_NONE)
					continue;
				end_run_codec(&a, &w, (enum end_sys_kind)k, cd, pool,
					      pool_bytes, n_lpn, &res[n_res++],
					      wl == WL_ONLINE && a.plot_dir &&
							      cd == KVF_CODEC_NONE
						      ? &online[k] : NULL);
			}
		}
		end_workload_free(&w);
	}
	free(pool);
	if (a.json)
		end_print_json(&a, res, n_res);
	else
		end_print_table(&a, res, n_res);
	rc = 0;
	if (a.plot_dir && end_plot(&a, res, n_res, online) < 0)
		rc = 1;
	for (int k = 0; k < SYS_COUNT; k++)
		if (online[k]) {
			end_trace_free(online[k]);
			free(online[k]);
		}
	for (size_t i = 0; i < n_res; i++)
		if (!res[i].ok)
			rc = 1;
	return rc;
}
