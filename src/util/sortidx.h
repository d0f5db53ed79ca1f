/*
 * sortidx — sorts an array of 32-bit indexes, or of values, in place.
 *
 * glibc's qsort_r sorts through a copy of the array (a merge sort): for
 * the index of a window's events, 4 bytes more an event while it sorts.
 * This sort needs no memory beyond the array and a stack of O(log n)
 * frames (introsort: quicksort, heapsort where quicksort degenerates). It
 * is not stable: give cmp a total order (break ties by the index) and the
 * result is the one any sort gives. Any thread; no allocation.
 */
#ifndef PROFHOST_SORTIDX_H
#define PROFHOST_SORTIDX_H

#include <stddef.h>
#include <stdint.h>

/* <0, 0, >0 as a sorts before, with, after b. */
typedef int (*sortidx_cmp)(uint32_t a, uint32_t b, void *ctx);

/* Sorts a[0..n) ascending by cmp. */
void sortidx_u32(uint32_t *a, size_t n, sortidx_cmp cmp, void *ctx);

/* Sorts the values a[0..n) ascending in place (with NaNs among them the
 * order is unspecified): a heapsort, for arrays as large as a window's
 * events, which qsort would copy. */
void sortidx_f64(double *a, size_t n);

#endif
