/*
 * symbols — code addresses to function names (symbols.c): per-module
 * tables from the ELF .symtab (else .dynsym), C++ names demangled and
 * shortened. Used by the CPU sampler on the host thread (the live
 * process's modules) and by the salvage reader (a dead process's modules,
 * from its salvage file's table). One struct symbols per user; not
 * thread-safe.
 */
#ifndef PROFHOST_SYMBOLS_H
#define PROFHOST_SYMBOLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../events/trace.h"

struct symbols;

/* A symbolizer with an empty per-module cache; NULL when out of memory. */
struct symbols *symbols_new(void);

/* A symbolizer for a process that is gone (a salvage file's stacks): it
 * knows only the modules symbols_add_module gives it, never this
 * process's own (no dl_iterate_phdr, no dladdr), and demangles with a
 * C++ runtime it may load (profhost's own programs only). NULL when out
 * of memory. */
struct symbols *symbols_new_offline(void);

/* Adds to an offline symbolizer the module file `path` loaded at `bias`
 * over [lo, hi). `readable` false: its file is gone or not the one the
 * process loaded, so its addresses are named "<module>+0x<offset>" only.
 * 0, or -1 when out of memory. */
int symbols_add_module(struct symbols *s, const char *path, uint64_t bias,
		       uint64_t lo, uint64_t hi, bool readable);

/* Frees the symbolizer and its module cache. NULL-safe. */
void symbols_free(struct symbols *s);

/* Re-reads the process's module list (dl_iterate_phdr); modules already
 * cached keep their tables. Call before a round of lookups. 0 or -1. */
int symbols_refresh(struct symbols *s);

/*
 * Names the code address `pc` (an address inside the function) into
 * name[size] and the module's file name into module[msize] ("" when it is
 * in no module). Returns 2 when a symbol was found (a C++ name demangled
 * and shortened, see demangle_shorten, when the process has a C++
 * demangler), 1 when only the module is known (name is
 * "<module>+0x<offset>", the offset an address in the ELF file's address
 * space, as addr2line takes it), 0 when nothing is (name is "0x<pc>").
 */
int symbols_lookup(struct symbols *s, uint64_t pc, char *name, size_t size,
		   char *module, size_t msize);

/* The extent [*lo, *hi) of the sized function symbol holding `pc`.
 * Returns 0, or -1 when none is known. */
int symbols_range(struct symbols *s, uint64_t pc, uint64_t *lo, uint64_t *hi);

/*
 * The code around the function holding `pc` that belongs with it: from
 * that function, over every neighbouring symbol for which member(name)
 * is true and every local one (a static helper), up to the nearest
 * global or weak function that is not a member on either side. A
 * library's allocator is one translation unit (glibc's malloc.c), whose
 * static helpers (_int_malloc, arena_get2, _mid_memalign, ...) no
 * exported function's range covers: this is their extent, from the
 * exported names alone. Returns 0 with [*lo, *hi), or -1 when `pc` has no
 * sized symbol.
 */
int symbols_cluster_range(struct symbols *s, uint64_t pc,
			  bool (*member)(const char *name), uint64_t *lo,
			  uint64_t *hi);

/* Names every frame of `t` and sets each stack's folded string; then turns
 * TRACE_ARG_STACK placeholders into strings and attaches each CUDA stack to
 * the API event with its correlation id. 0, or -1 when memory ran out. */
int symbols_resolve_trace(struct symbols *s, struct trace *t);

/* Adds each timer sample of `t` (stacks of kind TRACE_STACK_SAMPLE) to its
 * events, where the writers and the reports read samples: an instant of
 * cat cpu_sample on its thread, named after its innermost function, with
 * args "stack" (folded, outermost first), "weight" (timer periods) and,
 * when cut, "truncated" = 1. Sets *periods to the periods the samples
 * stand for. 0, or -1 when memory ran out. */
int symbols_sample_events(struct trace *t, uint64_t *periods);

#endif
