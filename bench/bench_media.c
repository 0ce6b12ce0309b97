/*
 * bench_media.c - `kvbench media`: the file backend against a plain loop.
 *
 * Three measurements, each run side by side with its baseline on the same
 * file system, in the same run, repeated and reported as medians:
 *  - sequential segment writes: kvf_media_write of whole segments, striped
 *    round-robin, queue_depth in flight, then kvf_media_sync; against a
 *    single-threaded O_DIRECT pwrite loop of the same bytes + fdatasync;
 *  - streaming segment reads: the same segments read back with
 *    kvf_media_read (several in flight), every page's stamp checked;
 *    against an O_DIRECT pread loop;
 *  - random page reads: kvf_media_read batches at the configured queue
 *    depth against a queue-depth-1 pread loop of the same random pages.
 * Every page written carries a stamp (stripe, segment, page, pass) that the
 * reads check, so a figure is never of wrong data.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/alloc.h"
#include "bench/bench_common.h"
#include "ftl/media.h"

struct media_args {
	const char *dir;        /* where the files go */
	uint64_t total_bytes;   /* bytes per pass */
	uint64_t segment_bytes; /* bytes per segment */
	uint32_t n_stripes;     /* stripes (files) */
	uint32_t queue_depth;   /* io_uring entries */
	uint64_t random_reads;  /* pages per random-read pass */
	uint32_t repeat;        /* passes; medians are reported */
	int json;               /* print JSON instead of a table */
	int keep;               /* keep the files */
};

struct media_result {
	double write_mbs[2];  /* [0] kvflash, [1] plain; median MB/s */
	double read_mbs[2];
	double rand_iops[2];  /* [0] kvflash at queue depth, [1] plain QD1 */
	int direct_io;
	int uring;
};

#define PAGE 4096u

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvbench media [--dir DIR] [--size BYTES] [--segment BYTES]\n"
		"                     [--stripes N] [--qd N] [--random-reads N]\n"
		"                     [--repeat N] [--json] [--keep]\n"
		"  --dir DIR          directory for the files (default ./kvbench-media)\n"
		"  --size BYTES       bytes per pass, K/M/G suffixes (default 256M)\n"
		"  --segment BYTES    segment size (default 1M)\n"
		"  --stripes N        files to stripe over (default 1)\n"
		"  --qd N             io_uring queue depth (default 32)\n"
		"  --random-reads N   4 KiB pages per random-read pass (default 20000)\n"
		"  --repeat N         passes per measurement; medians (default 3)\n"
		"  --json             JSON instead of a table\n"
		"  --keep             leave the files in DIR\n");
}

static int parse_args(int argc, char **argv, struct media_args *a)
{
	const struct bench_opt opts[] = {
		BENCH_STR("--dir", a->dir),
		BENCH_U64("--size", a->total_bytes, 0, UINT64_MAX),
		BENCH_U64("--segment", a->segment_bytes, 0, UINT64_MAX),
		BENCH_U32("--stripes", a->n_stripes, 1, KVF_MEDIA_MAX_STRIPES),
		BENCH_U32("--qd", a->queue_depth, 1, 4096),
		BENCH_U64("--random-reads", a->random_reads, 1, UINT64_MAX),
		BENCH_U32("--repeat", a->repeat, 1, 100),
		BENCH_BOOL("--json", a->json),
		BENCH_BOOL("--keep", a->keep),
		{ 0 }
	};
	int rc;

	*a = (struct media_args){ .dir = "kvbench-media",
				  .total_bytes = 256ull << 20,
				  .segment_bytes = 1u << 20, .n_stripes = 1,
				  .queue_depth = 32, .random_reads = 20000,
				  .repeat = 3 };
	rc = bench_parse_opts("media", usage, opts, argc, argv);
	if (rc != 0)
		return rc;
	if (a->segment_bytes < PAGE || a->segment_bytes % PAGE != 0 ||
	    a->segment_bytes > (256u << 20))
		return bench_usage_error("media", "--segment must be a multiple of 4096 up to 256M");
	if (a->total_bytes < a->segment_bytes * a->n_stripes)
		return bench_usage_error("media", "--size must hold at least one segment per stripe");
	return 0;
}

/* stamp and check: the first 32 bytes of every page name it */
static void stamp(unsigned char *page, uint64_t stripe, uint64_t seg,
		  uint64_t pg, uint64_t pass)
{
	uint64_t v[4] = { stripe, seg, pg, pass ^ 0x6b76666c617368ull };

	memcpy(page, v, sizeof(v));
}

static int stamp_ok(const unsigned char *page, uint64_t stripe, uint64_t seg,
		    uint64_t pg, uint64_t pass)
{
	uint64_t v[4] = { stripe, seg, pg, pass ^ 0x6b76666c617368ull };

	return memcmp(page, v, sizeof(v)) == 0;
}

struct run_ctx {
	const struct media_args *a;
	struct kvf_media *m;
	uint64_t segs_per_stripe;
	uint32_t pages_per_seg;
	uint32_t batch;          /* segments per kvf_media call */
	unsigned char *buf;      /* batch segments */
	int plain_fd;            /* the baseline file */
	char *plain_path;
};

/* batch_ios - the requests of the batch of whole segments from s (of
 * n_segs, striped round robin) into c->buf; returns how many */
static uint32_t batch_ios(struct run_ctx *c, uint64_t s, uint64_t n_segs,
			  struct kvf_media_io *io)
{
	uint32_t n = (uint32_t)(n_segs - s < c->batch ? n_segs - s : c->batch);

	for (uint32_t i = 0; i < n; i++) {
		uint64_t idx = s + i;

		io[i] = (struct kvf_media_io){
			.stripe = (uint32_t)(idx % c->a->n_stripes),
			.seg = idx / c->a->n_stripes, .page = 0,
			.n_pages = c->pages_per_seg,
			.buf = c->buf + (size_t)i * c->a->segment_bytes };
	}
	return n;
}

/* kvf_write_pass - write every segment, stamped for pass; MB/s or < 0 */
static double kvf_write_pass(struct run_ctx *c, uint64_t pass)
{
	uint64_t n_segs = c->segs_per_stripe * c->a->n_stripes;
	struct kvf_media_io io[64];
	uint64_t t0 = bench_now_ns();

	for (uint64_t s = 0; s < n_segs; s += c->batch) {
		uint32_t n = batch_ios(c, s, n_segs, io);

		for (uint32_t i = 0; i < n; i++)
			for (uint32_t p = 0; p < c->pages_per_seg; p++)
				stamp((unsigned char *)io[i].buf +
					      (size_t)p * PAGE,
				      io[i].stripe, io[i].seg, p, pass);
		if (kvf_media_write(c->m, io, n) != KVF_OK)
			return -1;
	}
	if (kvf_media_sync(c->m) != KVF_OK)
		return -1;
	return bench_mbs(n_segs * c->a->segment_bytes, bench_now_ns() - t0);
}

/* kvf_read_pass - read every segment back and check stamps */
static double kvf_read_pass(struct run_ctx *c, uint64_t pass)
{
	uint64_t n_segs = c->segs_per_stripe * c->a->n_stripes;
	struct kvf_media_io io[64];
	uint64_t t0 = bench_now_ns();

	for (uint64_t s = 0; s < n_segs; s += c->batch) {
		uint32_t n = batch_ios(c, s, n_segs, io);

		if (kvf_media_read(c->m, io, n) != KVF_OK)
			return -1;
		for (uint32_t i = 0; i < n; i++)
			for (uint32_t p = 0; p < c->pages_per_seg; p++)
				if (!stamp_ok((unsigned char *)io[i].buf + (size_t)p * PAGE,
					      io[i].stripe, io[i].seg, p, pass)) {
					fprintf(stderr, "kvbench media: stripe %u segment %llu page %u read back wrong data\n",
						io[i].stripe,
						(unsigned long long)io[i].seg, p);
					return -1;
				}
	}
	return bench_mbs(n_segs * c->a->segment_bytes, bench_now_ns() - t0);
}

/* plain_pass - the baseline: one O_DIRECT pwrite/pread per segment */
static double plain_pass(struct run_ctx *c, int write, uint64_t pass)
{
	uint64_t n_segs = c->segs_per_stripe * c->a->n_stripes;
	size_t len = (size_t)c->a->segment_bytes;
	uint64_t t0 = bench_now_ns();

	for (uint64_t s = 0; s < n_segs; s++) {
		off_t off = (off_t)(s * len);
		ssize_t n;

		if (write) {
			for (uint32_t p = 0; p < c->pages_per_seg; p++)
				stamp(c->buf + (size_t)p * PAGE, 0, s, p, pass);
			n = pwrite(c->plain_fd, c->buf, len, off);
		} else {
			n = pread(c->plain_fd, c->buf, len, off);
			if (n == (ssize_t)len && !stamp_ok(c->buf, 0, s, 0, pass)) {
				fprintf(stderr, "kvbench media: plain file segment %llu read back wrong data\n",
					(unsigned long long)s);
				return -1;
			}
		}
		if (n != (ssize_t)len) {
			fprintf(stderr, "kvbench media: plain %s of %s: %s\n",
				write ? "pwrite" : "pread", c->plain_path,
				n < 0 ? strerror(errno) : "short transfer");
			return -1;
		}
	}
	if (write && fdatasync(c->plain_fd) != 0)
		return -1;
	return bench_mbs(n_segs * len, bench_now_ns() - t0);
}

/* random_pass - random_reads pages; kvflash in batches at the queue depth
 * (kvf = 1) or the plain loop at queue depth 1 (kvf = 0).  IOPS. */
static double random_pass(struct run_ctx *c, int kvf, uint64_t seed)
{
	uint64_t n_pages_total = c->segs_per_stripe * c->a->n_stripes *
				 c->pages_per_seg;
	uint64_t rng = seed, n = c->a->random_reads;
	uint32_t qd = c->a->queue_depth;
	struct kvf_media_io *io = kvf_calloc(qd, sizeof(*io));
	uint64_t t0 = bench_now_ns();

	if (io == NULL)
		return -1;
	for (uint64_t done = 0; done < n;) {
		uint32_t k = (uint32_t)(n - done < qd ? n - done : qd);

		for (uint32_t i = 0; i < k; i++) {
			uint64_t pg;

			rng = rng * 6364136223846793005ull + 1442695040888963407ull;
			pg = (rng >> 17) % n_pages_total;
			if (kvf) {
				uint64_t seg_idx = pg / c->pages_per_seg;

				io[i] = (struct kvf_media_io){
					.stripe = (uint32_t)(seg_idx % c->a->n_stripes),
					.seg = seg_idx / c->a->n_stripes,
					.page = (uint32_t)(pg % c->pages_per_seg),
					.n_pages = 1,
					.buf = c->buf + (size_t)i * PAGE };
			} else if (pread(c->plain_fd, c->buf, PAGE,
					 (off_t)(pg * PAGE)) != PAGE) {
				kvf_free(io);
				return -1;
			}
		}
		if (kvf && kvf_media_read(c->m, io, k) != KVF_OK) {
			kvf_free(io);
			return -1;
		}
		done += k;
	}
	kvf_free(io);
	return (double)n / ((double)(bench_now_ns() - t0) / 1e9);
}

static int measure(struct run_ctx *c, struct media_result *r)
{
	double w[2][100], rd[2][100], rr[2][100];
	uint32_t n = c->a->repeat;

	for (uint32_t i = 0; i < n; i++) {
		/* alternate which side goes first, so drift hits both */
		int first = (int)(i % 2);

		for (int k = 0; k < 2; k++) {
			int side = first ^ k;

			w[side][i] = side == 0 ? kvf_write_pass(c, i)
					       : plain_pass(c, 1, i);
			if (w[side][i] < 0)
				return -1;
		}
		for (int k = 0; k < 2; k++) {
			int side = first ^ k;

			rd[side][i] = side == 0 ? kvf_read_pass(c, i)
						: plain_pass(c, 0, i);
			if (rd[side][i] < 0)
				return -1;
		}
		for (int k = 0; k < 2; k++) {
			int side = first ^ k;

			rr[side][i] = random_pass(c, side == 0, 12345 + i);
			if (rr[side][i] < 0)
				return -1;
		}
	}
	for (int s = 0; s < 2; s++) {
		r->write_mbs[s] = bench_median(w[s], n);
		r->read_mbs[s] = bench_median(rd[s], n);
		r->rand_iops[s] = bench_median(rr[s], n);
	}
	return 0;
}

static void print_result(const struct media_args *a, const struct media_result *r)
{
	if (a->json) {
		struct bench_json j = { .f = stdout };

		bench_json_begin(&j, NULL);
		bench_json_str(&j, "bench", "media");
		bench_json_str(&j, "dir", a->dir);
		bench_json_u64(&j, "bytes_per_pass", a->total_bytes);
		bench_json_u64(&j, "segment_bytes", a->segment_bytes);
		bench_json_u64(&j, "stripes", a->n_stripes);
		bench_json_u64(&j, "queue_depth", a->queue_depth);
		bench_json_u64(&j, "repeat", a->repeat);
		bench_json_u64(&j, "direct_io", (uint64_t)r->direct_io);
		bench_json_u64(&j, "io_uring", (uint64_t)r->uring);
		bench_json_begin(&j, "seq_write");
		bench_json_double(&j, "kvflash_mb_s", r->write_mbs[0]);
		bench_json_double(&j, "plain_mb_s", r->write_mbs[1]);
		bench_json_double(&j, "ratio", r->write_mbs[0] / r->write_mbs[1]);
		bench_json_end(&j);
		bench_json_begin(&j, "seq_read");
		bench_json_double(&j, "kvflash_mb_s", r->read_mbs[0]);
		bench_json_double(&j, "plain_mb_s", r->read_mbs[1]);
		bench_json_double(&j, "ratio", r->read_mbs[0] / r->read_mbs[1]);
		bench_json_end(&j);
		bench_json_begin(&j, "random_read_4k");
		bench_json_double(&j, "kvflash_iops", r->rand_iops[0]);
		bench_json_double(&j, "plain_qd1_iops", r->rand_iops[1]);
		bench_json_double(&j, "ratio", r->rand_iops[0] / r->rand_iops[1]);
		bench_json_end(&j);
		bench_json_end(&j);
		return;
	}
	printf("kvbench media: %s, %llu MiB per pass, %llu KiB segments, %u stripe(s), "
	       "O_DIRECT %s, io_uring %s (qd %u), median of %u\n",
	       a->dir, (unsigned long long)(a->total_bytes >> 20),
	       (unsigned long long)(a->segment_bytes >> 10), a->n_stripes,
	       r->direct_io ? "on" : "off (fallback)",
	       r->uring ? "on" : "off (pread/pwrite)", a->queue_depth, a->repeat);
	printf("%-28s %14s %14s %8s\n", "measurement", "kvflash", "plain loop",
	       "ratio");
	printf("%-28s %10.1f MB/s %10.1f MB/s %7.2fx\n", "sequential segment write",
	       r->write_mbs[0], r->write_mbs[1], r->write_mbs[0] / r->write_mbs[1]);
	printf("%-28s %10.1f MB/s %10.1f MB/s %7.2fx\n", "streaming segment read",
	       r->read_mbs[0], r->read_mbs[1], r->read_mbs[0] / r->read_mbs[1]);
	printf("%-28s %9.0f IOPS %9.0f IOPS %7.2fx   (qd %u vs qd 1)\n",
	       "random 4 KiB page read", r->rand_iops[0], r->rand_iops[1],
	       r->rand_iops[0] / r->rand_iops[1], a->queue_depth);
}

int bench_media_main(int argc, char **argv)
{
	struct media_args a;
	struct media_result r = { 0 };
	struct run_ctx c = { .plain_fd = -1 };
	struct kvf_media_config cfg = { .kind = KVF_MEDIA_FILE };
	struct kvf_media_stats st;
	char **paths = NULL;
	size_t plen, buf_bytes;
	int rc = 1, made_dir = 0;

	if ((rc = parse_args(argc, argv, &a)) != 0)
		return rc == 1 ? 0 : rc;
	rc = 1;
	c.a = &a;
	c.pages_per_seg = (uint32_t)(a.segment_bytes / PAGE);
	c.segs_per_stripe = a.total_bytes / a.segment_bytes / a.n_stripes;
	c.batch = a.queue_depth < 8 ? a.queue_depth : 8;
	if (bench_make_dir("media", a.dir, &made_dir) != 0)
		return 1;
	plen = strlen(a.dir) + 32;
	paths = calloc(a.n_stripes, sizeof(*paths));
	c.plain_path = malloc(plen);
	buf_bytes = (size_t)a.segment_bytes * c.batch;
	if (buf_bytes < (size_t)a.queue_depth * PAGE)
		buf_bytes = (size_t)a.queue_depth * PAGE;
	c.buf = kvf_aligned_alloc(KVF_MEDIA_ALIGN, buf_bytes);
	if (!paths || !c.plain_path || !c.buf) {
		fprintf(stderr, "kvbench media: out of memory\n");
		goto out;
	}
	for (uint32_t i = 0; i < a.n_stripes; i++) {
		paths[i] = malloc(plen);
		if (paths[i] == NULL)
			goto out;
		snprintf(paths[i], plen, "%s/stripe%u.kvf", a.dir, i);
	}
	snprintf(c.plain_path, plen, "%s/plain.dat", a.dir);
	c.plain_fd = open(c.plain_path, O_RDWR | O_CREAT | O_DIRECT | O_TRUNC, 0644);
	if (c.plain_fd < 0) /* the baseline follows the backend's fallback */
		c.plain_fd = open(c.plain_path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (c.plain_fd < 0 ||
	    fallocate(c.plain_fd, 0, 0, (off_t)(c.segs_per_stripe * a.n_stripes *
						a.segment_bytes)) != 0) {
		fprintf(stderr, "kvbench media: %s: %s\n", c.plain_path, strerror(errno));
		goto out;
	}
	cfg.geo = (struct kvf_media_geometry){
		.n_stripes = a.n_stripes, .page_size = PAGE,
		.pages_per_segment = c.pages_per_seg,
		.segs_per_stripe = c.segs_per_stripe };
	cfg.paths = (const char *const *)paths;
	cfg.queue_depth = a.queue_depth;
	if (kvf_media_open(&cfg, &c.m) != KVF_OK) {
		fprintf(stderr, "kvbench media: %s\n", kvf_last_error());
		goto out;
	}
	kvf_media_stats(c.m, &st);
	r.direct_io = (int)st.direct_io;
	r.uring = (int)st.uring;
	if (measure(&c, &r) != 0) {
		fprintf(stderr, "kvbench media: %s\n", kvf_last_error());
		goto out;
	}
	print_result(&a, &r);
	rc = 0;
out:
	kvf_media_free(c.m);
	if (c.plain_fd >= 0)
		close(c.plain_fd);
	if (!a.keep) {
		for (uint32_t i = 0; paths && i < a.n_stripes; i++)
			if (paths[i])
				unlink(paths[i]);
		if (c.plain_path)
			unlink(c.plain_path);
		if (made_dir)
			rmdir(a.dir);
	}
	for (uint32_t i = 0; paths && i < a.n_stripes; i++)
		free(paths[i]);
	free(paths);
	free(c.plain_path);
	kvf_free(c.buf);
	return rc;
}
