/*
 * nvtx_stress — T threads push and pop N NVTX ranges each, all at once,
 * inside one NVTX range "stress" on the main thread (a capture range for
 * the test). Range k of thread t is named "t<t>#<k>" from a buffer the
 * thread overwrites right after, as Python passes temporaries; every
 * fourth one holds a nested "leaf".
 *
 *   nvtx_stress [--threads T] [--ranges N]
 */
#include <nvtx3/nvToolsExt.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long ranges = 125000;

static void *hammer(void *arg)
{
	int t = (int)(intptr_t)arg;
	char name[32];
	long k;

	for (k = 0; k < ranges; k++) {
		snprintf(name, sizeof name, "t%d#%ld", t, k);
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
	pthread_t *th;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atol(argv[++i]);
		else if (!strcmp(argv[i], "--ranges") && i + 1 < argc) ranges = atol(argv[++i]);
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
	free(th);
	return 0;
}
