/*
 * bench_append_report.c - `kvbench append`: the medians of the passes,
 * with their targets, as JSON or a table.  See bench_append.c for what is
 * measured.
 */
#include <stdint.h>
#include <stdio.h>

#include "bench/bench_append_int.h"
#include "bench/bench_common.h"
#include "kvflash.h"

/* ---- output ------------------------------------------------------------------ */

static double pct(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0;
}

static void json_pair(struct bench_json *j, const char *key, const double *v,
		      const char *unit, double target, const char *target_kind,
		      const double *cpu, uint64_t bytes)
{
	char k0[64], k1[64];

	snprintf(k0, sizeof(k0), "kvflash_%s", unit);
	snprintf(k1, sizeof(k1), "plain_%s", unit);
	bench_json_begin(j, key);
	bench_json_double(j, k0, v[0]);
	bench_json_double(j, k1, v[1]);
	bench_json_double(j, "ratio", v[0] / v[1]);
	bench_json_double(j, target_kind, target);
	if (cpu) { /* CPU seconds per GB (10^9 bytes) of user bytes */
		bench_json_double(j, "kvflash_cpu_s_per_gb",
				  cpu[0] / ((double)bytes / 1e9));
		bench_json_double(j, "plain_cpu_s_per_gb",
				  cpu[1] / ((double)bytes / 1e9));
	}
	bench_json_end(j);
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
	json_pair(&j, "prefill_append", m->prefill_mbs, "mb_s", 0.8,
		  "target_min_ratio", m->prefill_cpu, c->prefill_bytes);
	json_pair(&j, "decode_append", m->decode_mbs, "mb_s", 0.6,
		  "target_min_ratio", m->decode_cpu, c->decode_bytes);
	json_pair(&j, "cold_read_prefill_head", m->read_pre_mbs, "mb_s", 0.8,
		  "target_min_ratio", NULL, 0);
	json_pair(&j, "cold_read_decode_head", m->read_dec_mbs, "mb_s", 0.8,
		  "target_min_ratio", NULL, 0);
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

static void row(const char *what, const double *v, const char *target)
{
	printf("%-34s %9.1f MB/s %9.1f MB/s %6.2fx   %s\n", what, v[0], v[1],
	       v[0] / v[1], target);
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
	printf("%-34s %14s %14s %7s   %s\n", "measurement", "kvflash",
	       "plain loop", "ratio", "target");
	row("prefill append + sync", m->prefill_mbs, ">= 0.80x");
	row("decode append + sync", m->decode_mbs, ">= 0.60x");
	printf("  CPU s per GB appended: prefill %.2f (plain %.2f), decode %.2f (plain %.2f)\n",
	       m->prefill_cpu[0] / ((double)c->prefill_bytes / 1e9),
	       m->prefill_cpu[1] / ((double)c->prefill_bytes / 1e9),
	       m->decode_cpu[0] / ((double)c->decode_bytes / 1e9),
	       m->decode_cpu[1] / ((double)c->decode_bytes / 1e9));
	row("cold read, prefill-written head", m->read_pre_mbs, ">= 0.80x");
	row("cold read, decode-written head", m->read_dec_mbs, ">= 0.80x");
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
}
