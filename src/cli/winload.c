/*
 * winload — one saved window read back for `prof report` and its views
 * across ranks (see winload.h).
 */
#include <dirent.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../events/trace.h"
#include "../export/phb.h"
#include "../export/stacks.h"
#include "../read/phb_read.h"
#include "../read/readfile.h"
#include "../read/trace_json.h"
#include "../util/demangle.h"
#include "../common/err.h"
#include "winload.h"

/* capture.phb files are read whole; this bounds them. */
#define WINLOAD_PHB_MAX ((size_t)16 << 30)

/* Whether `path` is a regular file (links followed). */
static bool is_file(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

bool winload_is_window(const char *dir)
{
	char p[PATH_MAX];

	snprintf(p, sizeof p, "%s/%s", dir, PHB_FILE);
	if (is_file(p))
		return true;
	snprintf(p, sizeof p, "%s/trace.json", dir);
	if (is_file(p))
		return true;
	snprintf(p, sizeof p, "%s/trace.json.gz", dir);
	return is_file(p);
}

/* readfile's sniff function: a capture.phb may hold WINLOAD_PHB_MAX bytes,
 * a JSON trace TRACE_JSON_MAX_BYTES; anything else is refused from its
 * first bytes, before the rest is read or inflated. */
static int sniff(const char *head, size_t n, const char *path, struct readfile_kind *k,
		 struct err *e)
{
	size_t i = 0;

	if (phb_is_phb(head, n)) {
		k->max = WINLOAD_PHB_MAX;
		k->what = "capture data";
		k->hint = "";
		return 0;
	}
	while (i < n && (head[i] == ' ' || head[i] == '\n' || head[i] == '\r' ||
			 head[i] == '\t'))
		i++;
	if (n == 0)
		return err_set(e, "%s: empty file at offset 0", path);
	if (i < n && head[i] != '{' && head[i] != '[')
		return err_set(e, "%s: neither a profhost capture (capture.phb) nor a JSON "
			       "trace: unexpected byte 0x%02x at offset %zu", path,
			       (unsigned char)head[i], i);
	k->max = TRACE_JSON_MAX_BYTES;
	k->what = "JSON";
	k->hint = " (prof report parses JSON whole; use the window's capture.phb)";
	return 0;
}

int winload_read(const char *path, struct trace *t, char *dir, size_t dsize, struct err *e)
{
	char file[PATH_MAX];
	struct stat st;
	struct readfile_buf in;
	size_t skipped = 0, k;
	int rc;

	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		snprintf(dir, dsize, "%s", path);
		snprintf(file, sizeof file, "%s/%s", path, PHB_FILE);
		if (!is_file(file))
			snprintf(file, sizeof file, "%s/trace.json", path);
		if (!is_file(file))
			snprintf(file, sizeof file, "%s/trace.json.gz", path);
	} else {
		const char *slash = strrchr(path, '/');

		snprintf(file, sizeof file, "%s", path);
		if (slash)
			snprintf(dir, dsize, "%.*s", (int)(slash - path), path);
		else
			snprintf(dir, dsize, ".");
	}
	if (readfile_all(file, sniff, &in, e) != 0)
		return -1;
	if (phb_is_phb(in.data, in.len)) {
		rc = phb_parse(in.data, in.len, file, t, e);
	} else {
		for (k = 0; k < in.len && (in.data[k] == ' ' || in.data[k] == '\n' ||
					   in.data[k] == '\r' || in.data[k] == '\t'); k++)
			;
		if (k == in.len)
			rc = err_set(e, "%s: no JSON in it (only white space)", file);
		else
			rc = trace_json_parse(in.data, in.len, file, t, &skipped, e);
	}
	readfile_release(&in);
	/* A trace written by a process without a C++ demangler holds mangled
	 * names: name them here, as the process would have. */
	if (rc == 0 && stacks_demangle_names(t, demangle_find(true)) != 0)
		rc = err_set(e, "%s: out of memory naming its C++ functions", file);
	if (rc == 0)
		trace_sort(t); /* profhost wrote it sorted: then only a check */
	return rc;
}

long winload_highest_rank(const char *run)
{
	DIR *d = opendir(run);
	struct dirent *de;
	long hi = -1, r;
	char *end;

	if (!d)
		return -1;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, "rank", 4) != 0)
			continue;
		r = strtol(de->d_name + 4, &end, 10);
		if (end != de->d_name + 4 && !*end && r > hi && r < (1L << 30))
			hi = r;
	}
	closedir(d);
	return hi;
}
