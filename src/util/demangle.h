/*
 * demangle — C++ symbol names people can read (see docs/stacks.md#names).
 *
 * The demangler is the C++ runtime's own __cxa_demangle, looked up at run
 * time and never linked: profhost is C and must not bring a C++ runtime
 * into a process that has none. A process with C++ code has one already,
 * though not always in the global scope: Python loads PyTorch's libraries
 * (and with them libstdc++) RTLD_LOCAL, where dlsym(RTLD_DEFAULT) does not
 * look. So the lookup also asks libstdc++ and libc++abi by name, loaded
 * already (RTLD_NOLOAD) in a target process, or loaded for the purpose in
 * profhost's own command (`prof report`). Without one, names stay mangled.
 *
 * A frame's name is then shortened for flame graphs: the function's name
 * without return type, parameters, qualifiers or clone suffixes, with long
 * template arguments as "<...>" (see demangle_shorten).
 */
#ifndef PROFHOST_DEMANGLE_H
#define PROFHOST_DEMANGLE_H

#include <stdbool.h>
#include <stddef.h>

/* __cxa_demangle's type. */
typedef char *(*demangle_fn)(const char *mangled, char *buf, size_t *len,
			     int *status);

/* The process's C++ demangler, or NULL when it has none; with `may_load`,
 * loads libstdc++ to get one (profhost's own programs only, never a
 * target). Any thread; not from a signal handler. */
demangle_fn demangle_find(bool may_load);

/* True when `name` is a mangled C++ (Itanium ABI) name. */
bool demangle_is_mangled(const char *name);

/* Demangles `name` with `fn` into a malloc'd string (full: with parameters
 * and templates), or NULL when it is not a C++ name or cannot be. */
char *demangle_full(demangle_fn fn, const char *name);

/*
 * Writes a frame's name for a demangled C++ name `in` into out[size] (cut
 * there, always NUL-ended): the qualified name of the function alone,
 * without its return type, parameter list, const/ref qualifiers, ABI tags
 * and " [clone .cold]" suffixes; template arguments kept when short and
 * flat ("<float>", at most DEMANGLE_TEMPLATE_KEEP characters, no nested
 * '<' or '('), else "<...>"; the parameters of enclosing functions and
 * lambdas (in local names) as "(...)". Returns the length written.
 */
#define DEMANGLE_TEMPLATE_KEEP 24
size_t demangle_shorten(const char *in, char *out, size_t size);

/* Demangles `name` with `fn` and shortens it into out[size]. Returns true
 * when it did; false (out untouched) when `name` is not a C++ name or
 * cannot be demangled. */
bool demangle_frame(demangle_fn fn, const char *name, char *out, size_t size);

#endif
