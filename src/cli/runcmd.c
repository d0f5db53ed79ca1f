/*
 * run — `prof run`: runs a command with the host preloaded.
 *
 * The launcher only prepares the child's environment (which library, which
 * policy, where to write, one run id for every process of the launch), runs
 * the command, passes on the signals a job controller sends, and at the end
 * tells the user what the host wrote, as the host reported it in the
 * launcher notes file. It never loads the host itself.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "cliopt.h"
#include "locate.h"
#include "orphans.h"
#include "salvwrite.h"
#include "profenv.h"
#include "../common/err.h"
#include "../util/fsutil.h"
#include "../common/grow.h"
#include "../util/progname.h"
#include "../salvage/salvscan.h"

static const char run_synopsis[] =
	"prof run [-s policy.lua] [-o dir] [--set key=value]... -- cmd args...";

/* The launcher notes file is read whole; this bounds it. */
#define RUN_NOTES_MAX (16u << 20)

/* At most this many window directories are listed at the end. */
#define RUN_WINDOWS_SHOWN 20

struct run_opts {
	const char *script; /* -s, or NULL */
	const char *output; /* -o, or NULL */
	char *set;          /* the --set values joined with '\n' (malloc'd), or NULL */
	char **cmd;         /* the command, NULL-terminated (points into argv) */
};

/* The command's pid, for the forwarding handler; 0 when none runs. */
static volatile sig_atomic_t run_child_pid;

/* Signals passed on to the command, and signals ignored while it runs (the
 * terminal sends those to the whole foreground process group already). */
static const int run_forwarded[] = { SIGTERM, SIGHUP, SIGUSR1, SIGUSR2 };
static const int run_ignored[] = { SIGINT, SIGQUIT };

/* Writes the help of `prof run` to `out`. */
static void run_help(FILE *out)
{
	fprintf(out,
		"usage: %s\n"
		"\n"
		"Runs cmd with libprofhost.so preloaded and exits with cmd's exit status\n"
		"(128+N when cmd was killed by signal N). Options come before cmd; '--' is\n"
		"needed only when cmd starts with '-'.\n"
		"\n"
		"options:\n"
		"  -s, --script FILE     the Lua policy file (sets PROF_SCRIPT)\n"
		"  -o, --output DIR      the output directory (sets PROF_OUTPUT_DIR)\n"
		"      --set KEY=VALUE   overrides one policy field, e.g. schedule.active=5;\n"
		"                        may be repeated (sets PROF_SET)\n"
		"  -h, --help            show this help\n"
		"\n"
		"environment:\n"
		"  PROF_LIB              the libprofhost.so to preload (default: ../lib/\n"
		"                        libprofhost.so next to the directory of prof)\n"
		"  PROF_RUN_ID           the run directory's name, kept when already set\n"
		"                        (default: <cmd>-<YYYYmmdd-HHMMSS>)\n"
		"\n"
		"See docs/cli.md for everything prof run sets in cmd's environment.\n",
		run_synopsis);
}


/* Whether `kv` is key=value with a non-empty key of [A-Za-z0-9_.]. */
static bool run_valid_set(const char *kv)
{
	const char *p;

	for (p = kv; *p && *p != '='; p++) {
		bool ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
			  (*p >= '0' && *p <= '9') || *p == '_' || *p == '.';
		if (!ok)
			return false;
	}
	return p != kv && *p == '=';
}

/* Appends `kv` to o->set, '\n'-separated. Returns 0, or -1 when out of
 * memory. */
static int run_add_set(struct run_opts *o, const char *kv)
{
	size_t old = o->set ? strlen(o->set) : 0;
	size_t n = strlen(kv);
	char *s = realloc(o->set, old + n + 2);

	if (!s)
		return -1;
	if (old > 0)
		s[old++] = '\n';
	memcpy(s + old, kv, n + 1);
	o->set = s;
	return 0;
}

/* Parses the arguments of `prof run` (argv[0] is "run") into *o. Returns 0;
 * -1 when help was asked for (and printed); or an exit status after
 * reporting a usage error. o->set is the caller's to free in every case. */
static int run_parse(int argc, char **argv, struct run_opts *o)
{
	int i;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *val = NULL;
		int m;

		if (strcmp(a, "--") == 0) {
			i++;
			break;
		}
		if (a[0] != '-' || a[1] == '\0')
			break;
		if (cliopt_help(&cli_run_cmd, a))
			return -1;
		if ((m = cliopt_value(argc, argv, &i, 's', "script", &val)) != 0) {
			if (m < 0)
				return cliopt_usage_error(&cli_run_cmd, "option '%s' needs a policy file", a);
			o->script = val;
		} else if ((m = cliopt_value(argc, argv, &i, 'o', "output", &val)) != 0) {
			if (m < 0)
				return cliopt_usage_error(&cli_run_cmd, "option '%s' needs a directory", a);
			if (val[0] == '\0')
				return cliopt_usage_error(&cli_run_cmd, "option '%s' needs a non-empty "
							  "directory", a);
			o->output = val;
		} else if ((m = cliopt_value(argc, argv, &i, 0, "set", &val)) != 0) {
			if (m < 0)
				return cliopt_usage_error(&cli_run_cmd, "option '%s' needs key=value", a);
			if (!run_valid_set(val))
				return cliopt_usage_error(&cli_run_cmd, "--set '%s' is not key=value "
							  "with a key of letters, digits, '_' and '.'",
							  val);
			if (strchr(val, '\n'))
				return cliopt_usage_error(&cli_run_cmd, "--set '%.*s' has a newline "
							  "in its value",
							  (int)(strchr(val, '=') - val), val);
			if (run_add_set(o, val) != 0) {
				fprintf(stderr, "prof run: out of memory\n");
				return CLI_EXIT_USAGE;
			}
		} else {
			return cliopt_usage_error(&cli_run_cmd, "unknown option '%s'", a);
		}
	}
	if (i >= argc)
		return cliopt_usage_error(&cli_run_cmd, "missing command");
	o->cmd = argv + i;
	return 0;
}

/* Makes `path` absolute (relative to the working directory, without
 * resolving links) into out[size]. Returns 0, or -1 with *e set. */
static int run_abs_path(const char *path, char *out, size_t size, struct err *e)
{
	char cwd[PATH_MAX];
	size_t n;

	if (path[0] == '/') {
		if (strlen(path) >= size)
			return err_set(e, "path '%s' is too long", path);
		strcpy(out, path);
	} else {
		if (!getcwd(cwd, sizeof cwd))
			return err_errno(e, errno, "cannot get the working directory");
		while (path[0] == '.' && path[1] == '/') {
			path += 2;
			while (path[0] == '/')
				path++;
		}
		if (strcmp(path, ".") == 0 || path[0] == '\0')
			path = NULL;
		if (!path) {
			if (strlen(cwd) >= size)
				return err_set(e, "path '%s' is too long", cwd);
			strcpy(out, cwd);
		} else if (fsutil_join(out, size, cwd, path, e) != 0) {
			return -1;
		}
	}
	n = strlen(out);
	while (n > 1 && out[n - 1] == '/')
		out[--n] = '\0';
	return 0;
}

/* Whether the list entry entry[0..n) names `item` (same string, or a path
 * that resolves to it). */
static bool run_same_entry(const char *entry, size_t n, const char *item)
{
	char buf[PATH_MAX], real[PATH_MAX];

	if (strlen(item) == n && memcmp(entry, item, n) == 0)
		return true;
	if (n >= sizeof buf || !memchr(entry, '/', n))
		return false;
	memcpy(buf, entry, n);
	buf[n] = '\0';
	return realpath(buf, real) && strcmp(real, item) == 0;
}

/* Sets environment variable `name` to `item`, then ':', then the entries of
 * its previous value (split at any of `seps`) that do not name `item`, so
 * `item` comes first and only once. Empty entries are dropped unless
 * keep_empty. Returns 0, or -1 with *e set. */
static int run_env_prepend(const char *name, const char *item, const char *seps,
			   bool keep_empty, struct err *e)
{
	const char *old = getenv(name), *p;
	size_t cap, len;
	char *val;

	if (!old)
		old = "";
	cap = strlen(item) + strlen(old) + 2;
	val = malloc(cap);
	if (!val)
		return err_set(e, "out of memory");
	len = strlen(item);
	memcpy(val, item, len);
	for (p = old; *old && p; ) {
		size_t n = strcspn(p, seps);

		if ((n > 0 || keep_empty) && !run_same_entry(p, n, item)) {
			val[len++] = ':';
			memcpy(val + len, p, n);
			len += n;
		}
		p = p[n] ? p + n + 1 : NULL;
	}
	val[len] = '\0';
	if (setenv(name, val, 1) != 0) {
		free(val);
		return err_errno(e, errno, "cannot set %s", name);
	}
	free(val);
	return 0;
}

/* Sets environment variable `name` to `value`. Returns 0, or -1 with *e. */
static int run_env_set(const char *name, const char *value, struct err *e)
{
	if (setenv(name, value, 1) != 0)
		return err_errno(e, errno, "cannot set %s", name);
	return 0;
}

/* Sets an injection variable (NVTX_INJECTION64_PATH, CUDA_INJECTION64_PATH)
 * to the library, except under Nsight Systems (NSYS_PROFILING_SESSION_ID
 * set), whose own injection library must keep the slot it already holds.
 * Returns 0, or -1 with *e. */
static int run_env_inject(const char *name, const char *lib, struct err *e)
{
	const char *nsys = getenv("NSYS_PROFILING_SESSION_ID");
	const char *old = getenv(name);

	if (nsys && nsys[0] && old && old[0])
		return 0;
	return run_env_set(name, lib, e);
}

/* Number of entries of a NULL-terminated vector. */
static int run_count(char **v)
{
	int n = 0;

	while (v[n])
		n++;
	return n;
}

/* Sets PROF_RUN_ID to <program>-<YYYYmmdd-HHMMSS> (local time), the program
 * named as the host names it (progname.h), unless the environment has one.
 * Returns 0, or -1 with *e set. */
static int run_set_run_id(int argc, const char *const *argv, struct err *e)
{
	const char *env = getenv("PROF_RUN_ID");
	char id[128], stamp[32];
	struct tm tm;
	time_t now = time(NULL);
	size_t n;

	if (env && env[0])
		return 0;
	progname_from_argv(argc, argv, id, 80);
	n = strlen(id);
	if (!localtime_r(&now, &tm) || strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm) == 0)
		return err_set(e, "cannot format the local time");
	snprintf(id + n, sizeof id - n, "-%s", stamp);
	return run_env_set("PROF_RUN_ID", id, e);
}

/* Creates a fresh temporary directory (in $TMPDIR or /tmp) into dir[size]
 * and an empty notes file in it into notes[size]. Returns 0, or -1 with *e
 * set (nothing left behind). */
static int run_notes_create(char *dir, char *notes, size_t size, struct err *e)
{
	const char *tmp = getenv("TMPDIR");
	int fd;

	if (!tmp || !tmp[0])
		tmp = "/tmp";
	if (fsutil_join(dir, size, tmp, "prof-run-XXXXXX", e) != 0)
		return -1;
	if (!mkdtemp(dir))
		return err_errno(e, errno, "cannot create a temporary directory in '%s'", tmp);
	if (fsutil_join(notes, size, dir, "notes", e) != 0) {
		rmdir(dir);
		return -1;
	}
	fd = open(notes, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		err_errno(e, errno, "cannot create '%s'", notes);
		rmdir(dir);
		return -1;
	}
	close(fd);
	return 0;
}

/* Removes the notes directory and whatever was put in it (flat). */
static void run_notes_remove(const char *dir)
{
	char path[PATH_MAX];
	struct dirent *d;
	DIR *dp = opendir(dir);

	if (dp) {
		while ((d = readdir(dp)) != NULL) {
			if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0)
				continue;
			if (fsutil_join(path, sizeof path, dir, d->d_name, NULL) == 0)
				unlink(path);
		}
		closedir(dp);
	}
	rmdir(dir);
}

/* Length of the run directory within window dir `w`: up to and including
 * the path component equal to `run_id`, or 0 when there is none. */
static size_t run_dir_by_id(const char *w, const char *run_id)
{
	size_t n = strlen(run_id);
	const char *p;

	if (n == 0)
		return 0;
	for (p = strchr(w, '/'); p; p = strchr(p + 1, '/')) {
		if (strncmp(p + 1, run_id, n) == 0 && (p[1 + n] == '/' || p[1 + n] == '\0'))
			return (size_t)(p + 1 + n - w);
	}
	return 0;
}

/* Length of the directory holding window dir `w` (at least 1: "/"). */
static size_t run_parent_len(const char *w)
{
	const char *slash = strrchr(w, '/');

	return slash && slash != w ? (size_t)(slash - w) : 1;
}

/* Length of the deepest directory holding both a[0..la) and b[0..lb) (two
 * absolute directories): their common leading whole path components. */
static size_t run_common_dir(const char *a, size_t la, const char *b, size_t lb)
{
	size_t k = 0;

	while (k < la && k < lb && a[k] == b[k])
		k++;
	if ((k == la || a[k] == '/') && (k == lb || b[k] == '/'))
		return k > 0 ? k : 1;
	do
		k--;
	while (k > 0 && a[k] != '/');
	return k > 0 ? k : 1;
}

/* Whether a written directory is a flight recorder dump
 * (.../recorder<K>_steps<a>-<b>). */
static bool run_is_dump(const char *dir)
{
	const char *base = strrchr(dir, '/');

	base = base ? base + 1 : dir;
	return strncmp(base, "recorder", 8) == 0 && base[8] >= '0' && base[8] <= '9';
}

/* Prints "wrote N window(s) under <run dir>" (with recorder dumps: "wrote
 * 2 windows and 1 recorder dump under ...") and the window dirs (stderr).
 * The run dir is the directory named after the run id when all windows lie
 * in the same one, else the deepest directory holding all of them. */
static void run_print_windows(char **win, size_t n, const char *run_id)
{
	size_t len = run_dir_by_id(win[0], run_id), i, dumps = 0;

	for (i = 1; i < n && len > 0; i++) {
		if (run_dir_by_id(win[i], run_id) != len || strncmp(win[i], win[0], len) != 0)
			len = 0;
	}
	if (len == 0) {
		len = run_parent_len(win[0]);
		for (i = 1; i < n; i++)
			len = run_common_dir(win[0], len, win[i], run_parent_len(win[i]));
	}
	for (i = 0; i < n; i++)
		dumps += run_is_dump(win[i]);
	if (dumps == 0)
		fprintf(stderr, "profhost: wrote %zu window(s) under %.*s\n", n, (int)len, win[0]);
	else if (dumps == n)
		fprintf(stderr, "profhost: wrote %zu recorder dump%s under %.*s\n", n,
			n == 1 ? "" : "s", (int)len, win[0]);
	else
		fprintf(stderr, "profhost: wrote %zu window%s and %zu recorder dump%s under "
			"%.*s\n", n - dumps, n - dumps == 1 ? "" : "s", dumps,
			dumps == 1 ? "" : "s", (int)len, win[0]);
	for (i = 0; i < n && i < RUN_WINDOWS_SHOWN; i++)
		fprintf(stderr, "  %s\n", win[i]);
	if (n > RUN_WINDOWS_SHOWN)
		fprintf(stderr, "  ... and %zu more\n", n - RUN_WINDOWS_SHOWN);
}

/* Reads the launcher notes the host appended to and tells the user what was
 * written (stderr). Lines are "key\tvalue"; only "window" is known. */
static void run_report(const char *notes)
{
	struct err e;
	char *buf = fsutil_read(notes, RUN_NOTES_MAX, NULL, &e), *line, *next;
	char **win = NULL, **w;
	size_t n = 0, cap = 0, i;
	const char *run_id = getenv("PROF_RUN_ID");

	if (!buf) {
		fprintf(stderr, "prof run: cannot read the launcher notes: %s\n", e.msg);
		return;
	}
	for (line = buf; *line; line = next) {
		char *tab, *nl = strchr(line, '\n');

		next = nl ? nl + 1 : line + strlen(line);
		if (nl)
			*nl = '\0';
		tab = strchr(line, '\t');
		if (!tab || tab - line != 6 || strncmp(line, "window", 6) != 0 || !tab[1])
			continue;
		for (i = 0; i < n && strcmp(win[i], tab + 1) != 0; i++)
			;
		if (i < n)
			continue;
		w = grow_array(win, &cap, n + 1, sizeof *w, 16);
		if (!w)
			break;
		win = w;
		win[n++] = tab + 1;
	}
	if (n == 0 && profenv_disabled(getenv("PROF_DISABLE")))
		fprintf(stderr, "profhost: profiling was off (PROF_DISABLE=%s); nothing written\n",
			getenv("PROF_DISABLE"));
	else if (n == 0)
		fprintf(stderr, "profhost: no capture window was reached; nothing written\n");
	else
		run_print_windows(win, n, run_id ? run_id : "");
	free(win);
	free(buf);
}

/* Signal handler: passes the signal on to the command. */
static void run_forward(int sig)
{
	int saved = errno;
	pid_t pid = (pid_t)run_child_pid;

	if (pid > 0)
		kill(pid, sig);
	errno = saved;
}

/* Runs cmd (execvp) and waits for it, forwarding signals. Returns its exit
 * status, or 128+N when it died of signal N, with *started true. When cmd
 * could not be started, reports why on stderr and returns 127 (not found),
 * 126 (not runnable) or CLI_EXIT_USAGE (no process), with *started false.
 * *child and *wstatus get the process and its wait status. Main thread
 * only. */
static int run_command(char **cmd, bool *started, pid_t *child, int *wstatus)
{
	sigset_t block, old;
	struct sigaction sa, prev;
	int pipefd[2], status, child_errno = 0;
	size_t i;
	ssize_t r;
	pid_t pid;

	*started = false;
	if (pipe2(pipefd, O_CLOEXEC) != 0) {
		fprintf(stderr, "prof run: cannot create a pipe: %s\n", strerror(errno));
		return CLI_EXIT_USAGE;
	}
	sigemptyset(&block);
	for (i = 0; i < sizeof run_forwarded / sizeof run_forwarded[0]; i++)
		sigaddset(&block, run_forwarded[i]);
	for (i = 0; i < sizeof run_ignored / sizeof run_ignored[0]; i++)
		sigaddset(&block, run_ignored[i]);
	/* Blocked across fork: a signal sent now is forwarded once the pid is
	 * known, and the child gets the dispositions prof started with. */
	sigprocmask(SIG_BLOCK, &block, &old);
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		int err = errno;

		sigprocmask(SIG_SETMASK, &old, NULL);
		close(pipefd[0]);
		close(pipefd[1]);
		fprintf(stderr, "prof run: cannot fork: %s\n", strerror(err));
		return CLI_EXIT_USAGE;
	}
	if (pid == 0) {
		int err;

		sigprocmask(SIG_SETMASK, &old, NULL);
		close(pipefd[0]);
		execvp(cmd[0], cmd);
		err = errno;
		if (write(pipefd[1], &err, sizeof err) < 0)
			_exit(127);
		_exit(127);
	}
	close(pipefd[1]);
	run_child_pid = (sig_atomic_t)pid;

	memset(&sa, 0, sizeof sa);
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	for (i = 0; i < sizeof run_forwarded / sizeof run_forwarded[0]; i++) {
		/* Leave a signal prof was started with ignored (nohup) alone. */
		if (sigaction(run_forwarded[i], NULL, &prev) == 0 && prev.sa_handler == SIG_IGN)
			continue;
		sa.sa_handler = run_forward;
		sigaction(run_forwarded[i], &sa, NULL);
	}
	sa.sa_handler = SIG_IGN;
	for (i = 0; i < sizeof run_ignored / sizeof run_ignored[0]; i++)
		sigaction(run_ignored[i], &sa, NULL);
	sigprocmask(SIG_SETMASK, &old, NULL);

	/* The pipe closes on a successful exec; otherwise it carries errno. */
	do
		r = read(pipefd[0], &child_errno, sizeof child_errno);
	while (r < 0 && errno == EINTR);
	close(pipefd[0]);

	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR) {
			fprintf(stderr, "prof run: cannot wait for '%s': %s\n", cmd[0],
				strerror(errno));
			run_child_pid = 0;
			return CLI_EXIT_USAGE;
		}
	}
	run_child_pid = 0;
	if (r == (ssize_t)sizeof child_errno) {
		fprintf(stderr, "prof run: cannot run '%s': %s\n", cmd[0], strerror(child_errno));
		return child_errno == ENOENT || child_errno == ENOTDIR ? 127 : 126;
	}
	*started = true;
	*child = pid;
	*wstatus = status;
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return 1;
}

/* Checks that the policy file can be read: a regular file (a FIFO would
 * hang the command before main). Returns 0, or -1 with *e set. */
static int run_check_script(const char *path, struct err *e)
{
	struct stat st;
	int fd = fsutil_open_regular(path, &st);

	if (fd == FSUTIL_NOT_REGULAR)
		return err_set(e, "cannot read policy file '%s': it is %s, not a regular file",
			       path, fsutil_file_kind(st.st_mode));
	if (fd < 0)
		return err_errno(e, errno, "cannot read policy file '%s'", path);
	close(fd);
	return 0;
}

/* Sets up the child's environment (see docs/cli.md), all but
 * PROF_LAUNCHER_NOTES. Returns 0, or -1 with *e set. */
static int run_setup_env(const struct run_opts *o, struct err *e)
{
	char prefix[PATH_MAX], lib[PATH_MAX], path[PATH_MAX];

	if (locate_host(prefix, lib, e) != 0)
		return -1;
	if (o->script) {
		if (run_check_script(o->script, e) != 0 ||
		    run_abs_path(o->script, path, sizeof path, e) != 0 ||
		    run_env_set("PROF_SCRIPT", path, e) != 0)
			return -1;
	}
	if (o->output) {
		if (run_abs_path(o->output, path, sizeof path, e) != 0 ||
		    run_env_set("PROF_OUTPUT_DIR", path, e) != 0)
			return -1;
	}
	if (o->set && run_env_set("PROF_SET", o->set, e) != 0)
		return -1;
	if (run_env_prepend("LD_PRELOAD", lib, ": ", false, e) != 0 ||
	    run_env_inject("NVTX_INJECTION64_PATH", lib, e) != 0 ||
	    run_env_inject("CUDA_INJECTION64_PATH", lib, e) != 0 ||
	    run_set_run_id(run_count(o->cmd), (const char *const *)o->cmd, e) != 0)
		return -1;
	if (prefix[0] &&
	    (fsutil_join(path, sizeof path, prefix, "share/profhost/python", e) != 0 ||
	     run_env_prepend("PYTHONPATH", path, ":", true, e) != 0))
		return -1;
	return 0;
}

/* Creates the launched processes' salvage folder, a fresh folder of
 * this user's prof-salvage-XXXXXX (mkdtemp: mode 0700) in `home`
 * (orphans_home: PROF_SALVAGE_DIR, else /dev/shm; a tmpfs:
 * docs/recorder.md), into dir[size], held (*lock: flock, for the launch's
 * life, salvscan_hold_launcher) so that scans of the salvage folders leave
 * it to this launcher, and names it in PROF_SALVAGE_DIR. A scan that took
 * a fresh folder first (and may remove it, empty) makes this try another.
 * Without one, dir is "" and the host says why it keeps no salvage file. */
static void run_salvage_create(const char *home, char *dir, size_t size, int *lock)
{
	struct err e;
	int tries;

	*lock = -1;
	for (tries = 0; tries < 5; tries++) {
		if (snprintf(dir, size, "%s/" SALVSCAN_LAUNCH_PREFIX "XXXXXX", home) >= (int)size ||
		    !mkdtemp(dir))
			break;
		*lock = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (*lock >= 0 && salvscan_hold_launcher(*lock) == 0)
			break;
		if (*lock >= 0)
			close(*lock);
		*lock = -1;
		rmdir(dir);
	}
	if (*lock < 0) {
		dir[0] = '\0';
		return;
	}
	if (run_env_set("PROF_SALVAGE_DIR", dir, &e) != 0) {
		rmdir(dir);
		close(*lock);
		*lock = -1;
		dir[0] = '\0';
	}
}

/* `prof run`: see cli_run_cmd in cli.h. */
static int run_main(int argc, char **argv)
{
	struct run_opts o;
	struct err e;
	char dir[PATH_MAX], notes[PATH_MAX], salvage[PATH_MAX], home[PATH_MAX];
	bool started;
	pid_t child = 0;
	int rc, status = 0, lock;

	memset(&o, 0, sizeof o);
	rc = run_parse(argc, argv, &o);
	if (rc != 0) {
		free(o.set);
		return rc < 0 ? 0 : rc; /* -1: the help was printed */
	}
	rc = run_setup_env(&o, &e);
	free(o.set);
	if (rc != 0) {
		fprintf(stderr, "prof run: %s\n", e.msg);
		return CLI_EXIT_USAGE;
	}
	if (run_notes_create(dir, notes, sizeof dir, &e) != 0) {
		fprintf(stderr, "prof run: %s\n", e.msg);
		return CLI_EXIT_USAGE;
	}
	if (run_env_set("PROF_LAUNCHER_NOTES", notes, &e) != 0) {
		fprintf(stderr, "prof run: %s\n", e.msg);
		run_notes_remove(dir);
		return CLI_EXIT_USAGE;
	}
	/* what processes of this user's left unsalvaged, written before this
	 * launch adds its own (docs/recorder.md, "Orphaned salvage files") */
	orphans_home(home, sizeof home);
	orphans_at_start(home);
	run_salvage_create(home, salvage, sizeof salvage, &lock);
	rc = run_command(o.cmd, &started, &child, &status);
	/* A salvage file left means its process died without writing what it
	 * recorded (SIGKILL, _exit): written now, listed with the windows. */
	if (started && salvage[0])
		salvwrite_launch_dir(salvage, child, status, notes);
	if (started)
		run_report(notes);
	run_notes_remove(dir);
	if (salvage[0]) {
		rmdir(salvage); /* kept when a file could not be salvaged */
		close(lock);    /* then left to prof salvage --all */
	}
	return rc;
}

const struct cli_cmd cli_run_cmd = { "run", run_main, run_help, run_synopsis };
