/* capture — the list of capture sources and the calls over it (capture.h). */
#include "capture.h"

#include "../shim/nvtx.h"
#include "../capture/sampler.h"
#include "host.h"
#include "../capture/python.h"

#ifdef PROFHOST_HAVE_CUDA
#include "../capture/cupti.h"
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

void capture_init_all(struct host *h)
{
	size_t i;

	for (i = 0; capture_sources[i] && i < CAPTURE_MAX; i++) {
		struct err e;

		if (capture_sources[i]->init && capture_sources[i]->init(h, &e) != 0) {
			host_fail(h, &e);
			continue;
		}
		capture_on |= 1u << i;
	}
}

void capture_warmup_all(struct host *h)
{
	size_t i;

	for (i = 0; capture_sources[i]; i++)
		if ((capture_on >> i & 1) && capture_sources[i]->warmup)
			capture_sources[i]->warmup(h);
}

void capture_prepare_all(struct host *h)
{
	size_t i;

	for (i = 0; capture_sources[i]; i++)
		if ((capture_on >> i & 1) && capture_sources[i]->prepare)
			capture_sources[i]->prepare(h);
}

void capture_open_all(struct host *h, uint64_t gen)
{
	size_t i;

	for (i = 0; capture_sources[i]; i++)
		if ((capture_on >> i & 1) && capture_sources[i]->window_open)
			capture_sources[i]->window_open(h, gen);
}

void capture_close_all(struct host *h, uint64_t gen)
{
	size_t i;

	for (i = 0; capture_sources[i]; i++)
		if ((capture_on >> i & 1) && capture_sources[i]->window_close)
			capture_sources[i]->window_close(h, gen);
}

void capture_collect_all(struct host *h, const struct host_job *job,
			 struct trace *t)
{
	size_t i;

	for (i = 0; capture_sources[i]; i++) {
		struct err e;

		if ((capture_on >> i & 1) && capture_sources[i]->collect &&
		    capture_sources[i]->collect(h, job, t, &e) != 0)
			host_fail(h, &e);
	}
}

void capture_fini_all(struct host *h)
{
	size_t i;

	for (i = 0; capture_sources[i]; i++)
		if ((capture_on >> i & 1) && capture_sources[i]->fini)
			capture_sources[i]->fini(h);
}

void capture_step_all(struct host *h, uint64_t step, bool recording)
{
	size_t i;

	for (i = 0; capture_sources[i]; i++)
		if ((capture_on >> i & 1) && capture_sources[i]->step)
			capture_sources[i]->step(h, step, recording);
}
