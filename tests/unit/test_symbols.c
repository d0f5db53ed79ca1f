/*
 * test_symbols — the symbolizer and the synchronous backtrace: names from
 * the ELF symbol table of a PIE executable and of a shared library (load
 * bias), .dynsym when a library is stripped, module+0xoffset when nothing
 * names an address, C++ demangling once a demangler is in the process;
 * and a trace's stacks named, folded and attached to their events.
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>

#include "capture/cpu/sampler.h"
#include "check.h"

/* A local function of this (PIE) executable: not in .dynsym. */
__attribute__((noinline)) static int exe_local(int x)
{
	return x * 7 + 3;
}

static char name[1024], module[256];

static int lookup(struct symbols *s, const void *addr, size_t off)
{
	return symbols_lookup(s, (uint64_t)(uintptr_t)addr + off, name, sizeof name,
			      module, sizeof module);
}

static void test_executable_local_function(struct symbols *s)
{
	CHECK_EQ_INT(lookup(s, (void *)&exe_local, 4), 2);
	CHECK_EQ_STR(name, "exe_local");
	CHECK_EQ_STR(module, "test_symbols");
	CHECK_EQ_INT(exe_local(1), 10);
}

static void test_library_with_symtab(struct symbols *s, void *lib)
{
	void *(*local_addr)(void) = (void *(*)(void))dlsym(lib, "symtest_local_addr");
	void *exported = dlsym(lib, "symtest_exported");

	CHECK(local_addr && exported);
	if (!local_addr || !exported)
		return;
	/* A local function: only .symtab has it, at its address minus the
	 * library's load bias. */
	CHECK_EQ_INT(lookup(s, local_addr(), 2), 2);
	CHECK_EQ_STR(name, "symtest_local");
	CHECK_EQ_STR(module, "libsymtest_full.so");
	CHECK_EQ_INT(lookup(s, exported, 0), 2);
	CHECK_EQ_STR(name, "symtest_exported");
}

static void test_stripped_library(struct symbols *s, void *lib)
{
	void *(*local_addr)(void) = (void *(*)(void))dlsym(lib, "symtest_local_addr");
	void *exported = dlsym(lib, "symtest_exported");
	char expect[128];
	Dl_info info;
	void *local;

	CHECK(local_addr && exported);
	if (!local_addr || !exported)
		return;
	/* Exported: .dynsym still names it. */
	CHECK_EQ_INT(lookup(s, exported, 1), 2);
	CHECK_EQ_STR(name, "symtest_exported");
	/* Local: nothing names it; the offset is the one addr2line takes
	 * (the library is linked at 0, so the address minus the bias). */
	local = local_addr();
	CHECK(dladdr(local, &info) != 0);
	snprintf(expect, sizeof expect, "libsymtest_stripped.so+0x%llx",
		 (unsigned long long)((uintptr_t)local + 1 - (uintptr_t)info.dli_fbase));
	CHECK_EQ_INT(lookup(s, local, 1), 1);
	CHECK_EQ_STR(name, expect);
	CHECK_EQ_STR(module, "libsymtest_stripped.so");
}

static void test_unknown_address(struct symbols *s)
{
	void *anon = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char expect[64];

	CHECK(anon != MAP_FAILED);
	snprintf(expect, sizeof expect, "0x%llx", (unsigned long long)(uintptr_t)anon + 16);
	CHECK_EQ_INT(lookup(s, anon, 16), 0);
	CHECK_EQ_STR(name, expect);
	CHECK_EQ_STR(module, "");
	munmap(anon, 4096);
}

static void test_demangling(struct symbols *s, void *lib)
{
	void *(*cxx_addr)(void) = (void *(*)(void))dlsym(lib, "symtest_cxx_addr");
	bool global = dlsym(RTLD_DEFAULT, "__cxa_demangle") != NULL;
	void *stdcxx;

	CHECK(cxx_addr != NULL);
	if (!cxx_addr)
		return;
	if (!global) { /* (a sanitizer's runtime may bring libstdc++ along) */
		/* No demangler in the process: the name stays mangled. */
		CHECK_EQ_INT(lookup(s, cxx_addr(), 1), 2);
		CHECK_EQ_STR(name, "_ZN8profhost5probeEi");
	}
	/* Loaded RTLD_LOCAL, as Python loads PyTorch's libraries (and their
	 * libstdc++): not in the global scope, found by name. */
	stdcxx = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_LOCAL);
	CHECK(stdcxx != NULL);
	if (!stdcxx)
		return;
	CHECK(global || dlsym(RTLD_DEFAULT, "__cxa_demangle") == NULL);
	symbols_refresh(s);
	CHECK_EQ_INT(lookup(s, cxx_addr(), 1), 2);
	CHECK_EQ_STR(name, "profhost::probe");
	/* The cached name serves a second lookup. */
	CHECK_EQ_INT(lookup(s, cxx_addr(), 3), 2);
	CHECK_EQ_STR(name, "profhost::probe");
}

static void test_function_range(struct symbols *s, void *lib)
{
	void *exported = dlsym(lib, "symtest_exported");
	uint64_t lo = 0, hi = 0;

	CHECK_EQ_INT(symbols_range(s, (uint64_t)(uintptr_t)exported + 1, &lo, &hi), 0);
	CHECK_EQ_INT(lo, (uint64_t)(uintptr_t)exported);
	CHECK(hi > lo + 1 && hi < lo + 4096);
}

/* f1 -> f2 -> f3 takes a stack. */
static uint64_t ips[64];
static int nips;
static bool truncated;

__attribute__((noinline)) static int f3(int depth)
{
	nips = sampler_backtrace_now(ips, depth, &truncated);
	return nips + 1;
}

__attribute__((noinline)) static int f2(int depth)
{
	return f3(depth) + 1;
}

__attribute__((noinline)) static int f1(int depth)
{
	return f2(depth) + 1;
}

/* Index of the first frame named `want` among the stack's names, or -1. */
static int frame_index(struct symbols *s, const char *want)
{
	int i;

	for (i = 0; i < nips; i++) {
		symbols_lookup(s, ips[i] - 1, name, sizeof name, module, sizeof module);
		if (strcmp(name, want) == 0)
			return i;
	}
	return -1;
}

static void test_backtrace_now(struct symbols *s)
{
	int i3, i2, i1;

	CHECK(f1(64) > 3);
	CHECK(!truncated);
	i3 = frame_index(s, "f3");
	i2 = frame_index(s, "f2");
	i1 = frame_index(s, "f1");
	CHECK(i3 >= 0 && i2 == i3 + 1 && i1 == i2 + 1);
	CHECK(frame_index(s, "main") > i1);
	/* Cut short: as many frames as asked, and said so. */
	f1(2);
	CHECK_EQ_INT(nips, 2);
	CHECK(truncated);
}

/* A trace whose stacks are named and attached by symbols_resolve_trace. */
static void test_resolve_trace(struct symbols *s)
{
	struct trace t;
	struct trace_event e = { 0 };
	struct trace_stack st = { 0 };
	long range_stack, cuda_stack;
	const struct trace_event *ev;
	const struct trace_arg *a;

	f1(64);
	CHECK(trace_init(&t) == 0);
	st.kind = TRACE_STACK_RANGE;
	range_stack = trace_add_stack(&t, &st, ips, (size_t)nips, 0);
	st.kind = TRACE_STACK_CUDA;
	st.id = 77;
	cuda_stack = trace_add_stack(&t, &st, ips, (size_t)nips, 0);
	CHECK(range_stack == 0 && cuda_stack == 1);
	/* Two stacks with the same addresses share their frames. */
	CHECK_EQ_INT(t.nframes, nips);
	CHECK_EQ_INT(t.nstack_frames, 2 * nips);

	e.cat = TRACE_CAT_USER_ANNOTATION;
	e.ph = TRACE_PH_COMPLETE;
	e.name = trace_intern(&t, "ranged", 6);
	trace_add_event(&t, &e);
	trace_arg_stack(&t, (uint32_t)range_stack);
	e.cat = TRACE_CAT_CUDA_RUNTIME;
	e.id = 77;
	e.name = trace_intern(&t, "cudaMemcpy", 10);
	trace_add_event(&t, &e);
	trace_arg_int(&t, "bytes", 5);
	e.cat = TRACE_CAT_USER_ANNOTATION;
	e.id = 0;
	trace_add_event(&t, &e); /* so the CUDA event is not the last */

	CHECK_EQ_INT(symbols_resolve_trace(s, &t), 0);
	CHECK(strstr(trace_str(&t, t.stacks[0].folded), "f1;f2;f3") != NULL);
	ev = &t.ev[0];
	CHECK_EQ_INT(ev->nargs, 1);
	a = &t.args[ev->args];
	CHECK_EQ_STR(trace_str(&t, a->key), "stack");
	CHECK_EQ_INT(a->type, TRACE_ARG_STR);
	CHECK(strstr(trace_str(&t, a->v.str), "main;test_resolve_trace;f1;f2;f3;") != NULL);
	ev = &t.ev[1];
	CHECK_EQ_INT(ev->nargs, 2);
	a = &t.args[ev->args];
	CHECK_EQ_STR(trace_str(&t, a[0].key), "bytes");
	CHECK_EQ_INT(a[0].v.i, 5);
	CHECK_EQ_STR(trace_str(&t, a[1].key), "stack");
	CHECK_EQ_INT(a[1].v.str, t.stacks[1].folded);
	CHECK_EQ_INT(t.ev[2].nargs, 0);
	trace_free(&t);
}

static int dummy_append(uint16_t kind, int64_t ts, const void *payload,
			uint32_t len, uint64_t id, uint64_t a)
{
	(void)kind, (void)ts, (void)payload, (void)len, (void)id, (void)a;
	return 0;
}

/* The check before a thread's first fast unwind: a stack through the
 * allocator or the dynamic loader is unsafe, plain code and the rest of
 * libc are not. (Last: unwind_setup makes backtraces skip this program's
 * frames as profhost's own.) */
static void test_unsafe_points(void)
{
	struct sampler_slot slot;
	struct unwind_config cfg = { dummy_append, &slot, 1, 64 };
	void *p;
	uint64_t pc[1];

	CHECK_EQ_INT(unwind_setup(&cfg), 0);
	pc[0] = (uint64_t)(uintptr_t)&exe_local + 4;
	CHECK(!unwind_stack_unsafe(pc, 1));
	p = dlsym(RTLD_DEFAULT, "malloc");
	pc[0] = (uint64_t)(uintptr_t)p + 4;
	CHECK(unwind_stack_unsafe(pc, 1));
	p = dlsym(RTLD_DEFAULT, "free");
	pc[0] = (uint64_t)(uintptr_t)p + 4;
	CHECK(unwind_stack_unsafe(pc, 1));
	p = dlsym(RTLD_DEFAULT, "calloc");
	pc[0] = (uint64_t)(uintptr_t)p + 4;
	CHECK(unwind_stack_unsafe(pc, 1));
	/* Anywhere in the dynamic loader: its ELF header, say. */
	CHECK(getauxval(AT_BASE) != 0);
	pc[0] = (uint64_t)getauxval(AT_BASE) + 4;
	CHECK(unwind_stack_unsafe(pc, 1));
	p = dlsym(RTLD_DEFAULT, "qsort"); /* libc, not the allocator */
	pc[0] = (uint64_t)(uintptr_t)p + 4;
	CHECK(!unwind_stack_unsafe(pc, 1));
}

int main(void)
{
	struct symbols *s = symbols_new();
	void *full = dlopen(SYMTEST_FULL, RTLD_NOW | RTLD_LOCAL);
	void *stripped = dlopen(SYMTEST_STRIPPED, RTLD_NOW | RTLD_LOCAL);

	CHECK(s != NULL);
	CHECK(full != NULL && stripped != NULL);
	if (!s || !full || !stripped)
		return check_done();
	CHECK_EQ_INT(symbols_refresh(s), 0);
	test_executable_local_function(s);
	test_library_with_symtab(s, full);
	test_stripped_library(s, stripped);
	test_unknown_address(s);
	test_function_range(s, full);
	test_backtrace_now(s);
	test_resolve_trace(s);
	test_demangling(s, full);
	test_unsafe_points();
	symbols_free(s);
	return check_done();
}
