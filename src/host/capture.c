/* capture — the list of capture sources, what the host gives them, and the
 * calls over them through their tables (capture.h, src/capture/source.h). */
#include "capture.h"

#include <stdio.h>

#include "../capture/nvtx/nvtx_host.h"
#include "../capture/python/python.h"
#include "../capture/cpu/sampler.h"
#include "host.h"

#ifdef PROFHOST_HAVE_CUDA
#include "../capture/cupti/cupti.h"
#endif

/* Sources in the order they are called. The sampler stays last: its
 * collect names the stacks other sources' events carry (the CUDA calls'
 * backtraces) and adds the samples as events. */
const struct capture_ops *const capture_sources[] = {
	&nvtx_capture,
#ifdef PROFHOST_HAVE_CUDA
	&cupti_capture,
#endif
	&python_capture,
	&sampler_capture,
	NULL
};

#define CAPTURE_MAX 16

/* Bit i set: source i initialized and stays on. Written at start-up only. */
static uint32_t capture_on;

/* What the sources get (capture_host): core.c's, copied once at start-up. */
static struct capture_host capture_host;

void capture_init_all(struct host *h, const struct capture_host *host)
{
	struct capture_host *ch = &capture_host;
	size_t i;

	*ch = *host;
	for (i = 0; capture_sources[i] && i < CAPTURE_MAX; i++) {
		struct err e;

		if (capture_sources[i]->init && capture_sources[i]->init(ch, &e) != 0) {
			host_fail(h, &e);
			continue;
		}
		capture_on |= 1u << i;
	}
}

void capture_warmup_all(void)
{
	size_t i;

	for (i = 0; capture_sources[i]; i++)
		if ((capture_on >> i & 1) && capture_sources[i]->warmup)
			capture_sources[i]->warmup();
}

void capture_prepare_all(void)
{
	size_t i;

	for (i = 0; capture_sources[i]; i++)
		if ((capture_on >> i & 1) && capture_sources[i]->prepare)
			capture_sources[i]->prepare();
}

void capture_open_all(uint64_t gen)
{
	size_t i;

	for (i = 0; capture_sources[i]; i++)
		if ((capture_on >> i & 1) && capture_sources[i]->window_open)
			capture_sources[i]->window_open(gen);
}

void capture_close_all(uint64_t gen)
{
	size_t i;

	for (i = 0; capture_sources[i]; i++)
		if ((capture_on >> i & 1) && capture_sources[i]->window_close)
			capture_sources[i]->window_close(gen);
}

void capture_collect_all(struct host *h, const struct host_job *job,
			 struct trace *t)
{
	struct capture_window w;
	size_t i;

	w.gen = job->gen;
	w.window = job->window;
	w.first = job->first;
	w.last = job->last;
	w.start_ts = job->start_ts;
	w.end_ts = job->end_ts;
	w.dump = job->dump;
	w.gens = job->dump ? job->gens + job->nskip : NULL;
	w.ngens = job->dump ? job->ngens - job->nskip : 0;
	for (i = 0; capture_sources[i]; i++) {
		struct err e;

		if ((capture_on >> i & 1) && capture_sources[i]->collect &&
		    capture_sources[i]->collect(&w, t, &e) != 0)
			host_fail(h, &e);
	}
}

void capture_fini_all(void)
{
	size_t i;

	for (i = 0; capture_sources[i]; i++)
		if ((capture_on >> i & 1) && capture_sources[i]->fini)
			capture_sources[i]->fini();
}

void capture_step_all(const struct capture_step *s)
{
	size_t i;

	for (i = 0; capture_sources[i]; i++)
		if ((capture_on >> i & 1) && capture_sources[i]->step)
			capture_sources[i]->step(s);
}

void capture_explicit_step_all(void)
{
	size_t i;

	for (i = 0; capture_sources[i]; i++)
		if ((capture_on >> i & 1) && capture_sources[i]->explicit_step)
			capture_sources[i]->explicit_step();
}

void capture_cuda_inject_all(void)
{
	size_t i;

	for (i = 0; capture_sources[i]; i++)
		if ((capture_on >> i & 1) && capture_sources[i]->cuda_inject)
			capture_sources[i]->cuda_inject();
}

void capture_recorder_all(uint64_t gen)
{
	size_t i;

	for (i = 0; capture_sources[i]; i++)
		if ((capture_on >> i & 1) && capture_sources[i]->recorder &&
		    capture_sources[i]->recorder->segment)
			capture_sources[i]->recorder->segment(gen);
}

void capture_dump_taken_all(void)
{
	size_t i;

	for (i = 0; capture_sources[i]; i++)
		if ((capture_on >> i & 1) && capture_sources[i]->recorder &&
		    capture_sources[i]->recorder->dump_taken)
			capture_sources[i]->recorder->dump_taken();
}

void capture_dump_dropped_all(void)
{
	size_t i;

	for (i = 0; capture_sources[i]; i++)
		if ((capture_on >> i & 1) && capture_sources[i]->recorder &&
		    capture_sources[i]->recorder->dump_dropped)
			capture_sources[i]->recorder->dump_dropped();
}

void capture_recorder_rotated_all(void)
{
	size_t i;

	for (i = 0; capture_sources[i]; i++)
		if ((capture_on >> i & 1) && capture_sources[i]->recorder &&
		    capture_sources[i]->recorder->rotated)
			capture_sources[i]->recorder->rotated();
}

bool capture_recorder_rotated_wanted(void)
{
	size_t i;

	for (i = 0; capture_sources[i]; i++)
		if ((capture_on >> i & 1) && capture_sources[i]->recorder &&
		    capture_sources[i]->recorder->rotated &&
		    (!capture_sources[i]->recorder->rotated_wanted ||
		     capture_sources[i]->recorder->rotated_wanted()))
			return true;
	return false;
}


/* The window listener (host.h's struct window_listener): what window.c
 * publishes goes to every source. Threads and locks as window.c calls. */
static void listen_warmup(void *ctx)
{
	(void)ctx;
	capture_warmup_all();
}

static void listen_prepare(void *ctx)
{
	(void)ctx;
	capture_prepare_all();
}

static void listen_open(void *ctx, uint64_t gen)
{
	(void)ctx;
	capture_open_all(gen);
}

static void listen_close(void *ctx, uint64_t gen)
{
	(void)ctx;
	capture_close_all(gen);
}

static void listen_step(void *ctx, uint64_t step, bool recording, bool next_active)
{
	struct capture_step cs;

	(void)ctx;
	cs.step = step;
	cs.recording = recording;
	cs.next_active = next_active;
	capture_step_all(&cs);
}

static void listen_recorder(void *ctx, uint64_t gen)
{
	(void)ctx;
	capture_recorder_all(gen);
}

static void listen_dump_taken(void *ctx)
{
	(void)ctx;
	capture_dump_taken_all();
}

static void listen_dump_dropped(void *ctx)
{
	(void)ctx;
	capture_dump_dropped_all();
}

static bool listen_rotated_wanted(void *ctx)
{
	(void)ctx;
	return capture_recorder_rotated_wanted();
}

const struct window_listener capture_listener = {
	.warmup = listen_warmup,
	.prepare = listen_prepare,
	.open = listen_open,
	.close = listen_close,
	.step = listen_step,
	.recorder = listen_recorder,
	.dump_taken = listen_dump_taken,
	.dump_dropped = listen_dump_dropped,
	.rotated_wanted = listen_rotated_wanted,
};

int capture_hang_stacks_all(char *out, size_t size, char *why, size_t wsize)
{
	size_t i;

	snprintf(why, wsize, "no capture source gives them");
	for (i = 0; capture_sources[i]; i++) {
		const struct capture_hang_ops *hang = capture_sources[i]->hang;

		if ((capture_on >> i & 1) && hang && hang->stacks &&
		    hang->stacks(out, size, why, wsize) == 0)
			return 0;
	}
	return -1;
}

int capture_hang_gpu_all(struct capture_gpu_hang *g)
{
	size_t i;

	g->n = 0;
	g->more = g->forgotten = 0;
	snprintf(g->note, sizeof g->note, "no GPU capture in this build (CPU only)");
	for (i = 0; capture_sources[i]; i++) {
		const struct capture_hang_ops *hang = capture_sources[i]->hang;

		if (!(capture_on >> i & 1) || !hang || !hang->gpu)
			continue;
		g->note[0] = '\0';
		if (hang->gpu(g) == 1)
			return 1;
		if (!g->note[0])
			snprintf(g->note, sizeof g->note, "%s cannot say",
				 capture_sources[i]->name);
	}
	return 0;
}

bool capture_ended_any(void)
{
	size_t i;

	for (i = 0; capture_sources[i]; i++) {
		const struct capture_hang_ops *hang = capture_sources[i]->hang;

		if ((capture_on >> i & 1) && hang && hang->ended && hang->ended())
			return true;
	}
	return false;
}
