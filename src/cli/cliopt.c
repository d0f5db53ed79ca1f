/*
 * cliopt — the arguments of every subcommand of `prof` (see cliopt.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cliopt.h"

bool cliopt_is_help(const char *arg)
{
	return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0;
}

bool cliopt_help(const struct cli_cmd *cmd, const char *arg)
{
	if (!cliopt_is_help(arg))
		return false;
	cmd->help(stdout);
	return true;
}

int cliopt_value(int argc, char **argv, int *i, char shortname, const char *longname,
		 const char **val)
{
	const char *a = argv[*i];
	size_t n = strlen(longname);

	if (shortname && a[0] == '-' && a[1] == shortname) {
		if (a[2] != '\0') {
			*val = a + 2;
			return 1;
		}
	} else if (a[0] == '-' && a[1] == '-' && strncmp(a + 2, longname, n) == 0) {
		if (a[2 + n] == '=') {
			*val = a + 3 + n;
			return 1;
		}
		if (a[2 + n] != '\0')
			return 0;
	} else {
		return 0;
	}
	if (*i + 1 >= argc)
		return -1;
	*i += 1;
	*val = argv[*i];
	return 1;
}

int cliopt_usage_error(const struct cli_cmd *cmd, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	fprintf(stderr, "prof %s: %s (usage: %s)\n", cmd->name, msg, cmd->synopsis);
	return CLI_EXIT_USAGE;
}
