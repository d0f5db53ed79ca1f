/*
 * sockdir — where control sockets live, and the names of REPL signals
 * (see control.h). Shared by the server and `prof attach`.
 */
#include "control.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

int control_dir_path(char *out, size_t size, const char *xdg, struct err *e)
{
	struct stat st;
	int n;

	if (xdg && xdg[0] == '/' && stat(xdg, &st) == 0 && S_ISDIR(st.st_mode) &&
	    st.st_uid == geteuid())
		n = snprintf(out, size, "%s/profhost", xdg);
	else
		n = snprintf(out, size, "/tmp/profhost-%u", (unsigned)geteuid());
	if (n < 0 || (size_t)n >= size)
		return err_set(e, "the socket directory under '%s' is too long", xdg);
	return 0;
}

int control_dir_prepare(const char *dir, bool create, struct err *e)
{
	struct stat st;

	if (create && mkdir(dir, 0700) != 0 && errno != EEXIST)
		return err_errno(e, errno, "cannot create the socket directory '%s'", dir);
	if (lstat(dir, &st) != 0)
		return err_errno(e, errno, "socket directory '%s'", dir);
	if (!S_ISDIR(st.st_mode))
		return err_set(e, "socket directory '%s' is not a directory; not using it",
			       dir);
	if (st.st_uid != geteuid())
		return err_set(e, "socket directory '%s' belongs to uid %u, not to uid "
			       "%u; not using it", dir, (unsigned)st.st_uid,
			       (unsigned)geteuid());
	if ((st.st_mode & 077) && chmod(dir, 0700) != 0)
		return err_errno(e, errno, "cannot make socket directory '%s' private "
				 "(mode 0700)", dir);
	return 0;
}

/* "<dir>/<pid><suffix>", fitting a socket address. */
static int pid_path(char *out, size_t size, const char *dir, pid_t pid,
		    const char *suffix, struct err *e)
{
	int n = snprintf(out, size, "%s/%d%s", dir, (int)pid, suffix);

	if (n < 0 || (size_t)n >= size || (size_t)n >= CONTROL_PATH_MAX)
		return err_set(e, "socket path in '%s' is too long for a UNIX socket",
			       dir);
	return 0;
}

int control_sock_path(char *out, size_t size, const char *dir, pid_t pid,
		      struct err *e)
{
	return pid_path(out, size, dir, pid, ".sock", e);
}

int control_trigger_path(char *out, size_t size, const char *dir, pid_t pid,
			 struct err *e)
{
	return pid_path(out, size, dir, pid, ".attach", e);
}

/* The pid a control file belongs to: "<pid>.sock", "<pid>.attach" or
 * ".<pid>.<anything>.tmp"; 0 for any other name. */
static pid_t owner_of(const char *name)
{
	const char *p = name;
	char *end;
	long pid;
	size_t n = strlen(name);

	if (*p == '.') {
		if (n < 5 || strcmp(name + n - 4, ".tmp") != 0)
			return 0;
		p++;
	}
	if (!isdigit((unsigned char)*p))
		return 0;
	pid = strtol(p, &end, 10);
	if (pid <= 0 || pid > 0x3fffffff)
		return 0;
	if (name[0] == '.')
		return *end == '.' ? (pid_t)pid : 0;
	return strcmp(end, ".sock") == 0 || strcmp(end, ".attach") == 0 ? (pid_t)pid : 0;
}

int control_clean_stale(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *ent;
	int removed = 0;

	if (!d)
		return 0;
	while ((ent = readdir(d)) != NULL) {
		pid_t pid = owner_of(ent->d_name);

		if (pid <= 0 || pid == getpid())
			continue;
		if (kill(pid, 0) == 0 || errno != ESRCH)
			continue;
		if (unlinkat(dirfd(d), ent->d_name, 0) == 0)
			removed++;
	}
	closedir(d);
	return removed;
}

int control_parse_signal(const char *s, int *sig, struct err *e)
{
	const char *name = s;
	char *end;
	long n;

	if (!s || !*s)
		goto bad;
	if (strncasecmp(name, "SIG", 3) == 0)
		name += 3;
	if (strcasecmp(name, "USR1") == 0) {
		*sig = SIGUSR1;
		return 0;
	}
	if (strcasecmp(name, "USR2") == 0) {
		*sig = SIGUSR2;
		return 0;
	}
	errno = 0;
	n = strtol(s, &end, 10);
	if (errno || end == s || *end)
		goto bad;
	if (n == 0 || n == SIGUSR1 || n == SIGUSR2 ||
	    (n >= SIGRTMIN && n <= SIGRTMAX)) {
		*sig = (int)n;
		return 0;
	}
bad:
	return err_set(e, "PROF_REPL_SIGNAL='%s' is not understood (use USR1, USR2, "
		       "a real-time signal number %d-%d, or 0 to turn the REPL off)",
		       s ? s : "", SIGRTMIN, SIGRTMAX);
}

const char *control_signal_name(int sig, char *buf, size_t size)
{
	if (sig == SIGUSR1)
		snprintf(buf, size, "SIGUSR1");
	else if (sig == SIGUSR2)
		snprintf(buf, size, "SIGUSR2");
	else if (sig >= SIGRTMIN && sig <= SIGRTMAX)
		snprintf(buf, size, "SIGRTMIN+%d", sig - SIGRTMIN);
	else
		snprintf(buf, size, "signal %d", sig);
	return buf;
}
