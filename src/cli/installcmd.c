/*
 * prof install-python — makes `PROF_SCRIPT=policy.lua python train.py` run
 * under profhost with no LD_PRELOAD, the way coverage.py measures
 * subprocesses: a profhost.pth in the interpreter's site-packages runs,
 * at every start of that interpreter, one environment look-up, and when
 * PROF_SCRIPT is set loads share/profhost/python/profhost_boot.py, which
 * loads the host library (see that file and docs/python.md).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "cliopt.h"
#include "locate.h"
#include "../common/err.h"
#include "../util/fsutil.h"

static const char install_synopsis[] =
	"prof install-python [--python PATH] [--uninstall]";

#define PTH_NAME "profhost.pth"

/* Writes the help of `prof install-python` to `out`. */
static void install_help(FILE *out)
{
	fprintf(out,
		"usage: %s\n"
		"\n"
		"Writes profhost.pth into the site-packages of a Python interpreter, so that\n"
		"  PROF_SCRIPT=policy.lua python train.py\n"
		"runs under profhost with no LD_PRELOAD. Without PROF_SCRIPT the interpreter\n"
		"runs as before (the file costs one environment look-up at start-up).\n"
		"It goes into the interpreter's own site-packages when that is writable (a\n"
		"virtual environment, or as root), else into the user's site-packages.\n"
		"\n"
		"options:\n"
		"  --python PATH  the interpreter (default: python3 on PATH)\n"
		"  --uninstall    remove the file from both places\n"
		"  -h, --help     show this help\n",
		install_synopsis);
}

/* Where an interpreter looks for .pth files. */
struct pyinfo {
	char exe[PATH_MAX];     /* sys.executable */
	char version[16];       /* "3.11" */
	char purelib[PATH_MAX]; /* its site-packages; "" when not on sys.path */
	char user[PATH_MAX];    /* the user's site-packages; "" when disabled */
};

static const char ask_code[] =
	"import site, sys, sysconfig\n"
	"p = sysconfig.get_paths()['purelib']\n"
	"print(sys.executable)\n"
	"print('%d.%d' % sys.version_info[:2])\n"
	"print(p if p in sys.path else '')\n"
	"print(site.getusersitepackages() if site.ENABLE_USER_SITE else '')\n";

/* Copies line `k` (from 0) of text into out[PATH_MAX]. Returns 0, or -1
 * when there is no such line or it is too long. */
static int line_of(const char *text, int k, char *out)
{
	const char *end;
	size_t n;

	while (k-- > 0) {
		text = strchr(text, '\n');
		if (!text)
			return -1;
		text++;
	}
	end = strchr(text, '\n');
	n = end ? (size_t)(end - text) : strlen(text);
	if (n >= PATH_MAX)
		return -1;
	memcpy(out, text, n);
	out[n] = '\0';
	return 0;
}

/* Runs `python -c ask_code` (PROF_SCRIPT removed, so profhost.pth stays
 * inert in it) and fills *pi. Returns 0, or -1 with *e naming the
 * interpreter and the fix. Main thread. */
static int ask_python(const char *python, struct pyinfo *pi, struct err *e)
{
	char out[4 * PATH_MAX + 64], ver[PATH_MAX];
	size_t len = 0;
	int fds[2], status;
	pid_t pid;

	if (pipe2(fds, O_CLOEXEC) != 0)
		return err_errno(e, errno, "cannot create a pipe");
	pid = fork();
	if (pid < 0) {
		close(fds[0]);
		close(fds[1]);
		return err_errno(e, errno, "cannot fork");
	}
	if (pid == 0) {
		dup2(fds[1], 1);
		unsetenv("PROF_SCRIPT");
		execlp(python, python, "-c", ask_code, (char *)NULL);
		fprintf(stderr, "prof install-python: cannot run '%s': %s (name an "
			"interpreter with --python PATH)\n", python, strerror(errno));
		_exit(127);
	}
	close(fds[1]);
	for (;;) {
		ssize_t r = read(fds[0], out + len, sizeof out - 1 - len);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		len += (size_t)r;
		if (len == sizeof out - 1)
			break;
	}
	out[len] = '\0';
	close(fds[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
		return err_set(e, "cannot run '%s'", python);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
	    line_of(out, 0, pi->exe) != 0 || line_of(out, 1, ver) != 0 ||
	    line_of(out, 2, pi->purelib) != 0 || line_of(out, 3, pi->user) != 0)
		return err_set(e, "'%s' did not say where its site-packages are (is it a "
			       "Python 3 interpreter?)", python);
	snprintf(pi->version, sizeof pi->version, "%.15s", ver);
	return 0;
}

/* Whether directory `dir` exists and this user may create files in it, or
 * can be created (its parent exists and is writable). */
static int dir_writable(const char *dir)
{
	char parent[PATH_MAX];
	char *slash;

	if (access(dir, W_OK | X_OK) == 0)
		return 1;
	if (errno != ENOENT || strlen(dir) >= sizeof parent)
		return 0;
	strcpy(parent, dir);
	slash = strrchr(parent, '/');
	if (!slash || slash == parent)
		return 0;
	*slash = '\0';
	return dir_writable(parent);
}

/* Whether `s` can stand inside a Python string literal as it is. */
static int plain_path(const char *s)
{
	return !strpbrk(s, "\"\\\n\r");
}

/* Writes the .pth into dir (created when missing) through a temporary
 * file renamed into place. Returns 0, or -1 with *e. */
static int write_pth(const char *dir, const char *lib, const char *boot,
		     char *path, struct err *e)
{
	char tmp[PATH_MAX + 32];
	FILE *f;

	if (fsutil_mkdirs(dir, 0755, e) != 0 ||
	    fsutil_join(path, PATH_MAX, dir, PTH_NAME, e) != 0)
		return -1;
	snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
	f = fopen(tmp, "wx");
	if (!f)
		return err_errno(e, errno, "cannot create '%s'", tmp);
	fprintf(f, "# profhost: PROF_SCRIPT=policy.lua python ... runs under profhost "
		"(written by prof install-python; prof install-python --uninstall removes "
		"it). Does nothing when PROF_SCRIPT is unset.\n"
		"import os; os.environ.get(\"PROF_SCRIPT\") and "
		"__import__(\"runpy\").run_path(\"%s\", {\"PROFHOST_LIB\": \"%s\"})\n",
		boot, lib);
	if (fclose(f) != 0 || rename(tmp, path) != 0) {
		err_errno(e, errno, "cannot write '%s'", path);
		unlink(tmp);
		return -1;
	}
	return 0;
}

/* Removes dir/profhost.pth; prints what it removed. Returns 1 when it
 * removed it, 0 when there was none, -1 with *e on failure. */
static int remove_pth(const char *dir, struct err *e)
{
	char path[PATH_MAX];

	if (!dir[0] || fsutil_join(path, sizeof path, dir, PTH_NAME, e) != 0)
		return 0;
	if (unlink(path) == 0) {
		printf("prof install-python: removed %s\n", path);
		return 1;
	}
	if (errno == ENOENT)
		return 0;
	return err_errno(e, errno, "cannot remove '%s'", path);
}

/* Parses the arguments into *python and *uninstall. Returns -1 to go on,
 * else the exit status (help shown, or a usage error said). */
static int parse(int argc, char **argv, const char **python, int *uninstall)
{
	int i;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *val = NULL;
		int m;

		if (cliopt_help(&cli_install_python_cmd, a))
			return 0;
		if (strcmp(a, "--uninstall") == 0) {
			*uninstall = 1;
		} else if ((m = cliopt_value(argc, argv, &i, 0, "python", &val)) != 0) {
			if (m < 0)
				return cliopt_usage_error(&cli_install_python_cmd,
							  "--python needs a value (an interpreter, "
							  "e.g. --python venv/bin/python)");
			*python = val;
		} else {
			return cliopt_usage_error(&cli_install_python_cmd,
						  "unknown argument '%s'", a);
		}
	}
	if (!(*python)[0])
		return cliopt_usage_error(&cli_install_python_cmd,
					  "--python needs a value (an interpreter, e.g. "
					  "--python venv/bin/python)");
	return -1;
}

/* `prof install-python`: see cli_install_python_cmd in cli.h. */
static int install_main(int argc, char **argv)
{
	const char *python = "python3", *dir;
	char prefix[PATH_MAX], lib[PATH_MAX], boot[PATH_MAX], path[PATH_MAX];
	struct pyinfo pi;
	struct err e;
	int uninstall = 0, rc, a, b;

	rc = parse(argc, argv, &python, &uninstall);
	if (rc >= 0)
		return rc;
	if (ask_python(python, &pi, &e) != 0)
		goto fail;
	if (uninstall) {
		a = remove_pth(pi.purelib, &e);
		b = a < 0 ? 0 : remove_pth(pi.user, &e);
		if (a < 0 || b < 0)
			goto fail;
		if (!a && !b)
			printf("prof install-python: no profhost.pth for %s; nothing to "
			       "remove\n", pi.exe);
		return 0;
	}
	if (locate_host(prefix, lib, &e) != 0)
		goto fail;
	if (!prefix[0] || fsutil_join(boot, sizeof boot, prefix,
				      "share/profhost/python/profhost_boot.py", &e) != 0 ||
	    access(boot, R_OK) != 0) {
		err_set(&e, "cannot find profhost_boot.py under %s/share/profhost/python "
			"(is profhost installed there?)", prefix[0] ? prefix : "?");
		goto fail;
	}
	if (!plain_path(lib) || !plain_path(boot)) {
		err_set(&e, "the installation's path '%s' holds a quote, backslash or "
			"newline, which profhost.pth cannot name", prefix);
		goto fail;
	}
	if (pi.purelib[0] && dir_writable(pi.purelib))
		dir = pi.purelib;
	else if (pi.user[0])
		dir = pi.user;
	else {
		err_set(&e, "cannot write to %s's site-packages (%s) and its user "
			"site-packages are off: run it as root, or name a virtual "
			"environment's interpreter with --python", pi.exe,
			pi.purelib[0] ? pi.purelib : "not on sys.path");
		goto fail;
	}
	if (write_pth(dir, lib, boot, path, &e) != 0)
		goto fail;
	printf("prof install-python: wrote %s for %s (Python %s)%s\n"
	       "  PROF_SCRIPT=policy.lua %s train.py now runs under profhost;\n"
	       "  prof install-python%s%s --uninstall removes it\n",
	       path, pi.exe, pi.version,
	       dir == pi.user ? ", in your user site-packages (its own is not writable)" : "",
	       python, strcmp(python, "python3") ? " --python " : "",
	       strcmp(python, "python3") ? python : "");
	return 0;
fail:
	fprintf(stderr, "prof install-python: %s\n", e.msg);
	return 1;
}

const struct cli_cmd cli_install_python_cmd = { "install-python", install_main,
						install_help, install_synopsis };
