/*
 * nvtx_stress — T threads push and pop N NVTX ranges each, all at once,
 * inside one NVTX range "stress" on the main thread (a capture range for
 * the test). Range k of thread t is named "t<t>#<k>" from a buffer the
 * thread overwrites right after, as Python passes temporaries; every
 * fourth one holds a nested "leaf". With --names M, range k is named
 * "t<t>#<k mod M>": M names a thread, as a program's ranges repeat.
 *
 * With --wait-for PATH it waits (at most 15 minutes) for PATH to exist
 * before exiting, so a slow machine writes the window while the program
 * runs (scripts/bench.sh, window_memory), not in the exit's bounded wait;
 * then it prints its peak resident size (VmHWM: this program's own, not
 * its parent's before exec as wait4's ru_maxrss may be).
 *
 *   nvtx_stress [--threads T] [--ranges N] [--names M] [--wait-for PATH]
 */
#include <nvtx3/nvToolsExt.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long ranges = 125000;
static long names; /* 0: every range its own name */

static void *hammer(void *arg)
{
	int t = (int)(intptr_t)arg;
	char name[32];
	long k;

	for (k = 0; k < ranges; k++) {
		snprintf(name, sizeof name, "t%d#%ld", t, names > 0 ? k % names : k);
		nvtxRangePushA(name);
		if (k % 4 == 0) {
			nvtxRangePushA("leaf");
			nvtxRangePop();
		}
		memset(name, 'X', sizeof name - 1);
		nvtxRangePop();
	}
	return NULL;
}

int main(int argc, char **argv)
{
	long threads = 8, i;
	const char *wait_for = NULL;
	pthread_t *th;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atol(argv[++i]);
		else if (!strcmp(argv[i], "--ranges") && i + 1 < argc) ranges = atol(argv[++i]);
		else if (!strcmp(argv[i], "--names") && i + 1 < argc) names = atol(argv[++i]);
		else if (!strcmp(argv[i], "--wait-for") && i + 1 < argc) wait_for = argv[++i];
		else {
			fprintf(stderr, "nvtx_stress: unknown argument '%s'\n", argv[i]);
			return 2;
		}
	}
	th = calloc((size_t)threads, sizeof *th);
	nvtxRangePushA("stress");
	for (i = 0; i < threads; i++)
		pthread_create(&th[i], NULL, hammer, (void *)(intptr_t)i);
	for (i = 0; i < threads; i++)
		pthread_join(th[i], NULL);
	nvtxRangePop();
	printf("nvtx_stress: %ld threads x %ld ranges\n", threads, ranges);
	for (i = 0; wait_for && access(wait_for, F_OK) != 0 && i < 15 * 60 * 20; i++) {
		struct timespec ts = { 0, 50000000 };

		nanosleep(&ts, NULL);
	}
	if (wait_for) {
		char line[128];
		FILE *f = fopen("/proc/self/status", "r");

		while (f && fgets(line, sizeof line, f))
			if (!strncmp(line, "VmHWM:", 6))
				printf("nvtx_stress: peak RSS %ld kB\n", atol(line + 6));
		if (f)
			fclose(f);
	}
	free(th);
	return 0;
}
