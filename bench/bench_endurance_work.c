/*
 * bench_endurance_work.c - the workloads of `kvbench endurance`, as
 * seeded operation lists every system replays alike.
 *
 * offline: rounds of a fixed batch; each sequence gets a long prompt
 *   (uniform in [P/2, P]) and generates uniform in [G/2, G] tokens; a
 *   sequence is freed when it is done, the next round starts when the
 *   whole batch is.
 * online: requests arrive (Poisson, --rate a step) into a batch of at most
 *   --max-batch; prompt and output lengths are log-normal (sigma 1, the
 *   shape published for chat traces such as ShareGPT and LMSYS-Chat: most
 *   requests short, a long tail), clipped; a sequence is freed when done.
 * chat: conversations of --turns turns; each turn appends a user prompt
 *   to the conversation's sequence (a prefill) and generates a reply;
 *   between turns the conversation thinks (exponential, --think steps
 *   mean) and keeps its KV; it is freed after its last turn.
 * train: --train-steps optimizer steps (Adam) over one tensor of
 *   --train-params fp32 parameters kept in the store: params, m and v
 *   (12 bytes a parameter) read and written back each step.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_common.h"
#include "bench/bench_endurance_int.h"

struct rng {
	uint64_t s;
};

static uint64_t rng_next(struct rng *r)
{
	r->s += 0x9e3779b97f4a7c15ull;
	return bench_mix64(r->s);
}

/* rng_unit - uniform in (0, 1) */
static double rng_unit(struct rng *r)
{
	return ((double)(rng_next(r) >> 11) + 0.5) / 9007199254740992.0;
}

static uint32_t rng_range(struct rng *r, uint32_t lo, uint32_t hi)
{
	return hi <= lo ? lo : lo + (uint32_t)(rng_next(r) % (hi - lo + 1));
}

/* lognormal - mean m, sigma 1, clipped to [lo, hi] */
static uint32_t lognormal(struct rng *r, double m, uint32_t lo, uint32_t hi)
{
	double z = sqrt(-2.0 * log(rng_unit(r))) * cos(6.283185307179586 * rng_unit(r));
	double v = exp(log(m) - 0.5 + z);

	if (v < lo)
		return lo;
	return v > hi ? hi : (uint32_t)v;
}

static uint32_t poisson(struct rng *r, double lambda)
{
	double l = exp(-lambda), p = 1.0;
	uint32_t k = 0;

	do {
		k++;
		p *= rng_unit(r);
	} while (p > l && k < 1000);
	return k - 1;
}

static int push(struct end_workload *w, uint8_t kind, uint64_t seq, uint32_t n)
{
	if (w->n_ops == w->cap) {
		size_t cap = w->cap ? 2 * w->cap : 4096;
		struct end_op *o = realloc(w->ops, cap * sizeof(*o));

		if (o == NULL) {
			fprintf(stderr, "kvbench endurance: out of memory for the workload\n");
			return -1;
		}
		w->ops = o;
		w->cap = cap;
	}
	w->ops[w->n_ops++] = (struct end_op){ .kind = kind, .seq = seq, .n = n };
	if (kind == OP_DECODE)
		w->gen_tokens++;
	else if (kind == OP_PREFILL)
		w->prompt_tokens += n;
	else if (kind == OP_STEP)
		w->steps++;
	else if (kind == OP_REQUEST)
		w->requests++;
	return 0;
}

/* One sequence in the batch. */
struct act {
	uint64_t seq;
	uint32_t left;      /* tokens still to generate this turn */
	uint32_t turns;     /* chat: turns after this one */
	uint64_t born;      /* step of its first append */
	uint64_t len;       /* tokens it holds */
};

struct gen {
	struct end_workload *w;
	struct act *act;
	size_t n_act, cap;
	uint64_t live_tokens;
	double life_sum;
	uint64_t life_n;
};

static int gen_add(struct gen *g, struct act a)
{
	if (g->n_act == g->cap) {
		size_t cap = g->cap ? 2 * g->cap : 64;
		struct act *n = realloc(g->act, cap * sizeof(*n));

		if (n == NULL)
			return -1;
		g->act = n;
		g->cap = cap;
	}
	g->act[g->n_act++] = a;
	return 0;
}

static int gen_prefill(struct gen *g, struct act *a, uint32_t n)
{
	a->len += n;
	g->live_tokens += n;
	if (g->live_tokens > g->w->peak_live_tokens)
		g->w->peak_live_tokens = g->live_tokens;
	return push(g->w, OP_PREFILL, a->seq, n);
}

static int gen_end(struct gen *g, struct act *a)
{
	g->live_tokens -= a->len;
	g->life_sum += (double)(g->w->steps - a->born);
	g->life_n++;
	return push(g->w, OP_END, a->seq, 0);
}

/*
 * gen_step - one decode step of the batch: each active sequence with
 * tokens left generates one; a sequence done with its turn completes a
 * request and is ended (done() says whether it leaves the batch for good;
 * chat sequences that think are handed to park()).
 */
static int gen_step(struct gen *g, int (*park)(struct gen *g, struct act *a))
{
	size_t keep = 0;

	for (size_t i = 0; i < g->n_act; i++) {
		struct act *a = &g->act[i];

		a->len++;
		g->live_tokens++;
		if (g->live_tokens > g->w->peak_live_tokens)
			g->w->peak_live_tokens = g->live_tokens;
		if (push(g->w, OP_DECODE, a->seq, 1))
			return -1;
	}
	if (push(g->w, OP_STEP, 0, 0))
		return -1;
	for (size_t i = 0; i < g->n_act; i++) {
		struct act a = g->act[i];

		if (--a.left > 0) {
			g->act[keep++] = a;
			continue;
		}
		if (push(g->w, OP_REQUEST, a.seq, 0))
			return -1;
		if (park && a.turns > 0) {
			if (park(g, &a))
				return -1;
		} else if (gen_end(g, &a)) {
			return -1;
		}
	}
	g->n_act = keep;
	return 0;
}

static int make_offline(const struct end_args *a, struct rng *r, struct gen *g)
{
	uint64_t seq = 0;

	for (uint32_t round = 0; round < a->off_rounds; round++) {
		for (uint32_t b = 0; b < a->off_batch; b++) {
			struct act x = { .seq = seq++, .born = g->w->steps,
					 .left = rng_range(r, (a->off_gen + 1) / 2, a->off_gen) };

			if (x.left == 0)
				x.left = 1;
			if (gen_prefill(g, &x, rng_range(r, (a->off_prompt + 1) / 2, a->off_prompt)) ||
			    gen_add(g, x))
				return -1;
		}
		while (g->n_act > 0)
			if (gen_step(g, NULL))
				return -1;
	}
	g->w->n_seqs = seq;
	return 0;
}

static int make_online(const struct end_args *a, struct rng *r, struct gen *g)
{
	uint64_t seq = 0, queued = 0;

	for (uint32_t step = 0; step < a->on_steps || g->n_act > 0; step++) {
		if (step < a->on_steps)
			queued += poisson(r, a->on_rate);
		while (queued > 0 && g->n_act < a->on_max_batch) {
			struct act x = { .seq = seq++, .born = g->w->steps,
					 .left = lognormal(r, a->on_gen, 1, 8 * a->on_gen) };

			queued--;
			if (gen_prefill(g, &x, lognormal(r, a->on_prompt, 4, 8 * a->on_prompt)) ||
			    gen_add(g, x))
				return -1;
		}
		if (g->n_act && gen_step(g, NULL))
			return -1;
		if (g->n_act == 0 && step >= a->on_steps)
			break;
	}
	g->w->n_seqs = seq;
	return 0;
}

/* Chat: conversations thinking between turns, by the step they wake. */
struct parked {
	struct act a;
	uint64_t wake;
};

static struct parked *parked;
static size_t n_parked, cap_parked;
static struct rng *chat_rng;
static const struct end_args *chat_args;

static int chat_park(struct gen *g, struct act *a)
{
	double think = -log(rng_unit(chat_rng)) * chat_args->chat_think;

	if (n_parked == cap_parked) {
		size_t cap = cap_parked ? 2 * cap_parked : 64;
		struct parked *p = realloc(parked, cap * sizeof(*p));

		if (p == NULL)
			return -1;
		parked = p;
		cap_parked = cap;
	}
	parked[n_parked++] = (struct parked){ .a = *a,
		.wake = g->w->steps + 1 + (uint64_t)think };
	return 0;
}

static int chat_turn(const struct end_args *a, struct rng *r, struct gen *g,
		     struct act x)
{
	x.left = lognormal(r, a->chat_gen, 1, 8 * a->chat_gen);
	return gen_prefill(g, &x, lognormal(r, a->chat_prompt, 4, 8 * a->chat_prompt)) ||
	       gen_add(g, x);
}

static int make_chat(const struct end_args *a, struct rng *r, struct gen *g)
{
	uint64_t seq = 0, started = 0;
	/* conversations start spread over the time their turns take */
	double rate = (double)a->chat_convs /
		      ((double)a->chat_turns * (a->chat_gen + a->chat_think) + 1.0) *
		      2.0;
	int rc = 0;

	chat_rng = r;
	chat_args = a;
	n_parked = 0;
	while (rc == 0 && (started < a->chat_convs || g->n_act > 0 || n_parked > 0)) {
		uint32_t arrive = started < a->chat_convs ? poisson(r, rate) : 0;

		for (uint32_t i = 0; i < arrive && started < a->chat_convs &&
				     g->n_act < a->chat_max_batch && rc == 0; i++, started++) {
			struct act x = { .seq = seq++, .born = g->w->steps,
					 .turns = rng_range(r, (a->chat_turns + 1) / 2, a->chat_turns) };

			x.turns = x.turns ? x.turns - 1 : 0;
			rc = chat_turn(a, r, g, x);
		}
		for (size_t i = 0; i < n_parked && rc == 0;) {
			if (parked[i].wake > g->w->steps || g->n_act >= a->chat_max_batch) {
				i++;
				continue;
			}
			struct act x = parked[i].a;

			parked[i] = parked[--n_parked];
			x.turns--;
			rc = chat_turn(a, r, g, x);
		}
		if (rc == 0)
			rc = g->n_act ? gen_step(g, chat_park) : push(g->w, OP_STEP, 0, 0);
	}
	free(parked);
	parked = NULL;
	cap_parked = n_parked = 0;
	g->w->n_seqs = seq;
	return rc ? -1 : 0;
}

int end_workload_make(const struct end_args *a, enum end_wl wl,
		      struct end_workload *w)
{
	struct rng r = { .s = a->seed * 0x2545f4914f6cdd1dull + (uint64_t)wl };
	struct gen g = { .w = w };
	int rc;

	memset(w, 0, sizeof(*w));
	w->wl = wl;
	if (wl == WL_TRAIN) {
		rc = 0;
		w->state_bytes = 12 * a->train_params;
		for (uint32_t i = 0; i < a->train_steps && rc == 0; i++)
			rc = push(w, OP_TRAIN, 0, 0) || push(w, OP_REQUEST, 0, 0);
	} else {
		rc = wl == WL_OFFLINE ? make_offline(a, &r, &g) :
		     wl == WL_ONLINE  ? make_online(a, &r, &g) :
					make_chat(a, &r, &g);
	}
	w->mean_life_steps = g.life_n ? g.life_sum / (double)g.life_n : 0.0;
	free(g.act);
	if (rc) {
		fprintf(stderr, "kvbench endurance: out of memory for the workload\n");
		end_workload_free(w);
		return -1;
	}
	return 0;
}

void end_workload_free(struct end_workload *w)
{
	free(w->ops);
	w->ops = NULL;
	w->n_ops = w->cap = 0;
}

const char *end_wl_name(enum end_wl wl)
{
	static const char *const names[] = { "offline", "online", "chat", "train" };

	return wl < WL_COUNT ? names[wl] : "?";
}
