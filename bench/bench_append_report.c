/*
 * bench_append_report.c - `kvbench append`: the medians of the passes,
 * with their targets, as JSON or a table.  See bench_append.c for what is
 * measured.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "bench/bench_append_int.h"
#include "bench/bench_common.h"
#include "kvflash.h"

/* ---- output ------------------------------------------------------------------ */

static double pct(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0;
}

static void json_pair(struct bench_json *j, const char *key, const double *v,
		      int sides, double target, const double *cpu,
		      uint64_t bytes)
{
	bench_json_begin(j, key);
	bench_json_double(j, "kvflash_mb_s", v[SIDE_KVF]);
	bench_json_double(j, "plain_mb_s", v[SIDE_PLAIN]);
	bench_json_double(j, "ratio", v[SIDE_KVF] / v[SIDE_PLAIN]);
	if (sides == SIDES) {
		bench_json_double(j, "no_tier_mb_s", v[SIDE_NOTIER]);
		bench_json_double(j, "no_tier_ratio",
				  v[SIDE_NOTIER] / v[SIDE_PLAIN]);
		bench_json_double(j, "tier_cost",
				  1.0 - v[SIDE_KVF] / v[SIDE_NOTIER]);
		bench_json_double(j, "target_max_tier_cost", 0.05);
	}
	bench_json_double(j, "target_min_ratio", target);
	if (cpu) { /* CPU seconds per GB (10^9 bytes) of user bytes */
		bench_json_double(j, "kvflash_cpu_s_per_gb",
				  cpu[SIDE_KVF] / ((double)bytes / 1e9));
		bench_json_double(j, "no_tier_cpu_s_per_gb",
				  cpu[SIDE_NOTIER] / ((double)bytes / 1e9));
		bench_json_double(j, "plain_cpu_s_per_gb",
				  cpu[SIDE_PLAIN] / ((double)bytes / 1e9));
	}
	bench_json_end(j);
}

/* json_codec - the codec store's appends against the uncompressed
 * store's and the plain write (--codec) */
static void json_codec(struct bench_json *j, const struct append_ctx *c,
		       const struct append_pass *m)
{
	const kvf_stats *s = &c->stats_codec;

	bench_json_begin(j, "codec_append");
	bench_json_str(j, "codec", kvf_codec_name(c->a->codec));
	bench_json_double(j, "prefill_mb_s", m->prefill_mbs[SIDE_CODEC]);
	bench_json_double(j, "prefill_ratio", m->prefill_mbs[SIDE_CODEC] /
						  m->prefill_mbs[SIDE_KVF]);
	bench_json_double(j, "prefill_plain_ratio", m->prefill_mbs[SIDE_CODEC] /
							m->prefill_mbs[SIDE_PLAIN]);
	bench_json_double(j, "decode_mb_s", m->decode_mbs[SIDE_CODEC]);
	bench_json_double(j, "decode_ratio", m->decode_mbs[SIDE_CODEC] /
						 m->decode_mbs[SIDE_KVF]);
	bench_json_double(j, "decode_plain_ratio", m->decode_mbs[SIDE_CODEC] /
						       m->decode_mbs[SIDE_PLAIN]);
	bench_json_double(j, "target_min_ratio", 0.9);
	bench_json_double(j, "prefill_cpu_s_per_gb",
			  m->prefill_cpu[SIDE_CODEC] / ((double)c->prefill_bytes / 1e9));
	bench_json_double(j, "decode_cpu_s_per_gb",
			  m->decode_cpu[SIDE_CODEC] / ((double)c->decode_bytes / 1e9));
	bench_json_u64(j, "host_bytes_written", s->host_bytes_written);
	bench_json_u64(j, "data_bytes", s->data_bytes);
	bench_json_u64(j, "padding_bytes", s->padding_bytes);
	bench_json_end(j);
}

/* print_codec - the same as a table's lines */
static void print_codec(const struct append_ctx *c, const struct append_pass *m)
{
	const kvf_stats *s = &c->stats_codec, *u = &c->stats;
	const char *name = kvf_codec_name(c->a->codec);

	printf("%s store (default options, kvf_options.codec %s), beside them in the same passes:\n",
	       name, name);
	printf("  prefill append + sync %8.1f MB/s: %.2fx the uncompressed store's, %.2fx plain (target >= 0.90x the uncompressed)\n",
	       m->prefill_mbs[SIDE_CODEC],
	       m->prefill_mbs[SIDE_CODEC] / m->prefill_mbs[SIDE_KVF],
	       m->prefill_mbs[SIDE_CODEC] / m->prefill_mbs[SIDE_PLAIN]);
	printf("  decode append + sync  %8.1f MB/s: %.2fx the uncompressed store's, %.2fx plain (target >= 0.90x the uncompressed)\n",
	       m->decode_mbs[SIDE_CODEC],
	       m->decode_mbs[SIDE_CODEC] / m->decode_mbs[SIDE_KVF],
	       m->decode_mbs[SIDE_CODEC] / m->decode_mbs[SIDE_PLAIN]);
	printf("  CPU s per GB appended: prefill %.2f (uncompressed %.2f), decode %.2f (uncompressed %.2f); the stages: below\n",
	       m->prefill_cpu[SIDE_CODEC] / ((double)c->prefill_bytes / 1e9),
	       m->prefill_cpu[SIDE_KVF] / ((double)c->prefill_bytes / 1e9),
	       m->decode_cpu[SIDE_CODEC] / ((double)c->decode_bytes / 1e9),
	       m->decode_cpu[SIDE_KVF] / ((double)c->decode_bytes / 1e9));
	printf("  written %.1f MiB (uncompressed store %.1f MiB): data %.1f MiB + padding %.1f MiB (the exact tails a sync writes)\n",
	       (double)s->host_bytes_written / (double)MIB,
	       (double)u->host_bytes_written / (double)MIB,
	       (double)s->data_bytes / (double)MIB,
	       (double)s->padding_bytes / (double)MIB);
}

/* The stages of the profile, in kvf_stats order. */
static const struct {
	const char *name, *json;
	size_t off;
} stages[] = {
	{ "kvf_append: planning, lookups", "append_ns", offsetof(kvf_stats, prof_append_ns) },
	{ "locks (store, sequence)", "lock_ns", offsetof(kvf_stats, prof_lock_ns) },
	{ "copies into buffers and pages", "copy_ns", offsetof(kvf_stats, prof_copy_ns) },
	{ "page hashes (XXH3)", "hash_ns", offsetof(kvf_stats, prof_hash_ns) },
	{ "memory tier", "tier_ns", offsetof(kvf_stats, prof_tier_ns) },
	{ "segments reserved, opened", "segment_ns", offsetof(kvf_stats, prof_segment_ns) },
	{ "writer queue (waits)", "queue_ns", offsetof(kvf_stats, prof_queue_ns) },
	{ "kvf_sync: media, catalog", "sync_ns", offsetof(kvf_stats, prof_sync_ns) },
};
#define N_STAGES (sizeof(stages) / sizeof(stages[0]))

static double stage_ns(const kvf_stats *s, size_t i)
{
	uint64_t v;

	memcpy(&v, (const char *)s + stages[i].off, sizeof(v));
	return (double)v;
}

static void json_prof(struct bench_json *j, const struct append_ctx *c)
{
	static const char *const who[3] = { "profile_defaults",
					    "profile_no_tier", "profile_codec" };
	static const char *const phase[2] = { "prefill", "decode" };

	for (int t = 0; t < (c->a->codec != KVF_CODEC_NONE ? 3 : 2); t++) {
		bench_json_begin(j, who[t]);
		for (int p = 0; p < 2; p++) {
			const kvf_stats *d = &c->prof[t].d[p];

			bench_json_begin(j, phase[p]);
			bench_json_double(j, "mb_s", c->prof[t].mbs[p]);
			bench_json_double(j, "phase_ns", c->prof[t].wall_ns[p]);
			for (size_t i = 0; i < N_STAGES; i++)
				bench_json_double(j, stages[i].json, stage_ns(d, i));
			bench_json_u64(j, "writer_threads_ns", d->prof_writer_ns);
			bench_json_u64(j, "segments_cached", d->cache_segments);
			bench_json_u64(j, "segments_not_cached",
				       d->cache_segments_skipped);
			bench_json_end(j);
		}
		bench_json_end(j);
	}
}

void append_print_json(const struct append_ctx *c,
		       const struct append_pass *m)
{
	const struct append_args *a = c->a;
	const kvf_stats *s = &c->stats;
	struct bench_json j = { .f = stdout };

	bench_json_begin(&j, NULL);
	bench_json_str(&j, "bench", "append");
	bench_json_str(&j, "dir", a->dir);
	bench_json_model(&j, &a->model);
	bench_json_u64(&j, "seqs", a->n_seqs);
	bench_json_u64(&j, "prompt_tokens", a->prompt_tokens);
	bench_json_u64(&j, "decode_steps", a->decode_steps);
	bench_json_u64(&j, "stripes", a->n_stripes);
	bench_json_u64(&j, "segment_bytes", a->segment_bytes);
	bench_json_u64(&j, "capacity_bytes", a->capacity_bytes);
	bench_json_u64(&j, "repeat", a->repeat);
	bench_json_u64(&j, "direct_io", (uint64_t)c->direct_io);
	bench_json_u64(&j, "plain_direct_io", (uint64_t)c->plain_direct);
	bench_json_u64(&j, "prefill_user_bytes", c->prefill_bytes);
	bench_json_u64(&j, "decode_user_bytes", c->decode_bytes);
	json_pair(&j, "prefill_append", m->prefill_mbs, SIDES, 0.9,
		  m->prefill_cpu, c->prefill_bytes);
	json_pair(&j, "decode_append", m->decode_mbs, SIDES, 0.8,
		  m->decode_cpu, c->decode_bytes);
	json_pair(&j, "cold_read_prefill_head", m->read_pre_mbs, 2, 0.9,
		  NULL, 0);
	json_pair(&j, "cold_read_decode_head", m->read_dec_mbs, 2, 0.8,
		  NULL, 0);
	json_prof(&j, c);
	if (a->codec != KVF_CODEC_NONE)
		json_codec(&j, c, m);
	bench_json_begin(&j, "host_wa");
	bench_json_double(&j, "host_wa", s->host_wa);
	bench_json_double(&j, "target_max", 1.02);
	bench_json_u64(&j, "user_bytes", s->user_bytes);
	bench_json_u64(&j, "host_bytes_written", s->host_bytes_written);
	bench_json_u64(&j, "data_bytes", s->data_bytes);
	bench_json_u64(&j, "padding_bytes", s->padding_bytes);
	bench_json_u64(&j, "summary_bytes", s->summary_bytes);
	bench_json_u64(&j, "cleaner_bytes", s->cleaner_bytes);
	bench_json_u64(&j, "kt_bytes", s->kt_bytes);
	bench_json_u64(&j, "metadata_bytes", s->metadata_bytes);
	bench_json_u64(&j, "segments_written", s->segments_written);
	bench_json_end(&j);
	bench_json_begin(&j, "index_memory");
	bench_json_u64(&j, "index_bytes", s->index_bytes);
	bench_json_u64(&j, "stored_bytes", s->host_bytes_written);
	bench_json_double(&j, "percent",
			  pct(s->index_bytes, s->host_bytes_written));
	bench_json_double(&j, "target_max_percent", 0.2);
	bench_json_end(&j);
	bench_json_double(&j, "reopen_ms", m->reopen_ms);
	bench_json_u64(&j, "verified_bytes", c->verified_bytes);
	bench_json_end(&j);
}

static void row(const char *what, const double *v, int sides,
		const char *target)
{
	if (sides == SIDES)
		printf("%-32s %8.1f %8.1f %8.1f MB/s %6.2fx %6.2fx  %s\n", what,
		       v[SIDE_KVF], v[SIDE_NOTIER], v[SIDE_PLAIN],
		       v[SIDE_KVF] / v[SIDE_PLAIN],
		       v[SIDE_NOTIER] / v[SIDE_PLAIN], target);
	else
		printf("%-32s %8.1f %8s %8.1f MB/s %6.2fx %7s  %s\n", what,
		       v[SIDE_KVF], "", v[SIDE_PLAIN],
		       v[SIDE_KVF] / v[SIDE_PLAIN], "", target);
}

static void print_prof(const struct append_ctx *c)
{
	int nt = c->a->codec != KVF_CODEC_NONE ? 3 : 2;

	printf("where the time goes (one more store of each kind with kvf_options.profile = 1):\n"
	       "  ms, and share of the phase's time (its appends and the sync)%s\n",
	       nt == 3 ? "; with a codec its encode is in the copies" : "");
	printf("  %-32s %17s %17s", "stage", "prefill", "prefill, no tier");
	if (nt == 3)
		printf(" %17s", "prefill, codec");
	printf(" %17s %17s", "decode", "decode, no tier");
	if (nt == 3)
		printf(" %17s", "decode, codec");
	printf("\n");
	for (size_t i = 0; i <= N_STAGES + 1; i++) {
		printf("  %-32s", i < N_STAGES ? stages[i].name :
				   i == N_STAGES ? "sum of the stages" :
						   "writer threads (beside)");
		for (int p = 0; p < 2; p++)
			for (int t = 0; t < nt; t++) {
				const kvf_stats *d = &c->prof[t].d[p];
				double v = 0;

				if (i < N_STAGES)
					v = stage_ns(d, i);
				else if (i == N_STAGES)
					for (size_t k = 0; k < N_STAGES; k++)
						v += stage_ns(d, k);
				else
					v = (double)d->prof_writer_ns;
				printf(" %8.1f %6.1f%%", v / 1e6,
				       100.0 * v / c->prof[t].wall_ns[p]);
			}
		printf("\n");
	}
	printf("  %-32s", "MB/s (timing on)");
	for (int p = 0; p < 2; p++)
		for (int t = 0; t < nt; t++)
			printf(" %17.1f", c->prof[t].mbs[p]);
	printf("\n  written segments the tier took in place: prefill %llu (%llu not: no spare buffer), decode %llu (%llu not)\n",
	       (unsigned long long)c->prof[0].d[0].cache_segments,
	       (unsigned long long)c->prof[0].d[0].cache_segments_skipped,
	       (unsigned long long)c->prof[0].d[1].cache_segments,
	       (unsigned long long)c->prof[0].d[1].cache_segments_skipped);
}

void append_print_table(const struct append_ctx *c,
			const struct append_pass *m)
{
	const struct append_args *a = c->a;
	const kvf_stats *s = &c->stats;
	double mib = (double)MIB;

	printf("kvbench append: %s, %u layers x %u kv heads (%u q) x %u dims f16, "
	       "%u sequences per batch, prompt %u tokens, %u decode steps,\n"
	       "  %u stripe(s), %llu KiB segments, capacity %llu MiB, O_DIRECT %s "
	       "(plain %s), median of %u\n",
	       a->dir, a->model.n_layers, a->model.n_kv_heads,
	       a->model.n_q_heads, a->model.head_dim, a->n_seqs,
	       a->prompt_tokens, a->decode_steps, a->n_stripes,
	       (unsigned long long)(a->segment_bytes >> 10),
	       (unsigned long long)(a->capacity_bytes >> 20),
	       c->direct_io ? "on" : "off (fallback)",
	       c->plain_direct ? "on" : "off", a->repeat);
	printf("%-32s %8s %8s %8s      %7s %7s  %s\n", "measurement", "kvflash",
	       "no tier", "plain", "ratio", "no tier", "target");
	row("prefill append + sync", m->prefill_mbs, SIDES, ">= 0.90x");
	row("decode append + sync", m->decode_mbs, SIDES, ">= 0.80x");
	printf("  the memory tier's cost (kvflash against dram_budget = 0): prefill %.1f%%, decode %.1f%% (target <= 5%%)\n",
	       100.0 * (1.0 - m->prefill_mbs[SIDE_KVF] / m->prefill_mbs[SIDE_NOTIER]),
	       100.0 * (1.0 - m->decode_mbs[SIDE_KVF] / m->decode_mbs[SIDE_NOTIER]));
	printf("  CPU s per GB appended: prefill %.2f (no tier %.2f, plain %.2f), decode %.2f (no tier %.2f, plain %.2f)\n",
	       m->prefill_cpu[SIDE_KVF] / ((double)c->prefill_bytes / 1e9),
	       m->prefill_cpu[SIDE_NOTIER] / ((double)c->prefill_bytes / 1e9),
	       m->prefill_cpu[SIDE_PLAIN] / ((double)c->prefill_bytes / 1e9),
	       m->decode_cpu[SIDE_KVF] / ((double)c->decode_bytes / 1e9),
	       m->decode_cpu[SIDE_NOTIER] / ((double)c->decode_bytes / 1e9),
	       m->decode_cpu[SIDE_PLAIN] / ((double)c->decode_bytes / 1e9));
	if (a->codec != KVF_CODEC_NONE)
		print_codec(c, m);
	row("cold read, prefill-written head", m->read_pre_mbs, 2, ">= 0.90x");
	row("cold read, decode-written head", m->read_dec_mbs, 2, ">= 0.80x");
	printf("%-34s %9.4f %39s\n", "host WA (no frees, kt_pages off)",
	       s->host_wa, "<= 1.02");
	printf("  user bytes %.1f MiB; written %.1f MiB = data %.1f MiB (%.2f%%) "
	       "+ padding %.1f MiB (%.2f%%)\n"
	       "  + summaries %.1f MiB (%.2f%%) + cleaner %.1f MiB; catalog %.1f MiB "
	       "(not in WA); %llu segments\n",
	       (double)s->user_bytes / mib, (double)s->host_bytes_written / mib,
	       (double)s->data_bytes / mib, pct(s->data_bytes, s->user_bytes),
	       (double)s->padding_bytes / mib,
	       pct(s->padding_bytes, s->user_bytes),
	       (double)s->summary_bytes / mib,
	       pct(s->summary_bytes, s->user_bytes),
	       (double)s->cleaner_bytes / mib, (double)s->metadata_bytes / mib,
	       (unsigned long long)s->segments_written);
	printf("%-34s %8.3f%% %39s\n", "index memory / stored bytes",
	       pct(s->index_bytes, s->host_bytes_written), "<= 0.20%");
	printf("  %.1f KiB of index for %.1f MiB stored (%.2f bytes per %u-byte page)\n",
	       (double)s->index_bytes / 1024.0,
	       (double)s->host_bytes_written / mib,
	       s->host_bytes_written ?
		       (double)s->index_bytes /
			       ((double)s->host_bytes_written / 4096.0) :
		       0,
	       4096u);
	printf("  reopen (kvf_open of the closed store) %.1f ms; %.1f MiB of heads "
	       "read back and checked\n",
	       m->reopen_ms, (double)c->verified_bytes / mib);
	print_prof(c);
}
