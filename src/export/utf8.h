/*
 * utf8 — well-formed UTF-8, for every writer that shows or stores names.
 *
 * Names come from the program (NVTX, ranges, threads, symbols) and may hold
 * any bytes. Writers keep well-formed sequences and replace each maximal
 * ill-formed subpart with one U+FFFD, as Unicode recommends and Python and
 * browsers decode. Pure functions: any thread.
 */
#ifndef PROFHOST_UTF8_H
#define PROFHOST_UTF8_H

#include <stddef.h>

/* U+FFFD in UTF-8, and its length. */
#define UTF8_REPLACEMENT "\xEF\xBF\xBD"
#define UTF8_REPLACEMENT_LEN 3

/* Length of the well-formed sequence starting at s (s[0] >= 0x80, n >= 1
 * bytes available): 2 to 4; or 0, with *bad set to the length of the
 * maximal ill-formed subpart (at least 1) that one U+FFFD replaces.
 * Rejects bad leads, overlongs, surrogates, values above U+10FFFF and
 * truncated sequences. */
size_t utf8_seq(const unsigned char *s, size_t n, size_t *bad);

#endif
