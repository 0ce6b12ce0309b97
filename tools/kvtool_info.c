/*
 * kvtool_info.c - `kvtool info [--json] DIR`: a store's configuration
 * (kvf_store_info_get), its sequences and segments, the disk its files
 * hold against the bytes it holds live, and the figures of
 * kvf_stats_get.
 *
 * kvf_stats_get counts two ways, and each figure is labelled with its
 * own: bytes appended and written (by cause) and the write amplification
 * count since the store was created (as of its last sync); bytes read and
 * catalog bytes count since this open, kvtool's own read-only one, so they
 * are 0 here ("this open").  The store is opened read-only and never
 * changed.
 */
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>

#include "kvtool.h"

/* What info shows, gathered before anything is printed. */
struct info {
	const char *dir;     /* the store directory */
	kvf_store_info si;   /* configuration */
	kvf_stats stats;     /* figures: since create, and this open */
	size_t n_seqs;       /* live sequences */
	uint64_t disk_media; /* blocks the stripe files (or flash image) in
			      * the directory hold: they are sparse, so not
			      * their size */
	uint64_t disk_other; /* and the rest: catalog, header, mark */
};

/* blocks_under - the bytes of disk every file under path holds */
static uint64_t blocks_under(const char *path)
{
	struct stat sb;
	uint64_t sum = 0;
	struct dirent *e;
	DIR *d;

	if (lstat(path, &sb) != 0)
		return 0;
	if (!S_ISDIR(sb.st_mode))
		return (uint64_t)sb.st_blocks * 512;
	if ((d = opendir(path)) == NULL)
		return 0;
	while ((e = readdir(d)) != NULL) {
		char p[4352];

		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		snprintf(p, sizeof(p), "%s/%s", path, e->d_name);
		sum += blocks_under(p);
	}
	closedir(d);
	return sum;
}

/* disk_use - what the store's files hold on disk: the media files in the
 * directory (stripes on devices named by device_paths are not there),
 * and everything else */
static void disk_use(struct info *in)
{
	uint64_t all = blocks_under(in->dir), media = 0;
	struct dirent *e;
	DIR *d = opendir(in->dir);

	while (d && (e = readdir(d)) != NULL)
		if (strncmp(e->d_name, "stripe-", 7) == 0 ||
		    strcmp(e->d_name, "flash.img") == 0) {
			char p[4352];

			snprintf(p, sizeof(p), "%s/%s", in->dir, e->d_name);
			media += blocks_under(p);
		}
	if (d)
		closedir(d);
	in->disk_media = media;
	in->disk_other = all - media;
}

static void version_text(char *buf, size_t cap, unsigned v)
{
	snprintf(buf, cap, "%u.%u.%u", v / 10000, v / 100 % 100, v % 100);
}

/* print_tier - this handle's memory tier (kvf_options.dram_budget): what
 * it holds and how its reads went, since this open */
static void print_tier(const kvf_stats *s)
{
	char b[7][16];

	if (s->dram_budget == 0) {
		printf("memory tier  off (dram_budget 0)\n");
		return;
	}
	printf("memory tier  budget %s, holding %s (peak %s): cache %s (recent %s, hot %s), waiting for write-back %s\n",
	       human_bytes(b[0], sizeof(b[0]), s->dram_budget),
	       human_bytes(b[1], sizeof(b[1]), s->dram_bytes),
	       human_bytes(b[2], sizeof(b[2]), s->dram_peak),
	       human_bytes(b[3], sizeof(b[3]), s->cache_bytes),
	       human_bytes(b[4], sizeof(b[4]), s->cache_recent_bytes),
	       human_bytes(b[5], sizeof(b[5]), s->cache_hot_bytes),
	       human_bytes(b[6], sizeof(b[6]), s->writeback_bytes));
	printf("  since open %llu page hits, %llu misses, %llu evictions; %llu attention calls read %s from media (%s a call)\n",
	       (unsigned long long)s->cache_hits,
	       (unsigned long long)s->cache_misses,
	       (unsigned long long)s->cache_evictions,
	       (unsigned long long)s->attend_calls,
	       human_bytes(b[1], sizeof(b[1]), s->attend_bytes_read),
	       human_bytes(b[2], sizeof(b[2]), s->attend_calls
				 ? s->attend_bytes_read / s->attend_calls : 0));
}

/* print_prefix - the prefix index (kvf_seq_create_tokens): its chunks
 * now, and this open's reuse */
static void print_prefix(const kvf_stats *s)
{
	char b[16];

	printf("prefix       %llu chunks in the index; since open %llu lookups, %llu hits, %llu of %llu tokens reused, %s not rewritten\n",
	       (unsigned long long)s->prefix_chunks,
	       (unsigned long long)s->prefix_lookups,
	       (unsigned long long)s->prefix_hits,
	       (unsigned long long)s->prefix_tokens_reused,
	       (unsigned long long)s->prefix_tokens_asked,
	       human_bytes(b, sizeof(b), s->prefix_bytes_saved));
	printf("prefix cache %llu cached prefixes, %s only they hold; since open %llu kept, %llu dropped, %llu hits on them\n",
	       (unsigned long long)s->prefix_cached,
	       human_bytes(b, sizeof(b), s->prefix_cached_bytes),
	       (unsigned long long)s->prefix_cache_kept,
	       (unsigned long long)s->prefix_cache_dropped,
	       (unsigned long long)s->prefix_cache_hits);
}

static void print_text(const struct info *in)
{
	const kvf_store_info *si = &in->si;
	const kvf_stats *s = &in->stats;
	char b[6][32], ver[32];

	version_text(ver, sizeof(ver), si->library_version);
	printf("store        %s\n", in->dir);
	printf("format       version %u (library %s)\n", si->format_version, ver);
	printf("store id     %016llx\n", (unsigned long long)si->store_id);
	printf("model        %u layers, %u query heads, %u KV heads, head_dim %u, %s\n",
	       si->model.n_layers, si->model.n_q_heads, si->model.n_kv_heads,
	       si->model.head_dim, kvf_dtype_name(si->model.dtype));
	if (si->codec != KVF_CODEC_NONE)
		printf("codec        %s: %u tokens of one head per K/V group, encoded in %u page%s of %u bytes (%u bytes used, layout version %u%s), the part-filled last group plain\n",
		       kvf_codec_name((kvf_codec)si->codec), si->group_tokens,
		       si->group_pages, si->group_pages > 1 ? "s" : "",
		       si->page_size, si->group_bytes, si->codec_layout,
		       si->codec_layout == 2 ? ": K's scales a byte" : "");
	else if (si->group_pages > 1)
		printf("pages        %u bytes, %u tokens of one head per K/V group of %u pages (%.1f %% unused)\n",
		       si->page_size, si->group_tokens, si->group_pages,
		       100.0 - 100.0 * si->group_bytes /
				       ((double)si->group_pages * si->page_size));
	else
		printf("pages        %u bytes, %u tokens of one head per K/V page\n",
		       si->page_size, si->group_tokens);
	printf("segments     %s each (%u data pages and a summary); %u stripes x %llu = %u segments\n",
	       human_bytes(b[0], sizeof(b[0]), si->segment_size),
	       si->data_pages_per_segment, si->n_stripes,
	       (unsigned long long)si->segs_per_stripe, s->segments_total);
	printf("capacity     %s (%llu bytes), %s media, K^T pages %s%s\n",
	       human_bytes(b[1], sizeof(b[1]), si->capacity_bytes),
	       (unsigned long long)si->capacity_bytes, kvf_media_name(si->media),
	       si->kt_pages ? "on" : "off", si->read_only ? ", opened read-only" : "");
	printf("sequences    %zu\n", in->n_seqs);
	printf("segment use  %u sealed, %u open, %u dying, %u corrupt, %u free\n",
	       s->segments_sealed, s->segments_open, s->segments_dying,
	       s->segments_corrupt, s->segments_free);
	printf("live pages   %llu (%s)\n", (unsigned long long)s->live_pages,
	       human_bytes(b[2], sizeof(b[2]), s->live_pages * si->page_size));
	printf("disk         %s allocated for %s live: media files %s, catalog and the rest %s%s\n",
	       human_bytes(b[0], sizeof(b[0]), in->disk_media + in->disk_other),
	       human_bytes(b[1], sizeof(b[1]), s->live_pages * si->page_size),
	       human_bytes(b[3], sizeof(b[3]), in->disk_media),
	       human_bytes(b[4], sizeof(b[4]), in->disk_other),
	       si->media == KVF_MEDIA_MEMORY ? " (a memory store: its pages were in the process)" :
	       in->disk_media == 0 && s->live_pages ? " (the stripes are devices, not counted)" : "");
	printf("syncs        %llu since the store was created\n",
	       (unsigned long long)s->n_syncs);
	printf("index        %s of memory\n",
	       human_bytes(b[3], sizeof(b[3]), s->index_bytes));
	printf("since create user %s appended, %s written to media (as of the last sync)\n",
	       human_bytes(b[0], sizeof(b[0]), s->user_bytes),
	       human_bytes(b[1], sizeof(b[1]), s->host_bytes_written));
	printf("written      data %s, padding %s, cleaner %s, K^T %s, summaries %s (since create)\n",
	       human_bytes(b[0], sizeof(b[0]), s->data_bytes),
	       human_bytes(b[1], sizeof(b[1]), s->padding_bytes),
	       human_bytes(b[2], sizeof(b[2]), s->cleaner_bytes),
	       human_bytes(b[4], sizeof(b[4]), s->kt_bytes),
	       human_bytes(b[5], sizeof(b[5]), s->summary_bytes));
	printf("WA           host %.3f, device %.3f, total %.3f (since create)%s\n",
	       s->host_wa, s->device_wa, s->total_wa,
	       s->user_bytes ? "" : ", nothing appended");
	printf("this open    read %s, catalog %s written (counted from kvtool's own read-only open, so 0 here)\n",
	       human_bytes(b[2], sizeof(b[2]), s->bytes_read),
	       human_bytes(b[3], sizeof(b[3]), s->metadata_bytes));
	print_tier(s);
	printf("live         %.1f%% of the media's data pages (a writer with kvf_options.evict_policy evicts past its evict_high)\n",
	       100.0 * s->live_share);
	print_prefix(s);
}

static void print_json(const struct info *in)
{
	const kvf_store_info *si = &in->si;
	const kvf_stats *s = &in->stats;
	char ver[32];

	version_text(ver, sizeof(ver), si->library_version);
	fputs("{\"store\": ", stdout);
	json_string(stdout, in->dir);
	printf(", \"format_version\": %u, \"library_version\": \"%s\"",
	       si->format_version, ver);
	printf(", \"store_id\": \"%016llx\"", (unsigned long long)si->store_id);
	printf(", \"model\": {\"n_layers\": %u, \"n_q_heads\": %u, \"n_kv_heads\": %u, \"head_dim\": %u, \"dtype\": \"%s\"}",
	       si->model.n_layers, si->model.n_q_heads, si->model.n_kv_heads,
	       si->model.head_dim, kvf_dtype_name(si->model.dtype));
	printf(", \"page_size\": %u, \"group_tokens\": %u, \"group_pages\": %u, \"codec\": \"%s\", \"codec_layout\": %u, \"segment_size\": %llu",
	       si->page_size, si->group_tokens, si->group_pages,
	       kvf_codec_name((kvf_codec)si->codec), si->codec_layout,
	       (unsigned long long)si->segment_size);
	printf(", \"data_pages_per_segment\": %u, \"n_stripes\": %u, \"segs_per_stripe\": %llu",
	       si->data_pages_per_segment, si->n_stripes,
	       (unsigned long long)si->segs_per_stripe);
	printf(", \"capacity_bytes\": %llu, \"media\": \"%s\", \"kt_pages\": %u, \"read_only\": %s",
	       (unsigned long long)si->capacity_bytes, kvf_media_name(si->media),
	       si->kt_pages, si->read_only ? "true" : "false");
	printf(", \"sequences\": %zu", in->n_seqs);
	printf(", \"segments\": {\"total\": %u, \"free\": %u, \"open\": %u, \"sealed\": %u, \"dying\": %u, \"corrupt\": %u}",
	       s->segments_total, s->segments_free, s->segments_open,
	       s->segments_sealed, s->segments_dying, s->segments_corrupt);
	printf(", \"live_pages\": %llu, \"live_share\": %.6f, \"n_syncs\": %llu, \"index_bytes\": %llu",
	       (unsigned long long)s->live_pages, s->live_share,
	       (unsigned long long)s->n_syncs, (unsigned long long)s->index_bytes);
	printf(", \"disk\": {\"allocated_bytes\": %llu, \"media_bytes\": %llu, \"other_bytes\": %llu, \"live_bytes\": %llu}",
	       (unsigned long long)(in->disk_media + in->disk_other),
	       (unsigned long long)in->disk_media,
	       (unsigned long long)in->disk_other,
	       (unsigned long long)(s->live_pages * si->page_size));
	printf(", \"since_create\": {\"user_bytes\": %llu, \"host_bytes_written\": %llu, \"data_bytes\": %llu, \"padding_bytes\": %llu, \"cleaner_bytes\": %llu, \"kt_bytes\": %llu, \"summary_bytes\": %llu",
	       (unsigned long long)s->user_bytes,
	       (unsigned long long)s->host_bytes_written,
	       (unsigned long long)s->data_bytes,
	       (unsigned long long)s->padding_bytes,
	       (unsigned long long)s->cleaner_bytes,
	       (unsigned long long)s->kt_bytes,
	       (unsigned long long)s->summary_bytes);
	printf(", \"host_wa\": %.6f, \"device_wa\": %.6f, \"total_wa\": %.6f}",
	       s->host_wa, s->device_wa, s->total_wa);
	printf(", \"this_open\": {\"bytes_read\": %llu, \"metadata_bytes\": %llu}",
	       (unsigned long long)s->bytes_read,
	       (unsigned long long)s->metadata_bytes);
	printf(", \"memory_tier\": {\"dram_budget\": %llu, \"dram_bytes\": %llu, \"dram_peak\": %llu, \"cache_bytes\": %llu, \"cache_recent_bytes\": %llu, \"cache_hot_bytes\": %llu, \"cache_hits\": %llu, \"cache_misses\": %llu, \"cache_evictions\": %llu, \"writeback_bytes\": %llu, \"writeback_runs\": %llu, \"attend_calls\": %llu, \"attend_bytes_read\": %llu}",
	       (unsigned long long)s->dram_budget, (unsigned long long)s->dram_bytes,
	       (unsigned long long)s->dram_peak, (unsigned long long)s->cache_bytes,
	       (unsigned long long)s->cache_recent_bytes,
	       (unsigned long long)s->cache_hot_bytes,
	       (unsigned long long)s->cache_hits, (unsigned long long)s->cache_misses,
	       (unsigned long long)s->cache_evictions,
	       (unsigned long long)s->writeback_bytes,
	       (unsigned long long)s->writeback_runs,
	       (unsigned long long)s->attend_calls,
	       (unsigned long long)s->attend_bytes_read);
	printf(", \"prefix\": {\"chunks\": %llu, \"lookups\": %llu, \"hits\": %llu, \"tokens_asked\": %llu, \"tokens_reused\": %llu, \"bytes_saved\": %llu, \"cached\": %llu, \"cached_bytes\": %llu, \"cache_kept\": %llu, \"cache_dropped\": %llu, \"cache_hits\": %llu}}\n",
	       (unsigned long long)s->prefix_chunks,
	       (unsigned long long)s->prefix_lookups,
	       (unsigned long long)s->prefix_hits,
	       (unsigned long long)s->prefix_tokens_asked,
	       (unsigned long long)s->prefix_tokens_reused,
	       (unsigned long long)s->prefix_bytes_saved,
	       (unsigned long long)s->prefix_cached,
	       (unsigned long long)s->prefix_cached_bytes,
	       (unsigned long long)s->prefix_cache_kept,
	       (unsigned long long)s->prefix_cache_dropped,
	       (unsigned long long)s->prefix_cache_hits);
}

int cmd_info(const struct cmd *c, int argc, char **argv)
{
	int json = 0, rc;
	const struct opt_spec opts[] = { { "--json", &json, NULL } };
	struct info in;
	kvf_store *st;

	if ((rc = parse_store_args(c, argc, argv, opts, 1, &in.dir)) != EXIT_OK)
		return rc;
	if ((rc = store_open(c, in.dir, &st)) != EXIT_OK)
		return rc;
	memset(&in.si, 0, sizeof(in.si));
	memset(&in.stats, 0, sizeof(in.stats));
	in.si.struct_size = sizeof(in.si);
	in.stats.struct_size = sizeof(in.stats);
	if (kvf_store_info_get(st, &in.si) != KVF_OK ||
	    kvf_stats_get(st, &in.stats) != KVF_OK ||
	    kvf_seq_list(st, NULL, 0, &in.n_seqs) != KVF_OK)
		return store_close(c, st, call_failed(c));
	disk_use(&in);
	if (json)
		print_json(&in);
	else
		print_text(&in);
	return store_close(c, st, EXIT_OK);
}
