/*
 * test_wallclock — the wall clock's repeat stores (src/capture/cpu/wallclock.c).
 * A tick counts an idle thread's last sample again, into the store of the
 * window or recorder segment open; a merge adds each repeat as a copy of
 * the sample it repeats. Stores are few: a new one forgets the recorder's
 * given-back segments first, but a dump's segments stay until its collect
 * however many segments open meanwhile, and lose that mark once a later
 * collect shows no dump waits for them.
 */
#include "check.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "capture/cpu/sampler.h"
#include "events/trace.h"

#define REF_TS 1000 /* the sleeper's one recorded sample */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int32_t sleeper_tid;
static int stop;

/* A thread that only waits: its CPU time stands still. */
static void *sleeper(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	sleeper_tid = (int32_t)syscall(SYS_gettid);
	pthread_cond_broadcast(&cv);
	while (!stop)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	return NULL;
}

/* One tick of window `gen` at `now` over a slot for the sleeper, whose
 * last sample (REF_TS) is in `gen`: it is counted again into gen's store. */
static void tick_into(uint64_t gen, int64_t now)
{
	struct sampler_slot sl;
	struct timespec cpu;

	memset(&sl, 0, sizeof sl);
	clock_gettime(wallclock_thread_cpu_clock(sleeper_tid), &cpu);
	atomic_store(&sl.tid, sleeper_tid);
	atomic_store(&sl.last_ts, REF_TS);
	atomic_store(&sl.cpu_after, (int64_t)cpu.tv_sec * 1000000000 + cpu.tv_nsec);
	sl.wall_gen = gen;
	sl.wall_tick = 0;
	wallclock_tick(&sl, 1, gen, 0, now, 1);
}

/* How many repeats wallclock_merge adds for window `gen` to a trace
 * holding the sleeper's sample. */
static int merged(uint64_t gen)
{
	const uint64_t pcs[] = { 0x100, 0x200 };
	struct trace_stack s = { 0 };
	struct trace t;
	uint64_t lost = 0;
	int n;

	CHECK_EQ_INT(trace_init(&t), 0);
	s.ts = REF_TS;
	s.tid = sleeper_tid;
	s.kind = TRACE_STACK_SAMPLE;
	s.weight = 1;
	CHECK(trace_add_stack(&t, &s, pcs, 2, 1) >= 0);
	CHECK_EQ_INT(wallclock_merge(gen, INT64_MIN, &t, &lost), 0);
	CHECK_EQ_INT(lost, 0);
	n = (int)t.nstacks - 1;
	trace_free(&t);
	return n;
}

static void test_a_tick_repeats_an_idle_thread(void)
{
	wallclock_open(1, false);
	tick_into(1, 2000);
	tick_into(1, 3000);
	CHECK_EQ_INT(merged(1), 2);
	CHECK_EQ_INT(merged(1), 0); /* forgotten by the merge */
	wallclock_fini();
}

static void test_dump_outlives_rotations(void)
{
	uint64_t gen;

	/* 2 and 3 are a dump's segments; 1 was given back before it */
	for (gen = 1; gen <= 3; gen++) {
		wallclock_open(gen, true);
		tick_into(gen, (int64_t)gen * 10000);
	}
	wallclock_rec_dumped();
	/* the recorder goes on, with short steps, before the collect */
	for (gen = 10; gen < 30; gen++) {
		wallclock_open(gen, true);
		tick_into(gen, (int64_t)gen * 10000);
	}
	CHECK_EQ_INT(merged(10), 0); /* given back: forgotten first */
	CHECK_EQ_INT(merged(2), 1);
	CHECK_EQ_INT(merged(3), 1);
	/* 1 lost its mark at that collect: the next segments forget it */
	for (gen = 30; gen < 40; gen++)
		wallclock_open(gen, true);
	CHECK_EQ_INT(merged(1), 0);
	wallclock_fini();
}

int main(void)
{
	pthread_t th;

	pthread_mutex_lock(&mu);
	pthread_create(&th, NULL, sleeper, NULL);
	while (!sleeper_tid)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);

	test_a_tick_repeats_an_idle_thread();
	test_dump_outlives_rotations();

	pthread_mutex_lock(&mu);
	stop = 1;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	pthread_join(th, NULL);
	return check_done();
}
