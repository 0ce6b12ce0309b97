/* bench_common.c - timing, option parsing, directories and JSON output
 * for kvbench. */
#include "bench/bench_common.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double bench_cpu_s(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru) != 0)
		return 0;
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

int bench_parse_u64(const char *flag, const char *text, uint64_t *out)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	errno = 0;
	if (text == NULL || *text == '\0' || *text == '-') {
		fprintf(stderr, "kvbench: %s needs a non-negative number\n", flag);
		return -1;
	}
	v = strtoull(text, &end, 10);
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	default: break;
	}
	if (errno != 0 || end == text || *end != '\0' ||
	    (shift && v > (UINT64_MAX >> shift))) {
		fprintf(stderr, "kvbench: %s: '%s' is not a number (digits and an optional K, M or G)\n",
			flag, text);
		return -1;
	}
	*out = (uint64_t)v << shift;
	return 0;
}

int bench_parse_double(const char *flag, const char *text, double *out)
{
	char *end;
	double v;

	errno = 0;
	if (text == NULL || *text == '\0') {
		fprintf(stderr, "kvbench: %s needs a number\n", flag);
		return -1;
	}
	v = strtod(text, &end);
	if (errno != 0 || end == text || *end != '\0' || !isfinite(v)) {
		fprintf(stderr, "kvbench: %s: '%s' is not a number\n", flag,
			text);
		return -1;
	}
	*out = v;
	return 0;
}

static const struct bench_opt *find_opt(const struct bench_opt *opts,
					const char *flag)
{
	for (; opts->name; opts++)
		if (strcmp(opts->name, flag) == 0)
			return opts;
	return NULL;
}

/* set_opt - store text in o's field: 0, -1 out of range, 2 said why */
static int set_opt(const struct bench_opt *o, const char *flag,
		   const char *text)
{
	uint64_t v;

	if (o && o->kind == BENCH_KIND_STR) {
		*o->s = text;
		return 0;
	}
	if (o && o->kind == BENCH_KIND_FUNC)
		return o->parse(flag, text, o->any);
	if (o && o->kind == BENCH_KIND_DOUBLE)
		return bench_parse_double(flag, text, o->d) ? 2 : 0;
	if (bench_parse_u64(flag, text, &v) != 0)
		return 2;
	if (o == NULL || v < o->min || v > o->max)
		return -1;
	if (o->kind == BENCH_KIND_U32)
		*o->u32 = (uint32_t)v;
	else
		*o->u64 = v;
	return 0;
}

int bench_parse_codec(const char *flag, const char *text, void *out)
{
	for (int c = KVF_CODEC_FP8; c <= KVF_CODEC_INT4; c++)
		if (strcmp(text, kvf_codec_name((kvf_codec)c)) == 0) {
			*(kvf_codec *)out = (kvf_codec)c;
			return 0;
		}
	fprintf(stderr, "kvbench: %s %s is not fp8, int8 or int4\n", flag, text);
	return 2;
}

int bench_parse_opts(const char *cmd, void (*usage)(FILE *f),
		     const struct bench_opt *opts, int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *f = argv[i];
		const struct bench_opt *o = find_opt(opts, f);
		int rc;

		if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
			usage(stdout);
			return 1;
		}
		if (o == NULL)
			return bench_usage_error(cmd, "unknown option '%s' (kvbench %s --help)",
						 f, cmd);
		if (o->kind == BENCH_KIND_BOOL) {
			*o->b = 1;
			continue;
		}
		/* a value is never the next option: `--dir --json` once
		 * ran the default run in a directory called --json */
		if (i + 1 >= argc || argv[i + 1][0] == '\0' ||
		    strncmp(argv[i + 1], "--", 2) == 0)
			return bench_usage_error(cmd, "%s needs a value (kvbench %s --help)",
						 f, cmd);
		rc = set_opt(o, f, argv[++i]);
		if (rc == 2)
			return 2;
		if (rc != 0)
			return bench_usage_error(cmd, "%s %s: unknown option or value out of range (kvbench %s --help)",
						 f, argv[i], cmd);
	}
	return 0;
}

int bench_refuse_unused(const char *cmd, int argc, char **argv,
			const char *const *flags, const char *where)
{
	for (int i = 1; i < argc; i++)
		for (const char *const *f = flags; *f; f++)
			if (strcmp(argv[i], *f) == 0)
				return bench_usage_error(cmd, "%s does nothing %s (kvbench %s --help)",
							 *f, where, cmd);
	return 0;
}

double bench_median(double *v, uint32_t n)
{
	for (uint32_t i = 1; i < n; i++)
		for (uint32_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
			double t = v[j];

			v[j] = v[j - 1];
			v[j - 1] = t;
		}
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double bench_mbs(uint64_t bytes, uint64_t ns)
{
	return ns ? (double)bytes / 1e6 / ((double)ns / 1e9) : 0;
}

/* is_store_or_empty - path holds a KVFLASH store header, or nothing */
static int is_store_or_empty(const char *path)
{
	char magic[8], *hdr = malloc(strlen(path) + 16);
	DIR *d;
	struct dirent *e;
	FILE *f;
	int ok = 0;

	if (hdr == NULL)
		return 0;
	snprintf(hdr, strlen(path) + 16, "%s/KVFLASH", path);
	if ((f = fopen(hdr, "rb")) != NULL) {
		ok = fread(magic, 1, 8, f) == 8 && memcmp(magic, "KVFLASH", 8) == 0;
		fclose(f);
	}
	free(hdr);
	if (ok || (d = opendir(path)) == NULL)
		return ok;
	ok = 1;
	while ((e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			ok = 0;
	closedir(d);
	return ok;
}

static int rm_one(const char *path, const struct stat *sb, int flag,
		  struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

int bench_store_check(const char *path)
{
	if (access(path, F_OK) != 0 || is_store_or_empty(path))
		return 0;
	fprintf(stderr, "kvbench: %s exists and is not a kvflash store; not removing it (choose another --dir)\n",
		path);
	return -1;
}

const char *bench_ratio(char *buf, size_t cap, double num, double den,
			int decimals)
{
	double r = den != 0 ? num / den : NAN;

	if (!isfinite(r))
		snprintf(buf, cap, "n/a");
	else
		snprintf(buf, cap, "%.*fx", decimals, r);
	return buf;
}

int bench_remove_store(const char *path)
{
	if (access(path, F_OK) != 0)
		return 0;
	if (bench_store_check(path) != 0)
		return -1;
	if (nftw(path, rm_one, 8, FTW_DEPTH | FTW_PHYS) != 0) {
		fprintf(stderr, "kvbench: removing %s: %s\n", path,
			strerror(errno));
		return -1;
	}
	return 0;
}

int bench_make_dir(const char *cmd, const char *dir, int *made)
{
	int created = mkdir(dir, 0755) == 0;

	if (made)
		*made = created;
	if (!created && errno != EEXIST) {
		fprintf(stderr, "kvbench %s: mkdir %s: %s\n", cmd, dir,
			strerror(errno));
		return -1;
	}
	return 0;
}

int bench_fail(const char *cmd, const char *what, kvf_status rc)
{
	fprintf(stderr, "kvbench %s: %s: %s (%s)\n", cmd, what, kvf_last_error(),
		kvf_strerror(rc));
	return -1;
}

int bench_check_heads(const char *cmd, const kvf_model *m)
{
	if (m->n_q_heads % m->n_kv_heads == 0)
		return 0;
	return bench_usage_error(cmd,
				 "--q-heads %u must be a multiple of --kv-heads %u",
				 m->n_q_heads, m->n_kv_heads);
}

void bench_store_options(kvf_options *o, const kvf_model *m,
			 uint32_t n_stripes, uint64_t segment_bytes,
			 uint64_t capacity_bytes)
{
	kvf_options_init(o, m);
	if (n_stripes)
		o->n_stripes = n_stripes;
	o->segment_size = segment_bytes;
	o->capacity_bytes = capacity_bytes;
}

kvf_status bench_open_direct(const char *dir, kvf_options *o,
			     kvf_store **out, int *direct_io)
{
	kvf_status rc;

	o->direct_io = 1;
	rc = kvf_open(dir, o, out);
	*direct_io = rc == KVF_OK;
	if (rc == KVF_ENOTSUP) { /* no O_DIRECT here: go on without */
		o->direct_io = 0;
		rc = kvf_open(dir, o, out);
	}
	return rc;
}

int bench_plain_create(const char *cmd, const char *path, uint64_t bytes,
		       int *direct)
{
	int fd;

	unlink(path);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0644);
	*direct = fd >= 0;
	if (fd < 0) /* the store falls back the same way */
		fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || fallocate(fd, 0, 0, (off_t)bytes) != 0) {
		fprintf(stderr, "kvbench %s: %s: %s\n", cmd, path,
			strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

#define READ_MAX_THREADS 64u

struct word_part {
	const uint64_t *w; /* words to read */
	size_t n;          /* how many */
	uint64_t sum;      /* their sum */
};

/* sum_words - four independent sums, so the loop runs at load speed */
static void *sum_words(void *arg)
{
	struct word_part *p = arg;
	uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
	size_t i;

	for (i = 0; i + 4 <= p->n; i += 4) {
		s0 += p->w[i];
		s1 += p->w[i + 1];
		s2 += p->w[i + 2];
		s3 += p->w[i + 3];
	}
	for (; i < p->n; i++)
		s0 += p->w[i];
	p->sum = s0 + s1 + s2 + s3;
	return NULL;
}

double bench_read_words(const char *cmd, const uint64_t *buf, uint64_t bytes,
			uint32_t n_threads, volatile uint64_t *sink)
{
	struct word_part part[READ_MAX_THREADS];
	pthread_t tid[READ_MAX_THREADS];
	uint32_t n = n_threads < 1 ? 1 : n_threads > READ_MAX_THREADS ?
		READ_MAX_THREADS : n_threads;
	size_t words = bytes / 8, each = (words + n - 1) / n;
	uint64_t t0 = bench_now_ns(), sum = 0;
	uint32_t started = 1;

	for (uint32_t i = 0; i < n; i++) {
		size_t lo = (size_t)i * each < words ? (size_t)i * each : words;
		size_t hi = lo + each < words ? lo + each : words;

		part[i] = (struct word_part){ .w = buf + lo, .n = hi - lo };
	}
	for (uint32_t i = 1; i < n; i++, started++)
		if (pthread_create(&tid[i], NULL, sum_words, &part[i]) != 0)
			break;
	sum_words(&part[0]);
	for (uint32_t i = 1; i < started; i++)
		pthread_join(tid[i], NULL);
	t0 = bench_now_ns() - t0;
	for (uint32_t i = 0; i < started; i++)
		sum += part[i].sum;
	*sink += sum;
	if (started < n) {
		fprintf(stderr, "kvbench %s: pthread_create failed\n", cmd);
		return 0;
	}
	return (double)t0;
}

double bench_read_file(const char *cmd, const char *path, unsigned char *chunk,
		       uint32_t chunk_bytes, uint64_t bytes, int direct,
		       volatile uint64_t *sink)
{
	uint64_t t0, done = 0;
	int fd;

	errno = 0; /* a short read sets none */
	if ((fd = open(path, O_RDONLY | (direct ? O_DIRECT : 0))) < 0)
		goto err;
	t0 = bench_now_ns();
	while (done < bytes) {
		if (pread(fd, chunk, chunk_bytes, (off_t)done) != (ssize_t)chunk_bytes)
			goto err;
		done += chunk_bytes;
	}
	t0 = bench_now_ns() - t0;
	*sink += chunk[chunk_bytes - 1];
	close(fd);
	return (double)t0;
err:
	fprintf(stderr, "kvbench %s: reading %s: %s\n", cmd, path,
		errno ? strerror(errno) : "short read");
	if (fd >= 0)
		close(fd);
	return 0;
}

int bench_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "kvbench %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 2;
}

static void json_key(struct bench_json *j, const char *key)
{
	if (j->need_comma)
		fputc(',', j->f);
	fputc('\n', j->f);
	for (int i = 0; i < j->depth; i++)
		fputs("  ", j->f);
	if (key)
		fprintf(j->f, "\"%s\": ", key);
	j->need_comma = 1;
}

void bench_json_begin(struct bench_json *j, const char *key)
{
	if (j->depth > 0)
		json_key(j, key);
	fputc('{', j->f);
	j->depth++;
	j->need_comma = 0;
}

void bench_json_end(struct bench_json *j)
{
	j->depth--;
	fputc('\n', j->f);
	for (int i = 0; i < j->depth; i++)
		fputs("  ", j->f);
	fputc('}', j->f);
	j->need_comma = 1;
	if (j->depth == 0)
		fputc('\n', j->f);
}

void bench_json_u64(struct bench_json *j, const char *key, uint64_t v)
{
	json_key(j, key);
	fprintf(j->f, "%llu", (unsigned long long)v);
}

void bench_json_double(struct bench_json *j, const char *key, double v)
{
	json_key(j, key);
	if (isfinite(v))
		fprintf(j->f, "%.6g", v);
	else
		fputs("null", j->f);
}

void bench_json_str(struct bench_json *j, const char *key, const char *v)
{
	json_key(j, key);
	fputc('"', j->f);
	for (; *v; v++) {
		if (*v == '"' || *v == '\\')
			fputc('\\', j->f);
		if ((unsigned char)*v < 0x20)
			fprintf(j->f, "\\u%04x", *v);
		else
			fputc(*v, j->f);
	}
	fputc('"', j->f);
}

void bench_json_model(struct bench_json *j, const kvf_model *m)
{
	bench_json_begin(j, "model");
	bench_json_u64(j, "n_layers", m->n_layers);
	bench_json_u64(j, "n_q_heads", m->n_q_heads);
	bench_json_u64(j, "n_kv_heads", m->n_kv_heads);
	bench_json_u64(j, "head_dim", m->head_dim);
	bench_json_str(j, "dtype", "f16");
	bench_json_end(j);
}
