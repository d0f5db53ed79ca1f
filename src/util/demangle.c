/* demangle — C++ names people can read (see demangle.h). */
#include "demangle.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

/* The C++ runtimes that carry a demangler, by their usual file names. */
static const char *const runtimes[] = { "libstdc++.so.6", "libc++abi.so.1", NULL };

demangle_fn demangle_find(bool may_load)
{
	void *fn = dlsym(RTLD_DEFAULT, "__cxa_demangle"), *lib;
	size_t i;

	for (i = 0; !fn && runtimes[i]; i++) {
		lib = dlopen(runtimes[i], RTLD_LAZY | RTLD_LOCAL |
			     (may_load ? 0 : RTLD_NOLOAD));
		if (!lib)
			continue;
		fn = dlsym(lib, "__cxa_demangle");
		/* Loaded already (NOLOAD) or on purpose: it stays, so `fn`
		 * stays valid; the handle's reference is the only cost. */
	}
	return (demangle_fn)fn;
}

bool demangle_is_mangled(const char *name)
{
	return name[0] == '_' && name[1] == 'Z';
}

char *demangle_full(demangle_fn fn, const char *name)
{
	int status = -1;
	char *d;

	if (!fn || !demangle_is_mangled(name))
		return NULL;
	d = fn(name, NULL, NULL, &status);
	if (d && status == 0)
		return d;
	free(d);
	return NULL;
}

/* ------------------------------------------------------------ scanning */

/* True when c may be part of an identifier. */
static bool ident(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '_' || c == '$';
}

/* The symbols an operator may be named by, longest first. */
static const char *const op_symbols[] = {
	"<=>", "<<=", ">>=", "->*", "()", "[]", "<<", ">>", "<=", ">=", "==",
	"!=", "&&", "||", "++", "--", "->", "+=", "-=", "*=", "/=", "%=", "&=",
	"|=", "^=", "<", ">", "+", "-", "*", "/", "%", "&", "|", "^", "~", "!",
	"=", ",", NULL
};

/* When s[i..] starts the keyword "operator" at a word boundary, the index
 * just after the operator's symbol (for a conversion operator, or new and
 * delete, just after "operator "); else i. */
static size_t skip_operator(const char *s, size_t i, size_t end)
{
	size_t k, n;

	if (end - i < 8 || strncmp(s + i, "operator", 8) != 0 ||
	    (i > 0 && ident(s[i - 1])) || (i + 8 < end && ident(s[i + 8])))
		return i;
	k = i + 8;
	for (n = 0; op_symbols[n]; n++) {
		size_t len = strlen(op_symbols[n]);

		if (end - k >= len && strncmp(s + k, op_symbols[n], len) == 0)
			return k + len;
	}
	return k < end && s[k] == ' ' ? k + 1 : k;
}

/* The index of the bracket closing the one at s[i], or `end` when there is
 * none before it. */
static size_t find_close(const char *s, size_t i, size_t end)
{
	int depth = 0;
	size_t j;

	for (j = i; j < end; j++) {
		size_t k = skip_operator(s, j, end);

		if (k != j) {
			j = k - 1;
			continue;
		}
		if (strchr("(<{[", s[j]))
			depth++;
		else if (strchr(")>}]", s[j]) && --depth == 0)
			return j;
	}
	return end;
}

/* Where a demangled name's final parameter list begins: the last
 * parenthesised group at the top level that is not "(anonymous
 * namespace)" and not followed by "::" (the function of a local name).
 * Returns `end` when there is none. */
static size_t params_start(const char *s, size_t end)
{
	size_t i, close, cut = end;

	for (i = 0; i < end; i++) {
		size_t k = skip_operator(s, i, end);

		if (k != i) {
			i = k - 1;
			continue;
		}
		if (!strchr("(<{[", s[i]))
			continue;
		close = find_close(s, i, end);
		if (s[i] == '(' && strncmp(s + i, "(anonymous namespace)", 21) != 0 &&
		    (close + 2 >= end || strncmp(s + close + 1, "::", 2) != 0))
			cut = i;
		i = close;
	}
	return cut;
}

/* Where the name begins after a return type ("void ns::f<int>"): just after
 * the last space at the top level before any operator keyword. */
static size_t name_start(const char *s, size_t end)
{
	size_t i, start = 0;

	for (i = 0; i < end; i++) {
		if (skip_operator(s, i, end) != i)
			break; /* the operator's own spaces are its name's */
		if (strchr("(<{[", s[i]))
			i = find_close(s, i, end);
		else if (s[i] == ' ')
			start = i + 1;
	}
	return start;
}

/* An output buffer that cuts at its size and stays NUL-ended. */
struct out {
	char *p;
	size_t n, size;
};

static void put(struct out *o, const char *s, size_t n)
{
	size_t room = o->size > o->n + 1 ? o->size - o->n - 1 : 0;

	if (n > room)
		n = room;
	memcpy(o->p + o->n, s, n);
	o->n += n;
	if (o->size)
		o->p[o->n] = '\0';
}

size_t demangle_shorten(const char *in, char *out, size_t size)
{
	size_t end = strlen(in), i, close, k;
	struct out o = { out, 0, size };

	if (size)
		out[0] = '\0';
	end = params_start(in, end);
	i = name_start(in, end);
	while (i < end) {
		k = skip_operator(in, i, end);
		if (k != i) {
			put(&o, in + i, k - i);
			i = k;
			continue;
		}
		if (in[i] == '<' || in[i] == '(' || (in[i] == '[' &&
						     strncmp(in + i, "[abi:", 5) == 0)) {
			close = find_close(in, i, end);
			if (close >= end) { /* unbalanced: keep the rest */
				put(&o, in + i, end - i);
				break;
			}
			if (in[i] == '<') {
				if (close - i - 1 <= DEMANGLE_TEMPLATE_KEEP &&
				    !memchr(in + i + 1, '<', close - i - 1) &&
				    !memchr(in + i + 1, '(', close - i - 1))
					put(&o, in + i, close - i + 1);
				else
					put(&o, "<...>", 5);
			} else if (in[i] == '(') {
				if (strncmp(in + i, "(anonymous namespace)", 21) == 0 ||
				    close == i + 1)
					put(&o, in + i, close - i + 1);
				else
					put(&o, "(...)", 5);
			} /* an ABI tag goes */
			i = close + 1;
			continue;
		}
		put(&o, in + i, 1);
		i++;
	}
	return o.n;
}

bool demangle_frame(demangle_fn fn, const char *name, char *out, size_t size)
{
	char *d = demangle_full(fn, name);

	if (!d)
		return false;
	demangle_shorten(d, out, size);
	free(d);
	return true;
}
