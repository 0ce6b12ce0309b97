/*
 * bench_export.c - `kvbench export`: what lz4 does for K/V, and how fast
 * a sequence moves through kvf_seq_export / kvf_seq_import.
 *
 * For f16 and bf16, and two kinds of values: "normal" (every element
 * drawn from N(0, 1)) and "channels" (each (head, dim) channel has a mean
 * drawn from N(0, 2) and a scale from |N(0, 1)|, as real keys have a few
 * large, steady channels), it fills a sequence of a memory store, then
 * measures side by side on the same bytes, a 256-token chunk at a time as
 * the export cuts them: lz4 alone, byte planes + lz4, and what the export
 * keeps (the smaller, or raw when neither saves bytes), as ratios (raw /
 * stored) and MB/s of raw bytes; then kvf_seq_export to a file in DIR and
 * kvf_seq_import into a second store, in MB/s of K/V, and the file's size
 * against the raw K/V.  Benchmarks never pass or fail.
 */
#include <lz4.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/alloc.h"
#include "bench/bench_common.h"
#include "compute/half.h"
#include "engine/portable/seqfile.h"
#include "kvflash.h"

struct xargs {
	const char *dir;
	kvf_model model;
	uint32_t tokens;
	int json;
};

struct xrow {
	const char *dtype, *data;
	double raw_mib, lz4_ratio, planes_ratio, kept_ratio;
	double lz4_mbs, planes_mbs, file_ratio, export_mbs, import_mbs;
};

static double normal(uint64_t *s)
{
	double u, v;

	*s = bench_mix64(*s + 1);
	u = ((*s >> 11) + 1.0) / 9007199254740994.0;
	*s = bench_mix64(*s + 1);
	v = (*s >> 11) / 9007199254740992.0;
	return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

static void put(unsigned char *p, size_t i, float x, kvf_dtype dt)
{
	uint16_t h = dt == KVF_DTYPE_BF16 ? kvf_f32_to_bf16(x) : kvf_f32_to_f16(x);

	memcpy(p + i * 2, &h, 2);
}

/* codec_figures - lz4 and planes + lz4 over buf in 256-token chunks */
static void codec_figures(const unsigned char *buf, size_t len, size_t chunk,
			  struct xrow *r)
{
	size_t cap = (size_t)LZ4_compressBound((int)chunk);
	unsigned char *out = kvf_malloc(cap), *pl = kvf_malloc(chunk);
	uint64_t n1 = 0, n2 = 0, kept = 0, ns1 = 0, ns2 = 0;

	for (size_t off = 0; off < len; off += chunk) {
		size_t n = len - off < chunk ? len - off : chunk, h = n / 2;
		uint64_t t0 = bench_now_ns();
		int a = LZ4_compress_default((const char *)buf + off, (char *)out,
					     (int)n, (int)cap);
		uint64_t t1 = bench_now_ns();
		int b;

		for (size_t i = 0; i < h; i++) {
			pl[i] = buf[off + 2 * i];
			pl[h + i] = buf[off + 2 * i + 1];
		}
		b = LZ4_compress_default((const char *)pl, (char *)out, (int)n,
					 (int)cap);
		ns1 += t1 - t0;
		ns2 += bench_now_ns() - t1;
		n1 += (uint64_t)a;
		n2 += (uint64_t)b;
		kept += (uint64_t)a < n && a <= b ? (uint64_t)a
			: (uint64_t)b < n ? (uint64_t)b : n;
	}
	r->lz4_ratio = (double)len / n1;
	r->planes_ratio = (double)len / n2;
	r->kept_ratio = (double)len / kept;
	r->lz4_mbs = bench_mbs(len, ns1);
	r->planes_mbs = bench_mbs(len, ns2);
	kvf_free(out);
	kvf_free(pl);
}

static int one(const struct xargs *a, kvf_dtype dt, int channels,
	       struct xrow *r)
{
	kvf_model m = a->model;
	size_t row = (size_t)m.n_kv_heads * m.head_dim, n = a->tokens;
	unsigned char *k = kvf_malloc(n * row * 2), *v = kvf_malloc(n * row * 2);
	float *mu = kvf_malloc(row * sizeof(float)), *sd = kvf_malloc(row * sizeof(float));
	char file[4096], p1[4096] = "", p2[4096] = "";
	kvf_options o;
	kvf_store *s1 = NULL, *s2 = NULL;
	uint64_t seed = 42, t0, t1, t2;
	struct stat sb;
	kvf_status rc;
	int ret = -1;

	m.dtype = dt;
	r->dtype = kvf_dtype_name(dt);
	r->data = channels ? "channels" : "normal";
	if (!k || !v || !mu || !sd)
		goto out;
	for (size_t c = 0; c < row; c++) {
		mu[c] = channels ? (float)(2 * normal(&seed)) : 0;
		sd[c] = channels ? (float)fabs(normal(&seed)) : 1;
	}
	for (size_t i = 0; i < n * row; i++) {
		put(k, i, mu[i % row] + sd[i % row] * (float)normal(&seed), dt);
		put(v, i, (float)normal(&seed), dt);
	}
	r->raw_mib = 2.0 * n * row * 2 * m.n_layers / 1048576.0;
	codec_figures(k, n * row * 2, 256 * row * 2, r);
	kvf_options_init(&o, &m);
	o.media = KVF_MEDIA_MEMORY;
	o.capacity_bytes = (uint64_t)(r->raw_mib * 1048576.0) * 2 + (64u << 20);
	snprintf(p1, sizeof(p1), "%s/s1", a->dir);
	snprintf(p2, sizeof(p2), "%s/s2", a->dir);
	if (bench_remove_store(p1) != 0 || bench_remove_store(p2) != 0)
		goto out;
	if ((rc = kvf_open(p1, &o, &s1)) != KVF_OK ||
	    (rc = kvf_seq_create(s1, 1)) != KVF_OK) {
		bench_fail("export", "the store", rc);
		goto out;
	}
	for (uint32_t l = 0; l < m.n_layers; l++)
		if ((rc = kvf_append(s1, 1, l, (uint32_t)n, k, v)) != KVF_OK) {
			bench_fail("export", "kvf_append", rc);
			goto out;
		}
	snprintf(file, sizeof(file), "%s/seq.kvx", a->dir);
	t0 = bench_now_ns();
	rc = kvf_seq_export(s1, 1, file);
	t1 = bench_now_ns();
	if (rc != KVF_OK || (rc = kvf_open(p2, &o, &s2)) != KVF_OK) {
		bench_fail("export", "kvf_seq_export", rc);
		goto out;
	}
	t2 = bench_now_ns();
	if ((rc = kvf_seq_import(s2, file, 1, NULL)) != KVF_OK) {
		bench_fail("export", "kvf_seq_import", rc);
		goto out;
	}
	r->import_mbs = bench_mbs((uint64_t)(r->raw_mib * 1048576.0), bench_now_ns() - t2);
	r->export_mbs = bench_mbs((uint64_t)(r->raw_mib * 1048576.0), t1 - t0);
	r->file_ratio = stat(file, &sb) == 0 ? r->raw_mib * 1048576.0 / (double)sb.st_size : 0;
	unlink(file);
	ret = 0;
out:
	kvf_close(s1);
	kvf_close(s2);
	if (s1)
		bench_remove_store(p1);
	if (s2)
		bench_remove_store(p2);
	kvf_free(k);
	kvf_free(v);
	kvf_free(mu);
	kvf_free(sd);
	return ret;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvbench export [--dir DIR] [--tokens N] [--layers N] [--q-heads N]\n"
		"                      [--kv-heads N] [--head-dim N] [--json]\n"
		"  --dir DIR     directory for the export file (default ./kvbench-export)\n"
		"  --tokens N    tokens of the sequence (default 2048)\n"
		"  --layers N    layers (default 4); --q-heads (32), --kv-heads (8),\n"
		"                --head-dim (128): the model\n"
		"  --json        one JSON object instead of a table\n");
}

int bench_export_main(int argc, char **argv)
{
	struct xargs a = { .dir = "./kvbench-export", .tokens = 2048,
			   .model = { 4, 32, 8, 128, KVF_DTYPE_F16 } };
	const struct bench_opt opts[] = {
		BENCH_STR("--dir", a.dir),
		BENCH_U32("--tokens", a.tokens, 1, 1u << 20),
		BENCH_MODEL_OPTS(a.model),
		BENCH_BOOL("--json", a.json),
		{ .name = NULL }
	};
	struct xrow r[4];
	struct bench_json j = { .f = stdout };
	int rc, made;

	if ((rc = bench_parse_opts("export", usage, opts, argc, argv)) != 0)
		return rc == 1 ? 0 : rc;
	if ((rc = bench_check_heads("export", &a.model)) != 0)
		return rc;
	if (bench_make_dir("export", a.dir, &made) != 0)
		return 1;
	for (int i = 0; i < 4; i++)
		if (one(&a, i < 2 ? KVF_DTYPE_F16 : KVF_DTYPE_BF16, i & 1, &r[i]) != 0)
			return 1;
	if (made)
		(void)rmdir(a.dir);
	if (a.json) {
		bench_json_begin(&j, NULL);
		bench_json_u64(&j, "tokens", a.tokens);
		for (int i = 0; i < 4; i++) {
			char key[32];

			snprintf(key, sizeof(key), "%s_%s", r[i].dtype, r[i].data);
			bench_json_begin(&j, key);
			bench_json_double(&j, "raw_mib", r[i].raw_mib);
			bench_json_double(&j, "lz4_ratio", r[i].lz4_ratio);
			bench_json_double(&j, "planes_ratio", r[i].planes_ratio);
			bench_json_double(&j, "kept_ratio", r[i].kept_ratio);
			bench_json_double(&j, "lz4_mbs", r[i].lz4_mbs);
			bench_json_double(&j, "planes_mbs", r[i].planes_mbs);
			bench_json_double(&j, "file_ratio", r[i].file_ratio);
			bench_json_double(&j, "export_mbs", r[i].export_mbs);
			bench_json_double(&j, "import_mbs", r[i].import_mbs);
			bench_json_end(&j);
		}
		bench_json_end(&j);
		fputc('\n', stdout);
		return 0;
	}
	printf("kvbench export: %u tokens, %u layers, %u KV heads of %u dims; K chunks of 256 tokens\n\n",
	       a.tokens, a.model.n_layers, a.model.n_kv_heads, a.model.head_dim);
	printf("%-5s %-9s %8s | %9s %9s %9s | %10s %10s | %9s %10s %10s\n",
	       "dtype", "values", "K/V MiB", "lz4", "planes", "kept", "lz4 MB/s",
	       "pl. MB/s", "file", "export", "import");
	for (int i = 0; i < 4; i++)
		printf("%-5s %-9s %8.1f | %8.3fx %8.3fx %8.3fx | %10.0f %10.0f | %8.3fx %5.0f MB/s %5.0f MB/s\n",
		       r[i].dtype, r[i].data, r[i].raw_mib, r[i].lz4_ratio,
		       r[i].planes_ratio, r[i].kept_ratio, r[i].lz4_mbs,
		       r[i].planes_mbs, r[i].file_ratio, r[i].export_mbs,
		       r[i].import_mbs);
	printf("\nratios are raw / compressed on K (codec columns) and K+V / file size (file);\n"
	       "\"kept\" is what the export stores: the smaller codec, or raw when neither saves bytes\n");
	return 0;
}
