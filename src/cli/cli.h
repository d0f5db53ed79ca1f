/*
 * cli — the `prof` command's subcommands (private to src/cli).
 *
 * prof.c dispatches, through its table, to the subcommands, a file each
 * (<name>cmd.c); each parses its arguments with cliopt.h, reports its own
 * errors on stderr ("prof <sub>: ...") and returns the process exit status
 * (docs/cli.md). Subcommands never call each other or prof.c: what several
 * use lies below them, in files of its own job (locate.c, salvwrite.c,
 * orphans.c, winload.c, profenv.c).
 */
#ifndef PROFHOST_CLI_H
#define PROFHOST_CLI_H

#include <stdio.h>

/* Exit status for bad arguments and set-up failures (missing library,
 * unreadable policy file). */
#define CLI_EXIT_USAGE 2

/* A subcommand of prof: what prof.c's table dispatches to. Each is one
 * file, <name>cmd.c, which parses its arguments with cliopt.h and calls no
 * other subcommand; what several share lies in files of its own below
 * them. */
struct cli_cmd {
	const char *name;       /* as typed: "run", "install-python" */
	/* Runs it, argv[0] being its name; returns the exit status. Main
	 * thread only. */
	int (*main)(int argc, char **argv);
	void (*help)(FILE *out); /* writes its help to `out` */
	const char *synopsis;   /* its one-line synopsis, in usage errors */
};

/* `prof run [options] [--] cmd args...`. Runs the command under the host
 * and returns the command's exit status (128+N when it died of signal N),
 * CLI_EXIT_USAGE on bad arguments or set-up failure, 126/127 when the
 * command could not be started. Installs signal handlers and changes the
 * environment of the calling process. */
extern const struct cli_cmd cli_run_cmd;

/* `prof report <dir-or-file> [options]`. Runs the built-in and custom
 * reports on saved output; returns 0, 1 when an input cannot be read or a
 * report fails, CLI_EXIT_USAGE on bad arguments. */
extern const struct cli_cmd cli_report_cmd;

/* `prof attach [options] PID`. Opens the REPL of a running process (see
 * docs/repl.md). Returns 0, 1 when a -e chunk failed (a Lua error) or the
 * connection was lost, CLI_EXIT_USAGE when it could not attach (bad
 * arguments, no such process, not profhost, permission, REPL off, no
 * answer). Installs signal handlers. */
extern const struct cli_cmd cli_attach_cmd;

/* `prof capture RUN [options]`. Asks every process of run directory RUN
 * to record the same steps (docs/jobs.md). Returns 0, 1 when the request
 * cannot be written or no process read it in time, CLI_EXIT_USAGE on bad
 * arguments. */
extern const struct cli_cmd cli_capture_cmd;

/* `prof salvage [-o DIR] FILE`, `prof salvage --all [--discard] [-o DIR]
 * [FOLDER...]`. Writes the recording a dead process left in its salvage
 * file and removes the file; --all does so for every salvage file of this
 * user's processes that ended (or removes them, --discard). Returns 0, or
 * 1 (said in one line each) when a file cannot be salvaged,
 * CLI_EXIT_USAGE on bad arguments. */
extern const struct cli_cmd cli_salvage_cmd;

/* `prof install-python [--python PATH] [--uninstall]`. Writes (or
 * removes) the profhost.pth that makes `PROF_SCRIPT=policy.lua python
 * ...` run under profhost without LD_PRELOAD (docs/python.md). Returns 0,
 * 1 when it cannot, CLI_EXIT_USAGE on bad arguments. */
extern const struct cli_cmd cli_install_python_cmd;

#endif
