/*
 * fuzz_reader — a fuzz target for the offline readers: capture.phb
 * (phb_parse) and Chrome traces (trace_json_parse). Input that starts with
 * the phb magic goes to the first, anything else to the second. Every
 * input must either parse or fail with one line naming the input; a crash,
 * a leak or a sanitizer report is a bug.
 *
 * libFuzzer: configure with -DPROFHOST_FUZZ=ON and CC=clang, then
 *   build/tests/fuzz/fuzz_reader_libfuzzer tests/fuzz/corpus
 * AFL-style (any compiler): the replay driver reads the files named on its
 * command line, or stdin when there are none:
 *   afl-fuzz -i tests/fuzz/corpus -o findings -- build/tests/bin/fuzz_reader @@
 * ctest runs the replay driver over tests/fuzz/corpus.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "events/trace.h"
#include "read/phb_read.h"
#include "read/trace_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct trace t;
	struct err e;
	int rc;

	if (trace_init(&t) != 0)
		return 0;
	e.msg[0] = '\0';
	if (phb_is_phb(data, size)) {
		rc = phb_parse(data, size, "input", &t, &e);
	} else {
		/* cJSON wants the text NUL-terminated past its length */
		char *copy = malloc(size + 1);

		if (!copy) {
			trace_free(&t);
			return 0;
		}
		memcpy(copy, data, size);
		copy[size] = '\0';
		rc = trace_json_parse(copy, size, "input", &t, NULL, &e);
		free(copy);
	}
	if (rc != 0 && (strncmp(e.msg, "input: ", 7) != 0 || strchr(e.msg, '\n'))) {
		fprintf(stderr, "bad error message: %s\n", e.msg);
		abort();
	}
	trace_free(&t);
	return 0;
}

#ifndef PROFHOST_LIBFUZZER
/* Replays files (argv) or stdin through the target. */
static int replay(FILE *f, const char *name)
{
	size_t cap = 1 << 16, n = 0, got;
	uint8_t *buf = malloc(cap);

	if (!buf)
		return 1;
	while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
		n += got;
		if (n == cap) {
			uint8_t *g = realloc(buf, cap *= 2);

			if (!g) {
				free(buf);
				return 1;
			}
			buf = g;
		}
	}
	LLVMFuzzerTestOneInput(buf, n);
	free(buf);
	(void)name;
	return 0;
}

int main(int argc, char **argv)
{
	int i, runs = 0;

	if (argc < 2)
		return replay(stdin, "stdin");
	for (i = 1; i < argc; i++) {
		FILE *f = fopen(argv[i], "rb");

		if (!f) {
			perror(argv[i]);
			return 1;
		}
		if (replay(f, argv[i]) != 0)
			return 1;
		fclose(f);
		runs++;
	}
	printf("%d passed, 0 failed\n", runs);
	return 0;
}
#endif
