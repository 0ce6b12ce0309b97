/*
 * kvtool_verify.c - `kvtool verify [--json] DIR`: read every page of a
 * store and check it (kvf_verify), printing each damaged page or summary
 * as it is found, then the totals.
 *
 * Exit status: 0 the store is clean; 1 damage was found (the list is on
 * stdout, a one-line count on stderr) or the check could not run.  With
 * --json stdout is one JSON object in every case, its "damage" array
 * streamed as kvf_verify reports.  The store is opened read-only and never
 * changed.
 */
#include <string.h>

#include "kvtool.h"

/* State of one run, for the damage callback. */
struct verify_out {
	int json;             /* print JSON */
	size_t n;             /* damages printed */
	kvf_store_info si;    /* for offsets and token ranges */
};

static void json_damage(const struct verify_out *o, const kvf_verify_damage *d)
{
	uint64_t t0 = d->group * o->si.group_tokens;

	printf("%s{\"segid\": ", o->n ? ", " : "");
	if (d->segid == KVF_SEGMENT_NONE) {
		fputs("null, \"page\": null, \"stripe\": null, \"seg_in_stripe\": null, \"byte_offset\": null",
		      stdout);
	} else {
		printf("%u, \"page\": ", d->segid);
		if (d->page == KVF_PAGE_SUMMARY)
			fputs("\"summary\"", stdout);
		else
			printf("%u", d->page);
		printf(", \"stripe\": %u, \"seg_in_stripe\": %llu, \"byte_offset\": ",
		       d->stripe, (unsigned long long)d->seg_in_stripe);
		if (d->page == KVF_PAGE_SUMMARY)
			fputs("null", stdout);
		else
			printf("%llu", (unsigned long long)(d->seg_in_stripe * o->si.segment_size +
							    (uint64_t)d->page * o->si.page_size));
	}
	if (d->seq == KVF_SEQ_NONE) {
		fputs(", \"seq\": null", stdout);
	} else {
		printf(", \"seq\": %llu, \"layer\": %u, \"kind\": \"%s\", \"head\": %u, \"group\": %llu",
		       (unsigned long long)d->seq, d->layer, kvf_kind_name(d->kind),
		       d->head, (unsigned long long)d->group);
		if (d->kind == KVF_KIND_KT) /* an entry of the K^T stream */
			fputs(", \"tokens\": null", stdout);
		else
			printf(", \"tokens\": [%llu, %llu]", (unsigned long long)t0,
			       (unsigned long long)(t0 + o->si.group_tokens));
	}
	printf(", \"status\": %d, \"status_text\": ", (int)d->status);
	json_string(stdout, kvf_strerror(d->status));
	fputs(", \"message\": ", stdout);
	json_string(stdout, d->message);
	putchar('}');
}

static int on_damage(void *arg, const kvf_verify_damage *d)
{
	struct verify_out *o = arg;

	if (o->json)
		json_damage(o, d);
	else
		printf("damaged: %s\n", d->message);
	o->n++;
	return 0;
}

static void json_report(const kvf_verify_report *r)
{
	printf("], \"clean\": %s, \"sequences_checked\": %llu, \"pages_checked\": %llu, \"bad_pages\": %llu, \"segments_checked\": %u, \"bad_segments\": %u, \"bytes_read\": %llu}\n",
	       r->bad_pages + r->bad_segments ? "false" : "true",
	       (unsigned long long)r->sequences_checked,
	       (unsigned long long)r->pages_checked,
	       (unsigned long long)r->bad_pages, r->segments_checked,
	       r->bad_segments, (unsigned long long)r->bytes_read);
}

int cmd_verify(const struct cmd *c, int argc, char **argv)
{
	struct verify_out o = { 0 };
	const struct opt_spec opts[] = { { "--json", &o.json, NULL } };
	kvf_verify_report r = { .struct_size = sizeof(r) };
	const char *dir;
	kvf_store *st;
	char read_text[32];
	int rc;

	if ((rc = parse_store_args(c, argc, argv, opts, 1, &dir)) != EXIT_OK)
		return rc;
	if ((rc = store_open(c, dir, &st)) != EXIT_OK) {
		if (strstr(kvf_last_error(), "/meta lost records"))
			fprintf(stderr, "kvtool: verify: %s is damaged: its catalog lost records of completed syncs; `kvtool repair --dry-run %s` shows what can be salvaged\n",
				dir, dir);
		return rc;
	}
	o.si.struct_size = sizeof(o.si);
	if (kvf_store_info_get(st, &o.si) != KVF_OK)
		return store_close(c, st, call_failed(c));
	if (o.json) {
		fputs("{\"store\": ", stdout);
		json_string(stdout, dir);
		fputs(", \"damage\": [", stdout);
	}
	if (kvf_verify(st, on_damage, &o, &r) != KVF_OK) {
		if (o.json) {
			fputs("], \"error\": ", stdout);
			json_string(stdout, kvf_last_error());
			fputs("}\n", stdout);
		}
		return store_close(c, st, call_failed(c));
	}
	if (o.json)
		json_report(&r);
	else
		printf("checked %llu pages of %llu sequences and %u segment summaries (%s read): %llu damaged pages, %u damaged summaries\n",
		       (unsigned long long)r.pages_checked,
		       (unsigned long long)r.sequences_checked, r.segments_checked,
		       human_bytes(read_text, sizeof(read_text), r.bytes_read),
		       (unsigned long long)r.bad_pages, r.bad_segments);
	if (r.bad_pages + r.bad_segments == 0)
		return store_close(c, st, EXIT_OK);
	fprintf(stderr, "kvtool: %s: %s is damaged: %llu damaged pages, %u damaged summaries\n",
		c->name, dir, (unsigned long long)r.bad_pages, r.bad_segments);
	return store_close(c, st, EXIT_FAILED);
}
