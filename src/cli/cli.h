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

/* `prof salvage [-o DIR] FILE`, `prof salvage --all [--discard] [-o DIR]
 * [FOLDER...]`. argv[0] is "salvage". Writes the recording a dead process
 * left in its salvage file and removes the file; --all does so for every
 * salvage file of this user's processes that ended (or removes them,
 * --discard). Returns 0, or 1 (said in one line each) when a file cannot
 * be salvaged, CLI_EXIT_USAGE on bad arguments. */
int cli_salvage_main(int argc, char **argv);

/* Writes the help of `prof salvage` to `out`. */
void cli_salvage_help(FILE *out);

/* The one-line synopsis of `prof salvage`. */
extern const char *const cli_salvage_synopsis;

/* How cli_salvage_file() salvages a file. */
struct cli_salvage_opts {
	const char *who;       /* the messages' prefix: "prof salvage" */
	const char *how;       /* the folder's mark: "after SIGKILL", "after
				  its process ended" */
	const char *notes;     /* the launcher notes file the window folder is
				  listed in; NULL: none */
	const char *out_dir;   /* -o DIR: the run folder goes in DIR (the
				  user's path, followed as given); NULL: the
				  run folder the file names, under the rules
				  for an untrusted path (outdir_open_untrusted) */
	bool exited;           /* its process is known to have ended by exit
				  or _exit (the launched command's wait
				  status) */
};

/* Salvages the file at `path`, which is untrusted input (salvage_open:
 * this user's; the run folder it names: outdir_open_untrusted): its
 * recording goes to a window folder, then the file is removed. Returns 0;
 * 1 when the file held no recording, 2 when it held the flight recorder
 * of a process that ended before its first step and left nothing worth a
 * folder (salvage_worth in salvage.c; either way the file is just
 * removed); -1 with *e, one line without the prefix (the file stays). */
int cli_salvage_file(const char *path, const struct cli_salvage_opts *o, struct err *e);

/* Says on stderr, prefixed by `who`, that the salvage file at `path` was
 * removed without a folder: cli_salvage_file()'s 1 or 2 in `rc`. */
void cli_salvage_say_removed(const char *who, const char *path, int rc);

/* The launcher's salvage: every salvage file in folder `dir` once the
 * launched process `child` ended with wait status `status` (its own
 * file is marked with how it ended). Errors are said on stderr. */
void cli_salvage_dir(const char *dir, pid_t child, int status, const char *notes);

/* `prof salvage --all` (orphans.c): salvages (or with `discard` removes)
 * every salvage file of this user's processes that ended, in the folders
 * folders[0, n) or, with none, in PROF_SALVAGE_DIR and /dev/shm (each with
 * the launcher folders there whose launcher is gone): a line each and a
 * count on stderr. Returns 0, or 1 when a file or folder could not be. */
int cli_salvage_all(const char *const *folders, int n, bool discard,
		    const struct cli_salvage_opts *o);

/* The folder `prof run` makes its launch's salvage folder in, into
 * home[size]: PROF_SALVAGE_DIR when it is set to a tmpfs folder of this
 * user's that no one else can write (salvscan_check_dir), else /dev/shm
 * (one that is set but refused is said in one line, "prof run: ..."). */
void cli_salvage_home(char *home, size_t size);

/* `prof run`'s start: salvages, under the rules of cli_salvage_file, the
 * salvage files of this user's processes that ended in `home`
 * (cli_salvage_home) and the launcher folders there whose launcher is
 * gone, a line each on stderr. Returns how many it found. */
unsigned cli_salvage_orphans_at_start(const char *home);

/* Prints "prof <cmd>: <message> (usage: <synopsis>)" on stderr and returns
 * CLI_EXIT_USAGE: the one shape of every usage error. */
int cli_usage_error(const char *cmd, const char *synopsis, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Matches argv[*i] against the option -<shortname>/--<longname> (shortname
 * 0: the long form only). The value may be attached (-sX, --script=X) or
 * the next argument (then *i is advanced past it). Returns 1 with *val set,
 * 0 when argv[*i] is another argument, -1 when the value is missing. */
int cli_option(int argc, char **argv, int *i, char shortname, const char *longname,
	       const char **val);

/* Whether PROF_DISABLE's value `v` turns the host off: anything but unset,
 * "", 0, false, no or off, as the host reads it (it refuses a value it does
 * not understand too). */
bool cli_prof_disabled(const char *v);


/* Finds this installation (see docs/cli.md, PROF_LIB): its prefix, the
 * parent of the directory holding `prof`, into prefix[PATH_MAX] ("" when
 * it cannot be told), and the host library into lib[PATH_MAX] (absolute,
 * links resolved). Returns 0, or -1 with *e naming where it looked and
 * the fix. */
int cli_find_host(char *prefix, char *lib, struct err *e);

/* profhost's Lua library, for the reports: $PROF_LUA_DIR, else
 * <prefix>/share/profhost/lua, into out[size]. Returns 0, or -1 with *e. */
int cli_find_lua_dir(char *out, size_t size, struct err *e);

/* `prof install-python [--python PATH] [--uninstall]`. argv[0] is
 * "install-python". Writes (or removes) the profhost.pth that makes
 * `PROF_SCRIPT=policy.lua python ...` run under profhost without
 * LD_PRELOAD (docs/python.md). Returns 0, 1 when it cannot, CLI_EXIT_USAGE
 * on bad arguments. */
int cli_install_python_main(int argc, char **argv);

/* Writes the help of `prof install-python` to `out`. */
void cli_install_python_help(FILE *out);

/* The one-line synopsis of `prof install-python`. */
extern const char cli_install_python_synopsis[];

/* `prof attach [options] PID`. argv[0] is "attach". Opens the REPL of a
 * running process (see docs/repl.md). Returns 0, 1 when a -e chunk failed
 * (a Lua error) or the connection was lost, CLI_EXIT_USAGE when it could not
 * attach (bad arguments, no such process, not profhost, permission, REPL
 * off, no answer). Main thread only; installs signal handlers. */
int cli_attach_main(int argc, char **argv);

/* Writes the help of `prof attach` to `out`. */
void cli_attach_help(FILE *out);

/* The one-line synopsis of `prof attach`. */
extern const char cli_attach_synopsis[];

/* `prof capture RUN [options]`. argv[0] is "capture". Asks every process
 * of run directory RUN to record the same steps (docs/jobs.md). Returns 0,
 * 1 when the request cannot be written or no process read it in time,
 * CLI_EXIT_USAGE on bad arguments. */
int cli_capture_main(int argc, char **argv);

/* Writes the help of `prof capture` to `out`. */
void cli_capture_help(FILE *out);

/* The one-line synopsis of `prof capture`. */
extern const char cli_capture_synopsis[];

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

struct trace;

/* Loads one saved window (a window folder: its capture.phb, else its
 * trace.json[.gz]; or one such file) into `t` (trace_init'ed), sorted;
 * *dir gets the folder its reports write into. Returns 0, or -1 with *e
 * naming the file and what broke (report.c). */
int cli_report_load_window(const char *path, struct trace *t, char *dir, size_t dsize,
			   struct err *e);

/* prof report's view of the latest job-wide capture or dump of run
 * directory `run` (jobview.c, docs/jobs.md): each rank's folder of it
 * read one at a time into fixed memory, then the step times across
 * ranks, the slow rank and its phase, and what the others spent more
 * time in. Returns 1 when it printed a view, 0 when the run has no
 * job-wide capture or dump, -1 when out of memory. */
int cli_jobs_report(const char *run, FILE *out);

/* prof report's view of a hang across ranks (hangs.c): reads the latest
 * hang<K>_step<N>/hang.json of each rank<R> folder of run directory `run`,
 * one rank at a time (memory does not grow with the ranks), and prints
 * which ranks are stuck where and the odd one out to `out`. Returns 1 when
 * it printed a view, 0 when no rank has a hang report, -1 when out of
 * memory. */
int cli_hangs_report(const char *run, FILE *out);

#endif
