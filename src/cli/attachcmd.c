/*
 * attach — `prof attach PID`: the REPL of a running process.
 *
 * Before connecting it finds out, from /proc, why it could not: no such
 * process, another user's, profhost not in it, the REPL turned off. Then it
 * connects to the process's socket; when there is none yet it leaves a
 * trigger file and sends the REPL signal (only when the process catches
 * that signal, so it can never kill it) and waits for the socket. The
 * session: a prompt with line editing and history on a terminal (plain
 * lines otherwise), chunks sent whole and re-sent with the next line while
 * the server calls them incomplete, Ctrl-C sent as an interrupt.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "../control/control.h"
#include "../common/grow.h"
#include "../common/io.h"
#include "cli.h"
#include "cliopt.h"
#include "lineedit.h"
#include "profenv.h"

static const char attach_synopsis[] =
	"prof attach [-e CODE] [--no-signal] [--timeout SECONDS] PID";

#define ATTACH_EXIT_LUA 1
#define ATTACH_DEFAULT_TIMEOUT_S 5
#define ATTACH_PROC_MAX (1u << 20)

struct attach_opts {
	pid_t pid;
	const char *code;          /* -e, or NULL */
	bool no_signal;
	int timeout_s;
};

/* The target as /proc shows it. */
struct target {
	pid_t pid;
	int sig;                   /* its REPL signal */
	bool maps_read;            /* /proc/PID/maps said profhost is there */
	char dir[PATH_MAX];
	char sock[CONTROL_PATH_MAX];
	char trigger[PATH_MAX];
};

/* Self-pipe for SIGINT while a command runs. */
static int sigint_pipe[2] = { -1, -1 };

/* Writes the help of `prof attach` to `out`. */
static void attach_help(FILE *out)
{
	fprintf(out,
		"usage: %s\n"
		"\n"
		"Opens a Lua prompt inside a running process started under profhost (the\n"
		"policy's VM, in the process itself). Type Lua; =expr or a bare expression\n"
		"prints its value; prof.help() lists what the REPL can do (prof.status(),\n"
		"prof.capture_now{steps = N}, prof.top(), prof.stacks(), live\n"
		"prof.schedule{...}). Ctrl-C interrupts the running command (never the\n"
		"process); Ctrl-D leaves.\n"
		"\n"
		"options:\n"
		"  -e, --eval CODE       run CODE, print what it prints, and exit: 0 when it\n"
		"                        ran, 1 on a Lua error, 2 when prof could not attach\n"
		"      --no-signal       do not send the REPL signal; only leave the trigger\n"
		"                        file (seen within a second)\n"
		"      --timeout SECONDS how long to wait for the process to open its\n"
		"                        socket (default %d)\n"
		"  -h, --help            show this help\n"
		"\n"
		"Only the user the process runs as may attach. See docs/repl.md.\n",
		attach_synopsis, ATTACH_DEFAULT_TIMEOUT_S);
}

/* "prof attach: <message>" on stderr; returns CLI_EXIT_USAGE. */
static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
	va_list ap;

	fputs("prof attach: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return CLI_EXIT_USAGE;
}

static int usage_error(const char *what, const char *arg)
{
	return cliopt_usage_error(&cli_attach_cmd, "%s%s%s", what, arg ? " " : "",
				  arg ? arg : "");
}

/* Parses a whole positive decimal number. */
static bool parse_num(const char *s, long max, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v <= 0 || v > max)
		return false;
	*out = v;
	return true;
}

static int parse_args(int argc, char **argv, struct attach_opts *o, bool *help)
{
	int i;
	long v;

	memset(o, 0, sizeof *o);
	o->timeout_s = ATTACH_DEFAULT_TIMEOUT_S;
	*help = false;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *val = NULL;
		int m;

		if (cliopt_help(&cli_attach_cmd, a)) {
			*help = true;
			return 0;
		} else if ((m = cliopt_value(argc, argv, &i, 'e', "eval", &val)) != 0) {
			if (m < 0)
				return usage_error("missing code after", a);
			o->code = val;
		} else if (strcmp(a, "--no-signal") == 0) {
			o->no_signal = true;
		} else if ((m = cliopt_value(argc, argv, &i, 0, "timeout", &val)) != 0) {
			if (m < 0 || !parse_num(val, 3600, &v))
				return usage_error("--timeout needs a number of seconds from "
						   "1 to 3600, got", val ? val : "nothing");
			o->timeout_s = (int)v;
		} else if (a[0] == '-') {
			return usage_error("unknown option", a);
		} else if (o->pid) {
			return usage_error("one process at a time; extra argument", a);
		} else {
			if (!parse_num(a, INT_MAX, &v))
				return usage_error("not a process id:", a);
			o->pid = (pid_t)v;
		}
	}
	if (!o->pid)
		return usage_error("missing the process id", NULL);
	return 0;
}

/* ------------------------------------------------------------ /proc */

/* Reads /proc/<pid>/<name> (up to ATTACH_PROC_MAX bytes) into a malloc'd
 * buffer, NUL-terminated. NULL with errno set. */
static char *read_proc(pid_t pid, const char *name, size_t *len)
{
	char path[64];
	char *buf = NULL;
	size_t n = 0, cap = 0;
	int fd;

	snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	for (;;) {
		ssize_t r;

		if (cap - n < 4096) {
			char *p;

			cap = cap ? cap * 2 : 8192;
			if (cap > ATTACH_PROC_MAX + 1)
				break;
			p = realloc(buf, cap);
			if (!p)
				break;
			buf = p;
		}
		r = read(fd, buf + n, cap - n - 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	if (!buf) {
		errno = EACCES;
		return NULL;
	}
	buf[n] = '\0';
	if (len)
		*len = n;
	return buf;
}

/* The value of NAME in a NUL-separated environment block, or NULL. */
static const char *env_value(const char *env, size_t len, const char *name)
{
	size_t nl = strlen(name), i = 0;

	while (i < len) {
		const char *entry = env + i;
		size_t el = strlen(entry);

		if (el > nl && strncmp(entry, name, nl) == 0 && entry[nl] == '=')
			return entry + nl + 1;
		i += el + 1;
	}
	return NULL;
}

/* Whether the process catches signal sig (its SigCgt mask). */
static bool catches(pid_t pid, int sig)
{
	char *status = read_proc(pid, "status", NULL);
	const char *line;
	unsigned long long mask = 0;

	if (!status)
		return false;
	line = strstr(status, "\nSigCgt:");
	if (line)
		mask = strtoull(line + 8, NULL, 16);
	free(status);
	return (mask >> (sig - 1)) & 1;
}

/* True when the process has ended and waits to be reaped (a zombie). */
static bool exited(pid_t pid)
{
	char *stat = read_proc(pid, "stat", NULL);
	const char *close_paren;
	bool gone = false;

	if (!stat)
		return false;
	close_paren = strrchr(stat, ')');
	if (close_paren && close_paren[1] == ' ')
		gone = close_paren[2] == 'Z' || close_paren[2] == 'X';
	free(stat);
	return gone;
}

/* Whether the process has profhost's control thread ("profhost-ctl"). */
static bool has_control_thread(pid_t pid)
{
	char path[64], comm[300];
	struct dirent *ent;
	bool found = false;
	DIR *d;

	snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return true; /* cannot tell: do not claim otherwise */
	while (!found && (ent = readdir(d)) != NULL) {
		char *text;

		if (ent->d_name[0] == '.')
			continue;
		snprintf(comm, sizeof comm, "task/%s/comm", ent->d_name);
		text = read_proc(pid, comm, NULL);
		found = text && strcmp(text, "profhost-ctl\n") == 0;
		free(text);
	}
	closedir(d);
	return found;
}

/* What /proc/<pid>/maps says about profhost in the process. */
enum loaded { LOADED_UNKNOWN, LOADED_NONE, LOADED_SHIM, LOADED_CORE };

static enum loaded profhost_loaded(pid_t pid)
{
	char *maps = read_proc(pid, "maps", NULL);
	enum loaded l;

	if (!maps)
		return LOADED_UNKNOWN;
	l = strstr(maps, "/libprofhost-core.so") ? LOADED_CORE
	    : strstr(maps, "/libprofhost.so") ? LOADED_SHIM : LOADED_NONE;
	free(maps);
	return l;
}

/* The parent pid of `pid` from /proc/<pid>/stat, or -1. */
static pid_t parent_of(pid_t pid)
{
	char *stat = read_proc(pid, "stat", NULL);
	const char *p = stat ? strrchr(stat, ')') : NULL;
	int ppid = -1;

	if (p && sscanf(p + 1, " %*c %d", &ppid) != 1)
		ppid = -1;
	free(stat);
	return (pid_t)ppid;
}

/* Whether `pid` descends from `ancestor` within `depth` generations. */
static bool descends_from(pid_t pid, pid_t ancestor, int depth)
{
	while (depth-- > 0) {
		pid = parent_of(pid);
		if (pid <= 1)
			return false;
		if (pid == ancestor)
			return true;
	}
	return false;
}

/* Writes into out[size] the pids (", "-separated, at most 8) of the
 * processes below `pid` (children and grandchildren: a launcher's shell or
 * `torchrun` in between) that run profhost's core; returns how many there
 * are. For `prof attach <launcher>`. */
static int find_profhost_children(pid_t pid, char *out, size_t size)
{
	DIR *d = opendir("/proc");
	struct dirent *ent;
	size_t used = 0;
	int n = 0;

	out[0] = '\0';
	if (!d)
		return 0;
	while ((ent = readdir(d)) != NULL) {
		char *end;
		long v = strtol(ent->d_name, &end, 10);

		if (*end || v <= 0 || (pid_t)v == pid || !descends_from((pid_t)v, pid, 3) ||
		    profhost_loaded((pid_t)v) != LOADED_CORE)
			continue;
		if (n < 8 && used < size) {
			int w = snprintf(out + used, size - used, "%s%ld", n ? ", " : "", v);

			if (w > 0)
				used += (size_t)w;
		}
		n++;
	}
	closedir(d);
	return n;
}

/* Says why a process without profhost's core cannot be attached to: it runs
 * without profhost (naming the children that run it, as under `prof run`),
 * with PROF_DISABLE set, or its core did not start. Returns CLI_EXIT_USAGE. */
static int fail_no_core(pid_t pid, enum loaded l, const char *env, size_t envlen)
{
	const char *v = env ? env_value(env, envlen, "PROF_DISABLE") : NULL;
	char kids[128];
	int nkids;

	if (profenv_disabled(v))
		return fail("process %d runs with PROF_DISABLE=%s: profhost is off there",
			    (int)pid, v);
	if (l == LOADED_SHIM)
		return fail("process %d has libprofhost.so but its core did not "
			    "start (profiling is off there; its stderr says why)",
			    (int)pid);
	nkids = find_profhost_children(pid, kids, sizeof kids);
	if (nkids == 1)
		return fail("process %d is not running profhost, but its child %s is: "
			    "prof attach %s", (int)pid, kids, kids);
	if (nkids > 1)
		return fail("process %d is not running profhost, but %d processes below "
			    "it are (%s%s): attach to one of them, e.g. prof attach %.*s",
			    (int)pid, nkids, kids, nkids > 8 ? ", ..." : "",
			    (int)strcspn(kids, ","), kids);
	return fail("process %d is not running profhost (start it with "
		    "prof run, or with LD_PRELOAD=libprofhost.so)", (int)pid);
}

/* Reads the REPL signal and the socket directory from the process's
 * environment (env may be NULL: the defaults). Returns 0, or
 * CLI_EXIT_USAGE after saying why not. */
static int target_from_env(struct target *t, const char *env, size_t envlen)
{
	const char *v = env ? env_value(env, envlen, "PROF_REPL_SIGNAL") : NULL;
	struct err e;

	t->sig = SIGUSR1;
	if (v && *v && control_parse_signal(v, &t->sig, &e) != 0)
		return fail("process %d: %s, so profhost is off there", (int)t->pid,
			    e.msg);
	if (v && *v && t->sig == 0)
		return fail("process %d has its REPL turned off "
			    "(PROF_REPL_SIGNAL=0 in its environment)", (int)t->pid);
	v = env ? env_value(env, envlen, "XDG_RUNTIME_DIR") : NULL;
	if (control_dir_path(t->dir, sizeof t->dir, v, &e) != 0 ||
	    control_sock_path(t->sock, sizeof t->sock, t->dir, t->pid, &e) != 0 ||
	    control_trigger_path(t->trigger, sizeof t->trigger, t->dir, t->pid, &e) != 0)
		return fail("%s", e.msg);
	return 0;
}

/* Finds out whether pid can be attached to, and where its socket is.
 * Returns 0, or CLI_EXIT_USAGE after saying why not. */
static int find_target(pid_t pid, struct target *t)
{
	char path[64];
	struct stat st;
	char *env;
	size_t envlen = 0;
	enum loaded l;
	int rc;

	memset(t, 0, sizeof *t);
	t->pid = pid;
	snprintf(path, sizeof path, "/proc/%d", (int)pid);
	if (kill(pid, 0) != 0 && errno == ESRCH)
		return fail("no such process: %d", (int)pid);
	if (stat(path, &st) != 0)
		return fail("no such process: %d", (int)pid);
	if (exited(pid))
		return fail("no such process: %d (it has exited)", (int)pid);
	if (st.st_uid != geteuid())
		return fail("permission denied: process %d runs as uid %u and you are "
			    "uid %u; only its own user may attach (e.g. sudo -u "
			    "<that user> prof attach %d)", (int)pid,
			    (unsigned)st.st_uid, (unsigned)geteuid(), (int)pid);
	l = profhost_loaded(pid);
	t->maps_read = l != LOADED_UNKNOWN;
	env = read_proc(pid, "environ", &envlen);
	if (l == LOADED_NONE || l == LOADED_SHIM ||
	    (l == LOADED_UNKNOWN && env && profenv_disabled(env_value(env, envlen, "PROF_DISABLE"))))
		rc = fail_no_core(pid, l, env, envlen);
	else
		rc = target_from_env(t, env, envlen);
	free(env);
	return rc;
}

/* ------------------------------------------------------------ connecting */

/* Connects to path; the socket, or -1 with errno. */
static int try_connect(const char *path)
{
	struct sockaddr_un addr;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	memset(&addr, 0, sizeof addr);
	addr.sun_family = AF_UNIX;
	snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
	if (connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0)
		return fd;
	{
		int saved = errno;

		close(fd);
		errno = saved;
	}
	return -1;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* Connects, waking the process first when it has no socket yet. Returns
 * the socket, or -1 after saying why (exit status CLI_EXIT_USAGE). */
static int connect_target(const struct target *t, const struct attach_opts *o)
{
	struct err e;
	char name[32];
	int fd, waited = 0, fdt;
	bool signalled = false;

	fd = try_connect(t->sock);
	if (fd >= 0)
		return fd;
	if (errno == EACCES || errno == EPERM) {
		fail("permission denied connecting to %s", t->sock);
		return -1;
	}
	/* Wake it: a trigger file (works even when the application replaced
	 * the signal handler), and the signal when the process catches it. */
	if (control_dir_prepare(t->dir, true, &e) != 0) {
		fail("%s", e.msg);
		return -1;
	}
	fdt = open(t->trigger, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fdt >= 0)
		close(fdt);
	if (!o->no_signal && catches(t->pid, t->sig)) {
		if (kill(t->pid, t->sig) != 0) {
			unlink(t->trigger);
			if (errno == ESRCH)
				fail("process %d exited", (int)t->pid);
			else
				fail("cannot send %s to process %d: %s",
				     control_signal_name(t->sig, name, sizeof name),
				     (int)t->pid, strerror(errno));
			return -1;
		}
		signalled = true;
	}
	while (waited < o->timeout_s * 1000) {
		sleep_ms(20);
		waited += 20;
		fd = try_connect(t->sock);
		if (fd >= 0)
			return fd;
		if ((kill(t->pid, 0) != 0 && errno == ESRCH) || exited(t->pid)) {
			unlink(t->trigger);
			fail("process %d exited", (int)t->pid);
			return -1;
		}
	}
	unlink(t->trigger);
	if (!t->maps_read)
		fail("no answer from process %d within %d s (and /proc/%d/maps cannot be "
		     "read to tell whether profhost runs there)", (int)t->pid,
		     o->timeout_s, (int)t->pid);
	else if (!has_control_thread(t->pid))
		fail("profhost is loaded in process %d but not running there (it turned "
		     "itself off at start-up; its stderr says why)", (int)t->pid);
	else
		fail("no answer from process %d within %d s (%s; is it stopped?)",
		     (int)t->pid, o->timeout_s,
		     signalled ? "sent the REPL signal and left the trigger file"
			       : "left the trigger file");
	return -1;
}

/* ------------------------------------------------------------ frames */

/* Writes text, adding a newline when it has none. */
static void write_line(int fd, const char *s, size_t n)
{
	io_write_all(fd, s, n);
	if (n == 0 || s[n - 1] != '\n')
		io_write_all(fd, "\n", 1);
}

/* What reading frames came to. */
enum wait_result {
	WAIT_DONE_OK,
	WAIT_DONE_ERROR,
	WAIT_DONE_INCOMPLETE,
	WAIT_EXIT,        /* the process said it is exiting */
	WAIT_DROPPED,     /* a NOTE, then the server closed (idle) */
	WAIT_LOST         /* the connection ended without a word */
};

/* Reads frames until DONE (or the end), printing OUT on stdout and ERR,
 * NOTE and EXIT on stderr. With `interruptible`, SIGINT sends INTERRUPT. */
static enum wait_result read_until_done(int fd, struct control_reader *rd,
					bool interruptible)
{
	bool noted = false;

	for (;;) {
		char type;
		const char *data;
		size_t len;
		int rc;

		while ((rc = control_next_frame(rd, &type, &data, &len)) == 1) {
			switch (type) {
			case CONTROL_OUT:
				io_write_all(STDOUT_FILENO, data, len);
				break;
			case CONTROL_ERR:
				write_line(STDERR_FILENO, data, len);
				break;
			case CONTROL_NOTE:
				io_write_all(STDERR_FILENO, "[", 1);
				io_write_all(STDERR_FILENO, data, len);
				io_write_all(STDERR_FILENO, "]\n", 2);
				noted = true;
				break;
			case CONTROL_EXIT:
				io_write_all(STDERR_FILENO, "[", 1);
				io_write_all(STDERR_FILENO, data, len);
				io_write_all(STDERR_FILENO, "]\n", 2);
				return WAIT_EXIT;
			case CONTROL_DONE:
				if (len == 1 && data[0] == CONTROL_DONE_OK)
					return WAIT_DONE_OK;
				if (len == 1 && data[0] == CONTROL_DONE_INCOMPLETE)
					return WAIT_DONE_INCOMPLETE;
				return WAIT_DONE_ERROR;
			default:
				break;
			}
		}
		if (rc < 0)
			return WAIT_LOST;
		for (;;) {
			struct pollfd p[2] = { { fd, POLLIN, 0 }, { sigint_pipe[0], POLLIN, 0 } };
			int n = poll(p, interruptible ? 2 : 1, -1);
			char c;

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				return WAIT_LOST;
			if (interruptible && p[1].revents) {
				while (read(sigint_pipe[0], &c, 1) == 1)
					;
				control_send(fd, CONTROL_INTERRUPT, NULL, 0);
			}
			if (p[0].revents)
				break;
		}
		rc = control_recv(fd, rd, true);
		if (rc <= 0)
			return noted ? WAIT_DROPPED : WAIT_LOST;
	}
}

static void on_sigint(int sig)
{
	int saved = errno;

	(void)sig;
	if (write(sigint_pipe[1], "i", 1) < 0) {
		/* full: an interrupt is pending anyway */
	}
	errno = saved;
}

/* Forgets a Ctrl-C that came while no command ran. */
static void drain_sigint(void)
{
	char c;

	while (read(sigint_pipe[0], &c, 1) == 1)
		;
}

/* SIGINT writes to the self-pipe (no restart: poll returns). */
static int setup_signals(void)
{
	struct sigaction sa;

	if (pipe2(sigint_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
		return -1;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_sigint;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	return 0;
}

/* Says how the connection ended (for the process that went away). */
static void say_lost(pid_t pid)
{
	if ((kill(pid, 0) != 0 && errno == ESRCH) || exited(pid))
		fprintf(stderr, "[process %d has exited]\n", (int)pid);
	else
		fprintf(stderr, "[process %d closed the connection]\n", (int)pid);
}

/* ------------------------------------------------------------ sessions */

/* -e: one chunk. */
static int run_once(int fd, struct control_reader *rd, pid_t pid, const char *code)
{
	if (control_send(fd, CONTROL_EVAL, code, strlen(code)) != 0) {
		say_lost(pid);
		return ATTACH_EXIT_LUA;
	}
	switch (read_until_done(fd, rd, true)) {
	case WAIT_DONE_OK:
		return 0;
	case WAIT_DONE_INCOMPLETE:
		fprintf(stderr, "prof attach: the code is incomplete (an unfinished "
			"block or expression)\n");
		return ATTACH_EXIT_LUA;
	case WAIT_DONE_ERROR:
	case WAIT_EXIT:
	case WAIT_DROPPED:
		return ATTACH_EXIT_LUA;
	case WAIT_LOST:
		say_lost(pid);
		return ATTACH_EXIT_LUA;
	}
	return ATTACH_EXIT_LUA;
}

/* Lines from a non-terminal stdin, read with poll() so the socket is
 * watched meanwhile. */
struct line_src {
	char *buf;
	size_t len, cap;
	bool eof;
};

/* The next line (malloc'd), or NULL with *status LINEEDIT_EOF or
 * LINEEDIT_WAKE (the socket is readable first). */
static char *next_plain_line(struct line_src *ls, int watch, int *status)
{
	for (;;) {
		char *nl = ls->len ? memchr(ls->buf, '\n', ls->len) : NULL;
		struct pollfd p[2] = { { STDIN_FILENO, POLLIN, 0 }, { watch, POLLIN, 0 } };
		ssize_t n;

		if (nl || (ls->eof && ls->len)) {
			size_t l = nl ? (size_t)(nl - ls->buf) : ls->len;
			char *line = malloc(l + 1);

			if (!line) {
				*status = LINEEDIT_ERROR;
				return NULL;
			}
			memcpy(line, ls->buf, l);
			line[l] = '\0';
			l += nl ? 1 : 0;
			memmove(ls->buf, ls->buf + l, ls->len - l);
			ls->len -= l;
			*status = LINEEDIT_OK;
			return line;
		}
		if (ls->eof) {
			*status = LINEEDIT_EOF;
			return NULL;
		}
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			*status = LINEEDIT_ERROR;
			return NULL;
		}
		if (!p[0].revents && p[1].revents) {
			*status = LINEEDIT_WAKE;
			return NULL;
		}
		if (ls->cap - ls->len < 4096) {
			/* room to read 4 KiB: one doubling (from 8 KiB) */
			char *b = grow_array(ls->buf, &ls->cap, ls->len + 4096, 1, 8192);

			if (!b) {
				*status = LINEEDIT_ERROR;
				return NULL;
			}
			ls->buf = b;
		}
		n = read(STDIN_FILENO, ls->buf + ls->len, ls->cap - ls->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			ls->eof = true;
		else
			ls->len += (size_t)n;
	}
}

/* The socket became readable while waiting for input: only notices and
 * the end can come now. *noted remembers a notice across calls (the server
 * closes after one). Returns -1 to go on, else the exit status. */
static int handle_unasked(int fd, struct control_reader *rd, pid_t pid,
			  bool *noted)
{
	char type;
	const char *data;
	size_t len;
	int rc = control_recv(fd, rd, false);
	bool closed = rc == 0 || (rc < 0 && errno != EAGAIN);

	while (control_next_frame(rd, &type, &data, &len) == 1) {
		if (type == CONTROL_NOTE || type == CONTROL_EXIT) {
			fprintf(stderr, "[%.*s]\n", (int)len, data);
			*noted = true;
		}
		if (type == CONTROL_EXIT)
			return 0;
	}
	if (!closed)
		return -1;
	if (*noted)
		return 0;
	say_lost(pid);
	return ATTACH_EXIT_LUA;
}

/* Appends line to the chunk being built ("\n"-joined). */
static int chunk_add(char **chunk, size_t *len, const char *line)
{
	size_t l = strlen(line);
	char *p = realloc(*chunk, *len + l + 2);

	if (!p)
		return -1;
	if (*len)
		p[(*len)++] = '\n';
	memcpy(p + *len, line, l + 1);
	*len += l;
	*chunk = p;
	return 0;
}

/* The interactive session. Returns the exit status. */
static int run_interactive(int fd, struct control_reader *rd, pid_t pid)
{
	bool tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
	struct lineedit *le = tty ? lineedit_new(STDIN_FILENO, STDOUT_FILENO) : NULL;
	struct line_src ls = { 0 };
	char *chunk = NULL;
	size_t clen = 0;
	int status = 0;
	bool noted = false;

	if (tty && !le)
		return fail("out of memory");
	for (;;) {
		int st, rc;
		char *line = tty ? lineedit_read(le, clen ? ">> " : "> ", fd, &st)
				 : next_plain_line(&ls, fd, &st);

		if (st == LINEEDIT_WAKE) {
			rc = handle_unasked(fd, rd, pid, &noted);
			if (rc >= 0) {
				status = rc;
				break;
			}
			continue;
		}
		if (st == LINEEDIT_INTERRUPT) {
			clen = 0;
			continue;
		}
		if (st != LINEEDIT_OK)
			break; /* Ctrl-D, end of input */
		if (tty)
			lineedit_add_history(le, line);
		rc = chunk_add(&chunk, &clen, line);
		free(line);
		if (rc != 0) {
			status = fail("out of memory");
			break;
		}
		drain_sigint();
		if (control_send(fd, CONTROL_EVAL, chunk, clen) != 0) {
			say_lost(pid);
			status = ATTACH_EXIT_LUA;
			break;
		}
		switch (read_until_done(fd, rd, true)) {
		case WAIT_DONE_INCOMPLETE:
			continue; /* more lines: the continuation prompt */
		case WAIT_DONE_OK:
		case WAIT_DONE_ERROR:
			clen = 0;
			continue;
		case WAIT_EXIT:
		case WAIT_DROPPED:
			status = 0;
			break;
		case WAIT_LOST:
			say_lost(pid);
			status = ATTACH_EXIT_LUA;
			break;
		}
		break;
	}
	control_send(fd, CONTROL_QUIT, NULL, 0);
	free(chunk);
	free(ls.buf);
	lineedit_free(le);
	return status;
}

/* Reads the server's first frame: HELLO (printed unless quiet), or the
 * reason it turned us away. Returns 0 or CLI_EXIT_USAGE. */
static int greeting(int fd, struct control_reader *rd, pid_t pid, bool quiet)
{
	char type;
	const char *data;
	size_t len;
	int rc;
	struct pollfd p = { fd, POLLIN, 0 };

	while ((rc = control_next_frame(rd, &type, &data, &len)) == 0) {
		if (poll(&p, 1, 10000) <= 0)
			return fail("process %d did not greet within 10 s", (int)pid);
		if (control_recv(fd, rd, true) <= 0)
			return fail("process %d closed the connection before greeting",
				    (int)pid);
	}
	if (rc < 0)
		return fail("process %d sent something that is not profhost's protocol",
			    (int)pid);
	if (type == CONTROL_BUSY || type == CONTROL_REFUSED)
		return fail("%.*s", (int)len, data);
	if (type != CONTROL_HELLO)
		return fail("process %d sent something that is not profhost's protocol",
			    (int)pid);
	if (!quiet)
		io_write_all(STDOUT_FILENO, data, len);
	return 0;
}

/* `prof attach`: see cli_attach_cmd in cli.h. */
static int attach_main(int argc, char **argv)
{
	struct attach_opts o;
	struct target t;
	struct control_reader rd = { 0 };
	bool help;
	int fd, rc;

	if (parse_args(argc, argv, &o, &help) != 0)
		return CLI_EXIT_USAGE;
	if (help)
		return 0; /* printed */
	if (find_target(o.pid, &t) != 0)
		return CLI_EXIT_USAGE;
	signal(SIGPIPE, SIG_IGN);
	fd = connect_target(&t, &o);
	if (fd < 0)
		return CLI_EXIT_USAGE;
	if (setup_signals() != 0) {
		close(fd);
		return fail("cannot set up signal handling: %s", strerror(errno));
	}
	rc = greeting(fd, &rd, o.pid, o.code != NULL);
	if (rc == 0)
		rc = o.code ? run_once(fd, &rd, o.pid, o.code)
			    : run_interactive(fd, &rd, o.pid);
	close(fd);
	control_reader_free(&rd);
	return rc;
}

const struct cli_cmd cli_attach_cmd = { "attach", attach_main, attach_help, attach_synopsis };
