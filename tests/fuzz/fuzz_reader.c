/*
 * fuzz_reader — a fuzz target for the offline readers: capture.phb
 * (phb_parse), salvage files (salvage_open, salvage_build) and Chrome
 * traces (trace_json_parse). Input that starts with the phb magic goes to
 * the first; input that starts with the salvage magic is written to a
 * temporary file, zero-filled to the salvage header's size (so that short
 * inputs reach past the size check), and read as a salvage file left by a
 * dead process; anything else goes to the JSON reader. Every input must
 * either parse or fail with one line naming the input; a crash, a leak or
 * a sanitizer report is a bug. A salvage file's run folder is untrusted:
 * when outdir_untrusted_text() accepts it, it must be absolute and free of
 * ".", ".." and empty parts and of control characters (checked here by
 * another route); nothing is ever written where it points.
 *
 * libFuzzer: configure with -DPROFHOST_FUZZ=ON and CC=clang, then
 *   build/tests/fuzz/fuzz_reader_libfuzzer tests/fuzz/corpus
 * AFL-style (any compiler): the replay driver reads the files named on its
 * command line, or stdin when there are none:
 *   afl-fuzz -i tests/fuzz/corpus -o findings -- build/tests/bin/fuzz_reader @@
 * ctest runs the replay driver over tests/fuzz/corpus.
 */
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "events/trace.h"
#include "export/outdir.h"
#include "read/phb_read.h"
#include "salvage/salvage_read.h"
#include "read/trace_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The temporary file salvage inputs are written to (made on first use,
 * removed at exit). */
static char salvage_path[64];

static void salvage_path_remove(void)
{
	unlink(salvage_path);
}

/* Aborts unless `path`, which outdir_untrusted_text() accepted, is an
 * absolute path of printable characters with no ".", ".." or empty part. */
static void check_accepted_path(const char *path)
{
	const char *p = path;
	size_t n;

	if (path[0] != '/')
		goto bad;
	for (; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			goto bad;
	if (strcmp(path, "/") == 0)
		return;
	for (p = path + 1;; p += n + 1) {
		n = strcspn(p, "/");
		if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			goto bad;
		if (!p[n])
			return;
	}
bad:
	fprintf(stderr, "untrusted run folder accepted: '%s'\n", path);
	abort();
}

/* Aborts unless the message names `name` on one line. */
static void check_message(const struct err *e, const char *name)
{
	if (!strstr(e->msg, name) || strchr(e->msg, '\n')) {
		fprintf(stderr, "bad error message: %s\n", e->msg);
		abort();
	}
}

/* Reads data[0, size) as a salvage file (see the top). */
static void fuzz_salvage(const uint8_t *data, size_t size)
{
	struct salvage_file f;
	struct trace t;
	struct err e;
	char run_dir[sizeof f.hd->run_dir];
	int fd;

	if (!salvage_path[0]) {
		snprintf(salvage_path, sizeof salvage_path, "/tmp/fuzz_salvage_XXXXXX");
		fd = mkstemp(salvage_path);
		if (fd < 0) {
			perror("mkstemp");
			abort();
		}
		close(fd);
		atexit(salvage_path_remove);
	}
	fd = open(salvage_path, O_WRONLY | O_TRUNC);
	if (fd < 0 || write(fd, data, size) != (ssize_t)size ||
	    (size < SALV_HEADER_BYTES && ftruncate(fd, (off_t)SALV_HEADER_BYTES) != 0)) {
		perror(salvage_path);
		abort();
	}
	close(fd);
	e.msg[0] = '\0';
	if (salvage_open(salvage_path, &f, &e) != 0) {
		check_message(&e, salvage_path);
		return;
	}
	snprintf(run_dir, sizeof run_dir, "%.*s", (int)sizeof run_dir - 1, f.hd->run_dir);
	if (outdir_untrusted_text(run_dir, &e) == 0)
		check_accepted_path(run_dir);
	else if (strchr(e.msg, '\n'))
		check_message(&e, "");
	if (salvage_recording(&f) && trace_init(&t) == 0) {
		salvage_build(&f, "after its process ended", &t, &e);
		trace_free(&t);
	}
	salvage_close(&f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct trace t;
	struct err e;
	int rc;

	if (size >= 8 && memcmp(data, SALV_MAGIC, 8) == 0) {
		fuzz_salvage(data, size);
		return 0;
	}
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
