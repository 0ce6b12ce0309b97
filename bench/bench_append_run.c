/*
 * bench_append_run.c - `kvbench append`: the timed side: the data pool,
 * the plain O_DIRECT loops, the store's prefill, decode and cold reads
 * with the check of every head read back, and one pass of them all,
 * alternating which side goes first.  See bench_append.c for what is
 * measured.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/alloc.h"
#include "bench/bench_append_int.h"
#include "bench/bench_common.h"
#include "kvflash.h"

/* ---- data ---------------------------------------------------------------- */

/* pool_fill - random f16 values with the top exponent bit clear (finite,
 * magnitude below 2) */
static void pool_fill(uint16_t *pool, size_t n)
{
	for (size_t i = 0; i < n; i += 4) {
		uint64_t r = bench_mix64(i + 0x6b7666ull);

		for (size_t j = 0; j < 4 && i + j < n; j++)
			pool[i + j] = (uint16_t)(r >> (16 * j)) & 0xbfffu;
	}
}

/* rows_of - where the rows of (seq, layer, kind) start in the pool */
static const uint16_t *rows_of(const struct append_ctx *c, uint64_t seq,
			       uint32_t layer, int kind)
{
	uint64_t h =
		bench_mix64((seq << 20) ^ ((uint64_t)layer << 2) ^ (uint64_t)kind);

	return c->pool + h % POOL_SLACK;
}

/* ---- plain loops ----------------------------------------------------------- */

/* plain_create - a fresh preallocated plain file; its descriptor or -1 */
static int plain_create(struct append_ctx *c)
{
	return bench_plain_create("append", c->plain_path, c->plain_file_bytes,
				  &c->plain_direct);
}

/* plain_write - bytes (rounded up to a page) in 1 MiB pwrites from
 * offset 0, then fdatasync, into a fresh file; MB/s of bytes, < 0 on
 * error; *cpu gets the CPU seconds spent meanwhile */
static double plain_write(struct append_ctx *c, uint64_t bytes, double *cpu)
{
	uint64_t t0, ns, done = 0, total = (bytes + 4095) & ~4095ull;
	double c0;
	int fd = plain_create(c);

	if (fd < 0)
		return -1;
	c0 = bench_cpu_s();
	t0 = bench_now_ns();
	while (done < total) {
		size_t n = total - done < PLAIN_CHUNK ? (size_t)(total - done) :
							PLAIN_CHUNK;

		if (pwrite(fd, c->chunk, n, (off_t)done) != (ssize_t)n) {
			fprintf(stderr, "kvbench append: pwrite %s: %s\n",
				c->plain_path, strerror(errno));
			close(fd);
			return -1;
		}
		done += n;
	}
	if (fdatasync(fd) != 0) {
		fprintf(stderr, "kvbench append: fdatasync %s: %s\n",
			c->plain_path, strerror(errno));
		close(fd);
		return -1;
	}
	ns = bench_now_ns() - t0;
	*cpu = bench_cpu_s() - c0;
	close(fd);
	return bench_mbs(bytes, ns);
}

/* plain_read - read n_heads runs of head_bytes each (rounded up to a
 * page), one after the other from the start of the plain file, in preads
 * of at most 1 MiB; MB/s of head bytes, < 0 on error */
static double plain_read(struct append_ctx *c, uint32_t n_heads,
			 uint64_t head_bytes)
{
	uint64_t run = (head_bytes + 4095) & ~4095ull, off = 0, ns = 0;
	int fd = open(c->plain_path,
		      O_RDONLY | (c->plain_direct ? O_DIRECT : 0));

	if (fd < 0) {
		fprintf(stderr, "kvbench append: %s: %s\n", c->plain_path,
			strerror(errno));
		return -1;
	}
	for (uint32_t i = 0; i < n_heads; i++) {
		uint64_t t0, done = 0;

		if (off + run > c->plain_file_bytes)
			off = 0;
		t0 = bench_now_ns();
		while (done < run) {
			size_t n = run - done < PLAIN_CHUNK ?
					   (size_t)(run - done) :
					   PLAIN_CHUNK;

			if (pread(fd, c->chunk, n, (off_t)(off + done)) !=
			    (ssize_t)n) {
				fprintf(stderr,
					"kvbench append: pread %s: %s\n",
					c->plain_path, strerror(errno));
				close(fd);
				return -1;
			}
			done += n;
		}
		ns += bench_now_ns() - t0;
		off += run;
	}
	close(fd);
	return bench_mbs((uint64_t)n_heads * head_bytes, ns);
}

/* ---- the store ------------------------------------------------------------- */

/* store_open - the store at dir, created fresh (create) or reopened with
 * its defaults; no_tier: dram_budget = 0; profile: kvf_options.profile;
 * codec: kvf_options.codec */
static kvf_status store_open(struct append_ctx *c, const char *dir, int create,
			     int no_tier, int profile, kvf_codec codec,
			     kvf_store **out)
{
	const struct append_args *a = c->a;
	kvf_options o;

	if (!create)
		return kvf_open(dir, NULL, out);
	bench_store_options(&o, &a->model, a->n_stripes, a->segment_bytes,
			    a->capacity_bytes);
	if (no_tier)
		o.dram_budget = 0;
	o.profile = (uint32_t)profile;
	o.codec = codec;
	return bench_open_direct(dir, &o, out, &c->direct_io);
}

/* prefill - every sequence of batch 0 appends its prompt, layer by layer
 * (a batched forward pass), then sync; MB/s of user bytes */
static double prefill(struct append_ctx *c, kvf_store *st, double *cpu)
{
	const struct append_args *a = c->a;
	uint64_t t0, ns;
	double c0;
	kvf_status rc;

	for (uint32_t s = 0; s < a->n_seqs; s++)
		if ((rc = kvf_seq_create(st, s)) != KVF_OK)
			return bench_fail("append", "kvf_seq_create", rc);
	c0 = bench_cpu_s();
	t0 = bench_now_ns();
	for (uint32_t l = 0; l < a->model.n_layers; l++)
		for (uint32_t s = 0; s < a->n_seqs; s++) {
			rc = kvf_append(st, s, l, a->prompt_tokens,
					rows_of(c, s, l, 0),
					rows_of(c, s, l, 1));
			if (rc != KVF_OK)
				return bench_fail("append",
						  "kvf_append (prefill)", rc);
		}
	if ((rc = kvf_sync(st)) != KVF_OK)
		return bench_fail("append", "kvf_sync", rc);
	ns = bench_now_ns() - t0;
	*cpu = bench_cpu_s() - c0;
	return bench_mbs(c->prefill_bytes, ns);
}

/* decode - batch 1 (empty sequences) appends one token per layer per
 * step, then sync; MB/s of user bytes */
static double decode(struct append_ctx *c, kvf_store *st, double *cpu)
{
	const struct append_args *a = c->a;
	size_t tok_elts = (size_t)a->model.n_kv_heads * a->model.head_dim;
	uint64_t t0, ns;
	double c0;
	kvf_status rc;

	for (uint32_t s = 0; s < a->n_seqs; s++)
		if ((rc = kvf_seq_create(st, a->n_seqs + s)) != KVF_OK)
			return bench_fail("append", "kvf_seq_create", rc);
	c0 = bench_cpu_s();
	t0 = bench_now_ns();
	for (uint32_t t = 0; t < a->decode_steps; t++)
		for (uint32_t l = 0; l < a->model.n_layers; l++)
			for (uint32_t s = 0; s < a->n_seqs; s++) {
				uint64_t id = a->n_seqs + s;

				rc = kvf_append(st, id, l, 1,
						rows_of(c, id, l, 0) +
							t * tok_elts,
						rows_of(c, id, l, 1) +
							t * tok_elts);
				if (rc != KVF_OK)
					return bench_fail("append",
							  "kvf_append (decode)", rc);
			}
	if ((rc = kvf_sync(st)) != KVF_OK)
		return bench_fail("append", "kvf_sync", rc);
	ns = bench_now_ns() - t0;
	*cpu = bench_cpu_s() - c0;
	return bench_mbs(c->decode_bytes, ns);
}

/* check_head - the tokens read back are the ones appended; 0 or -1 */
static int check_head(struct append_ctx *c, uint64_t seq, uint32_t layer,
		      uint32_t head, uint64_t n, const uint16_t *k,
		      const uint16_t *v)
{
	uint32_t H = c->a->model.n_kv_heads, D = c->a->model.head_dim;

	for (int kind = 0; kind < 2; kind++) {
		const uint16_t *got = kind ? v : k;
		const uint16_t *src = rows_of(c, seq, layer, kind);

		for (uint64_t t = 0; t < n; t++)
			if (memcmp(got + t * D, src + (t * H + head) * D,
				   (size_t)D * 2) != 0) {
				fprintf(stderr,
					"kvbench append: sequence %llu layer %u head %u %s token %llu read back wrong data\n",
					(unsigned long long)seq, layer, head,
					kind ? "V" : "K",
					(unsigned long long)t);
				return -1;
			}
	}
	return 0;
}

/* read_heads - whole-range kvf_reads of n_reads heads of batch `batch`
 * (n tokens each), each checked; MB/s of the time in kvf_read */
static double read_heads(struct append_ctx *c, kvf_store *st, int batch,
			 uint64_t n, uint16_t *k, uint16_t *v)
{
	const struct append_args *a = c->a;
	uint64_t ns = 0;

	for (uint32_t i = 0; i < a->n_reads; i++) {
		uint64_t seq = (uint64_t)batch * a->n_seqs + i % a->n_seqs;
		uint32_t layer = (i * 7 + i / a->n_seqs) % a->model.n_layers;
		uint32_t head = (i * 3 + i / a->n_seqs) % a->model.n_kv_heads;
		uint64_t t0 = bench_now_ns();
		kvf_status rc = kvf_read(st, seq, layer, head, 0, n, k, v);

		ns += bench_now_ns() - t0;
		if (rc != KVF_OK)
			return bench_fail("append", "kvf_read", rc);
		if (check_head(c, seq, layer, head, n, k, v) != 0)
			return -1;
		c->verified_bytes += 2 * n * c->row_bytes;
	}
	return bench_mbs((uint64_t)a->n_reads * 2 * n * c->row_bytes, ns);
}

/* one_pass - fresh stores through every phase; `first` picks the side
 * that goes first (the three take turns) */
int append_one_pass(struct append_ctx *c, int first, struct append_pass *p)
{
	const struct append_args *a = c->a;
	uint64_t pre_n = a->prompt_tokens, dec_n = a->decode_steps, t0;
	uint16_t *k = malloc((pre_n > dec_n ? pre_n : dec_n) * c->row_bytes);
	uint16_t *v = malloc((pre_n > dec_n ? pre_n : dec_n) * c->row_bytes);
	kvf_store *st = NULL, *st0 = NULL, *stc = NULL;
	int sides = a->codec != KVF_CODEC_NONE ? SIDES_MAX : SIDES;
	kvf_status rc;
	double cpu;
	int ret = -1;

	if (bench_remove_store(c->store_dir) != 0 ||
	    bench_remove_store(c->store0_dir) != 0 ||
	    bench_remove_store(c->storec_dir) != 0)
		goto out;
	if (k == NULL || v == NULL) {
		fprintf(stderr, "kvbench append: out of memory\n");
		goto out;
	}
	if ((rc = store_open(c, c->store_dir, 1, 0, 0, KVF_CODEC_NONE, &st)) != KVF_OK ||
	    (rc = store_open(c, c->store0_dir, 1, 1, 0, KVF_CODEC_NONE, &st0)) != KVF_OK) {
		bench_fail("append", "kvf_open", rc);
		goto out;
	}
	if (sides == SIDES_MAX &&
	    (rc = store_open(c, c->storec_dir, 1, 0, 0, a->codec, &stc)) != KVF_OK) {
		bench_fail("append", "kvf_open (codec)", rc);
		goto out;
	}
	for (int i = 0; i < sides; i++) {
		int side = (first + i) % sides;
		kvf_store *s = side == SIDE_KVF ? st : side == SIDE_NOTIER ? st0 : stc;

		p->prefill_mbs[side] =
			side == SIDE_PLAIN ?
				plain_write(c, c->prefill_bytes,
					    &p->prefill_cpu[side]) :
				prefill(c, s, &p->prefill_cpu[side]);
		if (p->prefill_mbs[side] < 0)
			goto out;
	}
	for (int i = 0; i < sides; i++) {
		int side = (first + i) % sides;
		kvf_store *s = side == SIDE_KVF ? st : side == SIDE_NOTIER ? st0 : stc;

		p->decode_mbs[side] =
			side == SIDE_PLAIN ?
				plain_write(c, c->decode_bytes,
					    &p->decode_cpu[side]) :
				decode(c, s, &p->decode_cpu[side]);
		if (p->decode_mbs[side] < 0)
			goto out;
	}
	if (stc) {
		c->stats_codec.struct_size = sizeof(c->stats_codec);
		if ((rc = kvf_stats_get(stc, &c->stats_codec)) != KVF_OK) {
			bench_fail("append", "kvf_stats_get", rc);
			goto out;
		}
		rc = kvf_close(stc);
		stc = NULL;
		if (rc != KVF_OK || bench_remove_store(c->storec_dir) != 0) {
			bench_fail("append", "kvf_close (codec)", rc);
			goto out;
		}
	}
	c->stats.struct_size = sizeof(c->stats);
	if ((rc = kvf_stats_get(st, &c->stats)) != KVF_OK) {
		bench_fail("append", "kvf_stats_get", rc);
		goto out;
	}
	rc = kvf_close(st0);
	st0 = NULL;
	if (rc != KVF_OK || bench_remove_store(c->store0_dir) != 0) {
		bench_fail("append", "kvf_close", rc);
		goto out;
	}
	/* the plain file holds the prefill bytes again for the reads */
	if (plain_write(c, c->prefill_bytes, &cpu) < 0)
		goto out;
	rc = kvf_close(st);
	st = NULL;
	if (rc != KVF_OK) {
		bench_fail("append", "kvf_close", rc);
		goto out;
	}
	t0 = bench_now_ns();
	if ((rc = store_open(c, c->store_dir, 0, 0, 0, KVF_CODEC_NONE, &st)) != KVF_OK) {
		bench_fail("append", "kvf_open (reopen)", rc);
		goto out;
	}
	p->reopen_ms = (double)(bench_now_ns() - t0) / 1e6;
	c->verified_bytes = 0;
	for (int i = 0; i < 2; i++) {
		int side = (first + i) % 2;

		p->read_pre_mbs[side] =
			side ? plain_read(c, a->n_reads,
					  2 * pre_n * c->row_bytes) :
			       read_heads(c, st, 0, pre_n, k, v);
		if (p->read_pre_mbs[side] < 0)
			goto out;
	}
	for (int i = 0; i < 2; i++) {
		int side = (first + i) % 2;

		p->read_dec_mbs[side] =
			side ? plain_read(c, a->n_reads,
					  2 * dec_n * c->row_bytes) :
			       read_heads(c, st, 1, dec_n, k, v);
		if (p->read_dec_mbs[side] < 0)
			goto out;
	}
	ret = 0;
out:
	if (st && (rc = kvf_close(st)) != KVF_OK && ret == 0)
		ret = bench_fail("append", "kvf_close", rc);
	if (st0 && (rc = kvf_close(st0)) != KVF_OK && ret == 0)
		ret = bench_fail("append", "kvf_close", rc);
	if (stc && (rc = kvf_close(stc)) != KVF_OK && ret == 0)
		ret = bench_fail("append", "kvf_close", rc);
	free(k);
	free(v);
	return ret;
}

/* stats_minus - a - b, field by field (every kvf_stats counter is a
 * uint64_t after struct_size but for three doubles, not used here) */
static void stats_minus(kvf_stats *d, const kvf_stats *a, const kvf_stats *b)
{
	*d = *a;
	d->prof_append_ns = a->prof_append_ns - b->prof_append_ns;
	d->prof_lock_ns = a->prof_lock_ns - b->prof_lock_ns;
	d->prof_copy_ns = a->prof_copy_ns - b->prof_copy_ns;
	d->prof_hash_ns = a->prof_hash_ns - b->prof_hash_ns;
	d->prof_tier_ns = a->prof_tier_ns - b->prof_tier_ns;
	d->prof_segment_ns = a->prof_segment_ns - b->prof_segment_ns;
	d->prof_queue_ns = a->prof_queue_ns - b->prof_queue_ns;
	d->prof_sync_ns = a->prof_sync_ns - b->prof_sync_ns;
	d->prof_writer_ns = a->prof_writer_ns - b->prof_writer_ns;
	d->cache_segments = a->cache_segments - b->cache_segments;
	d->cache_segments_skipped =
		a->cache_segments_skipped - b->cache_segments_skipped;
}

int append_profile(struct append_ctx *c, int which)
{
	struct append_prof *pr = &c->prof[which];
	kvf_stats s[3];
	kvf_store *st = NULL;
	kvf_status rc;
	double cpu;
	int ret = -1;

	if (bench_remove_store(c->store0_dir) != 0)
		return -1;
	if ((rc = store_open(c, c->store0_dir, 1, which == 1, 1,
			     which == 2 ? c->a->codec : KVF_CODEC_NONE, &st)) != KVF_OK)
		return bench_fail("append", "kvf_open (profile)", rc);
	for (int i = 0; i < 3; i++) {
		s[i].struct_size = sizeof(s[i]);
		if ((rc = kvf_stats_get(st, &s[i])) != KVF_OK) {
			bench_fail("append", "kvf_stats_get", rc);
			goto out;
		}
		if (i == 0 && (pr->mbs[0] = prefill(c, st, &cpu)) < 0)
			goto out;
		if (i == 1 && (pr->mbs[1] = decode(c, st, &cpu)) < 0)
			goto out;
	}
	for (int i = 0; i < 2; i++) {
		stats_minus(&pr->d[i], &s[i + 1], &s[i]);
		/* the timed part of the phase (its calls and the sync) */
		pr->wall_ns[i] = (double)(i ? c->decode_bytes : c->prefill_bytes) /
				 pr->mbs[i] * 1e3;
	}
	ret = 0;
out:
	if ((rc = kvf_close(st)) != KVF_OK && ret == 0)
		ret = bench_fail("append", "kvf_close", rc);
	if (bench_remove_store(c->store0_dir) != 0)
		ret = -1;
	return ret;
}

/* ---- main ---------------------------------------------------------------------- */

int append_setup(struct append_ctx *c)
{
	const struct append_args *a = c->a;
	uint64_t max_tok = a->prompt_tokens > a->decode_steps ?
				   a->prompt_tokens :
				   a->decode_steps;
	size_t plen = strlen(a->dir) + 16;

	c->row_bytes = a->model.head_dim * 2;
	c->prefill_bytes = (uint64_t)a->n_seqs * a->model.n_layers *
			   a->prompt_tokens * 2 * a->model.n_kv_heads *
			   c->row_bytes;
	c->decode_bytes = (uint64_t)a->n_seqs * a->model.n_layers *
			  a->decode_steps * 2 * a->model.n_kv_heads *
			  c->row_bytes;
	c->plain_file_bytes =
		((c->prefill_bytes > c->decode_bytes ? c->prefill_bytes :
						       c->decode_bytes) +
		 PLAIN_CHUNK - 1) &
		~(uint64_t)(PLAIN_CHUNK - 1);
	c->pool_elts =
		max_tok * a->model.n_kv_heads * a->model.head_dim + POOL_SLACK;
	c->pool = malloc(c->pool_elts * sizeof(uint16_t));
	c->chunk = kvf_aligned_alloc(4096, PLAIN_CHUNK);
	c->store_dir = malloc(plen);
	c->plain_path = malloc(plen);
	c->store0_dir = malloc(plen);
	c->storec_dir = malloc(plen);
	if (!c->pool || !c->chunk || !c->store_dir || !c->plain_path ||
	    !c->store0_dir || !c->storec_dir) {
		fprintf(stderr, "kvbench append: out of memory\n");
		return -1;
	}
	pool_fill(c->pool, c->pool_elts);
	memcpy(c->chunk, c->pool,
	       PLAIN_CHUNK < c->pool_elts * 2 ? PLAIN_CHUNK : c->pool_elts * 2);
	snprintf(c->store_dir, plen, "%s/store", a->dir);
	snprintf(c->store0_dir, plen, "%s/store0", a->dir);
	snprintf(c->storec_dir, plen, "%s/storec", a->dir);
	snprintf(c->plain_path, plen, "%s/plain.dat", a->dir);
	if (bench_store_check(c->store_dir) != 0 ||
	    bench_store_check(c->store0_dir) != 0 ||
	    bench_store_check(c->storec_dir) != 0 ||
	    bench_make_dir("append", a->dir, &c->made_dir) != 0)
		return -1;
	c->claimed = 1; /* from here the run's files are its own */
	return 0;
}

/* default_capacity - room for both phases: the user bytes, summaries,
 * padding and the cleaner's low watermark (10% of the segments: kept
 * free so the background cleaner stays asleep), +25% in all, and the
 * partial segments each sync leaves per sequence */
uint64_t append_default_capacity(const struct append_ctx *c)
{
	const struct append_args *a = c->a;
	uint64_t seg = a->segment_bytes * a->n_stripes;
	uint64_t need = (c->prefill_bytes + c->decode_bytes) / 4 * 5 +
			(uint64_t)(8 * a->n_seqs + 16) * seg;

	return (need + seg - 1) / seg * seg;
}

