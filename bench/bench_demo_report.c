/*
 * bench_demo_report.c - `kvbench demo`: what the run did, how long its
 * calls took, and the store's own figures (write amplification, where the
 * bytes went, index memory), as JSON or text.  See bench_demo.c for the
 * workload.
 */
#include <stdint.h>
#include <stdio.h>

#include "bench/bench_common.h"
#include "bench/bench_demo_int.h"
#include "kvflash.h"

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

void demo_print_json(const struct demo *d)
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

void demo_print_text(const struct demo *d)
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

