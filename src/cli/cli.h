/*
 * cli — the `prof` command (private to src/cli).
 *
 * prof.c dispatches the subcommands; each subcommand lives in its own file
 * and reports its own errors on stderr ("prof <sub>: ..."), returning the
 * process exit status. The exit statuses are documented in docs/cli.md.
 */
#ifndef PROFHOST_CLI_H
#define PROFHOST_CLI_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

struct err;

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

/* --- lineedit.c: a small line editor for a terminal --- */

struct lineedit;

enum lineedit_status {
	LINEEDIT_OK = 0,        /* a line was entered */
	LINEEDIT_EOF,           /* Ctrl-D on an empty line, or end of input */
	LINEEDIT_INTERRUPT,     /* Ctrl-C */
	LINEEDIT_WAKE,          /* the watched descriptor is readable; call
				   again to go on editing the same line */
	LINEEDIT_ERROR
};

/* An editor reading keys from in_fd (a terminal) and drawing on out_fd.
 * Restores the terminal when SIGTERM, SIGHUP or SIGQUIT ends the process
 * during a read. NULL when out of memory. */
struct lineedit *lineedit_new(int in_fd, int out_fd);

/* Reads one line after `prompt`, in raw mode for the duration of the call:
 * arrows, Home/End, Backspace/Delete, Ctrl-A/E/B/F/K/U/W/L/P/N, history
 * with Up/Down. Between calls the terminal stays without echo and line
 * discipline (Ctrl-C still a signal), so keys typed while a command runs
 * wait for the next line; lineedit_free restores the terminal's mode.
 * Returns the line (malloc'd, no newline) with LINEEDIT_OK, else NULL and
 * the status. watch_fd (-1: none) is polled with the terminal. */
char *lineedit_read(struct lineedit *le, const char *prompt, int watch_fd,
		    int *status);

/* Adds a line to the history (not an empty one, nor a repeat of the last). */
void lineedit_add_history(struct lineedit *le, const char *line);

void lineedit_free(struct lineedit *le);

#endif
