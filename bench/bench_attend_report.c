/*
 * bench_attend_report.c - `kvbench attend`: the figures (medians of the
 * passes) printed as a table with each target beside its ratio, or as
 * JSON.  A file of its own: presentation only, it measures nothing.
 */
#include <stdint.h>
#include <stdio.h>

#include "bench/bench_attend_int.h"
#include "bench/bench_common.h"
#include "compute/kernels.h"
#include "kvflash.h"

/* ---- output -------------------------------------------------------------- */

static double gbs(uint64_t bytes, double ns)
{
	return ns > 0 ? (double)bytes / ns : 0;
}

static double mib(uint64_t bytes)
{
	return (double)bytes / (1024.0 * 1024.0);
}

static const char *const layer_name[N_LAYERS] = { "scattered heavy hitters",
						  "clustered heavy hitters" };

/* print_sparf - section 3 for SparF mode s: each layer against dense */
static void print_sparf(const struct attend_ctx *c, const struct attend_pass *m,
			uint32_t s)
{
	uint32_t G = c->group_tokens;

	printf("%s vs dense, cold: top_r %u dims, top_k %u\n",
	       sparf_mode[s].title, c->top_r, c->top_k);
	if (sparf_mode[s].sparse == 2)
		printf("   (each KV head's %u groups of %u tokens of most approximate mass, whole)\n",
		       (c->top_k + G - 1) / G, G);
	else
		printf("   (each query head's %u tokens of highest approximate score)\n",
		       c->top_k);
	for (uint32_t l = 0; l < N_LAYERS; l++) {
		const struct sparf_figs *f = &c->fig[l].sp[s];
		uint64_t dense = c->fig[l].dense_bytes;
		char rbuf[32];

		printf("   layer %u: %s (they hold %.0f%% of dense attention's mass)\n",
		       l, layer_name[l], 100 * c->fig[l].hh_mass);
		printf("%-34s %8.1f MiB %8.1f MiB %8s  <= 0.30x\n",
		       "   bytes read", mib(f->bytes), mib(dense),
		       bench_ratio(rbuf, sizeof(rbuf), (double)f->bytes,
				   (double)dense, 2));
		printf("%-34s %9.1f ms %9.1f ms %7.2fx  >= 2.50x faster\n",
		       "   time a call", m->sparf[s][l] / 1e6,
		       m->cold_dense[l] / 1e6,
		       m->cold_dense[l] / m->sparf[s][l]);
		printf("   the timed call is the second after a reopen: CPU %.1f ms; on the memory store\n"
		       "   (no I/O) %.1f ms; SparF pages read %llu, skipped %llu\n",
		       m->sparf_cpu[s][l] / 1e6, m->mem_sparf[s][l] / 1e6,
		       (unsigned long long)f->pages_read,
		       (unsigned long long)f->pages_skipped);
		printf("   first call after the reopen (it also catches the mean of V up if behind):\n"
		       "   %.1f MiB (%s dense), %.1f ms (speed-up %.2fx)\n",
		       mib(f->first_bytes),
		       bench_ratio(rbuf, sizeof(rbuf), (double)f->first_bytes,
				   (double)dense, 2),
		       m->sparf_first[s][l] / 1e6,
		       m->cold_dense[l] / m->sparf_first[s][l]);
		printf("   cosine of SparF's output to dense over the %u q heads: min %.4f, mean %.4f\n",
		       c->a->model.n_q_heads, f->cos_min, f->cos_mean);
	}
}

void attend_print_table(const struct attend_ctx *c,
			const struct attend_pass *m)
{
	const struct attend_args *a = c->a;
	uint64_t kv = c->kv_bytes;
	int ok = c->diff_ref <= CHECK_TOL && c->diff_mem_file <= CHECK_TOL &&
		 c->diff_flex <= CHECK_TOL;

	printf("kvbench attend: %s, one sequence of %u tokens, %u q heads / %u kv heads x %u dims f16\n"
	       "  (K+V %.1f MiB a layer); %u threads (store and baselines); both stores keep K^T pages;\n"
	       "  file store O_DIRECT %s (plain file %s); SparF top_r %u, top_k %u; median of %u\n",
	       a->dir, a->n_tokens, a->model.n_q_heads, a->model.n_kv_heads,
	       a->model.head_dim, mib(kv), c->n_threads,
	       c->direct_io ? "on" : "off (fallback)",
	       c->plain_direct ? "on" : "off", c->top_r, c->top_k, a->repeat);
	printf("\n%-34s %12s %12s %8s  %s\n", "measurement", "kvflash",
	       "baseline", "ratio", "target");
	printf("%-34s %7.2f GB/s %7.2f GB/s %7.2fx  >= 0.60x\n",
	       "1. dense, in memory", gbs(kv, m->mem_attend),
	       gbs(kv, m->mem_plain), m->mem_plain / m->mem_attend);
	printf("   kvf_attend %.1f ms a call (mean of %u back to back); baseline: sum of every\n"
	       "   64-bit word of a buffer of as many bytes, %u threads (on one: %.2f GB/s, %.2fx)\n",
	       m->mem_attend / 1e6, MEM_CALLS, c->n_threads,
	       gbs(kv, m->mem_plain1), m->mem_plain1 / m->mem_attend);
	printf("%-34s %7.2f GB/s %7.2f GB/s %7.2fx  >= 0.80x\n",
	       "2. dense, cold, file backend", gbs(kv, m->cold_dense[0]),
	       gbs(c->plain_file_bytes, m->plain_direct),
	       gbs(kv, m->cold_dense[0]) /
		       gbs(c->plain_file_bytes, m->plain_direct));
	printf("   kvf_attend %.1f ms a call (CPU %.1f ms), layer 1 %.1f ms; it read %.1f MiB in\n"
	       "   %llu pages; baseline: one thread of 1 MiB O_DIRECT preads; reopen %.1f ms, untimed\n",
	       m->cold_dense[0] / 1e6, m->cold_dense_cpu[0] / 1e6,
	       m->cold_dense[1] / 1e6, mib(c->fig[0].dense_bytes),
	       (unsigned long long)(c->fig[0].dense_bytes / 4096),
	       m->reopen / 1e6);
	for (uint32_t s = 0; s < N_MODES; s++)
		print_sparf(c, m, s);
	printf("%-34s %9.1f ms %9.1f ms %7.2fx  (speed-up of kvf_attend)\n",
	       "4. kvf_attend vs the FlexGen way", m->cold_dense[0] / 1e6,
	       m->flex / 1e6, m->flex / m->cold_dense[0]);
	printf("   cold, layer 0; FlexGen way: %u threads, each kvf_read of one head's K and V\n"
	       "   (%.1f MiB in all), then kvc_kernels()->attn_fold (%s, the store's kernel) over\n"
	       "   them; CPU %.1f ms (kvf_attend %.1f ms)\n",
	       c->n_threads, mib(c->flex_bytes), kvc_kernels()->name,
	       m->flex_cpu / 1e6, m->cold_dense_cpu[0] / 1e6);
	printf("5. H2O eviction (kvf_h2o_evict) of a fork, memory store: each layer's\n"
	       "   scores from %u queries near its q, then dense attention to q over what\n"
	       "   stays (first group and a window of half the budget kept)\n", H2O_QUERIES);
	for (uint32_t l = 0; l < N_LAYERS; l++)
		for (uint32_t b = 0; b < N_H2O; b++)
			printf("   layer %u keep 1/%u: %llu of %u tokens kept a head; cosine to the full sequence's\n"
			       "   over the %u q heads: min %.4f, mean %.4f; the drop took %.1f ms\n",
			       l, b ? 4u : 2u,
			       (unsigned long long)c->fig[l].h2o_kept[b], a->n_tokens,
			       a->model.n_q_heads, c->fig[l].h2o[b].cos_min,
			       c->fig[l].h2o[b].cos_mean, c->fig[l].h2o_ms[b]);
	printf("checks: %llu rows read back equal the rows appended; max |difference| to a\n"
	       "  double-precision reference %.2g, memory vs file store %.2g, FlexGen vs\n"
	       "  kvf_attend %.2g (tolerance %.0e): %s\n",
	       (unsigned long long)c->verified_rows, c->diff_ref,
	       c->diff_mem_file, c->diff_flex, CHECK_TOL,
	       ok ? "ok" : "MISMATCH");
}

static void json_vs(struct bench_json *j, const char *key, double kvf,
		    double base, const char *unit, double ratio,
		    const char *target_kind, double target)
{
	char k0[48], k1[48];

	snprintf(k0, sizeof(k0), "kvflash_%s", unit);
	snprintf(k1, sizeof(k1), "baseline_%s", unit);
	bench_json_begin(j, key);
	bench_json_double(j, k0, kvf);
	bench_json_double(j, k1, base);
	bench_json_double(j, "ratio", ratio);
	if (target_kind)
		bench_json_double(j, target_kind, target);
}

/* json_sparf - "<mode>_layer<l>": SparF mode s on layer l against dense */
static void json_sparf(struct bench_json *j, const struct attend_ctx *c,
		       const struct attend_pass *m, uint32_t s, uint32_t l)
{
	const struct sparf_figs *f = &c->fig[l].sp[s];
	uint64_t dense = c->fig[l].dense_bytes;
	char key[48];

	snprintf(key, sizeof(key), "%s_layer%u", sparf_mode[s].json, l);
	bench_json_begin(j, key);
	bench_json_str(j, "pattern", layer_name[l]);
	bench_json_u64(j, "sparse", sparf_mode[s].sparse);
	bench_json_str(j, "mode", sparf_mode[s].name);
	bench_json_double(j, "dense_heavy_hitter_mass", c->fig[l].hh_mass);
	json_vs(j, "bytes", (double)f->bytes, (double)dense, "bytes",
		(double)f->bytes / (double)dense, "target_max_ratio", 0.3);
	bench_json_end(j);
	json_vs(j, "time", m->sparf[s][l] / 1e6, m->cold_dense[l] / 1e6, "ms",
		m->cold_dense[l] / m->sparf[s][l], "target_min_speedup", 2.5);
	bench_json_end(j);
	bench_json_begin(j, "first_call_after_open");
	bench_json_u64(j, "bytes", f->first_bytes);
	bench_json_double(j, "ms", m->sparf_first[s][l] / 1e6);
	bench_json_end(j);
	bench_json_double(j, "cpu_ms", m->sparf_cpu[s][l] / 1e6);
	bench_json_double(j, "memory_store_ms", m->mem_sparf[s][l] / 1e6);
	bench_json_double(j, "cosine_min", f->cos_min);
	bench_json_double(j, "cosine_mean", f->cos_mean);
	bench_json_u64(j, "sparf_pages_read", f->pages_read);
	bench_json_u64(j, "sparf_pages_skipped", f->pages_skipped);
	bench_json_end(j);
}

void attend_print_json(const struct attend_ctx *c,
		       const struct attend_pass *m)
{
	const struct attend_args *a = c->a;
	struct bench_json j = { .f = stdout };
	uint64_t kv = c->kv_bytes;

	bench_json_begin(&j, NULL);
	bench_json_str(&j, "bench", "attend");
	bench_json_str(&j, "dir", a->dir);
	bench_json_begin(&j, "model");
	bench_json_u64(&j, "n_q_heads", a->model.n_q_heads);
	bench_json_u64(&j, "n_kv_heads", a->model.n_kv_heads);
	bench_json_u64(&j, "head_dim", a->model.head_dim);
	bench_json_str(&j, "dtype", "f16");
	bench_json_end(&j);
	bench_json_u64(&j, "tokens", a->n_tokens);
	bench_json_u64(&j, "kv_bytes_per_layer", kv);
	bench_json_u64(&j, "threads", c->n_threads);
	bench_json_u64(&j, "top_r", c->top_r);
	bench_json_u64(&j, "top_k", c->top_k);
	bench_json_u64(&j, "group_tokens", c->group_tokens);
	bench_json_u64(&j, "repeat", a->repeat);
	bench_json_u64(&j, "direct_io", (uint64_t)c->direct_io);
	bench_json_u64(&j, "plain_direct_io", (uint64_t)c->plain_direct);
	bench_json_str(&j, "kernel", kvc_kernels()->name);
	json_vs(&j, "dense_memory", gbs(kv, m->mem_attend),
		gbs(kv, m->mem_plain), "gb_s", m->mem_plain / m->mem_attend,
		"target_min_ratio", 0.6);
	bench_json_double(&j, "kvflash_ms", m->mem_attend / 1e6);
	bench_json_double(&j, "baseline_one_thread_gb_s",
			  gbs(kv, m->mem_plain1));
	bench_json_end(&j);
	json_vs(&j, "dense_cold_file", gbs(kv, m->cold_dense[0]),
		gbs(c->plain_file_bytes, m->plain_direct), "gb_s",
		gbs(kv, m->cold_dense[0]) /
			gbs(c->plain_file_bytes, m->plain_direct),
		"target_min_ratio", 0.8);
	bench_json_double(&j, "kvflash_ms", m->cold_dense[0] / 1e6);
	bench_json_double(&j, "kvflash_cpu_ms", m->cold_dense_cpu[0] / 1e6);
	bench_json_double(&j, "kvflash_layer1_ms", m->cold_dense[1] / 1e6);
	bench_json_u64(&j, "kvflash_bytes_read", c->fig[0].dense_bytes);
	bench_json_double(&j, "reopen_ms", m->reopen / 1e6);
	bench_json_end(&j);
	for (uint32_t s = 0; s < N_MODES; s++)
		for (uint32_t l = 0; l < N_LAYERS; l++)
			json_sparf(&j, c, m, s, l);
	json_vs(&j, "flexgen_way", m->cold_dense[0] / 1e6, m->flex / 1e6, "ms",
		m->flex / m->cold_dense[0], NULL, 0);
	bench_json_double(&j, "kvflash_cpu_ms", m->cold_dense_cpu[0] / 1e6);
	bench_json_double(&j, "baseline_cpu_ms", m->flex_cpu / 1e6);
	bench_json_u64(&j, "baseline_bytes_read", c->flex_bytes);
	bench_json_end(&j);
	for (uint32_t l = 0; l < N_LAYERS; l++)
		for (uint32_t b = 0; b < N_H2O; b++) {
			char key[32];

			snprintf(key, sizeof(key), "h2o_keep%u_layer%u", b ? 4u : 2u, l);
			bench_json_begin(&j, key);
			bench_json_str(&j, "pattern", layer_name[l]);
			bench_json_u64(&j, "tokens_kept", c->fig[l].h2o_kept[b]);
			bench_json_double(&j, "cosine_min", c->fig[l].h2o[b].cos_min);
			bench_json_double(&j, "cosine_mean", c->fig[l].h2o[b].cos_mean);
			bench_json_double(&j, "evict_ms", c->fig[l].h2o_ms[b]);
			bench_json_end(&j);
		}
	bench_json_begin(&j, "checks");
	bench_json_u64(&j, "rows_verified", c->verified_rows);
	bench_json_double(&j, "max_diff_reference", c->diff_ref);
	bench_json_double(&j, "max_diff_memory_vs_file", c->diff_mem_file);
	bench_json_double(&j, "max_diff_flexgen", c->diff_flex);
	bench_json_double(&j, "tolerance", CHECK_TOL);
	bench_json_end(&j);
	bench_json_end(&j);
}
