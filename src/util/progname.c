/* progname — the short program name (see progname.h). */
#include "progname.h"

#include <stdio.h>
#include <string.h>

/* Copies the basename of `path`, without a ".py" ending, keeping only safe
 * characters. */
static void copy_base(const char *path, char *out, size_t size)
{
	const char *b = strrchr(path, '/');
	size_t n = 0, len;

	b = b ? b + 1 : path;
	len = strlen(b);
	if (len > 3 && strcmp(b + len - 3, ".py") == 0)
		len -= 3;
	for (; n < len && n < 64 && n + 1 < size; n++) {
		char c = b[n];
		int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			 (c >= '0' && c <= '9') || c == '_' || c == '.' ||
			 c == '-' || c == '+';
		out[n] = ok ? c : '_';
	}
	out[n] = '\0';
}

void progname_from_argv(int argc, const char *const *argv, char *out, size_t size)
{
	char first[80];

	if (size == 0)
		return;
	out[0] = '\0';
	if (argc < 1 || !argv[0]) {
		snprintf(out, size, "process");
		return;
	}
	copy_base(argv[0], first, sizeof first);
	if (strncmp(first, "python", 6) == 0 && argc > 1 && argv[1]) {
		if (strcmp(argv[1], "-m") == 0 && argc > 2 && argv[2])
			copy_base(argv[2], out, size);
		else if (argv[1][0] != '-')
			copy_base(argv[1], out, size);
	}
	if (!out[0])
		snprintf(out, size, "%s", first[0] ? first : "process");
}
