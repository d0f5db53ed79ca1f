/* sortidx — in-place sort of an index array (see sortidx.h). */
#include "sortidx.h"

/* Below this many elements a range is sorted by insertion. */
#define SORTIDX_SMALL 16

static void swap_u32(uint32_t *a, uint32_t *b)
{
	uint32_t t = *a;

	*a = *b;
	*b = t;
}

static void insertion(uint32_t *a, size_t n, sortidx_cmp cmp, void *ctx)
{
	size_t i, j;

	for (i = 1; i < n; i++) {
		uint32_t v = a[i];

		for (j = i; j > 0 && cmp(a[j - 1], v, ctx) > 0; j--)
			a[j] = a[j - 1];
		a[j] = v;
	}
}

/* Moves element i down the max-heap a[0..n). */
static void sift_down(uint32_t *a, size_t i, size_t n, sortidx_cmp cmp, void *ctx)
{
	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= n)
			return;
		if (c + 1 < n && cmp(a[c], a[c + 1], ctx) < 0)
			c++;
		if (cmp(a[i], a[c], ctx) >= 0)
			return;
		swap_u32(&a[i], &a[c]);
		i = c;
	}
}

static void heapsort_u32(uint32_t *a, size_t n, sortidx_cmp cmp, void *ctx)
{
	size_t i;

	for (i = n / 2; i-- > 0;)
		sift_down(a, i, n, cmp, ctx);
	for (i = n; i-- > 1;) {
		swap_u32(&a[0], &a[i]);
		sift_down(a, 0, i, cmp, ctx);
	}
}

/* Quicksort with the median of three as pivot, recursing into the smaller
 * side; heapsort once `depth` splits were not enough (introsort). */
static void intro(uint32_t *a, size_t n, unsigned depth, sortidx_cmp cmp, void *ctx)
{
	while (n > SORTIDX_SMALL) {
		size_t mid = n / 2, i, j;
		uint32_t pivot;

		if (depth-- == 0) {
			heapsort_u32(a, n, cmp, ctx);
			return;
		}
		if (cmp(a[mid], a[0], ctx) < 0)
			swap_u32(&a[mid], &a[0]);
		if (cmp(a[n - 1], a[0], ctx) < 0)
			swap_u32(&a[n - 1], &a[0]);
		if (cmp(a[n - 1], a[mid], ctx) < 0)
			swap_u32(&a[n - 1], &a[mid]);
		pivot = a[mid]; /* a[0] <= pivot <= a[n - 1]: sentinels */
		i = 0;
		j = n - 1;
		for (;;) {
			do
				i++;
			while (cmp(a[i], pivot, ctx) < 0);
			do
				j--;
			while (cmp(pivot, a[j], ctx) < 0);
			if (i >= j)
				break;
			swap_u32(&a[i], &a[j]);
		}
		/* a[0..j] <= pivot <= a[j+1..n) */
		if (j + 1 < n - j - 1) {
			intro(a, j + 1, depth, cmp, ctx);
			a += j + 1;
			n -= j + 1;
		} else {
			intro(a + j + 1, n - j - 1, depth, cmp, ctx);
			n = j + 1;
		}
	}
	insertion(a, n, cmp, ctx);
}

void sortidx_u32(uint32_t *a, size_t n, sortidx_cmp cmp, void *ctx)
{
	unsigned depth = 0;
	size_t m;

	for (m = n; m > 1; m /= 2)
		depth += 2;
	intro(a, n, depth, cmp, ctx);
}

/* Moves element i down the max-heap of values a[0..n). */
static void sift_down_f64(double *a, size_t i, size_t n)
{
	for (;;) {
		size_t c = 2 * i + 1;
		double t;

		if (c >= n)
			return;
		if (c + 1 < n && a[c] < a[c + 1])
			c++;
		if (!(a[i] < a[c]))
			return;
		t = a[i];
		a[i] = a[c];
		a[c] = t;
		i = c;
	}
}

void sortidx_f64(double *a, size_t n)
{
	size_t i;

	for (i = n / 2; i-- > 0;)
		sift_down_f64(a, i, n);
	for (i = n; i-- > 1;) {
		double t = a[0];

		a[0] = a[i];
		a[i] = t;
		sift_down_f64(a, 0, i);
	}
}
