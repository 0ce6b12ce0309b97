/* bench_common.c - timing, argument parsing and JSON output for kvbench. */
#include "bench/bench_common.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <time.h>

uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
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
