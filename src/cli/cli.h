/*
 * cli — the `prof` command (private to src/cli).
 *
 * prof.c dispatches the subcommands; each subcommand lives in its own file
 * and reports its own errors on stderr ("prof <sub>: ..."), returning the
 * process exit status. The exit statuses are documented in docs/cli.md.
 */
#ifndef PROFHOST_CLI_H
#define PROFHOST_CLI_H

#include <stdio.h>

/* Exit status for bad arguments and set-up failures (missing library,
 * unreadable policy file). */
#define CLI_EXIT_USAGE 2

/* `prof run [options] [--] cmd args...`. argv[0] is "run". Runs the command
 * under the host and returns the command's exit status (128+N when it died
 * of signal N), CLI_EXIT_USAGE on bad arguments or set-up failure, 126/127
 * when the command could not be started. Main thread only; installs signal
 * handlers and changes the environment of the calling process. */
int cli_run_main(int argc, char **argv);

/* Writes the help of `prof run` to `out`. */
void cli_run_help(FILE *out);

/* The one-line synopsis of `prof run`, used in usage errors. */
extern const char cli_run_synopsis[];

/* `prof report <dir-or-file> [options]`. argv[0] is "report". Runs the
 * built-in and custom reports on saved output; returns 0, 1 when an input
 * cannot be read or a report fails, CLI_EXIT_USAGE on bad arguments. */
int cli_report_main(int argc, char **argv);

/* Writes the help of `prof report` to `out`. */
void cli_report_help(FILE *out);

/* The one-line synopsis of `prof report`. */
extern const char cli_report_synopsis[];

#endif
