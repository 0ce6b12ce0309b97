/*
 * bench_endurance_files.c - the two file baselines of `kvbench endurance`,
 * real files in the system's directory, their block trace from the file
 * system model (bench_endurance_trace.c) fed with the same writes:
 *
 * file-per-block: as the local-disk backends of vLLM and LMCache, one file
 *   per block of 16 tokens of a sequence (every layer's K and V), written
 *   whole when the block is complete, never rewritten, deleted when the
 *   sequence ends; buffered, synced at every sync point (syncfs).  A
 *   partial last block is not stored.
 * per-token: as FlexGen's disk offload, K and V caches of a sequence and
 *   layer in two files, token-major (row t holds token t of every KV
 *   head), each decode step writing its token's row; the rows reach the
 *   device at the end of every step (an offload keeps no KV in DRAM: a
 *   write-through, what O_DIRECT or a sync a step gives), so a page is
 *   written again by every token that lands in it.  The real files are
 *   written with buffered pwrite and synced at the sync points.
 */

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench_common.h"
#include "bench/bench_endurance_int.h"

struct files_impl {
	int dirfd;          /* for syncfs */
	long **block_file;  /* per sequence: fs model file of each block */
	uint64_t *n_blocks; /* per sequence: blocks written */
	long *tok_file;     /* per-token: [seq][layer][K, V] fs model files */
	long train_file[3]; /* train: params, m, v (fs model files) */
	int train_fd[3];    /* the same, real descriptors */
	int *tok_fd;        /* per-token: the same, real descriptors */
};

static int files_open_common(struct end_sys *s)
{
	struct files_impl *f = calloc(1, sizeof(*f));

	if (f == NULL)
		return end_sys_fail(s, "out of memory");
	s->impl = f;
	f->dirfd = -1;
	for (int i = 0; i < 3; i++)
		f->train_fd[i] = -1;
	if (fsm_init(&s->fs, &s->tr, 0, s->tr.n_lpn))
		return end_sys_fail(s, "out of memory");
	if ((f->dirfd = open(s->dir, O_RDONLY | O_DIRECTORY)) < 0)
		return end_sys_fail(s, "open %s: %s", s->dir, strerror(errno));
	return 0;
}

static int files_open(struct end_sys *s)
{
	struct files_impl *f;

	if (files_open_common(s))
		return -1;
	f = s->impl;
	f->block_file = calloc(s->n_seqs, sizeof(*f->block_file));
	f->n_blocks = calloc(s->n_seqs, sizeof(*f->n_blocks));
	if (f->block_file == NULL || f->n_blocks == NULL)
		return end_sys_fail(s, "out of memory");
	return 0;
}

/* write_all - the real write of len bytes at off of path's fd */
static int write_all(struct end_sys *s, int fd, const void *buf, size_t len,
		     uint64_t off)
{
	const unsigned char *p = buf;

	while (len > 0) {
		ssize_t k = pwrite(fd, p, len, (off_t)off);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return end_sys_fail(s, "pwrite: %s", strerror(k < 0 ? errno : EIO));
		p += k;
		off += (uint64_t)k;
		len -= (size_t)k;
		s->host_bytes += (uint64_t)k;
	}
	return 0;
}

static const void *pool_at(const struct end_sys *s, uint64_t salt, size_t n)
{
	uint64_t off = bench_mix64(salt) % (s->pool_bytes - n + 1);

	return s->pool + (off & ~(uint64_t)63);
}

static int files_append(struct end_sys *s, uint64_t seq, uint32_t n)
{
	struct files_impl *f = s->impl;
	const kvf_model *m = &s->a->model;
	uint64_t t1 = s->tokens[seq] + n;
	size_t bytes = (size_t)END_BLOCK_TOKENS * m->n_layers *
		       end_token_layer_bytes(m);

	while ((f->n_blocks[seq] + 1) * END_BLOCK_TOKENS <= t1) {
		uint64_t b = f->n_blocks[seq];
		char name[64], path[700];
		long *bf;
		long fi;
		int fd;

		if ((b & (b - 1)) == 0) { /* grow the list at powers of two */
			bf = realloc(f->block_file[seq], (b ? 2 * b : 1) * sizeof(*bf));
			if (bf == NULL)
				return end_sys_fail(s, "out of memory");
			f->block_file[seq] = bf;
		}
		snprintf(name, sizeof(name), "s%llu_b%llu",
			 (unsigned long long)seq, (unsigned long long)b);
		snprintf(path, sizeof(path), "%s/%s", s->dir, name);
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0)
			return end_sys_fail(s, "open %s: %s", path, strerror(errno));
		fi = fsm_create(&s->fs, name);
		if (write_all(s, fd, pool_at(s, seq * 7919 + b, bytes), bytes, 0) ||
		    fi < 0 || fsm_write(&s->fs, fi, 0, bytes)) {
			close(fd);
			return end_sys_fail(s, "writing %s", path);
		}
		close(fd);
		f->block_file[seq][b] = fi;
		f->n_blocks[seq]++;
	}
	return 0;
}

static int files_end(struct end_sys *s, uint64_t seq)
{
	struct files_impl *f = s->impl;

	for (uint64_t b = 0; b < f->n_blocks[seq]; b++) {
		char path[700];

		snprintf(path, sizeof(path), "%s/s%llu_b%llu", s->dir,
			 (unsigned long long)seq, (unsigned long long)b);
		if (unlink(path) != 0)
			return end_sys_fail(s, "unlink %s: %s", path, strerror(errno));
		fsm_unlink(&s->fs, f->block_file[seq][b]);
	}
	free(f->block_file[seq]);
	f->block_file[seq] = NULL;
	f->n_blocks[seq] = 0;
	return 0;
}

static int files_nop(struct end_sys *s)
{
	(void)s;
	return 0;
}

static int files_sync(struct end_sys *s)
{
	struct files_impl *f = s->impl;

	if (syncfs(f->dirfd) != 0)
		return end_sys_fail(s, "syncfs %s: %s", s->dir, strerror(errno));
	if (fsm_flush(&s->fs))
		return end_sys_fail(s, "the device is full: lower --util");
	return 0;
}

static int files_close(struct end_sys *s)
{
	struct files_impl *f = s->impl;
	size_t n = (size_t)s->n_seqs * s->a->model.n_layers * 2;
	int rc = 0;

	if (f == NULL)
		return -1;
	if (f->dirfd >= 0 && s->error[0] == 0)
		rc = files_sync(s);
	for (int i = 0; i < 3; i++)
		if (f->train_fd[i] >= 0)
			close(f->train_fd[i]);
	if (f->tok_fd)
		for (size_t i = 0; i < n; i++)
			if (f->tok_fd[i] >= 0)
				close(f->tok_fd[i]);
	if (f->block_file)
		for (uint64_t i = 0; i < s->n_seqs; i++)
			free(f->block_file[i]);
	free(f->block_file);
	free(f->n_blocks);
	free(f->tok_file);
	free(f->tok_fd);
	if (f->dirfd >= 0)
		close(f->dirfd);
	free(f);
	s->impl = NULL;
	return rc;
}

/* files_train - params, m and v in a file each, rewritten in place every
 * step and synced (the step is durable, as kvf_opt_step's is) */
static int files_train(struct end_sys *s)
{
	struct files_impl *f = s->impl;
	uint64_t bytes = 4 * s->a->train_params, chunk = 1u << 20;

	for (int i = 0; i < 3; i++) {
		if (f->train_fd[i] < 0) {
			char name[16], path[700];

			snprintf(name, sizeof(name), "state%d", i);
			snprintf(path, sizeof(path), "%s/%s", s->dir, name);
			f->train_fd[i] = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
			if (f->train_fd[i] < 0)
				return end_sys_fail(s, "open %s: %s", path, strerror(errno));
			if ((f->train_file[i] = fsm_create(&s->fs, name)) < 0)
				return end_sys_fail(s, "out of memory");
		}
		for (uint64_t off = 0; off < bytes; off += chunk) {
			uint64_t n = bytes - off < chunk ? bytes - off : chunk;

			if (write_all(s, f->train_fd[i], pool_at(s, off + (uint64_t)i, n),
				      n, off) ||
			    fsm_write(&s->fs, f->train_file[i], off, n))
				return end_sys_fail(s, "writing the training state");
		}
	}
	return files_sync(s);
}

const struct end_sys_ops end_ops_files = {
	.name = "file-per-block", .open = files_open, .append = files_append,
	.end_seq = files_end, .step = files_nop, .sync = files_sync,
	.close = files_close, .train_step = files_train,
};

/* ---- per-token ---- */

static int token_open(struct end_sys *s)
{
	struct files_impl *f;
	size_t n = (size_t)s->n_seqs * s->a->model.n_layers * 2;

	if (files_open_common(s))
		return -1;
	f = s->impl;
	f->tok_file = malloc(n * sizeof(*f->tok_file));
	f->tok_fd = malloc(n * sizeof(*f->tok_fd));
	if (f->tok_file == NULL || f->tok_fd == NULL)
		return end_sys_fail(s, "out of memory");
	for (size_t i = 0; i < n; i++) {
		f->tok_file[i] = -1;
		f->tok_fd[i] = -1;
	}
	return 0;
}

static int token_append(struct end_sys *s, uint64_t seq, uint32_t n)
{
	struct files_impl *f = s->impl;
	const kvf_model *m = &s->a->model;
	uint64_t row = end_token_layer_bytes(m) / 2, t0 = s->tokens[seq];

	for (uint32_t l = 0; l < m->n_layers; l++)
		for (uint32_t kv = 0; kv < 2; kv++) {
			size_t i = ((size_t)seq * m->n_layers + l) * 2 + kv;

			if (f->tok_fd[i] < 0) {
				char name[64], path[700];

				snprintf(name, sizeof(name), "s%llu_l%u_%c",
					 (unsigned long long)seq, l, kv ? 'v' : 'k');
				snprintf(path, sizeof(path), "%s/%s", s->dir, name);
				f->tok_fd[i] = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
				if (f->tok_fd[i] < 0)
					return end_sys_fail(s, "open %s: %s", path, strerror(errno));
				if ((f->tok_file[i] = fsm_create(&s->fs, name)) < 0)
					return end_sys_fail(s, "out of memory");
			}
			if (write_all(s, f->tok_fd[i],
				      pool_at(s, i * 131 + t0, (size_t)(n * row)),
				      (size_t)(n * row), t0 * row) ||
			    fsm_write(&s->fs, f->tok_file[i], t0 * row, n * row))
				return end_sys_fail(s, "writing the per-token cache");
		}
	return 0;
}

static int token_end(struct end_sys *s, uint64_t seq)
{
	struct files_impl *f = s->impl;
	const kvf_model *m = &s->a->model;

	for (uint32_t l = 0; l < m->n_layers; l++)
		for (uint32_t kv = 0; kv < 2; kv++) {
			size_t i = ((size_t)seq * m->n_layers + l) * 2 + kv;
			char path[700];

			if (f->tok_fd[i] < 0)
				continue;
			snprintf(path, sizeof(path), "%s/s%llu_l%u_%c", s->dir,
				 (unsigned long long)seq, l, kv ? 'v' : 'k');
			close(f->tok_fd[i]);
			f->tok_fd[i] = -1;
			if (unlink(path) != 0)
				return end_sys_fail(s, "unlink %s: %s", path, strerror(errno));
			fsm_unlink(&s->fs, f->tok_file[i]);
		}
	return 0;
}

static int token_step(struct end_sys *s)
{
	if (fsm_flush(&s->fs))
		return end_sys_fail(s, "the device is full: lower --util");
	return 0;
}

const struct end_sys_ops end_ops_token = {
	.name = "per-token", .open = token_open, .append = token_append,
	.end_seq = token_end, .step = token_step, .sync = files_sync,
	.close = files_close,
};
