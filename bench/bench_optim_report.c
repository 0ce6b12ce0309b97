/*
 * bench_optim_report.c - `kvbench optim`: the figures of both store kinds
 * with their targets, as JSON or a table.  See bench_optim.c for what is
 * measured.
 */
#include <stdint.h>
#include <stdio.h>

#include "bench/bench_common.h"
#include "bench/bench_optim_int.h"
#include "ftl/media.h"
#include "kvflash.h"

/* ---- output ------------------------------------------------------------------ */

/* per_s - bytes over ns as MB/s (10^6 bytes) */
static double per_s(uint64_t bytes, double ns)
{
	return ns > 0 ? (double)bytes / 1e6 / (ns / 1e9) : 0;
}

static void json_kind(struct bench_json *j, const char *key,
		      const struct kind_result *r, uint64_t bytes,
		      double target, const char *plain)
{
	char k[64];

	bench_json_begin(j, key);
	bench_json_u64(j, "bytes_per_step", bytes);
	bench_json_double(j, "kvflash_mb_s", per_s(bytes, r->step_ns));
	snprintf(k, sizeof(k), "%s_mb_s", plain);
	bench_json_double(j, k, per_s(bytes, r->plain_ns));
	bench_json_double(j, "ratio", r->plain_ns / r->step_ns);
	bench_json_double(j, "target_min_ratio", target);
	bench_json_double(j, "step_ms", r->step_ns / 1e6);
	snprintf(k, sizeof(k), "%s_ms", plain);
	bench_json_double(j, k, r->plain_ns / 1e6);
	bench_json_double(j, "topk_step_ms", r->topk_ns / 1e6);
	bench_json_double(j, "topk_over_dense", r->topk_ns / r->step_ns);
	bench_json_double(j, "create_ms", r->create_ms);
	bench_json_begin(j, "media_per_step");
	bench_json_u64(j, "read_bytes", r->io.bytes_read);
	bench_json_u64(j, "read_ios", r->io.read_ios);
	bench_json_u64(j, "written_bytes", r->io.bytes_written);
	bench_json_u64(j, "write_ios", r->io.write_ios);
	bench_json_u64(j, "syncs", r->io.syncs);
	bench_json_u64(j, "trims", r->io.trims);
	bench_json_end(j);
	bench_json_end(j);
}

void optim_print_json(const struct optim_ctx *c)
{
	const struct optim_args *a = c->a;
	uint64_t n = a->n_params, dense = n * 4, sent = c->nnz * 8;
	struct bench_json j = { .f = stdout };

	bench_json_begin(&j, NULL);
	bench_json_str(&j, "bench", "optim");
	bench_json_str(&j, "dir", a->dir);
	bench_json_str(&j, "optimizer", "adam");
	bench_json_u64(&j, "n_params", n);
	bench_json_u64(&j, "state_bytes", c->state_bytes);
	bench_json_str(&j, "kernels", kvc_optim_name(c->k));
	bench_json_u64(&j, "steps", a->steps);
	bench_json_u64(&j, "repeat", a->repeat);
	bench_json_u64(&j, "stripes", a->n_stripes);
	bench_json_u64(&j, "segment_bytes", a->segment_bytes);
	bench_json_u64(&j, "capacity_bytes", a->capacity_bytes);
	bench_json_u64(&j, "direct_io", (uint64_t)c->direct_io);
	bench_json_u64(&j, "io_uring", (uint64_t)c->file.io.uring);
	bench_json_u64(&j, "plain_direct_io", (uint64_t)c->plain_direct);
	if (c->mem.ran)
		json_kind(&j, "memory", &c->mem, 32 * n, 0.6, "memcpy");
	if (c->file.ran)
		json_kind(&j, "file", &c->file, c->state_bytes * 2, 0.7,
			  "plain");
	bench_json_begin(&j, "topk");
	bench_json_double(&j, "percent_entries", a->topk_pct);
	bench_json_u64(&j, "entries", c->nnz);
	bench_json_u64(&j, "sent_bytes", sent);
	bench_json_u64(&j, "dense_bytes", dense);
	bench_json_double(&j, "percent_of_dense",
			  100.0 * (double)sent / (double)dense);
	bench_json_double(&j, "percent_of_dense_bf16_values",
			  100.0 * (double)(c->nnz * 6) / (double)dense);
	bench_json_double(&j, "target_max_percent", 2.0);
	bench_json_end(&j);
	bench_json_u64(&j, "checked_values", c->checked);
	bench_json_end(&j);
}

/* io_line - what one dense step asked of the media */
static void io_line(const char *kind, const struct kvf_media_stats *io,
		    uint64_t state_bytes)
{
	double mib = (double)MIB;

	printf("  %s step's media I/O: read %.1f MiB in %llu requests "
	       "(%.0f KiB each), wrote %.1f MiB in %llu\n"
	       "  (%.0f KiB each), %llu sync(s), %llu trim(s); the state is "
	       "%.1f MiB\n",
	       kind, (double)io->bytes_read / mib,
	       (unsigned long long)io->read_ios,
	       io->read_ios ?
		       (double)io->bytes_read / 1024.0 / (double)io->read_ios :
		       0,
	       (double)io->bytes_written / mib,
	       (unsigned long long)io->write_ios,
	       io->write_ios ? (double)io->bytes_written / 1024.0 /
				       (double)io->write_ios :
			       0,
	       (unsigned long long)io->syncs, (unsigned long long)io->trims,
	       (double)state_bytes / mib);
}

void optim_print_table(const struct optim_ctx *c)
{
	const struct optim_args *a = c->a;
	const struct kind_result *mr = &c->mem, *fr = &c->file;
	uint64_t n = a->n_params, sent = c->nnz * 8, dense = n * 4;
	uint64_t mem_bytes = 32 * n, file_bytes = c->state_bytes * 2;
	double mib = (double)MIB;

	printf("kvbench optim: Adam (PyTorch defaults) on %llu fp32 params: "
	       "%.1f MiB params + %.1f MiB moments, %s kernels,\n"
	       "  dense f32 gradient, f32 params_out, Top-K %.3g%% "
	       "(%llu entries); %s, %u stripe(s), %llu KiB segments,\n"
	       "  %u step(s) x %u passes per side, medians",
	       (unsigned long long)n, (double)(n * 4) / mib,
	       (double)(n * 8) / mib, kvc_optim_name(c->k), a->topk_pct,
	       (unsigned long long)c->nnz, a->dir, a->n_stripes,
	       (unsigned long long)(a->segment_bytes >> 10), a->steps,
	       a->repeat);
	if (fr->ran)
		printf("; file store: O_DIRECT %s (plain %s), io_uring %s",
		       c->direct_io ? "on" : "off (fallback)",
		       c->plain_direct ? "on" : "off",
		       fr->io.uring ? "on" : "off");
	printf("\n%-36s %14s %14s %7s   %s\n", "measurement", "kvflash",
	       "plain loop", "ratio", "target");
	if (mr->ran) {
		printf("%-36s %9.1f MB/s %9.1f MB/s %6.2fx   >= 0.60x\n",
		       "Adam step, state in memory",
		       per_s(mem_bytes, mr->step_ns),
		       per_s(mem_bytes, mr->plain_ns),
		       mr->plain_ns / mr->step_ns);
		printf("  %.1f ms per step vs %.1f ms of memcpy; 32 bytes per "
		       "param (read p m v g, write p m v out)\n",
		       mr->step_ns / 1e6, mr->plain_ns / 1e6);
		io_line("memory", &mr->io, c->state_bytes);
	}
	if (fr->ran) {
		printf("%-36s %9.1f MB/s %9.1f MB/s %6.2fx   >= 0.70x\n",
		       "Adam step, file store, O_DIRECT",
		       per_s(file_bytes, fr->step_ns),
		       per_s(file_bytes, fr->plain_ns),
		       fr->plain_ns / fr->step_ns);
		printf("  %.1f ms per step vs %.1f ms of pread+pwrite+fdatasync; "
		       "24 bytes per param (read, write p m v)\n",
		       fr->step_ns / 1e6, fr->plain_ns / 1e6);
		io_line("file", &fr->io, c->state_bytes);
	}
	printf("%-36s %9.2f MiB %10.1f MiB %6.2f%%   <= 2%%\n",
	       "Top-K gradient bytes sent vs dense", (double)sent / mib,
	       (double)dense / mib, 100.0 * (double)sent / (double)dense);
	printf("  4-byte index + f32 value per entry; with bf16 values %.2f%%\n",
	       100.0 * (double)(c->nnz * 6) / (double)dense);
	printf("%-36s %14s %14s %7s\n", "Top-K step vs dense step", "Top-K",
	       "dense", "ratio");
	if (mr->ran)
		printf("%-36s %9.1f ms %12.1f ms %6.2fx\n", "  state in memory",
		       mr->topk_ns / 1e6, mr->step_ns / 1e6,
		       mr->topk_ns / mr->step_ns);
	if (fr->ran)
		printf("%-36s %9.1f ms %12.1f ms %6.2fx\n",
		       "  file store, O_DIRECT", fr->topk_ns / 1e6,
		       fr->step_ns / 1e6, fr->topk_ns / fr->step_ns);
	printf("  kvf_opt_create:");
	if (mr->ran)
		printf(" %.1f ms in memory", mr->create_ms);
	if (fr->ran)
		printf("%s %.1f ms on file", mr->ran ? "," : "", fr->create_ms);
	printf("; %llu values checked bit for bit against the kernels\n",
	       (unsigned long long)c->checked);
}

