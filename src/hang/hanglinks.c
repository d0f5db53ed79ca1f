/*
 * hanglinks — the hang reports a window overlaps (hanglinks.h).
 */
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../util/fsutil.h"
#include "hanglinks.h"

/* Whether `name` is a hang report's folder (hang<K>_step<N>, or with the
 * .pid<P> a second process of the same rank gets); *k its K. */
static bool hang_folder(const char *name, uint32_t *k)
{
	char *end;
	unsigned long v;

	if (strncmp(name, "hang", 4) != 0 || name[4] < '0' || name[4] > '9')
		return false;
	v = strtoul(name + 4, &end, 10);
	if (strncmp(end, "_step", 5) != 0 || end[5] < '0' || end[5] > '9' ||
	    v > UINT32_MAX)
		return false;
	*k = (uint32_t)v;
	return true;
}

/* A number member of `o`, or `dflt`. */
static double num(const cJSON *o, const char *key, double dflt)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsNumber(x) ? x->valuedouble : dflt;
}

/* Reads <rank_dir>/<name>/hang.json into *l when it is process pid's and
 * its stall overlaps [start_ts, end_ts]. */
static bool read_link(const char *rank_dir, const char *name, int32_t pid,
		      int64_t start_ts, int64_t end_ts, struct hang_link *l)
{
	char path[4096];
	struct stat st;
	struct err e;
	cJSON *root;
	char *text;
	double since, at;
	bool ok;
	int fd;

	if ((size_t)snprintf(path, sizeof path, "%s/%s/hang.json", rank_dir, name) >=
	    sizeof path || strlen(name) >= sizeof l->dir)
		return false;
	fd = fsutil_open_regular(path, &st);
	if (fd < 0)
		return false;
	text = fsutil_read_fd(fd, path, HANGLINKS_FILE_MAX, NULL, &e);
	close(fd);
	if (!text)
		return false;
	root = cJSON_Parse(text);
	free(text);
	if (!root)
		return false;
	since = num(root, "since_ts", -1);
	at = num(root, "report_ts", -1);
	/* the stalled step began before the window's end, and the window
	 * did not end before the report began being written */
	ok = (int32_t)num(root, "pid", -1) == pid && since >= 0 && at >= since &&
	     since < (double)end_ts && at >= (double)start_ts;
	if (ok) {
		l->step = (uint64_t)num(root, "step", 0);
		l->stalled_s = num(root, "stalled_s", 0);
		snprintf(l->dir, sizeof l->dir, "%s", name);
	}
	cJSON_Delete(root);
	return ok;
}

size_t hanglinks_find(const char *window_dir, const struct trace_meta *m,
		      struct hang_link *out, size_t max)
{
	int64_t start_ts = m->start_ts + m->monotonic_offset_ns;
	int64_t end_ts = m->end_ts + m->monotonic_offset_ns;
	char rank_dir[4096];
	char *slash;
	DIR *d;
	struct dirent *de;
	struct hang_link l;
	size_t n = 0, i, len = strlen(window_dir);

	/* "rank0/window0_steps1-4/" -> "rank0"; "window0_steps1-4" -> "." */
	while (len > 1 && window_dir[len - 1] == '/')
		len--;
	if (len >= sizeof rank_dir)
		return 0;
	memcpy(rank_dir, window_dir, len);
	rank_dir[len] = '\0';
	slash = strrchr(rank_dir, '/');
	if (!slash)
		snprintf(rank_dir, sizeof rank_dir, ".");
	else if (slash == rank_dir)
		rank_dir[1] = '\0'; /* "/w" -> "/" */
	else
		*slash = '\0';
	d = opendir(rank_dir);
	if (!d)
		return 0;
	while ((de = readdir(d))) {
		if (!hang_folder(de->d_name, &l.hang) ||
		    !read_link(rank_dir, de->d_name, m->pid, start_ts, end_ts, &l))
			continue;
		/* kept by hang number: the lowest `max` */
		for (i = n; i > 0 && out[i - 1].hang > l.hang; i--)
			if (i < max)
				out[i] = out[i - 1];
		if (i < max) {
			out[i] = l;
			if (n < max)
				n++;
		}
	}
	closedir(d);
	return n;
}
