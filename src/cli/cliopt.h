/*
 * cliopt — the arguments of every subcommand of `prof` (private to
 * src/cli): the -h/--help check, options with a value, and the one shape
 * of a usage error. Each subcommand parses its own arguments in order with
 * these, so what an argument means, and which error comes first, stays
 * the subcommand's. Main thread only; no state.
 */
#ifndef PROFHOST_CLIOPT_H
#define PROFHOST_CLIOPT_H

#include <stdbool.h>

#include "cli.h"

/* Whether argument `arg` is -h or --help. */
bool cliopt_is_help(const char *arg);

/* Whether argument `arg` asks for help (-h or --help): then writes the
 * help of `cmd` to stdout. The caller returns 0 after it. */
bool cliopt_help(const struct cli_cmd *cmd, const char *arg);

/* Matches argv[*i] against the option -<shortname>/--<longname> (shortname
 * 0: the long form only). The value may be attached (-sX, --script=X) or
 * the next argument (then *i is advanced past it). Returns 1 with *val set,
 * 0 when argv[*i] is another argument, -1 when the value is missing. */
int cliopt_value(int argc, char **argv, int *i, char shortname, const char *longname,
		 const char **val);

/* Prints "prof <cmd>: <message> (usage: <synopsis>)" on stderr and returns
 * CLI_EXIT_USAGE: the one shape of every usage error of a subcommand. */
int cliopt_usage_error(const struct cli_cmd *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif
