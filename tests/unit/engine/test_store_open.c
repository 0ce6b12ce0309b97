/*
 * test_store_open.c - kvf_open and kvf_close at their edges (issue 12):
 * a creation killed part way, options out of range, damaged or missing
 * store headers, closing a handle that went fatal, and reopening right
 * after the owner was killed.
 *
 * Creation is atomic: kvf_open writes DIR/CREATING first and DIR/KVFLASH
 * last, then removes the marker; a directory holding the marker and no
 * header is the leftover of a creation that did not finish, which the
 * next open clears before it creates afresh.  create_killed forks a child
 * that creates a store and SIGKILLs it after a seeded delay within the
 * measured creation time; a checker child must then open the same way and
 * find an empty store it can append to, sync and reopen.
 *
 * Options are checked before anything is made: each bad one is refused at
 * a missing path (still missing afterwards), under a regular file (where
 * a mkdir would fail first) and on an existing store (left as it was).
 * A damaged header is KVF_ECORRUPT naming the file; a directory holding
 * no store is KVF_ENOENT (read-only) or KVF_EINVAL; a store that lost its
 * header is KVF_ECORRUPT and nothing of it is removed.  A fatal handle's
 * kvf_close says KVF_EFATAL and still releases everything.
 *
 * The stripe files' lock lives on a descriptor of its own, not the one
 * io_uring uses (the kernel may keep that one's open file description a
 * moment after its process died): reopen_after_kill kills a busy owner
 * at random moments and reopens at once; io_descriptor_outlives_owner
 * makes that moment last, with a grandchild holding the I/O descriptor.
 *
 * Every refusal asserts the status, a message substring and that nothing
 * changed: the directory tree (names, kinds, and for files size, mtime and
 * bytes) is the same before and after, and a store's data reads back.
 *
 * Processes: a test that forks opens no store itself before its last
 * fork, so no RocksDB or writer thread exists in a process that forks
 * (but the owner forking its keeper, which only closes and pauses).
 * Children report to the parent through a pipe, one line per event ("E
 * message" on failure), and leave with _exit.  Random tests print their
 * seed (KVF_SEED=S repeats the choices; the kill timing also depends on
 * the machine).
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "api/status.h"
#include "engine/catalog.h"
#include "engine/segfmt.h"
#include "engine/store.h"
#include "kvflash.h"
#include "testutil.h"

#define LAYERS 2
#define QH 4
#define KVH 2
#define DIM 64 /* f16: 128 bytes a token of a head, G = 32 */
#define ROW (DIM * 2)
#define G 32

/* the creation marker's name is part of the on-disk format: spelled out
 * here, so that renaming it in the engine shows up as a failing test */
#define MARKER "CREATING"

/* the kill loops; each prints its seed */
#define CREATE_TRIALS 50  /* kills during a creation */
#define CREATE_MIN_MID 5  /* of those, at least this many mid-creation */
#define REOPEN_TRIALS 100 /* kills of a busy owner, ... */
#define REOPEN_BUDGET_NS (15ull * 1000000000ull) /* ... or this long */
#define REOPEN_MIN_TRIALS 10                     /* fewer: it stalled */
#define BUSY_MAX_NS (300ull * 1000000ull)        /* "at once" for KVF_EBUSY */

TestSuite(store_open, .timeout = 90);

#define OK(call) cr_assert(eq(int, (call), KVF_OK), "%s", kvf_last_error())

/* ---- options, values ----------------------------------------------------- */

/* small_opts - a file store of 8 MiB in 64 KiB segments, one stripe */
static kvf_options small_opts(void)
{
	kvf_model m = { LAYERS, QH, KVH, DIM, KVF_DTYPE_F16 };
	kvf_options o;

	kvf_options_init(&o, &m);
	o.segment_size = 64 * 1024;
	o.capacity_bytes = 8ull << 20;
	o.n_threads = 1;
	return o;
}

static unsigned char byte_of(uint64_t seq, uint32_t layer, int kind, uint64_t t,
			     uint32_t h, uint32_t i)
{
	uint64_t x = seq * 0x9e3779b97f4a7c15ull ^
		     (layer * 7919u + (uint32_t)kind * 104729u) ^
		     (t * 131u + h * 31u + i);

	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ull;
	return (unsigned char)(x ^ (x >> 32));
}

/* append_n - n tokens of seq's values to one layer, from token t0 */
static kvf_status append_n(kvf_store *s, uint64_t seq, uint32_t layer,
			   uint64_t t0, uint32_t n)
{
	size_t bytes = (size_t)n * KVH * ROW;
	unsigned char *k = malloc(bytes + 1), *v = malloc(bytes + 1);
	kvf_status rc = KVF_ENOMEM;

	if (k && v) {
		for (size_t o = 0; o < bytes; o++) {
			uint64_t t = t0 + o / (KVH * ROW);
			uint32_t h = (uint32_t)(o / ROW % KVH);

			k[o] = byte_of(seq, layer, 0, t, h,
				       (uint32_t)(o % ROW));
			v[o] = byte_of(seq, layer, 1, t, h,
				       (uint32_t)(o % ROW));
		}
		rc = kvf_append(s, seq, layer, n, k, v);
	}
	free(k);
	free(v);
	return rc;
}

/* data_ok - seq's layer holds exactly n tokens, each with its values */
static int data_ok(kvf_store *s, uint64_t seq, uint32_t layer, uint64_t n)
{
	unsigned char *k = malloc(n * ROW + 1), *v = malloc(n * ROW + 1);
	uint64_t len = 0;
	int ok = k && v && kvf_seq_len(s, seq, layer, &len) == KVF_OK &&
		 len == n;

	for (uint32_t h = 0; ok && h < KVH; h++) {
		ok = kvf_read(s, seq, layer, h, 0, n, k, v) == KVF_OK;
		for (uint64_t i = 0; ok && i < n * ROW; i++)
			ok = k[i] == byte_of(seq, layer, 0, i / ROW, h,
					     (uint32_t)(i % ROW)) &&
			     v[i] == byte_of(seq, layer, 1, i / ROW, h,
					     (uint32_t)(i % ROW));
	}
	free(k);
	free(v);
	return ok;
}

/* the data make_store leaves: sequence 1, layer 0 and layer 1 */
#define LEN0 (2 * G + 3)
#define LEN1 G

/* make_store - a closed store at path holding LEN0 and LEN1 tokens */
static void make_store(const char *path)
{
	kvf_options o = small_opts();
	kvf_store *st = NULL;

	OK(kvf_open(path, &o, &st));
	OK(kvf_seq_create(st, 1));
	OK(append_n(st, 1, 0, 0, LEN0));
	OK(append_n(st, 1, 1, 0, LEN1));
	OK(kvf_close(st));
}

/* store_intact - path opens (options NULL) and holds make_store's data */
static void store_intact(const char *path, const char *what)
{
	kvf_store *st = NULL;

	cr_assert(eq(int, kvf_open(path, NULL, &st), KVF_OK), "%s: %s", what,
		  kvf_last_error());
	cr_assert(data_ok(st, 1, 0, LEN0) && data_ok(st, 1, 1, LEN1),
		  "%s: the store's data changed", what);
	OK(kvf_close(st));
}

/* ---- files --------------------------------------------------------------- */

static int path_exists(const char *p)
{
	struct stat sb;

	return lstat(p, &sb) == 0;
}

static int path_gone(const char *p)
{
	return !path_exists(p);
}

/* put_file - write len bytes of c to path (len 0: an empty file) */
static void put_file(const char *path, int c, size_t len)
{
	unsigned char *b = malloc(len + 1);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	cr_assert(b && fd >= 0, "%s: %s", path, strerror(errno));
	memset(b, c, len);
	cr_assert(eq(int, (int)write(fd, b, len), (int)len));
	close(fd);
	free(b);
}

/* put_marker - the creation marker kvf_open writes (CREATING_TEXT) */
static void put_marker(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	cr_assert(fd >= 0, "%s: %s", path, strerror(errno));
	cr_assert(eq(int, (int)write(fd, CREATING_TEXT, strlen(CREATING_TEXT)),
		     (int)strlen(CREATING_TEXT)));
	close(fd);
}

static int rm_one(const char *p, const struct stat *sb, int flag,
		  struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static void rm_tree(const char *p)
{
	nftw(p, rm_one, 16, FTW_DEPTH | FTW_PHYS);
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

/* the walk of tree_of: nftw passes no argument */
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
 * tree_of - everything under root, one sorted line per entry: its path,
 * kind, and for a file its size, mtime and a hash of its bytes; "" when
 * root is missing.  A directory's own times are left out: an open that
 * makes and removes its LOCK changes them and nothing else.  Malloc'd.
 */
static char *tree_of(const char *root)
{
	size_t len = 1;
	char *out;

	walk_n = 0;
	walk_root_len = strlen(root);
	if (path_exists(root))
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

/* same_tree - root is still as `before` (tree_of) */
static void same_tree(const char *root, const char *before, const char *what)
{
	char *now = tree_of(root);

	cr_assert(eq(str, now, (char *)before), "%s changed %s", what, root);
	free(now);
}

/*
 * refused - kvf_open(p, o, &h) must fail with status `code`, a message
 * holding both substrings, *out cleared, and p's tree unchanged.
 */
static void refused(const char *p, const kvf_options *o, kvf_status code,
		    const char *sub1, const char *sub2, const char *what)
{
	char *before = tree_of(p);
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
	same_tree(p, before, what);
	free(before);
}

/* ---- children ------------------------------------------------------------ */

static int report_fd = -1; /* in a child: the pipe to the parent */

static void child_say(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

/* child_say - in a child: one line to the parent */
static void child_say(const char *fmt, ...)
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

/* CHILD_MUST - in a child: a call that must give KVF_OK, else report
 * "E ..." and leave with status 3 */
#define CHILD_MUST(call)                                          \
	do {                                                      \
		kvf_status rc_ = (call);                          \
		if (rc_ != KVF_OK) {                              \
			child_say("E %s gave %d: %s", #call, rc_, \
				  kvf_last_error());              \
			_exit(3);                                 \
		}                                                 \
	} while (0)

/* spawn - fork; the child gets 0 and reports on report_fd, the parent
 * gets the pid and reads the reports from *fd */
static pid_t spawn(int *fd)
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

/* read_line - the child's next line into buf (without the newline);
 * 0 at end of file */
static int read_line(int fd, char *buf, size_t cap)
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

/* collect - the rest of the child's reports, until it is gone */
static char *collect(int fd)
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

/* has_error - a child's reports hold an "E message" line */
static int has_error(const char *text)
{
	return strncmp(text, "E ", 2) == 0 || strstr(text, "\nE ") != NULL;
}

/* run_child - fork fn(path), wait for it; it must exit 0 with no "E " */
static void run_child(void (*fn)(const char *), const char *path,
		      const char *what)
{
	int fd, status, ok;
	pid_t pid = spawn(&fd);
	char *text;

	if (pid == 0) {
		fn(path);
		_exit(0);
	}
	text = collect(fd);
	cr_assert(eq(int, waitpid(pid, &status, 0), pid));
	ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && !has_error(text);
	cr_assert(ok, "%s: child status %d: %s", what, status, text);
	free(text);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_us(uint64_t us)
{
	struct timespec ts = { (time_t)(us / 1000000),
			       (long)(us % 1000000) * 1000 };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* ---- 1. creation is atomic ----------------------------------------------- */

/* creator - child: create the store and say how that went */
static void creator(const char *path)
{
	kvf_options o = small_opts();
	kvf_store *st = NULL;
	kvf_status rc = kvf_open(path, &o, &st);

	child_say("O %d %s", rc, rc == KVF_OK ? "" : kvf_last_error());
	_exit(0);
}

/*
 * fresh_checker - child: the same kvf_open as the creator's must succeed
 * and give an empty store that takes an append, a sync and a reopen, with
 * no marker left
 */
static void fresh_checker(const char *path)
{
	kvf_options o = small_opts();
	kvf_store *st = NULL;
	size_t n = 1;

	CHILD_MUST(kvf_open(path, &o, &st));
	CHILD_MUST(kvf_seq_list(st, NULL, 0, &n));
	if (n != 0) {
		child_say("E the store holds %zu sequences, not none", n);
		_exit(3);
	}
	CHILD_MUST(kvf_seq_create(st, 1));
	CHILD_MUST(append_n(st, 1, 0, 0, G + 5));
	CHILD_MUST(kvf_sync(st));
	CHILD_MUST(kvf_close(st));
	CHILD_MUST(kvf_open(path, &o, &st));
	if (!data_ok(st, 1, 0, G + 5) || !data_ok(st, 1, 1, 0)) {
		child_say("E the reopened store lost what was synced");
		_exit(3);
	}
	CHILD_MUST(kvf_close(st));
	if (path_exists(tmp_path(path, MARKER))) {
		child_say("E %s is still there after the open", MARKER);
		_exit(3);
	}
	_exit(0);
}

/* create_time_ns - how long a creating kvf_open takes, seen from the
 * fork that starts it (the middle one of three) */
static uint64_t create_time_ns(const char *dir)
{
	uint64_t t[3], lo, hi;

	for (int i = 0; i < 3; i++) {
		char p[4096], line[1200];
		int fd, status, rc = -1;
		uint64_t t0 = now_ns();
		pid_t pid;

		snprintf(p, sizeof(p), "%s/measure%d", dir, i);
		pid = spawn(&fd);
		if (pid == 0)
			creator(p);
		cr_assert(read_line(fd, line, sizeof(line)));
		t[i] = now_ns() - t0;
		close(fd);
		cr_assert(eq(int, waitpid(pid, &status, 0), pid));
		cr_assert(sscanf(line, "O %d", &rc) == 1 && rc == KVF_OK, "%s",
			  line);
		rm_tree(p);
	}
	lo = t[0] < t[1] ? t[0] : t[1];
	hi = t[0] < t[1] ? t[1] : t[0];
	return t[2] < lo ? lo : t[2] > hi ? hi : t[2];
}

enum kill_point {
	KILL_NO_DIR,    /* before the directory was made */
	KILL_NO_MARKER, /* directory, no marker, no header */
	KILL_MID,       /* the marker is there: mid-creation */
	KILL_DONE,      /* header and no marker: the store was whole */
	N_KILL_POINTS
};

static const char *const kill_point_names[N_KILL_POINTS] = {
	"before the directory", "before the marker", "mid-creation",
	"after the creation"
};

static enum kill_point kill_point_of(const char *path)
{
	if (!path_exists(path))
		return KILL_NO_DIR;
	if (path_exists(tmp_path(path, MARKER)))
		return KILL_MID;
	if (path_exists(tmp_path(path, STORE_HEADER_FILE)))
		return KILL_DONE;
	return KILL_NO_MARKER;
}

Test(store_open, create_killed)
{
	uint64_t seed = rng_seed("store_open/create_killed"), rng = seed;
	char *dir = tmpdir_make("open-kill");
	unsigned counts[N_KILL_POINTS] = { 0 };
	uint64_t span_us;

	cr_assert_not_null(dir);
	span_us = create_time_ns(dir) / 1000 + 1;
	fprintf(stderr,
		"store_open/create_killed: a creation takes %" PRIu64 " us\n",
		span_us);
	for (unsigned i = 0; i < CREATE_TRIALS; i++) {
		uint64_t delay_us = rng_below(&rng, span_us);
		enum kill_point at;
		char p[4096], what[200], *text;
		int fd, status;
		pid_t pid;

		snprintf(p, sizeof(p), "%s/s%u", dir, i);
		pid = spawn(&fd);
		if (pid == 0)
			creator(p);
		sleep_us(delay_us);
		kill(pid, SIGKILL);
		text = collect(fd);
		cr_assert(eq(int, waitpid(pid, &status, 0), pid));
		cr_assert(text[0] == '\0' || strncmp(text, "O 0 ", 4) == 0,
			  "seed %" PRIu64 " trial %u: the creation failed: %s",
			  seed, i, text);
		free(text);
		at = kill_point_of(p);
		counts[at]++;
		snprintf(what, sizeof(what),
			 "seed %" PRIu64 " trial %u: killed after %" PRIu64
			 " us, %s",
			 seed, i, delay_us, kill_point_names[at]);
		run_child(fresh_checker, p, what);
		rm_tree(p);
	}
	fprintf(stderr,
		"store_open/create_killed: seed %" PRIu64
		": %u kills %s, %u %s, %u %s, %u %s\n",
		seed, counts[KILL_NO_DIR], kill_point_names[KILL_NO_DIR],
		counts[KILL_NO_MARKER], kill_point_names[KILL_NO_MARKER],
		counts[KILL_MID], kill_point_names[KILL_MID], counts[KILL_DONE],
		kill_point_names[KILL_DONE]);
	cr_assert(counts[KILL_MID] >= CREATE_MIN_MID,
		  "seed %" PRIu64 ": only %u of %u kills landed mid-creation",
		  seed, counts[KILL_MID], CREATE_TRIALS);
	tmpdir_remove(dir);
}

/* make_leftovers - what a creation killed part way leaves: the marker,
 * a catalog directory with junk, a stripe file, a header being written */
static void make_leftovers(const char *path)
{
	char meta[4096];

	cr_assert(eq(int, mkdir(path, 0755), 0));
	put_marker(tmp_path(path, MARKER));
	snprintf(meta, sizeof(meta), "%s/meta", path);
	cr_assert(eq(int, mkdir(meta, 0755), 0));
	put_file(tmp_path(meta, "000003.log"), 0x33, 1000);
	put_file(tmp_path(path, "stripe-000.kvf"), 0x5a, 3 * 4096);
	put_file(tmp_path(path, STORE_HEADER_FILE ".tmp"), 0x4b, 40);
}

Test(store_open, create_clears_leftovers)
{
	char *dir = tmpdir_make("open-left");
	char *path = strdup(tmp_path(dir, "s"));
	kvf_options o = small_opts();
	kvf_store *st = NULL;
	size_t n = 1;

	make_leftovers(path);
	/* read-only makes nothing: refused, and the leftovers stay */
	o.read_only = 1;
	refused(path, &o, KVF_ENOENT, "holds no store", "did not finish",
		"read-only open of an unfinished creation");
	o.read_only = 0;

	/* a writer clears them and creates afresh */
	OK(kvf_open(path, &o, &st));
	cr_assert(path_gone(tmp_path(path, MARKER)), "the marker stayed");
	cr_assert(path_gone(tmp_path(path, STORE_HEADER_FILE ".tmp")));
	cr_assert(path_gone(tmp_path(path, "meta/000003.log")),
		  "the old catalog's file stayed");
	cr_assert(path_exists(tmp_path(path, STORE_HEADER_FILE)));
	OK(kvf_seq_list(st, NULL, 0, &n));
	cr_assert(eq(sz, n, 0), "the new store is not empty");
	OK(kvf_seq_create(st, 1));
	OK(append_n(st, 1, 0, 0, LEN0));
	OK(append_n(st, 1, 1, 0, LEN1));
	OK(kvf_close(st));
	store_intact(path, "the store made over the leftovers");
	free(path);
	tmpdir_remove(dir);
}

Test(store_open, stale_marker_on_whole_store)
{
	char *dir = tmpdir_make("open-stale");
	char *path = strdup(tmp_path(dir, "s"));
	kvf_options o = small_opts();
	kvf_store *st = NULL;

	/* killed between writing the header and removing the marker */
	make_store(path);
	put_marker(tmp_path(path, MARKER));

	/* a reader takes the store as it is and changes nothing */
	memset(&o.model, 0, sizeof(o.model));
	o.read_only = 1;
	OK(kvf_open(path, &o, &st));
	cr_assert(data_ok(st, 1, 0, LEN0) && data_ok(st, 1, 1, LEN1));
	OK(kvf_close(st));
	cr_assert(path_exists(tmp_path(path, MARKER)),
		  "a read-only open removed the marker");

	/* a writer keeps the data and removes the marker */
	o = small_opts();
	OK(kvf_open(path, &o, &st));
	cr_assert(data_ok(st, 1, 0, LEN0) && data_ok(st, 1, 1, LEN1),
		  "the store lost its data");
	cr_assert(path_gone(tmp_path(path, MARKER)),
		  "the stale marker was not removed");
	OK(kvf_close(st));
	store_intact(path, "after the stale marker");
	free(path);
	tmpdir_remove(dir);
}

/* ---- 2. options are validated before anything is made -------------------- */

struct bad_option {
	const char *what; /* for messages */
	void (*set)(kvf_options *o);
	const char *field; /* the message names it ... */
	const char *why;   /* ... and says this */
};

static const char *dev_paths_null[2]; /* set per test: { dir/dev0, NULL } */
static const char *dev_paths_one[1];  /* { dir/dev0 } */

static void direct_io_7(kvf_options *o)
{
	o->direct_io = 7;
}

static void read_only_5(kvf_options *o)
{
	o->read_only = 5;
}

static void media_9(kvf_options *o)
{
	o->media = (kvf_media_kind)9;
}

static void threads_huge(kvf_options *o)
{
	o->n_threads = 1u << 30;
}

static void page_5000(kvf_options *o)
{
	o->page_size = 5000;
}

static void page_2048(kvf_options *o)
{
	o->page_size = 2048;
}

static void page_131072(kvf_options *o)
{
	o->page_size = 131072;
}

static void seg_unaligned(kvf_options *o)
{
	o->segment_size = 64 * 1024 + 512;
}

static void seg_3_pages(kvf_options *o)
{
	o->segment_size = 3 * 4096;
}

static void capacity_1_seg(kvf_options *o)
{
	o->capacity_bytes = 64 * 1024 + 4096;
}

static void stripes_65(kvf_options *o)
{
	o->n_stripes = 65;
}

static void qd_5000(kvf_options *o)
{
	o->queue_depth = 5000;
}

static void cell_9(kvf_options *o)
{
	o->flash_cell = 9;
}

static void spare_095(kvf_options *o)
{
	o->flash_spare = 0.95f;
}

static void spare_nan(kvf_options *o)
{
	o->flash_spare = NAN;
}

static void channels_1000(kvf_options *o)
{
	o->flash_channels = 1000;
}

static void trim_3(kvf_options *o)
{
	o->trim = 3;
}

static void verify_2(kvf_options *o)
{
	o->verify_reads = 2;
}

static void kt_2(kvf_options *o)
{
	o->kt_pages = 2;
}

static void layers_0(kvf_options *o)
{
	o->model.n_layers = 0;
}

static void head_dim_48(kvf_options *o)
{
	o->model.head_dim = 48;
}

static void q_heads_5(kvf_options *o)
{
	o->model.n_q_heads = 5;
}

/* capacity for 2 stripes that holds 3 segments: 1 on one of them */
static void capacity_2_stripes(kvf_options *o)
{
	o->n_stripes = 2;
	o->capacity_bytes = 3 * 64 * 1024;
}

static void paths_null_entry(kvf_options *o)
{
	o->n_stripes = 2;
	o->n_device_paths = 2;
	o->device_paths = dev_paths_null;
}

static void paths_on_memory(kvf_options *o)
{
	o->media = KVF_MEDIA_MEMORY;
	o->n_device_paths = 1;
	o->device_paths = dev_paths_one;
}

/* the first rows are options the code before issue 12 never checked, so
 * it fails there at once (not at n_threads, which it would try to start) */
static const struct bad_option bad_options[] = {
	{ "direct_io 7", direct_io_7, "kvf_open: direct_io 7", "must be 0" },
	{ "read_only 5", read_only_5, "kvf_open: read_only 5",
	  "must be 0 or 1" },
	{ "media 9", media_9, "kvf_open: media 9", "is not a kvf_media_kind" },
	{ "page_size 5000", page_5000, "kvf_open: page_size 5000",
	  "must be a power of two in 4096..65536" },
	{ "page_size 2048", page_2048, "page_size 2048", "must be a power" },
	{ "page_size 131072", page_131072, "page_size 131072",
	  "must be a power" },
	{ "segment_size unaligned", seg_unaligned, "segment_size 66048",
	  "must be 4 to 65536 pages of 4096 bytes" },
	{ "segment_size 3 pages", seg_3_pages, "segment_size 12288",
	  "must be 4 to 65536 pages" },
	{ "capacity of 1 segment", capacity_1_seg, "capacity_bytes 69632",
	  "holds fewer than 2 segments of 65536 bytes per stripe" },
	{ "capacity of 1 segment a stripe", capacity_2_stripes,
	  "capacity_bytes 196608", "fewer than 2 segments" },
	{ "n_stripes 65", stripes_65, "n_stripes 65", "out of range (0..64)" },
	{ "queue_depth 5000", qd_5000, "queue_depth 5000", "out of range" },
	{ "flash_cell 9", cell_9, "flash_cell 9", "out of range (0..4)" },
	{ "flash_spare 0.95", spare_095, "flash_spare 0.95",
	  "out of range [0, 0.9)" },
	{ "flash_spare NaN", spare_nan, "flash_spare ",
	  "nan out of range [0, 0.9)" },
	{ "flash_channels 1000", channels_1000, "flash_channels 1000",
	  "out of range" },
	{ "trim 3", trim_3, "kvf_open: trim 3", "must be 0, 1 or 2" },
	{ "verify_reads 2", verify_2, "verify_reads 2", "must be 0 or 1" },
	{ "kt_pages 2", kt_2, "kt_pages 2", "must be 0 or 1" },
	{ "device_paths with a NULL", paths_null_entry, "device_paths[1]",
	  "is NULL" },
	{ "device_paths on memory media", paths_on_memory, "device_paths",
	  "are for media KVF_MEDIA_FILE" },
	{ "model.n_layers 0", layers_0, "model.n_layers 0",
	  "out of range (1..65535)" },
	{ "model.head_dim 48", head_dim_48, "model.head_dim 48",
	  "must divide the page size 4096" },
	{ "model.n_q_heads 5", q_heads_5, "model.n_q_heads 5",
	  "must be a multiple of n_kv_heads 2" },
	{ "n_threads 2^30", threads_huge, "n_threads 1073741824",
	  "out of range" },
};

/*
 * Each bad option is refused three ways, with KVF_EINVAL and a message
 * naming the field: (1) a path that does not exist, which must still not
 * exist afterwards; (2) a path under a regular file, where making anything
 * would fail first (with KVF_EIO) had the check come later; (3) a closed
 * store, whose files stay as they were and whose data still reads back.
 */
Test(store_open, bad_options_make_nothing)
{
	char *dir = tmpdir_make("open-opts");
	char *path = strdup(tmp_path(dir, "s"));
	char *missing = strdup(tmp_path(dir, "missing"));
	char *plain = strdup(tmp_path(dir, "plain"));
	char *under = strdup(tmp_path(plain, "s"));
	char *dev0 = strdup(tmp_path(dir, "dev0"));
	char *before;

	dev_paths_null[0] = dev0;
	dev_paths_null[1] = NULL;
	dev_paths_one[0] = dev0;
	put_file(plain, 0x70, 10);
	make_store(path);
	before = tree_of(dir);
	for (size_t i = 0; i < sizeof(bad_options) / sizeof(bad_options[0]);
	     i++) {
		const struct bad_option *b = &bad_options[i];
		kvf_options o = small_opts();
		char what[160];

		b->set(&o);
		snprintf(what, sizeof(what), "%s, at a path that is not there",
			 b->what);
		refused(missing, &o, KVF_EINVAL, b->field, b->why, what);
		cr_assert(path_gone(missing), "%s: made it", what);
		snprintf(what, sizeof(what), "%s, under a regular file",
			 b->what);
		refused(under, &o, KVF_EINVAL, b->field, b->why, what);
		snprintf(what, sizeof(what), "%s, on a store", b->what);
		refused(path, &o, KVF_EINVAL, b->field, b->why, what);
		same_tree(dir, before, b->what);
		cr_assert(path_gone(dev0), "%s: made a device path", b->what);
	}
	free(before);
	store_intact(path, "after the refused options");
	free(dev0);
	free(under);
	free(plain);
	free(missing);
	free(path);
	tmpdir_remove(dir);
}

/* ---- 3. damaged headers, and directories that hold no store -------------- */

/* header_refused - every way of opening path fails with KVF_ECORRUPT,
 * names the header file and changes nothing */
static void header_refused(const char *path, const char *what)
{
	kvf_options o = small_opts();
	char hpath[4096];

	snprintf(hpath, sizeof(hpath), "%s/%s", path, STORE_HEADER_FILE);
	refused(path, &o, KVF_ECORRUPT, hpath, "damaged", what);
	refused(path, NULL, KVF_ECORRUPT, hpath, "damaged", what);
	memset(&o.model, 0, sizeof(o.model));
	o.read_only = 1;
	refused(path, &o, KVF_ECORRUPT, hpath, "damaged", what);
}

Test(store_open, damaged_header)
{
	uint64_t seed = rng_seed("store_open/damaged_header"), rng = seed;
	char *dir = tmpdir_make("open-hdr");
	char *path = strdup(tmp_path(dir, "s"));
	char *hpath = strdup(tmp_path(path, STORE_HEADER_FILE));
	unsigned char good[4096], bad[4096];
	ssize_t len;
	int fd;

	make_store(path);
	fd = open(hpath, O_RDONLY);
	cr_assert(fd >= 0);
	len = read(fd, good, sizeof(good));
	close(fd);
	cr_assert(eq(i64, (int64_t)len, (int64_t)sizeof(struct store_header)));

#define PUT_HEADER(buf, n)                                                 \
	do {                                                               \
		int fd_ = open(hpath, O_WRONLY | O_TRUNC);                 \
		cr_assert(fd_ >= 0);                                       \
		cr_assert(eq(i64, (int64_t)write(fd_, (buf), (size_t)(n)), \
			     (int64_t)(n)));                               \
		close(fd_);                                                \
	} while (0)

	memcpy(bad, good, (size_t)len);
	bad[0] ^= 0x20;
	PUT_HEADER(bad, len);
	header_refused(path, "a flipped magic byte");

	PUT_HEADER(good, len / 2);
	header_refused(path, "a truncated header");

	PUT_HEADER(good, 0);
	header_refused(path, "an empty header file");

	for (int i = 0; i < 4; i++) {
		size_t n = 1 + rng_below(&rng, 2 * (uint64_t)len);
		char what[96];

		rng_fill(&rng, bad, n);
		if (n >= 8 && memcmp(bad, good, 8) == 0)
			bad[0] ^= 1; /* random, not the magic */
		PUT_HEADER(bad, n);
		snprintf(what, sizeof(what),
			 "seed %" PRIu64 ": %zu random bytes", seed, n);
		header_refused(path, what);
	}
#undef PUT_HEADER
	fd = open(hpath, O_WRONLY | O_TRUNC);
	cr_assert(fd >= 0);
	cr_assert(eq(i64, (int64_t)write(fd, good, (size_t)len), (int64_t)len));
	close(fd);
	store_intact(path, "the header put back");
	free(hpath);
	free(path);
	tmpdir_remove(dir);
}

Test(store_open, not_a_store)
{
	char *dir = tmpdir_make("open-none");
	char *empty = strdup(tmp_path(dir, "empty"));
	char *foreign = strdup(tmp_path(dir, "foreign"));
	kvf_options o = small_opts(), ro = small_opts();

	memset(&ro.model, 0, sizeof(ro.model));
	ro.read_only = 1;
	cr_assert(eq(int, mkdir(empty, 0755), 0));
	cr_assert(eq(int, mkdir(foreign, 0755), 0));
	put_file(tmp_path(foreign, "notes.txt"), 'n', 100);

	refused(empty, &ro, KVF_ENOENT, empty, "holds no store",
		"read-only open of an empty directory");
	refused(foreign, &ro, KVF_ENOENT, foreign, "holds no store",
		"read-only open of a foreign directory");
	refused(foreign, &o, KVF_EINVAL, foreign,
		"is not a kvflash store (no KVFLASH header) and is not empty",
		"create in a foreign directory");
	refused(foreign, NULL, KVF_EINVAL, foreign, "is not a kvflash store",
		"open of a foreign directory");
	free(foreign);
	free(empty);
	tmpdir_remove(dir);
}

Test(store_open, header_deleted)
{
	char *dir = tmpdir_make("open-nohdr");
	char *path = strdup(tmp_path(dir, "s"));
	char *hpath = strdup(tmp_path(path, STORE_HEADER_FILE));
	kvf_options o = small_opts();
	unsigned char good[4096];
	char *before;
	kvf_store *h = NULL;
	kvf_status rc;
	ssize_t len;
	int fd;

	make_store(path);
	fd = open(hpath, O_RDONLY);
	cr_assert(fd >= 0);
	len = read(fd, good, sizeof(good));
	close(fd);
	cr_assert(eq(int, unlink(hpath), 0));

	refused(path, &o, KVF_ECORRUPT, hpath, "header", "create over meta/");
	refused(path, NULL, KVF_ECORRUPT, hpath, "header",
		"reopen without a header");
	cr_assert(path_exists(tmp_path(path, "meta")) &&
			  path_exists(tmp_path(path, "stripe-000.kvf")),
		  "the damaged store's files were removed");

	/* read-only: refused too (the code says no store is there, as for
	 * any directory without a header), and nothing changes */
	memset(&o.model, 0, sizeof(o.model));
	o.read_only = 1;
	before = tree_of(path);
	rc = kvf_open(path, &o, &h);
	cr_assert(rc == KVF_ECORRUPT || rc == KVF_ENOENT, "read-only: %d %s",
		  rc, kvf_last_error());
	cr_assert_null(h);
	same_tree(path, before, "read-only open without a header");
	free(before);

	/* the header back: every byte of the store is still there */
	fd = open(hpath, O_WRONLY | O_CREAT, 0644);
	cr_assert(fd >= 0);
	cr_assert(eq(i64, (int64_t)write(fd, good, (size_t)len), (int64_t)len));
	close(fd);
	store_intact(path, "the header put back");
	free(hpath);
	free(path);
	tmpdir_remove(dir);
}

/* ---- 4. closing a handle that went fatal --------------------------------- */

/* open_fds - descriptors this process has open */
static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	cr_assert_not_null(d);
	while ((e = readdir(d)) != NULL)
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1; /* the one opendir holds */
}

Test(store_open, close_fatal)
{
	char *dir = tmpdir_make("open-fatal");
	char *path = strdup(tmp_path(dir, "s"));
	kvf_options o = small_opts();
	kvf_store *st = NULL;
	int fds;

	make_store(path);
	fds = open_fds();
	OK(kvf_open(path, &o, &st));
	/* unsynced: a full group and a partial one beyond the last sync */
	OK(append_n(st, 1, 0, LEN0, G + 7));
	OK(append_n(st, 1, 1, LEN1, 5));
	catalog_fail_commits(st->cat, 1);
	cr_assert(eq(int, kvf_sync(st), KVF_EFATAL), "%s", kvf_last_error());

	kvf_clear_error();
	cr_assert(eq(int, kvf_close(st), KVF_EFATAL),
		  "kvf_close of a fatal handle: %s", kvf_last_error());
	cr_assert(strstr(kvf_last_error(), "kvf_close: ") != NULL &&
			  strstr(kvf_last_error(), path) != NULL &&
			  strstr(kvf_last_error(), "close and reopen it"),
		  "%s", kvf_last_error());
	st = NULL;
	/* released: its descriptors (and locks) are gone; LSan would report
	 * any memory it kept */
	cr_assert(eq(int, open_fds(), fds), "kvf_close left descriptors open");

	/* the last sync's state, and a store that works again */
	store_intact(path, "reopened after the fatal close");
	OK(kvf_open(path, &o, &st));
	OK(append_n(st, 1, 0, LEN0, 3));
	OK(kvf_close(st));
	OK(kvf_open(path, &o, &st));
	cr_assert(data_ok(st, 1, 0, LEN0 + 3) && data_ok(st, 1, 1, LEN1));
	OK(kvf_close(st));
	free(path);
	tmpdir_remove(dir);
}

/* ---- 5. reopening right after the owner was killed ----------------------- */

/* store_maker - child: make_store's store, in a child (the parent forks) */
static void store_maker(const char *path)
{
	kvf_options o = small_opts();
	kvf_store *st = NULL;

	CHILD_MUST(kvf_open(path, &o, &st));
	CHILD_MUST(kvf_seq_create(st, 1));
	CHILD_MUST(append_n(st, 1, 0, 0, LEN0));
	CHILD_MUST(append_n(st, 1, 1, 0, LEN1));
	CHILD_MUST(kvf_close(st));
}

/* busy_seed - the seed busy_writer uses (set before the fork) */
static uint64_t busy_seed;

/* a busy writer appends up to BUSY_BATCH tokens at a time, and starts a
 * new sequence at BUSY_LEN: the store stays well inside its 8 MiB */
#define BUSY_BATCH (4 * G)
#define BUSY_LEN (48 * G)

/*
 * busy_writer - child: open the store and say how that went ("O rc
 * message"); then append, sync and read back wide ranges in a loop until
 * killed, so that io_uring requests (segment writes, page reads) are in
 * flight most of the time; say "R" once they are.  The values are not
 * checked: the process is here to be killed.
 */
static void busy_writer(const char *path)
{
	static unsigned char kv[BUSY_BATCH * KVH * ROW];
	static unsigned char k_out[BUSY_LEN * ROW], v_out[BUSY_LEN * ROW];
	kvf_options o = small_opts();
	kvf_store *st = NULL;
	kvf_status rc = kvf_open(path, &o, &st);
	uint64_t rng = busy_seed, seq, len = 0, ids[8];
	size_t n = 0;

	child_say("O %d %s", rc, rc == KVF_OK ? "" : kvf_last_error());
	if (rc != KVF_OK)
		_exit(0);
	rng_fill(&rng, kv, sizeof(kv));
	CHILD_MUST(kvf_seq_list(st, ids, 8, &n));
	for (size_t i = 0; i < n && i < 8; i++)
		CHILD_MUST(kvf_seq_free(st, ids[i]));
	seq = 100 + rng_below(&rng, 1000);
	CHILD_MUST(kvf_seq_create(st, seq));
	for (unsigned round = 0;; round++) {
		uint32_t k = 1 + (uint32_t)rng_below(&rng, BUSY_BATCH);
		uint64_t t0, t1;

		if (len + k > BUSY_LEN) {
			CHILD_MUST(kvf_seq_free(st, seq));
			CHILD_MUST(kvf_seq_create(st, ++seq));
			len = 0;
		}
		for (uint32_t l = 0; l < LAYERS; l++)
			CHILD_MUST(kvf_append(st, seq, l, k, kv, kv));
		len += k;
		if (round % 8 == 7)
			CHILD_MUST(kvf_sync(st));
		t0 = rng_below(&rng, len);
		t1 = t0 + 1 + rng_below(&rng, len - t0);
		CHILD_MUST(kvf_read(st, seq, round % LAYERS,
				    (uint32_t)rng_below(&rng, KVH), t0, t1,
				    k_out, v_out));
		if (round == 8)
			child_say("R");
	}
}

Test(store_open, reopen_after_kill)
{
	uint64_t seed = rng_seed("store_open/reopen_after_kill"), rng = seed;
	char *dir = tmpdir_make("open-reopen");
	char *path = strdup(tmp_path(dir, "s"));
	char first_busy[1200] = "", line[1200];
	unsigned trials = 0, busy = 0;
	uint64_t t_start;
	int fd, status, rc;
	pid_t pid;

	run_child(store_maker, path, "making the store");
	t_start = now_ns();
	for (;;) {
		/* the open of trial i is the check of kill i - 1 */
		int last = trials == REOPEN_TRIALS ||
			   now_ns() - t_start > REOPEN_BUDGET_NS;
		char *text;

		busy_seed = rng_next(&rng);
		pid = spawn(&fd);
		if (pid == 0)
			busy_writer(path);
		rc = -1;
		if (!read_line(fd, line, sizeof(line)) ||
		    sscanf(line, "O %d", &rc) != 1 ||
		    (rc != KVF_OK && rc != KVF_EBUSY)) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			cr_fatal("seed %" PRIu64
				 " trial %u: the open after the kill: %s",
				 seed, trials, line);
		}
		if (rc == KVF_EBUSY && busy++ == 0)
			snprintf(first_busy, sizeof(first_busy), "%s", line);
		if (rc == KVF_OK && !last) {
			/* kill it at a random moment of its I/O */
			if (read_line(fd, line, sizeof(line)) &&
			    strcmp(line, "R") == 0)
				sleep_us(rng_below(&rng, 10000));
		}
		kill(pid, SIGKILL);
		text = collect(fd);
		cr_assert(eq(int, waitpid(pid, &status, 0), pid));
		cr_assert(has_error(line) + has_error(text) == 0,
			  "seed %" PRIu64 " trial %u: the writer failed: %s%s",
			  seed, trials, line, text);
		free(text);
		if (last)
			break;
		trials++;
	}
	fprintf(stderr,
		"store_open/reopen_after_kill: seed %" PRIu64
		": %u kills in %.1f s, %u reopens found the store busy%s%s\n",
		seed, trials, (double)(now_ns() - t_start) / 1e9, busy,
		busy ? ", the first: " : "", first_busy);
	cr_assert(eq(u32, busy, 0),
		  "seed %" PRIu64
		  ": %u of %u opens right after a kill gave KVF_EBUSY (first: %s)",
		  seed, busy, trials, first_busy);
	cr_assert(trials >= REOPEN_MIN_TRIALS, "only %u trials ran", trials);
	free(path);
	tmpdir_remove(dir);
}

/*
 * The race above, made certain: what the kernel does to a killed owner's
 * io_uring requests (they keep the open file description of the stripe's
 * I/O descriptor a moment after the process is gone) is done here by a
 * grandchild that keeps only that descriptor, inherited at fork, while
 * its parent, the owner, is killed.  A lock held through that description
 * would outlive the owner; a lock held apart does not.  The I/O
 * descriptor is the stripe file's writable one: the lock needs no write
 * access (if the engine ever opens its lock descriptor writable, pick
 * the I/O one by O_DIRECT instead).
 */

/* stripe_io_fds - mark in keep[] this process's writable descriptors of
 * the stripe file; how many */
static int stripe_io_fds(const char *stripe, char *keep, int max_fd)
{
	char want[4096], link[32], target[4096], info[64], buf[512];
	int n = 0;

	if (realpath(stripe, want) == NULL)
		return -1;
	for (int fd = 0; fd < max_fd; fd++) {
		ssize_t len;
		unsigned flags = 0;
		char *f;
		FILE *fi;

		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		len = readlink(link, target, sizeof(target) - 1);
		if (len < 0)
			continue;
		target[len] = '\0';
		if (strcmp(target, want) != 0)
			continue;
		snprintf(info, sizeof(info), "/proc/self/fdinfo/%d", fd);
		if ((fi = fopen(info, "r")) == NULL)
			continue;
		len = (ssize_t)fread(buf, 1, sizeof(buf) - 1, fi);
		fclose(fi);
		buf[len > 0 ? len : 0] = '\0';
		f = strstr(buf, "flags:");
		if (f && sscanf(f, "flags: %o", &flags) == 1 &&
		    (flags & O_ACCMODE) == O_RDWR) {
			keep[fd] = 1;
			n++;
		}
	}
	return n;
}

#define MAX_FD 1024

/* io_keeper_owner - child: open the store, fork a grandchild that keeps
 * only the stripe's I/O descriptors, say "K pid n", then wait to die */
static void io_keeper_owner(const char *path)
{
	static char keep[MAX_FD];
	kvf_options o = small_opts();
	kvf_store *st = NULL;
	pid_t keeper;
	int n;

	CHILD_MUST(kvf_open(path, &o, &st));
	n = stripe_io_fds(tmp_path(path, "stripe-000.kvf"), keep, MAX_FD);
	keeper = fork();
	if (keeper == 0) {
		for (int fd = 0; fd < MAX_FD; fd++)
			if (!keep[fd])
				close(fd);
		for (;;)
			pause();
	}
	child_say("K %d %d", (int)keeper, n);
	for (;;)
		pause();
}

/* opener - child: open the store (options NULL) and say the status */
static void opener(const char *path)
{
	kvf_store *st = NULL;
	kvf_status rc = kvf_open(path, NULL, &st);

	child_say("O %d %s", rc, rc == KVF_OK ? "" : kvf_last_error());
	if (rc == KVF_OK)
		CHILD_MUST(kvf_close(st));
	_exit(0);
}

Test(store_open, io_descriptor_outlives_owner)
{
	char *dir = tmpdir_make("open-keep");
	char *path = strdup(tmp_path(dir, "s"));
	char line[1200], *text;
	int fd, ofd, status, keeper = -1, n = -1, rc = -1;
	pid_t owner, op;

	/* the keeper is reparented to this process when its parent dies */
	cr_assert(eq(int, prctl(PR_SET_CHILD_SUBREAPER, 1), 0));
	run_child(store_maker, path, "making the store");
	owner = spawn(&fd);
	if (owner == 0)
		io_keeper_owner(path);
	cr_assert(read_line(fd, line, sizeof(line)), "the owner said nothing");
	kill(owner, SIGKILL);
	text = collect(fd);
	cr_assert(eq(int, waitpid(owner, &status, 0), owner));
	cr_assert(sscanf(line, "K %d %d", &keeper, &n) == 2 && keeper > 0,
		  "the owner: %s%s", line, text);
	free(text);
	if (n < 1) {
		kill(keeper, SIGKILL);
		waitpid(keeper, &status, 0);
		cr_fatal("no writable descriptor of the stripe file found (%d)",
			 n);
	}

	/* the owner is gone, its I/O descriptor lives on in the keeper */
	op = spawn(&ofd);
	if (op == 0)
		opener(path);
	text = collect(ofd);
	cr_assert(eq(int, waitpid(op, &status, 0), op));
	kill(keeper, SIGKILL);
	cr_assert(eq(int, waitpid(keeper, &status, 0), keeper));
	cr_assert(sscanf(text, "O %d", &rc) == 1, "%s", text);
	cr_assert(eq(int, rc, KVF_OK),
		  "open while the dead owner's I/O descriptor (%d of them) is still open: %s",
		  n, text);
	free(text);
	store_intact(path, "after the keeper");
	free(path);
	tmpdir_remove(dir);
}

/* holder - child: open the store, say so, keep it open until the pipe
 * from the parent closes, then close it */
static int holder_in = -1;

static void holder(const char *path)
{
	kvf_options o = small_opts();
	kvf_store *st = NULL;
	char c;

	CHILD_MUST(kvf_open(path, &o, &st));
	child_say("R");
	while (read(holder_in, &c, 1) > 0)
		;
	CHILD_MUST(kvf_close(st));
	_exit(0);
}

/* contender - child: open the held store, writable then read-only; say
 * the status, the time it took and the message */
static void contender(const char *path)
{
	kvf_options o = small_opts();

	for (int ro = 0; ro < 2; ro++) {
		kvf_store *st = NULL;
		uint64_t t0 = now_ns();
		kvf_status rc;

		o.read_only = (uint32_t)ro;
		rc = kvf_open(path, &o, &st);
		child_say("O %d %" PRIu64 " %s", rc, now_ns() - t0,
			  kvf_last_error());
	}
	_exit(0);
}

Test(store_open, busy_at_once)
{
	char *dir = tmpdir_make("open-busy");
	char *path = strdup(tmp_path(dir, "s"));
	char line[1200], *text;
	int hold[2], fd, cfd, status, ok;
	pid_t pid, cpid;

	run_child(store_maker, path, "making the store");
	cr_assert(eq(int, pipe(hold), 0));
	pid = spawn(&fd);
	if (pid == 0) {
		close(hold[1]);
		holder_in = hold[0];
		holder(path);
	}
	close(hold[0]);
	cr_assert(read_line(fd, line, sizeof(line)) && !strcmp(line, "R"),
		  "the holder: %s", line);

	cpid = spawn(&cfd);
	if (cpid == 0) {
		close(hold[1]);
		contender(path);
	}
	text = collect(cfd);
	cr_assert(eq(int, waitpid(cpid, &status, 0), cpid));
	for (char *l = text; *l; l = strchr(l, '\n') + 1) {
		int rc = -1;
		unsigned long long ns = 0;

		cr_assert(sscanf(l, "O %d %llu", &rc, &ns) == 2, "%s", text);
		cr_assert(eq(int, rc, KVF_EBUSY), "%s", l);
		cr_assert(strstr(l, "is open by another handle") != NULL, "%s",
			  l);
		cr_assert(ns < BUSY_MAX_NS, "KVF_EBUSY after %llu ms: %s",
			  ns / 1000000, l);
	}
	free(text);

	/* the holder lets go; the store is free and whole */
	close(hold[1]);
	text = collect(fd);
	cr_assert(eq(int, waitpid(pid, &status, 0), pid));
	ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
	cr_assert(ok, "the holder: %s", text);
	free(text);
	store_intact(path, "after the holder closed");
	free(path);
	tmpdir_remove(dir);
}

/* A file called CREATING that kvf_open did not write is not its marker:
 * nothing beside it is removed on its word. */
Test(store_open, foreign_marker_removes_nothing)
{
	char *dir = tmpdir_make("open-foreign");
	char *path = strdup(tmp_path(dir, "s"));
	kvf_options o = small_opts();

	cr_assert(eq(int, mkdir(path, 0755), 0));
	put_file(tmp_path(path, MARKER), 'x', 10);
	put_file(tmp_path(path, "precious.txt"), 'p', 100);
	refused(path, &o, KVF_EINVAL, "not a kvflash store", "not empty",
		"create beside a foreign CREATING");
	cr_assert(path_exists(tmp_path(path, "precious.txt")),
		  "a foreign file was removed");
	cr_assert(path_exists(tmp_path(path, MARKER)));
	free(path);
	tmpdir_remove(dir);
}

/* Leftovers of a creation stay when the open that finds them cannot
 * create: no options, or bad ones. */
Test(store_open, leftovers_stay_on_a_refused_create)
{
	char *dir = tmpdir_make("open-leftbad");
	char *path = strdup(tmp_path(dir, "s"));
	kvf_options o = small_opts();
	kvf_store *st = NULL;

	make_leftovers(path);
	cr_assert(eq(int, kvf_open(path, NULL, &st), KVF_EINVAL));
	cr_assert(path_exists(tmp_path(path, "stripe-000.kvf")),
		  "an open without options removed the leftovers");
	o.model.head_dim = 3;
	cr_assert(eq(int, kvf_open(path, &o, &st), KVF_EINVAL));
	cr_assert(path_exists(tmp_path(path, "stripe-000.kvf")),
		  "an open with a bad model removed the leftovers");
	free(path);
	tmpdir_remove(dir);
}
