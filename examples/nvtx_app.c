/*
 * nvtx_app — a multi-threaded C program annotated with NVTX3, to run under
 * profhost (it needs no GPU and does not link profhost):
 *
 *   prof run -s examples/nvtx_steps.lua -- build/examples/nvtx_app
 *
 *   nvtx_app [--steps N] [--workers W] [--sleep-us U] [--log FILE]
 *
 * The trainer thread runs N steps. Each step is the range "train_step" of
 * the domain "nvtx_app" (a registered string, category "compute"), holding
 * "forward" (registered, in the domain) and "backward" (a wide string, in
 * NVTX's default domain), a start/end range "handoff" (category "io") that
 * a helper thread ends, and a mark "step_done". W worker threads meanwhile
 * run ranges "task w<i>#<k>" until the trainer is done. Every thread is
 * named with nvtxNameOsThread. Each range sleeps U microseconds (tasks U/4).
 *
 * --log FILE writes one line per range the program opened:
 *   <tid> <begin ns> <end ns> <domain> <name>
 * (CLOCK_MONOTONIC), which the end-to-end test compares with the trace.
 */
#include <nvtx3/nvToolsExt.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CAT_COMPUTE 1
#define CAT_IO 2

struct logged {
	int tid;
	int64_t t0, t1;
	const char *domain;
	char name[48];
};

static long sleep_us = 2000;
static nvtxDomainHandle_t domain;
static nvtxStringHandle_t s_train_step, s_forward;

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static struct logged *log_ev;
static size_t log_n, log_cap;

/* The handoff: the trainer posts a range id, the helper ends it. */
static pthread_mutex_t hand_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hand_cond = PTHREAD_COND_INITIALIZER;
static nvtxRangeId_t hand_id;
static int hand_state; /* 0 idle, 1 posted, 2 ended, 3 quit */
static int hand_tid;
static int64_t hand_t0, hand_t1;

static atomic_int done;

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int gettid_(void)
{
	return (int)syscall(SYS_gettid);
}

static void sleep_for(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
	while (nanosleep(&ts, &ts) != 0)
		;
}

static void log_range(int tid, int64_t t0, int64_t t1, const char *dom, const char *name)
{
	pthread_mutex_lock(&log_lock);
	if (log_n == log_cap) {
		log_cap = log_cap ? log_cap * 2 : 1024;
		log_ev = realloc(log_ev, log_cap * sizeof *log_ev);
		if (!log_ev) {
			perror("nvtx_app");
			exit(1);
		}
	}
	log_ev[log_n].tid = tid;
	log_ev[log_n].t0 = t0;
	log_ev[log_n].t1 = t1;
	log_ev[log_n].domain = dom;
	snprintf(log_ev[log_n].name, sizeof log_ev[log_n].name, "%s", name);
	log_n++;
	pthread_mutex_unlock(&log_lock);
}

/* Attributes for a registered-string range of the app's domain. */
static nvtxEventAttributes_t registered(nvtxStringHandle_t s, uint32_t category)
{
	nvtxEventAttributes_t a;

	memset(&a, 0, sizeof a);
	a.version = NVTX_VERSION;
	a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
	a.category = category;
	a.colorType = NVTX_COLOR_ARGB;
	a.color = 0xff76b900;
	a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
	a.message.registered = s;
	return a;
}

static nvtxEventAttributes_t ascii(const char *s, uint32_t category)
{
	nvtxEventAttributes_t a;

	memset(&a, 0, sizeof a);
	a.version = NVTX_VERSION;
	a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
	a.category = category;
	a.messageType = NVTX_MESSAGE_TYPE_ASCII;
	a.message.ascii = s;
	return a;
}

/* Ends the handoff ranges the trainer posts, on this other thread. */
static void *helper_main(void *arg)
{
	(void)arg;
	nvtxNameOsThreadA((uint32_t)gettid_(), "handoff-helper");
	pthread_mutex_lock(&hand_lock);
	for (;;) {
		while (hand_state != 1 && hand_state != 3)
			pthread_cond_wait(&hand_cond, &hand_lock);
		if (hand_state == 3)
			break;
		pthread_mutex_unlock(&hand_lock);
		sleep_for(sleep_us / 2);
		hand_t1 = now_ns();
		nvtxRangeEnd(hand_id);
		pthread_mutex_lock(&hand_lock);
		hand_state = 2;
		pthread_cond_broadcast(&hand_cond);
	}
	pthread_mutex_unlock(&hand_lock);
	return NULL;
}

static void *worker_main(void *arg)
{
	int w = (int)(intptr_t)arg, tid = gettid_(), k;
	char name[48];

	snprintf(name, sizeof name, "worker-%d", w);
	nvtxNameOsThreadA((uint32_t)tid, name);
	for (k = 0; !atomic_load(&done); k++) {
		int64_t t0, t1;

		/* A temporary name, as Python would pass: the host must copy it. */
		snprintf(name, sizeof name, "task w%d#%d", w, k);
		t0 = now_ns();
		nvtxRangePushA(name);
		sleep_for(sleep_us / 4);
		nvtxRangePop();
		t1 = now_ns();
		log_range(tid, t0, t1, "default", name);
	}
	return NULL;
}

/* One training step on the trainer thread. */
static void step(int tid)
{
	nvtxEventAttributes_t a_step = registered(s_train_step, CAT_COMPUTE);
	nvtxEventAttributes_t a_fwd = registered(s_forward, CAT_COMPUTE);
	nvtxEventAttributes_t a_hand = ascii("handoff", CAT_IO);
	nvtxEventAttributes_t a_mark = ascii("step_done", CAT_COMPUTE);
	int64_t ts0, tf0, tf1, tb0, tb1, ts1;

	ts0 = now_ns();
	nvtxDomainRangePushEx(domain, &a_step);

	tf0 = now_ns();
	nvtxDomainRangePushEx(domain, &a_fwd);
	sleep_for(sleep_us);
	nvtxDomainRangePop(domain);
	tf1 = now_ns();

	tb0 = now_ns();
	nvtxRangePushW(L"backward");
	sleep_for(sleep_us);
	nvtxRangePop();
	tb1 = now_ns();

	/* A start/end range that another thread ends. */
	pthread_mutex_lock(&hand_lock);
	hand_t0 = now_ns();
	hand_id = nvtxRangeStartEx(&a_hand);
	hand_tid = tid;
	hand_state = 1;
	pthread_cond_broadcast(&hand_cond);
	while (hand_state != 2)
		pthread_cond_wait(&hand_cond, &hand_lock);
	hand_state = 0;
	pthread_mutex_unlock(&hand_lock);

	nvtxDomainMarkEx(domain, &a_mark);
	nvtxDomainRangePop(domain);
	ts1 = now_ns();

	log_range(tid, tf0, tf1, "nvtx_app", "forward");
	log_range(tid, tb0, tb1, "default", "backward");
	log_range(hand_tid, hand_t0, hand_t1, "default", "handoff");
	log_range(tid, ts0, ts1, "nvtx_app", "train_step");
}

int main(int argc, char **argv)
{
	long steps = 20, workers = 2, i;
	const char *log_path = NULL;
	pthread_t helper, *wt;
	int tid = gettid_();

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atol(argv[++i]);
		else if (!strcmp(argv[i], "--workers") && i + 1 < argc) workers = atol(argv[++i]);
		else if (!strcmp(argv[i], "--sleep-us") && i + 1 < argc) sleep_us = atol(argv[++i]);
		else if (!strcmp(argv[i], "--log") && i + 1 < argc) log_path = argv[++i];
		else {
			fprintf(stderr, "nvtx_app: unknown argument '%s'\n", argv[i]);
			return 2;
		}
	}

	domain = nvtxDomainCreateA("nvtx_app");
	s_train_step = nvtxDomainRegisterStringA(domain, "train_step");
	s_forward = nvtxDomainRegisterStringA(domain, "forward");
	nvtxDomainNameCategoryA(domain, CAT_COMPUTE, "compute");
	nvtxNameCategoryA(CAT_IO, "io");
	nvtxNameOsThreadA((uint32_t)tid, "trainer");

	wt = calloc((size_t)workers, sizeof *wt);
	pthread_create(&helper, NULL, helper_main, NULL);
	for (i = 0; i < workers; i++)
		pthread_create(&wt[i], NULL, worker_main, (void *)(intptr_t)i);
	for (i = 0; i < steps; i++)
		step(tid);
	atomic_store(&done, 1);
	for (i = 0; i < workers; i++)
		pthread_join(wt[i], NULL);
	pthread_mutex_lock(&hand_lock);
	hand_state = 3;
	pthread_cond_broadcast(&hand_cond);
	pthread_mutex_unlock(&hand_lock);
	pthread_join(helper, NULL);

	if (log_path) {
		FILE *f = fopen(log_path, "w");
		if (!f) {
			perror(log_path);
			return 1;
		}
		for (i = 0; i < (long)log_n; i++)
			fprintf(f, "%d %lld %lld %s %s\n", log_ev[i].tid,
				(long long)log_ev[i].t0, (long long)log_ev[i].t1,
				log_ev[i].domain, log_ev[i].name);
		fclose(f);
	}
	printf("nvtx_app: %ld steps, %ld workers\n", steps, workers);
	free(wt);
	free(log_ev);
	return 0;
}
