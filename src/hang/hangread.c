/*
 * hangread — a hang report read back (hangread.h).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../util/fsutil.h"
#include "hangread.h"

bool hang_read_latest(const char *rdir, char *name, size_t size)
{
	DIR *d = opendir(rdir);
	struct dirent *de;
	long best = -1, k;
	char *end;

	if (!d)
		return false;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, "hang", 4) != 0)
			continue;
		k = strtol(de->d_name + 4, &end, 10);
		if (end == de->d_name + 4 || strncmp(end, "_step", 5) != 0 || k <= best)
			continue;
		best = k;
		snprintf(name, size, "%s", de->d_name);
	}
	closedir(d);
	return best >= 0;
}

/* The file at `path` (malloc'd, NUL-ended), or NULL: *missing set when it
 * does not exist, else *e says why. */
static char *slurp(const char *path, bool *missing, struct err *e)
{
	struct stat st;
	char *buf;
	int fd = fsutil_open_regular(path, &st);

	*missing = false;
	if (fd == FSUTIL_NOT_REGULAR) {
		err_set(e, "%s is %s, not a regular file", path, fsutil_file_kind(st.st_mode));
		return NULL;
	}
	if (fd < 0) {
		if (errno == ENOENT)
			*missing = true;
		else
			err_set(e, "cannot open %s: %s", path, strerror(errno));
		return NULL;
	}
	buf = fsutil_read_fd(fd, path, HANG_READ_FILE_MAX, NULL, e);
	close(fd);
	return buf;
}

/* The stepping thread's place in one hang.json: its innermost open range
 * and its innermost Python frame (file name without folders), or, with
 * neither, its innermost named native frame. */
static void rank_where(const cJSON *root, char *out, size_t size)
{
	const cJSON *threads = cJSON_GetObjectItemCaseSensitive(root, "threads");
	const cJSON *t, *pick = NULL, *a, *x;
	size_t n = 0;

	snprintf(out, size, "somewhere unknown");
	cJSON_ArrayForEach(t, threads) {
		if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "steps"))) {
			pick = t;
			break;
		}
		if (!pick && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "main")))
			pick = t;
	}
	if (!pick)
		return;
	a = cJSON_GetObjectItemCaseSensitive(pick, "ranges");
	if (cJSON_GetArraySize(a) > 0) {
		x = cJSON_GetObjectItemCaseSensitive(
			cJSON_GetArrayItem(a, cJSON_GetArraySize(a) - 1), "name");
		if (cJSON_IsString(x))
			n = (size_t)snprintf(out, size, "inside `%s`", x->valuestring);
	}
	a = cJSON_GetObjectItemCaseSensitive(pick, "python");
	x = cJSON_GetArrayItem(a, 0);
	if (cJSON_IsString(x) && n < size) {
		/* "func (/a/b/file.py:12)" -> "func (file.py:12)" */
		const char *s = x->valuestring, *open = strchr(s, '(');
		const char *slash = open ? strrchr(open, '/') : NULL;

		if (open && slash)
			snprintf(out + n, size - n, "%sin `%.*s(%s`", n ? ", " : "",
				 (int)(open - s), s, slash + 1);
		else
			snprintf(out + n, size - n, "%sin `%s`", n ? ", " : "", s);
		return;
	}
	if (n)
		return;
	a = cJSON_GetObjectItemCaseSensitive(pick, "native");
	cJSON_ArrayForEach(x, a) {
		/* "0x... symbol+0xoff (lib)": the first with a symbol */
		const char *sp = cJSON_IsString(x) ? strchr(x->valuestring, ' ') : NULL;

		if (sp && sp[1] != '(') {
			snprintf(out, size, "in `%s`", sp + 1);
			return;
		}
	}
}

/* The rank's GPU state from hang.json's "gpu": the kernels it lists in
 * flight (and `more` beyond them), the oldest by launched_s_ago. */
static void gpu_read(const cJSON *root, struct hang_read *out)
{
	const cJSON *gpu = cJSON_GetObjectItemCaseSensitive(root, "gpu");
	const cJSON *list = cJSON_GetObjectItemCaseSensitive(gpu, "in_flight"), *k, *x;
	const char *oldest = "(unnamed kernel)";
	long long n = 0;
	double age = -1;

	x = cJSON_GetObjectItemCaseSensitive(gpu, "note");
	snprintf(out->gpu_name, sizeof out->gpu_name, "%s",
		 !gpu ? "its hang.json has no GPU section"
		 : cJSON_IsString(x) ? x->valuestring : "not said why");
	out->gpu = HANG_READ_GPU_UNKNOWN;
	if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(gpu, "known"))) {
		cJSON_ArrayForEach(k, list) {
			x = cJSON_GetObjectItemCaseSensitive(k, "launched_s_ago");
			n++;
			if (cJSON_IsNumber(x) && x->valuedouble > age) {
				age = x->valuedouble;
				x = cJSON_GetObjectItemCaseSensitive(k, "name");
				oldest = cJSON_IsString(x) ? x->valuestring : "(unnamed kernel)";
			}
		}
		x = cJSON_GetObjectItemCaseSensitive(gpu, "more");
		if (cJSON_IsNumber(x) && x->valuedouble > 0)
			n += (long long)x->valuedouble;
		out->gpu = n ? HANG_READ_GPU_BUSY : HANG_READ_GPU_IDLE;
		snprintf(out->gpu_name, sizeof out->gpu_name, "%s", n ? oldest : "");
	}
	out->kernels = n;
	out->oldest_s = age;
}

int hang_read(const char *path, struct hang_read *out, struct err *e)
{
	cJSON *root;
	const cJSON *x;
	bool missing;
	char *text = slurp(path, &missing, e);

	if (!text)
		return missing ? 1 : -1;
	root = cJSON_Parse(text);
	free(text);
	if (!root)
		return err_set(e, "%s: not valid JSON", path);
	memset(out, 0, sizeof *out);
	rank_where(root, out->where, sizeof out->where);
	x = cJSON_GetObjectItemCaseSensitive(root, "step");
	if (cJSON_IsNumber(x))
		out->step = (long long)x->valuedouble;
	x = cJSON_GetObjectItemCaseSensitive(root, "stalled_s");
	if (cJSON_IsNumber(x))
		out->stalled_s = x->valuedouble;
	x = cJSON_GetObjectItemCaseSensitive(root, "world_size");
	if (cJSON_IsNumber(x))
		out->world_size = (long)x->valuedouble;
	gpu_read(root, out);
	cJSON_Delete(root);
	return 0;
}
