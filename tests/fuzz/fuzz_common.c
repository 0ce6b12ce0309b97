/*
 * fuzz_common.c - the template store, its work copy and the exercise of a
 * fuzzed store (see fuzz_common.h).
 */
#define _XOPEN_SOURCE 700
#include "fuzz_common.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static struct fz_template tmpl;
static int tmpl_made;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "fuzz: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	abort();
}

void fz_check(const char *call, kvf_status rc, uint64_t allowed)
{
	const char *msg;

	if (rc == KVF_OK)
		return;
	msg = kvf_last_error();
	if ((unsigned)rc >= 64 || !(allowed & FZ_ST(rc))) {
		fprintf(stderr, "fuzz: %s returned %s (%d): %s\n", call,
			kvf_strerror(rc), (int)rc, msg ? msg : "(no message)");
		abort();
	}
	if (msg == NULL || *msg == '\0') {
		fprintf(stderr, "fuzz: %s returned %s without a message\n", call,
			kvf_strerror(rc));
		abort();
	}
}

/* ---- files --------------------------------------------------------------- */

static char *join(const char *dir, const char *leaf)
{
	size_t n = strlen(dir) + strlen(leaf) + 2;
	char *p = malloc(n);

	if (p == NULL)
		die("out of memory");
	snprintf(p, n, "%s/%s", dir, leaf);
	return p;
}

void fz_write(const char *dir, const char *leaf, const void *buf, size_t len,
	      uint64_t off, int trunc)
{
	char *p = join(dir, leaf);
	int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);

	if (fd < 0 || (trunc && ftruncate(fd, (off_t)(off + len)) != 0) ||
	    (len && pwrite(fd, buf, len, (off_t)off) != (ssize_t)len))
		die("writing %s: %s", p, strerror(errno));
	close(fd);
	free(p);
}

size_t fz_read(const char *dir, const char *leaf, void *buf, size_t cap,
	       uint64_t off)
{
	char *p = join(dir, leaf);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		die("reading %s: %s", p, strerror(errno));
	n = pread(fd, buf, cap, (off_t)off);
	if (n < 0)
		die("reading %s: %s", p, strerror(errno));
	close(fd);
	free(p);
	return (size_t)n;
}

static int rm_one(const char *path, const struct stat *sb, int flag,
		  struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void rm_tree(const char *path)
{
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static const char *copy_src, *copy_dst;

static void copy_file(const char *from, const char *to)
{
	static unsigned char buf[1 << 16];
	int in = open(from, O_RDONLY | O_CLOEXEC);
	int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ssize_t n;

	if (in < 0 || out < 0)
		die("copying %s: %s", from, strerror(errno));
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, (size_t)n) != n)
			die("copying to %s: %s", to, strerror(errno));
	if (n < 0)
		die("copying %s: %s", from, strerror(errno));
	close(in);
	close(out);
}

static int copy_one(const char *path, const struct stat *sb, int flag,
		    struct FTW *ftw)
{
	char *to;

	(void)ftw;
	if (ftw->level == 0)
		return 0; /* the template itself: fz_work made its copy */
	to = join(copy_dst, path + strlen(copy_src) + 1);
	if (flag == FTW_D) {
		if (mkdir(to, 0755) != 0 && errno != EEXIST)
			die("mkdir %s: %s", to, strerror(errno));
	} else if (flag == FTW_F && S_ISREG(sb->st_mode)) {
		copy_file(path, to);
	}
	free(to);
	return 0;
}

const char *fz_work(void)
{
	const struct fz_template *t = fz_template();

	rm_tree(t->work);
	if (mkdir(t->work, 0755) != 0)
		die("mkdir %s: %s", t->work, strerror(errno));
	copy_src = t->dir;
	copy_dst = t->work;
	if (nftw(t->dir, copy_one, 16, FTW_PHYS) != 0)
		die("copying %s to %s", t->dir, t->work);
	return t->work;
}

/* ---- the template -------------------------------------------------------- */

void fz_options(kvf_options *o)
{
	kvf_model m = { FZ_LAYERS, FZ_QH, FZ_KVH, FZ_DIM, KVF_DTYPE_F16 };

	kvf_options_init(o, &m);
	o->page_size = FZ_PAGE;
	o->segment_size = FZ_SEG;
	o->capacity_bytes = FZ_CAPACITY;
	o->n_stripes = FZ_STRIPES;
	o->direct_io = 2; /* tmpfs has no O_DIRECT */
	o->n_threads = 1;
}

static void must(const char *call, kvf_status rc)
{
	if (rc != KVF_OK)
		die("making the template: %s: %s", call, kvf_last_error());
}

static void fill(unsigned char *buf, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		buf[i] = (unsigned char)((i * 31u + seed * 7u) & 0x3f);
}

static void append(kvf_store *st, uint64_t seq, uint32_t layer, uint32_t n)
{
	static unsigned char k[256 * FZ_KVH * FZ_DIM * 2], v[sizeof(k)];

	fill(k, (size_t)n * FZ_KVH * FZ_DIM * 2, (unsigned)(seq + layer));
	fill(v, (size_t)n * FZ_KVH * FZ_DIM * 2, (unsigned)(seq * 3 + layer));
	must("kvf_append", kvf_append(st, seq, layer, n, k, v));
}

static void build(kvf_store *st)
{
	static float grad[FZ_OPTIM_PARAMS];
	static unsigned char x[40 * FZ_QH * FZ_DIM * 2];
	kvf_grad g = { KVF_DTYPE_F32, grad, NULL, FZ_OPTIM_PARAMS };
	kvf_opt_config cfg;
	kvf_opt *optim;

	must("kvf_seq_create", kvf_seq_create(st, 1));
	for (uint32_t l = 0; l < FZ_LAYERS; l++)
		append(st, 1, l, 100);
	must("kvf_seq_fork", kvf_seq_fork(st, 1, 2, 70));
	for (uint32_t l = 0; l < FZ_LAYERS; l++)
		append(st, 2, l, 30);
	must("kvf_seq_create", kvf_seq_create(st, 3));
	append(st, 3, 0, 40);
	fill(x, sizeof(x), 5);
	must("kvf_append_x", kvf_append_x(st, 3, 1, 40, x));
	must("kvf_seq_create", kvf_seq_create(st, 4));
	for (uint32_t l = 0; l < FZ_LAYERS; l++)
		append(st, 4, l, 64);
	must("kvf_sync", kvf_sync(st));
	must("kvf_seq_free", kvf_seq_free(st, 4));
	kvf_opt_config_init(&cfg, KVF_OPT_ADAM);
	must("kvf_opt_create",
	     kvf_opt_create(st, FZ_OPTIM_NAME, FZ_OPTIM_PARAMS, &cfg, NULL, &optim));
	for (uint32_t i = 0; i < FZ_OPTIM_PARAMS; i++)
		grad[i] = (float)(i % 17) / 16.0f - 0.5f;
	must("kvf_opt_step", kvf_opt_step(optim, &g, NULL));
	must("kvf_opt_step", kvf_opt_step(optim, &g, NULL));
	must("kvf_opt_close", kvf_opt_close(optim));
	must("kvf_sync", kvf_sync(st));
}

static void describe(void)
{
	kvf_options o;
	kvf_store *st;
	kvf_store_info info = { .struct_size = sizeof(info) };

	kvf_options_init(&o, NULL);
	o.read_only = 1;
	o.direct_io = 2;
	o.n_threads = 1;
	must("kvf_open", kvf_open(tmpl.dir, &o, &st));
	must("kvf_store_info_get", kvf_store_info_get(st, &info));
	tmpl.store_id = info.store_id;
	tmpl.n_segments = (uint32_t)(info.segs_per_stripe * info.n_stripes);
	tmpl.pages_per_seg = (uint32_t)(info.segment_size / info.page_size);
	for (uint32_t s = 0; s < tmpl.n_segments; s++) {
		kvf_segment_info si = { .struct_size = sizeof(si) };

		must("kvf_segment_info_get", kvf_segment_info_get(st, s, &si));
		if (si.state != KVF_SEG_SEALED || tmpl.n_sealed == FZ_MAX_SEGS)
			continue;
		tmpl.sealed[tmpl.n_sealed] = s;
		tmpl.data_pages[tmpl.n_sealed] = si.data_pages;
		tmpl.seqnos[tmpl.n_sealed] = si.seqno;
		tmpl.n_sealed++;
	}
	must("kvf_close", kvf_close(st));
	if (tmpl.n_sealed == 0)
		die("the template has no sealed segment");
}

static void remove_template(void)
{
	if (!tmpl_made)
		return;
	rm_tree(tmpl.work);
	rm_tree(tmpl.dir);
	*strrchr(tmpl.dir, '/') = '\0';
	rmdir(tmpl.dir);
	free(tmpl.dir);
	free(tmpl.work);
	tmpl_made = 0;
}

const struct fz_template *fz_template(void)
{
	const char *base = getenv("KVF_TEST_DIR");
	kvf_options o;
	kvf_store *st;
	char *top;
	size_t n;

	if (tmpl_made)
		return &tmpl;
	if (base == NULL || *base == '\0')
		base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : NULL;
	if (base == NULL)
		base = getenv("TMPDIR");
	if (base == NULL || *base == '\0')
		base = "/tmp";
	n = strlen(base) + 32;
	top = malloc(n);
	if (top == NULL)
		die("out of memory");
	snprintf(top, n, "%s/kvf-fuzz-XXXXXX", base);
	if (mkdtemp(top) == NULL)
		die("mkdtemp %s: %s", top, strerror(errno));
	tmpl.dir = join(top, "template");
	tmpl.work = join(top, "work");
	free(top);
	fz_options(&o);
	must("kvf_open", kvf_open(tmpl.dir, &o, &st));
	build(st);
	must("kvf_close", kvf_close(st));
	describe();
	tmpl_made = 1;
	atexit(remove_template);
	return &tmpl;
}

/* ---- the exercise -------------------------------------------------------- */

/* statuses a read may give on a damaged store */
#define READ_OK (FZ_ST(KVF_ECORRUPT) | FZ_ST(KVF_ENOENT) | FZ_ST(KVF_ERANGE) | \
		 FZ_ST(KVF_EIO))
/* and kvf_open */
#define OPEN_OK (FZ_ST(KVF_ECORRUPT) | FZ_ST(KVF_EVERSION) | FZ_ST(KVF_EIO))
/* and a write (a write that fails midway makes the handle fatal) */
#define WRITE_OK (READ_OK | FZ_ST(KVF_ENOSPC) | FZ_ST(KVF_EEXIST) | \
		  FZ_ST(KVF_EFATAL))

static int on_damage(void *arg, const kvf_verify_damage *d)
{
	uint64_t *n = arg;

	if (d->message == NULL || *d->message == '\0') {
		fprintf(stderr, "fuzz: kvf_verify reported damage without a message\n");
		abort();
	}
	++*n;
	return 0;
}

static void read_seq(kvf_store *st, const kvf_store_info *info, uint64_t id)
{
	static unsigned char k[256 * FZ_DIM * 4], v[sizeof(k)];
	static unsigned char x[256 * FZ_QH * FZ_DIM * 4];
	kvf_seq_info si = { .struct_size = sizeof(si) };
	kvf_status rc;

	fz_check("kvf_seq_info_get", kvf_seq_info_get(st, id, &si), READ_OK);
	for (uint32_t l = 0; l < info->model.n_layers && l < 4; l++) {
		uint64_t n = 0, nx = 0;

		rc = kvf_seq_len(st, id, l, &n);
		fz_check("kvf_seq_len", rc, READ_OK);
		/* the buffers hold 256 tokens of the template's shape, at
		 * most 4 bytes a value */
		if (rc == KVF_OK && n > 0 && info->model.head_dim <= FZ_DIM)
			fz_check("kvf_read",
				 kvf_read(st, id, l, 0, 0, n < 256 ? n : 256, k, v),
				 READ_OK);
		rc = kvf_seq_x_len(st, id, l, &nx);
		fz_check("kvf_seq_x_len", rc, READ_OK);
		if (rc == KVF_OK && nx > 0 &&
		    info->model.n_q_heads * info->model.head_dim <= FZ_QH * FZ_DIM)
			fz_check("kvf_read_x",
				 kvf_read_x(st, id, l, 0, nx < 256 ? nx : 256, x),
				 READ_OK);
	}
}

static void read_optim(kvf_store *st)
{
	static float p[64];
	uint64_t steps, n;
	kvf_opt *o;
	kvf_status rc = kvf_opt_open(st, FZ_OPTIM_NAME, &o);

	fz_check("kvf_opt_open", rc, READ_OK);
	if (rc != KVF_OK)
		return;
	rc = kvf_opt_steps(o, &steps, &n);
	fz_check("kvf_opt_steps", rc, READ_OK);
	if (rc == KVF_OK && n > 0)
		fz_check("kvf_opt_read", kvf_opt_read(o, 0, n < 64 ? n : 64, p),
			 READ_OK);
	fz_check("kvf_opt_close", kvf_opt_close(o), 0);
}

static void read_all(kvf_store *st)
{
	kvf_store_info info = { .struct_size = sizeof(info) };
	kvf_verify_report rep = { .struct_size = sizeof(rep) };
	kvf_stats stats = { .struct_size = sizeof(stats) };
	uint64_t ids[64], damages = 0;
	size_t n = 0;

	fz_check("kvf_store_info_get", kvf_store_info_get(st, &info), 0);
	fz_check("kvf_stats_get", kvf_stats_get(st, &stats), 0);
	fz_check("kvf_seq_list", kvf_seq_list(st, ids, 64, &n), 0);
	for (size_t i = 0; i < n && i < 64; i++)
		read_seq(st, &info, ids[i]);
	for (uint32_t s = 0; s < info.segs_per_stripe * info.n_stripes; s++) {
		kvf_segment_info si = { .struct_size = sizeof(si) };

		fz_check("kvf_segment_info_get", kvf_segment_info_get(st, s, &si), 0);
	}
	read_optim(st);
	fz_check("kvf_verify", kvf_verify(st, on_damage, &damages, &rep), 0);
}

static void write_some(kvf_store *st)
{
	static unsigned char k[40 * FZ_KVH * FZ_DIM * 2], v[sizeof(k)];
	kvf_status rc = kvf_seq_create(st, 77);

	fz_check("kvf_seq_create", rc, WRITE_OK);
	if (rc == KVF_OK)
		fz_check("kvf_append", kvf_append(st, 77, 0, 40, k, v), WRITE_OK);
	fz_check("kvf_append", kvf_append(st, 1, 1, 40, k, v), WRITE_OK);
	fz_check("kvf_sync", kvf_sync(st), WRITE_OK);
}

void fz_exercise(const char *dir, unsigned what)
{
	kvf_options o;
	kvf_store *st;
	kvf_status rc;

	if (what & FZ_REPAIR) {
		kvf_repair_report r = { .struct_size = sizeof(r) };

		rc = kvf_repair(dir, NULL, 0, &r);
		fz_check("kvf_repair", rc,
			 OPEN_OK | FZ_ST(KVF_ENOTSUP) | FZ_ST(KVF_ENOENT));
	}
	if (what & FZ_RO) {
		kvf_options_init(&o, NULL); /* a zero model: as stored */
		o.read_only = 1;
		o.direct_io = 2;
		o.n_threads = 1;
		rc = kvf_open(dir, &o, &st);
		fz_check("kvf_open (read-only)", rc, OPEN_OK);
		if (rc == KVF_OK) {
			read_all(st);
			fz_check("kvf_close", kvf_close(st), 0);
		}
	}
	if (what & FZ_RW) {
		fz_options(&o);
		rc = kvf_open(dir, &o, &st);
		fz_check("kvf_open", rc, OPEN_OK | FZ_ST(KVF_EMISMATCH));
		if (rc == KVF_OK) {
			read_all(st);
			write_some(st);
			fz_check("kvf_close", kvf_close(st), FZ_ST(KVF_EFATAL));
		}
	}
}
