/*
 * test_endurance.c - kvbench endurance's parts: the lifetime arithmetic
 * against hand-worked cases, the file system model's accounting, trace
 * checks, the SSD replay, the workloads, and each system on a small run
 * (bytes accounted for, traces well formed).
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_endurance_int.h"
#include "testutil.h"

static int near(double a, double b)
{
	return fabs(a - b) <= 1e-9 * fabs(b);
}

Test(bench_endurance, lifetime_hand_worked)
{
	struct end_drive d = { .capacity_bytes = 1e12, .pe_cycles = 1000,
			       .spare = 0.2, .dwpd = 1, .warranty_years = 5,
			       .tokens_per_s = 1000 };

	/* 1e12 / 0.8 x 1000 = 1.25e15 NAND bytes */
	cr_assert(near(end_nand_budget(&d), 1.25e15));
	/* 1e4 B a token x 1000 tokens/s = 1e7 B/s: 1.25e8 s = 3.9610 years */
	cr_assert(near(end_lifetime_years(&d, 1e4), 1.25e8 / (365.25 * 86400)));
	cr_assert(fabs(end_lifetime_years(&d, 1e4) - 3.961) < 1e-3);
	/* TBW 1e12 x 365 x 5 = 1.825e15; 5e3 B a token: 3.65e8 s */
	cr_assert(near(end_rated_years(&d, 5e3), 3.65e8 / (365.25 * 86400)));
	/* 100 requests on 2e15 NAND bytes: 50 per PBW */
	cr_assert(near(end_requests_per_pbw(100, 2e15), 50.0));
	/* nothing written: nothing wears (the drive outlives any horizon);
	 * no tokens at all: no figure */
	cr_assert(isinf(end_requests_per_pbw(100, 0)));
	cr_assert(isnan(end_requests_per_pbw(0, 0)));
	cr_assert(isinf(end_lifetime_years(&d, 0)) && end_lifetime_years(&d, 0) > 0);
	cr_assert(isinf(end_rated_years(&d, 0)));
	cr_assert(isnan(end_lifetime_years(&d, NAN)));
	cr_assert(isnan(end_rated_years(&d, NAN)));
}

Test(bench_endurance, fsm_accounts_pages)
{
	struct end_trace t;
	struct fsm f;
	long a, b;

	end_trace_init(&t, 64);
	cr_assert(eq(int, fsm_init(&f, &t, 0, 64), 0));
	a = fsm_create(&f, "a");
	b = fsm_create(&f, "b");
	cr_assert(a >= 0 && b >= 0);
	/* 6000 bytes: pages 0 and 1 of a; 100 bytes of b */
	cr_assert(eq(int, fsm_write(&f, a, 0, 6000), 0));
	cr_assert(eq(int, fsm_write(&f, b, 0, 100), 0));
	cr_assert(eq(int, fsm_flush(&f), 0));
	cr_assert(eq(u64, t.write_pages, 3));
	cr_assert(eq(u64, f.n_used, 3));
	/* a grows inside its page 1: that page is written again, in place */
	cr_assert(eq(int, fsm_write(&f, a, 6000, 100), 0));
	cr_assert(eq(int, fsm_flush(&f), 0));
	cr_assert(eq(u64, t.write_pages, 4));
	cr_assert(eq(u64, f.n_used, 3));
	cr_assert(eq(u64, f.bytes_in, 6200));
	/* dirty pages of a file unlinked before its flush never reach the
	 * device; its written pages are trimmed */
	cr_assert(eq(int, fsm_write(&f, b, 4096, 4096), 0));
	fsm_unlink(&f, b);
	cr_assert(eq(int, fsm_flush(&f), 0));
	cr_assert(eq(u64, t.write_pages, 4));
	cr_assert(eq(u64, t.trim_pages, 1));
	cr_assert(eq(u64, f.n_used, 2));
	cr_assert(eq(long, fsm_lookup(&f, "b"), -1));
	cr_assert(eq(long, fsm_lookup(&f, "a"), a));
	cr_assert(eq(int, end_trace_check(&t), 0));
	fsm_free(&f);
	end_trace_free(&t);
}

Test(bench_endurance, fsm_full_device_fails)
{
	struct end_trace t;
	struct fsm f;
	long a;

	end_trace_init(&t, 8);
	cr_assert(eq(int, fsm_init(&f, &t, 0, 8), 0));
	a = fsm_create(&f, "a");
	cr_assert(eq(int, fsm_write(&f, a, 0, 9 * 4096), 0));
	cr_assert(eq(int, fsm_flush(&f), -1));
	cr_assert(f.full);
	fsm_free(&f);
	end_trace_free(&t);
}

Test(bench_endurance, trace_check_finds_bad_events)
{
	struct end_trace t;

	end_trace_init(&t, 16);
	end_trace_add(&t, TR_WRITE, 0, 4);
	end_trace_add(&t, TR_WRITE, 4, 4); /* merged with the first */
	cr_assert(eq(sz, t.n, 1));
	end_trace_add(&t, TR_TRIM, 0, 8);
	cr_assert(eq(int, end_trace_check(&t), 0));
	end_trace_add(&t, TR_WRITE, 14, 4); /* past the device */
	cr_assert(eq(int, end_trace_check(&t), -1));
	end_trace_free(&t);
}

Test(bench_endurance, replay_sequential_is_wa_one)
{
	struct end_trace t;
	struct end_replay r;

	end_trace_init(&t, 4096);
	for (int round = 0; round < 6; round++) {
		end_trace_add(&t, TR_WRITE, 0, 4096);
		end_trace_add(&t, TR_TRIM, 0, 4096);
	}
	cr_assert(eq(int, end_replay_run(&t, 0.07, 0.0, 64, 1, &r), 0));
	cr_assert(eq(u64, r.host_pages % (6 * 4096), 0));
	cr_assert(r.host_pages >= 2 * 4096);
	cr_assert(r.device_wa >= 1.0 && r.device_wa < 1.001, "WA %g", r.device_wa);
	cr_assert(r.erases > 0);
	end_trace_free(&t);
}

Test(bench_endurance, replay_random_overwrites_amplify)
{
	struct end_trace t;
	struct end_replay r, hot;
	uint64_t x = 7;

	end_trace_init(&t, 4096);
	end_trace_add(&t, TR_WRITE, 0, 4096);
	for (int i = 0; i < 40000; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		end_trace_add(&t, TR_WRITE, (x >> 33) % 4096, 1);
	}
	cr_assert(eq(int, end_replay_run(&t, 0.1, 0.0, 64, 1, &r), 0));
	cr_assert(r.device_wa > 2.0, "WA %g", r.device_wa);
	cr_assert(r.util_mean > 0.99);
	/* cold data beside it at a target utilization: more WA, not less */
	cr_assert(eq(int, end_replay_run(&t, 0.3, 0.0, 64, 1, &hot), 0));
	cr_assert(hot.device_wa < r.device_wa);
	end_trace_free(&t);
}

static void small_args(struct end_args *a, const char *dir)
{
	end_args_default(a);
	a->dir = dir;
	a->model.n_layers = 2;
	a->model.n_kv_heads = 2;
	a->model.n_q_heads = 4;
	a->model.head_dim = 64;
	a->sync_every = 8;
	a->off_batch = 3;
	a->off_rounds = 2;
	a->off_prompt = 100;
	a->off_gen = 40;
	a->on_steps = 120;
	a->on_rate = 0.2;
	a->on_prompt = 40;
	a->on_gen = 30;
	a->chat_convs = 6;
	a->chat_turns = 3;
	a->chat_prompt = 20;
	a->chat_gen = 20;
	a->chat_think = 10;
	a->train_params = 100000; /* not a whole number of pages */
	a->train_steps = 3;
	a->quiet = 1;
}

Test(bench_endurance, workloads_are_seeded_and_whole)
{
	struct end_args a;

	small_args(&a, "unused");
	for (int wl = 0; wl < WL_COUNT; wl++) {
		struct end_workload w1, w2;
		uint64_t dec = 0, ends = 0;
		uint8_t *ended;

		cr_assert(eq(int, end_workload_make(&a, (enum end_wl)wl, &w1), 0));
		cr_assert(eq(int, end_workload_make(&a, (enum end_wl)wl, &w2), 0));
		cr_assert(eq(sz, w1.n_ops, w2.n_ops));
		for (size_t i = 0; i < w1.n_ops; i++)
			cr_assert(w1.ops[i].kind == w2.ops[i].kind &&
				  w1.ops[i].n == w2.ops[i].n &&
				  w1.ops[i].seq == w2.ops[i].seq, "op %zu differs", i);
		ended = calloc(w1.n_seqs, 1);
		for (size_t i = 0; i < w1.n_ops; i++) {
			const struct end_op *o = &w1.ops[i];

			if (o->kind == OP_DECODE) {
				dec++;
				cr_assert(ended[o->seq] == 0);
			} else if (o->kind == OP_END) {
				cr_assert(ended[o->seq] == 0, "%s: seq ended twice", end_wl_name(w1.wl));
				ended[o->seq] = 1;
				ends++;
			}
		}
		cr_assert(eq(u64, dec, w1.gen_tokens));
		cr_assert(eq(u64, ends, w1.n_seqs), "%s: every sequence ends (%llu of %llu)",
			  end_wl_name(w1.wl), (unsigned long long)ends,
			  (unsigned long long)w1.n_seqs);
		cr_assert(w1.requests >= w1.n_seqs);
		cr_assert(w1.wl == WL_TRAIN ? w1.requests == a.train_steps &&
					      w1.state_bytes == 12 * a.train_params
					    : w1.peak_live_tokens > 0);
		free(ended);
		end_workload_free(&w1);
		end_workload_free(&w2);
	}
}

/* each system on a small online run: it succeeds, its trace is well
 * formed, and its bytes add up */
Test(bench_endurance, systems_small_runs)
{
	char *td;
	struct end_args a;
	struct end_workload w;
	size_t pool_bytes = 8u << 20;
	unsigned char *pool = malloc(pool_bytes);
	uint64_t lbytes, n_lpn, whole = 0, *len, kvflash_block = 0;

	cr_assert(pool != NULL);
	for (size_t i = 0; i < pool_bytes; i++)
		pool[i] = (unsigned char)(i * 2654435761u >> 13);
	td = tmpdir_make("endurance");
	cr_assert(td != NULL);
	small_args(&a, td);
	cr_assert(eq(int, end_workload_make(&a, WL_ONLINE, &w), 0));
	lbytes = end_token_layer_bytes(&a.model) * a.model.n_layers;
	/* bytes of whole blocks of 16 tokens: what RocksDB and the block
	 * files store (a partial last block stays in DRAM) */
	len = calloc(w.n_seqs, sizeof(*len));
	cr_assert(len != NULL);
	for (size_t i = 0; i < w.n_ops; i++)
		if (w.ops[i].kind == OP_PREFILL || w.ops[i].kind == OP_DECODE)
			len[w.ops[i].seq] += w.ops[i].kind == OP_PREFILL ? w.ops[i].n : 1;
	for (uint64_t q = 0; q < w.n_seqs; q++)
		whole += len[q] / 16 * 16 * lbytes;
	free(len);
	n_lpn = (w.peak_live_tokens * lbytes * 4 / END_PAGE / 256 + 16) * 256;
	for (int k = 0; k < SYS_COUNT; k++) {
		struct end_result r;
		struct end_trace *t = NULL;
		uint64_t user = (w.prompt_tokens + w.gen_tokens) * lbytes;

		end_run_system(&a, &w, (enum end_sys_kind)k, pool, pool_bytes,
			       n_lpn, &r, &t);
		cr_assert(r.ok, "%s: %s", end_sys_ops(k)->name, r.error);
		cr_assert(t != NULL);
		cr_assert(eq(int, end_trace_check(t), 0));
		cr_assert(eq(u64, r.user_bytes, user));
		cr_assert(eq(u64, r.block_bytes, t->write_pages * END_PAGE));
		cr_assert(r.nand_bytes >= r.block_bytes);
		cr_assert(r.device_wa >= 1.0 || r.block_bytes == 0);
		switch (k) {
		case SYS_TOKEN: /* every byte, and pages rewritten token by token */
			cr_assert(eq(u64, r.host_bytes, user));
			cr_assert(r.block_bytes > user);
			break;
		case SYS_FILES: /* whole blocks of 16 tokens only */
			cr_assert(eq(u64, r.host_bytes, whole));
			break;
		case SYS_ROCKS:
		case SYS_ROCKS_TUNED: /* the WAL and the tables at least */
			cr_assert(r.host_bytes > whole, "%s host %llu user %llu",
				  end_sys_ops(k)->name,
				  (unsigned long long)r.host_bytes,
				  (unsigned long long)whole);
			break;
		case SYS_KVFLASH_ADMIT: /* short sequences never written */
			cr_assert(r.dram_only > 0);
			cr_assert(r.block_bytes < kvflash_block, "%llu against %llu",
				  (unsigned long long)r.block_bytes,
				  (unsigned long long)kvflash_block);
			break;
		default: /* kvflash: its data pages and summaries */
			cr_assert(r.host_bytes > 0);
			kvflash_block = r.block_bytes;
			break;
		}
		cr_assert(r.nand_bytes_per_token > 0);
		cr_assert(r.lifetime_years > 0);
		end_trace_free(t);
		free(t);
	}
	end_workload_free(&w);
	tmpdir_remove(td);
	free(pool);
}

/* data that dies at once costs the SSD nothing when it is told (discard),
 * and garbage collection when it is not */
Test(bench_endurance, replay_without_discard_copies)
{
	struct end_trace t;
	struct end_replay told, untold;
	uint64_t x = 11;

	end_trace_init(&t, 4096);
	for (int i = 0; i < 20000; i++) {
		uint64_t p;

		x = x * 6364136223846793005ull + 1442695040888963407ull;
		p = (x >> 33) % 4096;
		end_trace_add(&t, TR_WRITE, p, 1);
		end_trace_add(&t, TR_TRIM, p, 1);
	}
	cr_assert(eq(int, end_replay_run(&t, 0.1, 0.0, 64, 1, &told), 0));
	cr_assert(eq(int, end_replay_run(&t, 0.1, 0.0, 64, 0, &untold), 0));
	cr_assert(told.device_wa < 1.01, "WA %g", told.device_wa);
	cr_assert(untold.device_wa > 1.5, "WA %g", untold.device_wa);
	end_trace_free(&t);
}

/* the systems that hold optimizer state, on a few steps: bytes accounted
 * for (params, m and v each step), traces well formed */
Test(bench_endurance, train_small_runs)
{
	char *td = tmpdir_make("endurance-train");
	struct end_args a;
	struct end_workload w;
	size_t pool_bytes = 8u << 20;
	unsigned char *pool = calloc(1, pool_bytes);
	uint64_t user, n_lpn;
	int ran = 0;

	cr_assert(td != NULL && pool != NULL);
	small_args(&a, td);
	cr_assert(eq(int, end_workload_make(&a, WL_TRAIN, &w), 0));
	user = 12ull * a.train_params * a.train_steps;
	n_lpn = (2 * w.state_bytes * 4 / END_PAGE / 256 + 16) * 256;
	for (int k = 0; k < SYS_COUNT; k++) {
		struct end_result r;
		struct end_trace *t = NULL;

		if (end_sys_ops(k)->train_step == NULL)
			continue;
		ran++;
		end_run_system(&a, &w, (enum end_sys_kind)k, pool, pool_bytes,
			       n_lpn, &r, &t);
		cr_assert(r.ok, "%s: %s", end_sys_ops(k)->name, r.error);
		cr_assert(eq(int, end_trace_check(t), 0));
		cr_assert(eq(u64, r.user_bytes, user));
		cr_assert(eq(u64, r.requests, a.train_steps));
		cr_assert(r.nand_bytes_per_step > 0 && isnan(r.nand_bytes_per_token));
		if (k == SYS_FILES) { /* rewritten in place: whole pages again */
			cr_assert(eq(u64, r.host_bytes, user));
			cr_assert(eq(u64, r.block_bytes,
				     3ull * a.train_steps *
				     ((4 * a.train_params + END_PAGE - 1) / END_PAGE) * END_PAGE));
		} else {
			cr_assert(r.host_bytes >= user, "%s: %llu < %llu",
				  end_sys_ops(k)->name,
				  (unsigned long long)r.host_bytes,
				  (unsigned long long)user);
		}
		end_trace_free(t);
		free(t);
	}
	cr_assert(eq(int, ran, 4));
	end_workload_free(&w);
	tmpdir_remove(td);
	free(pool);
}
