/*
 * powercut.c - simulated power cuts of a file store (see powercut.h).
 *
 * The journal is a sequence of records, each appended with one write():
 *   head: magic, kind, off, len, name_len, body_len; then name, then body.
 *   'W'  name = file, [off, off + len) is about to be written or punched
 *        through a descriptor opened with O_DIRECT (whole pages); body =
 *        the bytes it held before (its pre-image)
 *   'w'  the same through a buffered descriptor (any bytes: the flash
 *        emulator's image)
 *   'S'  name = file, an fdatasync of it returned 0
 *   'L'  name = the catalog's directory, body = entries {name_len, size,
 *        name} of its *.log files at a durable commit
 * A record cut short by the kill is the last one and is ignored: the
 * transfer it announced had not started.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "powercut.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/catalog.h"
#include "ftl/sysio.h"
#include "testutil.h"

#define PC_MAGIC 0x314a4350u /* "PCJ1" */
#define PC_PAGE 4096u        /* unit of a cut: the store's page */
#define PC_SECTOR 512u       /* unit of a torn page */

struct rec_head {
	uint32_t magic;
	uint32_t kind;
	uint64_t off;
	uint64_t len;
	uint32_t name_len;
	uint32_t body_len;
};

/* ---- the writer's side ---------------------------------------------------- */

static int journal_fd = -1;
static char armed_dir[4096];
static struct kvf_sysio table;

static void put_record(uint32_t kind, uint64_t off, uint64_t len,
		       const char *name, const void *body, uint32_t body_len)
{
	struct rec_head h = { PC_MAGIC, kind, off, len, (uint32_t)strlen(name),
			      body_len };
	size_t total = sizeof(h) + h.name_len + body_len;
	unsigned char *rec = malloc(total);

	if (rec == NULL)
		abort();
	memcpy(rec, &h, sizeof(h));
	memcpy(rec + sizeof(h), name, h.name_len);
	if (body_len)
		memcpy(rec + sizeof(h) + h.name_len, body, body_len);
	if (write(journal_fd, rec, total) != (ssize_t)total)
		abort(); /* a journal that lies would make every check moot */
	free(rec);
}

/* fd_path - the file behind fd if it is inside the armed store, else 0 */
static int fd_path(int fd, char *out, size_t cap)
{
	char link[64];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, out, cap - 1);
	if (n <= 0)
		return 0;
	out[n] = '\0';
	return strncmp(out, armed_dir, strlen(armed_dir)) == 0;
}

/* note_preimage - journal the bytes [off, off + len) of fd hold now */
static void note_preimage(int fd, uint64_t off, uint64_t len)
{
	char path[4096];
	void *buf;
	ssize_t got;
	int direct;

	if (len == 0 || !fd_path(fd, path, sizeof(path)))
		return;
	direct = (fcntl(fd, F_GETFL) & O_DIRECT) != 0;
	if (len > UINT32_MAX || posix_memalign(&buf, PC_PAGE, len) != 0)
		abort();
	/* the fd may be O_DIRECT: off and len are whole pages */
	got = kvf_sysio_real.pread(fd, buf, len, (off_t)off);
	if (got < 0)
		got = 0;
	memset((char *)buf + got, 0, len - (size_t)got);
	put_record(direct ? 'W' : 'w', off, len, path, buf, (uint32_t)len);
	free(buf);
}

static ssize_t pc_fault(enum kvf_sysio_op op, int fd, size_t len, off_t off)
{
	if (op == KVF_SYSIO_WRITE)
		note_preimage(fd, (uint64_t)off, len);
	return (ssize_t)len;
}

static int pc_fallocate(int fd, int mode, off_t off, off_t len)
{
	if (mode & FALLOC_FL_PUNCH_HOLE)
		note_preimage(fd, (uint64_t)off, (uint64_t)len);
	return kvf_sysio_real.fallocate(fd, mode, off, len);
}

static int pc_fdatasync(int fd)
{
	char path[4096];
	int rc = kvf_sysio_real.fdatasync(fd);

	if (rc == 0 && fd_path(fd, path, sizeof(path)))
		put_record('S', 0, 0, path, NULL, 0);
	return rc;
}

/* note_logs - journal the sizes of dir's write-ahead logs */
static void note_logs(const char *dir)
{
	DIR *d = opendir(dir);
	unsigned char *body = NULL;
	size_t len = 0;
	struct dirent *e;

	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		size_t nl = strlen(e->d_name);
		char path[4096];
		struct stat sb;
		uint32_t n32 = (uint32_t)nl;
		uint64_t size;

		if (nl < 5 || strcmp(e->d_name + nl - 4, ".log") != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (stat(path, &sb) != 0)
			continue;
		size = (uint64_t)sb.st_size;
		body = realloc(body, len + 4 + 8 + nl);
		if (body == NULL)
			abort();
		memcpy(body + len, &n32, 4);
		memcpy(body + len + 4, &size, 8);
		memcpy(body + len + 12, e->d_name, nl);
		len += 12 + nl;
	}
	closedir(d);
	put_record('L', 0, 0, dir, body, (uint32_t)len);
	free(body);
}

int powercut_arm(const char *journal, const char *store_dir)
{
	char meta[4096 + 8];

	if (realpath(store_dir, armed_dir) == NULL)
		return -1;
	journal_fd = open(journal, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND,
			  0644);
	if (journal_fd < 0)
		return -1;
	table = kvf_sysio_real;
	table.fault = pc_fault;
	table.fallocate = pc_fallocate;
	table.fdatasync = pc_fdatasync;
	kvf_sysio_set(&table);
	snprintf(meta, sizeof(meta), "%s/meta", armed_dir);
	note_logs(meta); /* the store was closed cleanly before */
	catalog_durable_hook = note_logs;
	return 0;
}

/* ---- the cut ---------------------------------------------------------------- */

static int lose_data_keep_logs; /* powercut_lose_data_keep_logs */

void powercut_lose_data_keep_logs(int on)
{
	lose_data_keep_logs = on;
}

/* One page of one write since its file's last sync. */
struct pending {
	uint32_t file;  /* index into files */
	uint64_t page;  /* byte offset of the page */
	uint64_t order; /* journal position: older first */
	const unsigned char *before; /* the page's bytes before that write */
};

/* One buffered write since its file's last sync. */
struct pending_bytes {
	uint32_t file;
	uint64_t off, len;
	const unsigned char *before;
};

struct cut {
	char **files;
	uint32_t n_files;
	struct pending *pend;
	size_t n_pend, cap_pend;
	struct pending_bytes *bytes; /* in journal order */
	size_t n_bytes, cap_bytes;
	const unsigned char *logs; /* body of the last 'L' */
	uint32_t logs_len;
	char logs_dir[4096];
};

static int failf(char *why, size_t cap, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int failf(char *why, size_t cap, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, cap, fmt, ap);
	va_end(ap);
	return -1;
}

static uint32_t file_index(struct cut *c, const char *name, uint32_t len)
{
	for (uint32_t i = 0; i < c->n_files; i++)
		if (strlen(c->files[i]) == len &&
		    memcmp(c->files[i], name, len) == 0)
			return i;
	c->files = realloc(c->files, (c->n_files + 1) * sizeof(*c->files));
	c->files[c->n_files] = strndup(name, len);
	return c->n_files++;
}

/* drop_file - the file was synced: its pending pages are durable */
static void drop_file(struct cut *c, uint32_t f)
{
	size_t k = 0;

	for (size_t i = 0; i < c->n_pend; i++)
		if (c->pend[i].file != f)
			c->pend[k++] = c->pend[i];
	c->n_pend = k;
	k = 0;
	for (size_t i = 0; i < c->n_bytes; i++)
		if (c->bytes[i].file != f)
			c->bytes[k++] = c->bytes[i];
	c->n_bytes = k;
}

/*
 * cut_bytes - buffered writes, newest first: each keeps its bytes, or
 * loses them all, or loses a sector-aligned part of them (torn), by
 * putting back what it overwrote.  Every byte ends up holding one of the
 * versions written to it.
 */
static int cut_bytes(struct cut *c, uint64_t *rng, struct powercut_stats *st,
		     char *why, size_t cap)
{
	for (size_t i = c->n_bytes; i-- > 0;) {
		const struct pending_bytes *b = &c->bytes[i];
		uint64_t r = lose_data_keep_logs ? 50 /* lost whole */
						  : rng_below(rng, 100);
		uint64_t from = 0, to = b->len;
		int fd;

		st->pages++;
		if (r < 40) {
			st->kept++;
			continue;
		}
		if (r >= 80 && b->len > PC_SECTOR) {
			/* torn: a run of whole sectors of the file lost */
			uint64_t s0 = b->off / PC_SECTOR;
			uint64_t s1 = (b->off + b->len - 1) / PC_SECTOR;
			uint64_t a = s0 + rng_below(rng, s1 - s0 + 1);
			uint64_t z = a + rng_below(rng, s1 - a + 1);

			from = a * PC_SECTOR > b->off ? a * PC_SECTOR - b->off : 0;
			to = (z + 1) * PC_SECTOR - b->off < b->len ?
				     (z + 1) * PC_SECTOR - b->off : b->len;
			st->torn++;
		} else {
			st->reverted++;
		}
		fd = open(c->files[b->file], O_WRONLY);
		if (fd < 0 || pwrite(fd, b->before + from, to - from,
				     (off_t)(b->off + from)) != (ssize_t)(to - from)) {
			if (fd >= 0)
				close(fd);
			return failf(why, cap, "powercut: put back %s at %llu: %s",
				     c->files[b->file],
				     (unsigned long long)b->off, strerror(errno));
		}
		close(fd);
	}
	return 0;
}

static int cmp_pending(const void *a, const void *b)
{
	const struct pending *x = a, *y = b;

	if (x->file != y->file)
		return x->file < y->file ? -1 : 1;
	if (x->page != y->page)
		return x->page < y->page ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

/* cut_page - choose what the page at pend[0..n) holds after the cut */
static int cut_page(int fd, const struct pending *p, size_t n, uint64_t *rng,
		    struct powercut_stats *st, char *why, size_t cap)
{
	/* versions: the bytes before each write (the first is the durable
	 * one), then the newest */
	const unsigned char *v[64];
	static _Alignas(PC_PAGE) unsigned char now[PC_PAGE], out[PC_PAGE];
	size_t nv = 0, pick;
	uint64_t r = lose_data_keep_logs ? 0 : rng_below(rng, 100);

	if (pread(fd, now, PC_PAGE, (off_t)p->page) != PC_PAGE)
		return failf(why, cap, "powercut: pread at %llu: %s",
			     (unsigned long long)p->page, strerror(errno));
	for (size_t i = 0; i < n && nv < 63; i++)
		v[nv++] = p[i].before;
	v[nv++] = now;
	st->pages++;
	if (r < 35) {
		pick = 0;
	} else if (r < 65) {
		pick = nv - 1;
	} else if (r < 80) {
		pick = (size_t)rng_below(rng, nv);
	} else {
		/* torn: each sector from one of two versions */
		size_t a = (size_t)rng_below(rng, nv), b = nv - 1;

		if (a == b)
			a = 0;
		for (uint32_t s = 0; s < PC_PAGE; s += PC_SECTOR)
			memcpy(out + s, (rng_below(rng, 2) ? v[a] : v[b]) + s,
			       PC_SECTOR);
		st->torn++;
		goto write;
	}
	memcpy(out, v[pick], PC_PAGE);
	if (pick == nv - 1) {
		st->kept++;
		return 0;
	}
	st->reverted++;
write:
	if (memcmp(out, now, PC_PAGE) != 0 &&
	    pwrite(fd, out, PC_PAGE, (off_t)p->page) != PC_PAGE)
		return failf(why, cap, "powercut: pwrite at %llu: %s",
			     (unsigned long long)p->page, strerror(errno));
	return 0;
}

static int cut_pages(struct cut *c, uint64_t *rng, struct powercut_stats *st,
		     char *why, size_t cap)
{
	int fd = -1, rc = 0;
	uint32_t open_file = UINT32_MAX;

	if (c->n_pend > 1)
		qsort(c->pend, c->n_pend, sizeof(*c->pend), cmp_pending);
	for (size_t i = 0; i < c->n_pend && rc == 0;) {
		size_t j = i;

		while (j < c->n_pend && c->pend[j].file == c->pend[i].file &&
		       c->pend[j].page == c->pend[i].page)
			j++;
		if (c->pend[i].file != open_file) {
			if (fd >= 0)
				close(fd);
			open_file = c->pend[i].file;
			/* O_DIRECT like the store: buffered writes beside
			 * its direct I/O would leave stale cached pages, which
			 * the kernel reports to the next fdatasync as EIO */
			fd = open(c->files[open_file], O_RDWR | O_DIRECT);
			if (fd < 0)
				return failf(why, cap, "powercut: open %s: %s",
					     c->files[open_file],
					     strerror(errno));
		}
		rc = cut_page(fd, &c->pend[i], j - i, rng, st, why, cap);
		i = j;
	}
	if (fd >= 0)
		close(fd);
	return rc;
}

/* durable_size - the log's length at the last durable commit (0: none) */
static uint64_t durable_size(const struct cut *c, const char *name)
{
	for (uint32_t at = 0; at + 12 <= c->logs_len;) {
		uint32_t nl;
		uint64_t size;

		memcpy(&nl, c->logs + at, 4);
		memcpy(&size, c->logs + at + 4, 8);
		if (strlen(name) == nl && memcmp(c->logs + at + 12, name, nl) == 0)
			return size;
		at += 12 + nl;
	}
	return 0;
}

static int cut_logs(struct cut *c, uint64_t *rng, struct powercut_stats *st,
		    char *why, size_t cap)
{
	DIR *d;
	struct dirent *e;
	int rc = 0;

	if (c->logs_dir[0] == '\0' || (d = opendir(c->logs_dir)) == NULL)
		return 0;
	while (rc == 0 && (e = readdir(d)) != NULL) {
		size_t nl = strlen(e->d_name);
		char path[8192];
		struct stat sb;
		uint64_t keep, size;

		if (nl < 5 || strcmp(e->d_name + nl - 4, ".log") != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", c->logs_dir, e->d_name);
		if (stat(path, &sb) != 0)
			continue;
		size = (uint64_t)sb.st_size;
		keep = durable_size(c, e->d_name);
		if (size <= keep)
			continue;
		keep += rng_below(rng, size - keep + 1);
		if (keep == size)
			continue;
		if (truncate(path, (off_t)keep) != 0) {
			rc = failf(why, cap, "powercut: truncate %s: %s", path,
				   strerror(errno));
			break;
		}
		st->logs_cut++;
		st->log_bytes += size - keep;
		if (rng_below(rng, 4) == 0) {
			/* the block after the cut held something else */
			unsigned char junk[512];
			size_t n = (size_t)(1 + rng_below(rng, sizeof(junk)));
			int fd = open(path, O_WRONLY | O_APPEND);

			rng_fill(rng, junk, n);
			if (rng_below(rng, 2))
				memset(junk, 0, n);
			if (fd < 0 || write(fd, junk, n) != (ssize_t)n)
				rc = failf(why, cap, "powercut: garbage %s: %s",
					   path, strerror(errno));
			if (fd >= 0)
				close(fd);
		}
	}
	closedir(d);
	return rc;
}

int powercut_apply(const char *journal, uint64_t seed,
		   struct powercut_stats *out, char *why, size_t why_cap)
{
	struct cut c = { 0 };
	struct powercut_stats st = { 0 };
	unsigned char *j = NULL;
	size_t len = 0, at = 0;
	uint64_t order = 0, rng = seed;
	struct stat sb;
	int fd = open(journal, O_RDONLY), rc;

	if (fd < 0 && errno == ENOENT) {
		if (out)
			*out = st; /* the writer died before it armed */
		return 0;
	}
	if (fd < 0 || fstat(fd, &sb) != 0) {
		if (fd >= 0)
			close(fd);
		return failf(why, why_cap, "powercut: %s: %s", journal,
			     strerror(errno));
	}
	len = (size_t)sb.st_size;
	j = malloc(len + 1);
	if (j == NULL || (len && read(fd, j, len) != (ssize_t)len)) {
		close(fd);
		free(j);
		return failf(why, why_cap, "powercut: read %s", journal);
	}
	close(fd);
	while (at + sizeof(struct rec_head) <= len) {
		struct rec_head h;
		const char *name;
		const unsigned char *body;

		memcpy(&h, j + at, sizeof(h));
		if (h.magic != PC_MAGIC) {
			free(j);
			return failf(why, why_cap,
				     "powercut: %s: bad record at %zu", journal,
				     at);
		}
		if (at + sizeof(h) + h.name_len + h.body_len > len)
			break; /* cut short by the kill */
		name = (const char *)j + at + sizeof(h);
		body = j + at + sizeof(h) + h.name_len;
		at += sizeof(h) + h.name_len + h.body_len;
		if (h.kind == 'W') {
			uint32_t f = file_index(&c, name, h.name_len);

			for (uint64_t o = 0; o + PC_PAGE <= h.len; o += PC_PAGE) {
				if (c.n_pend == c.cap_pend) {
					c.cap_pend = c.cap_pend ? 2 * c.cap_pend : 256;
					c.pend = realloc(c.pend, c.cap_pend *
								 sizeof(*c.pend));
				}
				c.pend[c.n_pend++] = (struct pending){
					f, h.off + o, order++, body + o
				};
			}
		} else if (h.kind == 'w') {
			if (c.n_bytes == c.cap_bytes) {
				c.cap_bytes = c.cap_bytes ? 2 * c.cap_bytes : 256;
				c.bytes = realloc(c.bytes, c.cap_bytes *
								   sizeof(*c.bytes));
			}
			c.bytes[c.n_bytes++] = (struct pending_bytes){
				file_index(&c, name, h.name_len), h.off, h.len,
				body
			};
		} else if (h.kind == 'S') {
			drop_file(&c, file_index(&c, name, h.name_len));
		} else if (h.kind == 'L') {
			snprintf(c.logs_dir, sizeof(c.logs_dir), "%.*s",
				 (int)h.name_len, name);
			c.logs = body;
			c.logs_len = h.body_len;
		}
	}
	rc = cut_pages(&c, &rng, &st, why, why_cap);
	if (rc == 0)
		rc = cut_bytes(&c, &rng, &st, why, why_cap);
	if (rc == 0 && !lose_data_keep_logs)
		rc = cut_logs(&c, &rng, &st, why, why_cap);
	for (uint32_t i = 0; i < c.n_files; i++)
		free(c.files[i]);
	free(c.files);
	free(c.pend);
	free(c.bytes);
	free(j);
	if (out)
		*out = st;
	return rc;
}
