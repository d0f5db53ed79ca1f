/*
 * cupti_load — finds libcupti and opens it with dlopen (never linked).
 *
 * A process must never hold two CUPTIs (PyTorch wheels bring their own):
 * a libcupti the process has already mapped is reused first. Then
 * PROF_CUPTI_LIB, $CUDA_HOME, the usual toolkit roots and the CUDA wheels
 * of a Python in the process. See struct cupti_search.
 */
#include "cupti_internal.h"

#include <dlfcn.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Names a wheel or toolkit directory may hold libcupti under, best first. */
static const char *const lib_names[] = {
	"libcupti.so.13", "libcupti.so", NULL
};

/* Subdirectories of a toolkit root that may hold them. */
static const char *const root_dirs[] = {
	"lib64", "extras/CUPTI/lib64", "lib", "targets/x86_64-linux/lib",
	"targets/sbsa-linux/lib", NULL
};

/* Subdirectories of a site-packages that the CUDA wheels use. */
static const char *const wheel_dirs[] = {
	"nvidia/cu13/lib", "nvidia/cuda_cupti/lib", NULL
};

/* A growing "where I looked" list for the not-found message. */
struct looked {
	char text[1024];
	size_t len;
};

static void looked_add(struct looked *l, const char *what)
{
	int n;

	if (l->len >= sizeof l->text - 1)
		return;
	n = snprintf(l->text + l->len, sizeof l->text - l->len, "%s%s",
		     l->len ? ", " : "", what);
	if (n > 0)
		l->len += (size_t)n;
	if (l->len > sizeof l->text - 1)
		l->len = sizeof l->text - 1;
}

static bool is_file(const char *p)
{
	struct stat st;

	return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Resolves every function; the library is unusable without the required
 * ones. Returns 0, or -1 with *e naming the missing function. */
static int resolve(struct cupti_fns *f, struct err *e)
{
	struct {
		void **slot;
		const char *name;
		bool required;
	} syms[] = {
		{ (void **)&f->GetVersion, "cuptiGetVersion", true },
		{ (void **)&f->GetResultString, "cuptiGetResultString", true },
		{ (void **)&f->GetCallbackName, "cuptiGetCallbackName", true },
		{ (void **)&f->Subscribe, "cuptiSubscribe", true },
		{ (void **)&f->Unsubscribe, "cuptiUnsubscribe", true },
		{ (void **)&f->EnableCallback, "cuptiEnableCallback", true },
		{ (void **)&f->SetThreadIdType, "cuptiSetThreadIdType", true },
		{ (void **)&f->ActivityRegisterTimestampCallback,
		  "cuptiActivityRegisterTimestampCallback", true },
		{ (void **)&f->ActivityRegisterCallbacks, "cuptiActivityRegisterCallbacks", true },
		{ (void **)&f->ActivityEnable, "cuptiActivityEnable", true },
		{ (void **)&f->ActivityDisable, "cuptiActivityDisable", true },
		{ (void **)&f->ActivityFlushAll, "cuptiActivityFlushAll", true },
		{ (void **)&f->ActivityGetNextRecord, "cuptiActivityGetNextRecord", true },
		{ (void **)&f->ActivityGetNumDroppedRecords,
		  "cuptiActivityGetNumDroppedRecords", true },
		{ (void **)&f->ActivityPushExternalCorrelationId,
		  "cuptiActivityPushExternalCorrelationId", true },
		{ (void **)&f->ActivityPopExternalCorrelationId,
		  "cuptiActivityPopExternalCorrelationId", true },
		{ (void **)&f->ActivityEnableLatencyTimestamps,
		  "cuptiActivityEnableLatencyTimestamps", false },
		{ (void **)&f->GetDeviceId, "cuptiGetDeviceId", false },
		{ (void **)&f->GetStreamIdEx, "cuptiGetStreamIdEx", false },
		{ (void **)&f->Finalize, "cuptiFinalize", true },
	};
	size_t i;

	for (i = 0; i < sizeof syms / sizeof syms[0]; i++) {
		*syms[i].slot = dlsym(f->handle, syms[i].name);
		if (!*syms[i].slot && syms[i].required)
			return err_set(e, "%s has no %s: not a usable CUPTI", f->path,
				       syms[i].name);
	}
	return 0;
}

/* Opens `path` (flags: RTLD_NOLOAD to only reuse). Returns 0, or -1 with
 * the loader's message in *e. */
static int open_lib(struct cupti_fns *f, const char *path, int flags, struct err *e)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | flags);

	if (!h)
		return err_set(e, "cannot load %s: %s", path, dlerror());
	f->handle = h;
	snprintf(f->path, sizeof f->path, "%s", path);
	if (resolve(f, e) != 0) {
		dlclose(h);
		f->handle = NULL;
		return -1;
	}
	return 0;
}

/* The path of a mapped libcupti in the maps file, or -1. `site` collects
 * the site-packages directories of mapped files (for the wheel search). */
static int from_maps(const char *maps, char *out, size_t size, char sites[][PATH_MAX],
		     size_t *nsites, size_t max_sites)
{
	FILE *f = fopen(maps, "r");
	char line[PATH_MAX + 256];
	int found = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof line, f)) {
		char *path = strchr(line, '/'), *base, *sp;
		size_t n;

		if (!path)
			continue;
		path[strcspn(path, "\n")] = '\0';
		base = strrchr(path, '/') + 1;
		if (found < 0 && strncmp(base, "libcupti", 8) == 0 && strstr(base, ".so")) {
			snprintf(out, size, "%s", path);
			found = 0;
		}
		sp = strstr(path, "/site-packages/");
		if (!sp)
			sp = strstr(path, "/dist-packages/");
		if (sp && *nsites < max_sites) {
			size_t i;

			n = (size_t)(sp - path) + 14;
			if (n >= PATH_MAX)
				continue;
			for (i = 0; i < *nsites; i++)
				if (strlen(sites[i]) == n && !strncmp(sites[i], path, n))
					break;
			if (i == *nsites) {
				memcpy(sites[*nsites], path, n);
				sites[*nsites][n] = '\0';
				(*nsites)++;
			}
		}
	}
	fclose(f);
	return found;
}

/* Tries dir/<sub>/<name> for each sub and name. 0 when one opened. */
static int try_dir(struct cupti_fns *f, const char *dir, const char *const *subs,
		   struct err *e, bool *failed)
{
	size_t i, j;
	char path[PATH_MAX];

	for (i = 0; subs[i]; i++)
		for (j = 0; lib_names[j]; j++) {
			if (snprintf(path, sizeof path, "%s/%s/%s", dir, subs[i],
				     lib_names[j]) >= (int)sizeof path || !is_file(path))
				continue;
			if (open_lib(f, path, 0, e) == 0)
				return 0;
			*failed = true; /* keep the first failure's message */
			return -1;
		}
	return -1;
}

enum cupti_load_rc cupti_load(struct cupti_fns *f, const struct cupti_search *s,
			      struct err *e)
{
	char path[PATH_MAX], sites[16][PATH_MAX];
	size_t nsites = 0, i;
	struct looked l = { .len = 0 };
	bool failed = false;

	memset(f, 0, sizeof *f);
	e->msg[0] = '\0';
	if (s->maps && from_maps(s->maps, path, sizeof path, sites, &nsites, 16) == 0) {
		if (open_lib(f, path, RTLD_NOLOAD, e) == 0) {
			f->reused = true;
			return CUPTI_LOAD_OK;
		}
		return CUPTI_LOAD_FAILED;
	}
	looked_add(&l, "the process (no libcupti loaded)");
	if (s->env_lib && *s->env_lib) {
		struct err why;

		if (open_lib(f, s->env_lib, 0, &why) == 0)
			return CUPTI_LOAD_OK;
		err_set(e, "PROF_CUPTI_LIB: %s", why.msg);
		return CUPTI_LOAD_FAILED;
	}
	looked_add(&l, "PROF_CUPTI_LIB (unset)");
	if (s->cuda_home && *s->cuda_home) {
		if (try_dir(f, s->cuda_home, root_dirs, e, &failed) == 0)
			return CUPTI_LOAD_OK;
		if (failed)
			return CUPTI_LOAD_FAILED;
		char what[PATH_MAX + 16];

		snprintf(what, sizeof what, "CUDA_HOME=%s", s->cuda_home);
		looked_add(&l, what);
	} else {
		looked_add(&l, "CUDA_HOME (unset)");
	}
	for (i = 0; s->roots && s->roots[i]; i++) {
		if (try_dir(f, s->roots[i], root_dirs, e, &failed) == 0)
			return CUPTI_LOAD_OK;
		if (failed)
			return CUPTI_LOAD_FAILED;
		looked_add(&l, s->roots[i]);
	}
	for (i = 0; s->sites && s->sites[i] && nsites < 16; i++)
		snprintf(sites[nsites++], PATH_MAX, "%s", s->sites[i]);
	if (s->virtual_env && *s->virtual_env && nsites < 16) {
		glob_t g;

		snprintf(path, sizeof path, "%s/lib/python3*/site-packages", s->virtual_env);
		if (glob(path, 0, NULL, &g) == 0) {
			for (i = 0; i < g.gl_pathc && nsites < 16; i++)
				snprintf(sites[nsites++], PATH_MAX, "%s", g.gl_pathv[i]);
			globfree(&g);
		}
	}
	for (i = 0; i < nsites; i++) {
		if (try_dir(f, sites[i], wheel_dirs, e, &failed) == 0)
			return CUPTI_LOAD_OK;
		if (failed)
			return CUPTI_LOAD_FAILED;
		char what[PATH_MAX + 32];

		snprintf(what, sizeof what, "%s/nvidia/{cu13,cuda_cupti}", sites[i]);
		looked_add(&l, what);
	}
	if (!nsites)
		looked_add(&l, "no Python CUDA wheels in the process");
	err_set(e, "no libcupti found (looked in: %s)", l.text);
	return CUPTI_LOAD_NOT_FOUND;
}

void cupti_unload(struct cupti_fns *f)
{
	if (f->handle)
		dlclose(f->handle);
	memset(f, 0, sizeof *f);
}

const char *cupti_result_name(const struct cupti_fns *f, CUptiResult rc, char *buf,
			      size_t size)
{
	const char *s = NULL;

	if (f->GetResultString && f->GetResultString(rc, &s) == CUPTI_SUCCESS && s)
		return s;
	snprintf(buf, size, "CUPTI error %d", (int)rc);
	return buf;
}
