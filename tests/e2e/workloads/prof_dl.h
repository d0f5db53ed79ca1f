/*
 * prof_dl.h — the workloads' view of profhost's C ABI (include/profhost.h):
 * the entry points looked up at run time with dlsym, so a workload runs the
 * same with and without the host (an absent one is a no-op). bind() fills
 * them; call it first. Include in one file of a program.
 */
#ifndef PROF_DL_H
#define PROF_DL_H

#include <dlfcn.h>

static void (*p_step)(void);
static void (*p_push)(const char *);
static void (*p_pop)(void);
static void (*p_mark)(const char *);
static int (*p_dump)(unsigned, const char *); /* NULL without the host */

static void prof_dl_nop(void) {}
static void prof_dl_nop_s(const char *s) { (void)s; }

static void bind(void)
{
	p_step = (void (*)(void))dlsym(RTLD_DEFAULT, "prof_step");
	p_push = (void (*)(const char *))dlsym(RTLD_DEFAULT, "prof_range_push");
	p_pop = (void (*)(void))dlsym(RTLD_DEFAULT, "prof_range_pop");
	p_mark = (void (*)(const char *))dlsym(RTLD_DEFAULT, "prof_mark");
	p_dump = (int (*)(unsigned, const char *))dlsym(RTLD_DEFAULT, "prof_dump");
	if (!p_step) p_step = prof_dl_nop;
	if (!p_push) p_push = prof_dl_nop_s;
	if (!p_pop) p_pop = prof_dl_nop;
	if (!p_mark) p_mark = prof_dl_nop_s;
}

#endif
