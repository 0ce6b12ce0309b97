/*
 * kvbench.c - the benchmark driver: `kvbench CMD [options]`.
 *
 * Each subcommand measures kvflash and a plain baseline side by side in
 * one run and prints a table (or JSON with --json) of figures and ratios.
 * Exit status: 0 done, 1 the benchmark failed to run, 2 bad usage.
 */
#include <stdio.h>
#include <string.h>

#include "bench/bench_common.h"
#include "kvflash.h"

struct bench_cmd {
	const char *name;
	int (*main)(int argc, char **argv);
	const char *summary;
};

static const struct bench_cmd cmds[] = {
	{ "media", bench_media_main,
	  "segment writes and reads of a media backend vs a plain O_DIRECT loop" },
	{ "append", bench_append_main,
	  "store prefill/decode appends, WA, index memory, cold head reads vs plain O_DIRECT" },
	{ "demo", bench_demo_main,
	  "the main job: a Llama-8B-shaped decode workload on a store left in a directory" },
	{ "ftl", bench_ftl_main,
	  "the emulated NAND device alone: GC, WA vs analytic models, wear, timing, emulator speed" },
	{ "kernels", bench_kernels_main,
	  "dense decode attention kernels (scalar, AVX2) vs a plain memory read of the same bytes" },
	{ "attend", bench_attend_main,
	  "kvf_attend dense and SparF, in memory and cold, vs plain reads and the FlexGen way" },
	{ "decode", bench_decode_main,
	  "a batch decoding step by step (append + attend_batch), memory tier on and off" },
	{ "endurance", bench_endurance_main,
	  "NAND bytes per token, WA, wear, lifetime: kvflash vs RocksDB, files, per-token" },
	{ "plan", bench_plan_main,
	  "the planners (KVPR split, X-cache alpha) against measured decode steps, MHA and GQA" },
	{ "evict", bench_evict_main,
	  "eviction policies (LRU, LFU, endurance) vs caller frees on a chat workload: hits, NAND bytes" },
	{ "prefix", bench_prefix_main,
	  "a chat workload (shared system prompts, multi-turn) with prefix reuse and without" },
	{ "export", bench_export_main,
	  "lz4 on f16/bf16 K/V (alone, byte planes) and kvf_seq_export/import speed" },
	{ "codec", bench_codec_main,
	  "compressed KV codecs (fp8, int8, int4): attention accuracy vs f16, bytes, warm speed" },
	{ "scale", bench_scale_main,
	  "open time, index memory, disk and recovery time as a store grows to 10,000 sequences and 100M tokens" },
	{ "optim", bench_optim_main,
	  "Adam steps on optimizer state in the store (memory, O_DIRECT file) vs plain copies; Top-K" },
};

static void usage(FILE *f)
{
	fprintf(f, "usage: kvbench CMD [options]   (kvbench CMD --help for a command's options)\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		fprintf(f, "  %-8s %s\n", cmds[i].name, cmds[i].summary);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "kvbench: missing command\n");
		usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("kvbench %s\n", kvf_version_string());
		return 0;
	}
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (strcmp(argv[1], cmds[i].name) == 0)
			return cmds[i].main(argc - 1, argv + 1);
	fprintf(stderr, "kvbench: unknown command '%s' (kvbench --help lists them)\n",
		argv[1]);
	return 2;
}
