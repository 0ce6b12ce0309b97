/*
 * kvtool_repair.c - `kvtool repair`: salvage a store whose catalog lost
 * records (kvf_repair), after `kvtool verify` or kvf_open reported it.
 *
 * Unlike the other store commands it changes the store (unless
 * --dry-run), and only when asked: kvf_open never repairs by itself.
 */
#include <stdlib.h>

#include "kvtool.h"

int cmd_repair(const struct cmd *c, int argc, char **argv)
{
	int dry_run = 0, json = 0, rc;
	const struct opt_spec opts[] = { { "--dry-run", &dry_run, NULL },
					 { "--json", &json, NULL } };
	kvf_repair_report r = { .struct_size = sizeof(r) };
	const char *dir;

	if ((rc = parse_store_args(c, argc, argv, opts, 2, &dir)) != EXIT_OK)
		return rc;
	if (kvf_repair(dir, NULL, dry_run, &r) != KVF_OK)
		return call_failed(c);
	if (json) {
		printf("{\"store\": ");
		json_string(stdout, dir);
		printf(", \"dry_run\": %d, \"catalog_points\": %llu, \"marked_points\": %llu, "
		       "\"segments_scanned\": %u, \"segments_restored\": %u, "
		       "\"segments_damaged\": %u, \"segments_optimizer\": %u, "
		       "\"sequences_restored\": %llu, \"sequences_extended\": %llu, "
		       "\"tokens_restored\": %llu, \"x_tokens_restored\": %llu, "
		       "\"changed\": %u}\n",
		       dry_run, (unsigned long long)r.catalog_points,
		       (unsigned long long)r.marked_points, r.segments_scanned,
		       r.segments_restored, r.segments_damaged,
		       r.segments_optimizer,
		       (unsigned long long)r.sequences_restored,
		       (unsigned long long)r.sequences_extended,
		       (unsigned long long)r.tokens_restored,
		       (unsigned long long)r.x_tokens_restored, r.changed);
		return EXIT_OK;
	}
	if (r.catalog_points >= r.marked_points) {
		printf("%s: the catalog holds all %llu durable points; nothing to repair\n",
		       dir, (unsigned long long)r.marked_points);
		return EXIT_OK;
	}
	printf("%s: the catalog held %llu of %llu durable points%s\n", dir,
	       (unsigned long long)r.catalog_points,
	       (unsigned long long)r.marked_points,
	       dry_run ? " (dry run: nothing changed)" : "");
	printf("segments: %u scanned, %u records %s from their summaries, %u damaged (left out), %u of optimizers (left out)\n",
	       r.segments_scanned, r.segments_restored,
	       dry_run ? "could be rebuilt" : "rebuilt", r.segments_damaged,
	       r.segments_optimizer);
	printf("sequences: %llu %s, %llu %s; %llu K/V tokens and %llu X tokens %s\n",
	       (unsigned long long)r.sequences_restored,
	       dry_run ? "could be made again" : "made again",
	       (unsigned long long)r.sequences_extended,
	       dry_run ? "could be extended" : "extended",
	       (unsigned long long)r.tokens_restored,
	       (unsigned long long)r.x_tokens_restored,
	       dry_run ? "could be given back" : "given back");
	if (!dry_run)
		printf("the store opens again; run kvtool verify %s to check it\n", dir);
	return EXIT_OK;
}
