/*
 * server — the control thread (see control.h).
 *
 * The REPL signal's handler only writes a byte to a pipe. The control
 * thread, with every signal blocked, sleeps in poll() on that pipe (and,
 * until the socket is open, wakes once a second to look for the trigger
 * file). Woken, it opens the socket; then it serves one client at a time,
 * running each chunk the client sends with policy_repl_eval() on this
 * thread. While a command runs, the policy polls us (every ~20 ms) and we
 * look at the client (an interrupt, or the client gone) and the listening
 * socket (a second client is told "busy" at once).
 */
#include "control.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "../policy/policy.h"
#include "../common/log.h"
#include "../util/ownfd.h"
#include "version.h"

#define SERVER_TRIGGER_POLL_MS 1000
#define SERVER_SEND_TIMEOUT_S 5
#define SERVER_STOP_WAIT_S 3
#define SERVER_BANNER_MAX 2048

/* The attached client. */
struct client {
	struct ownfd fd;           /* its connection (-1: none) */
	pid_t pid;
	struct control_reader rd;
	int64_t last_active_ns;
	bool gone;                 /* it left, or could not be written to */
};

static struct server {
	bool started;              /* a control thread runs in this process */
	struct control_opts o;
	char program[256];
	char source[PATH_MAX];
	pthread_t thread;
	struct ownfd wake_r, wake_w; /* pipe: 'T' open the socket, 'S' stop;
					the signal handler writes wake_w */
	bool have_dir;
	char dir[PATH_MAX];
	char trigger[PATH_MAX];
	char sock[CONTROL_PATH_MAX];
	bool sock_open;
	pthread_mutex_t lock;      /* guards sock and sock_open for readers */
	struct ownfd listen;       /* the listening socket */
	struct client c;
	pid_t pid;
	pid_t parent;              /* in a forked child: the parent's pid */
	struct sigaction old;      /* the application's handler before ours */
	atomic_int stopping;
} srv = {
	.wake_r = OWNFD_NONE,
	.wake_w = OWNFD_NONE,
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.listen = OWNFD_NONE,
	.c = { .fd = OWNFD_NONE },
};

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ------------------------------------------------------------ signal */

/* The REPL signal: wake the control thread, then run the handler the
 * application had, if any. Async-signal-safe. */
static void server_on_signal(int sig, siginfo_t *si, void *uc)
{
	int saved = errno;
	int fd = ownfd_fd(&srv.wake_w);

	/* Only into our own pipe: the program may have closed it and opened
	 * a file of its own under its number (the control thread then makes
	 * a new pipe). */
	if (fd >= 0 && ownfd_check(&srv.wake_w) && write(fd, "T", 1) < 0) {
		/* the pipe is full: the thread is being woken anyway */
	}
	if (srv.old.sa_flags & SA_SIGINFO) {
		if (srv.old.sa_sigaction)
			srv.old.sa_sigaction(sig, si, uc);
	} else if (srv.old.sa_handler != SIG_DFL && srv.old.sa_handler != SIG_IGN) {
		srv.old.sa_handler(sig);
	}
	errno = saved;
}

/* Installs the handler, keeping (and naming, once) one the application
 * already had. Returns 0 or -1 with *e. */
static int install_handler(int sig, struct err *e)
{
	struct sigaction sa;
	char name[32];
	bool app_handler;

	if (sigaction(sig, NULL, &srv.old) != 0)
		return err_errno(e, errno, "cannot read the handler of %s",
				 control_signal_name(sig, name, sizeof name));
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = server_on_signal;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(sig, &sa, NULL) != 0)
		return err_errno(e, errno, "cannot install the REPL handler for %s",
				 control_signal_name(sig, name, sizeof name));
	app_handler = (srv.old.sa_flags & SA_SIGINFO) ||
		      (srv.old.sa_handler != SIG_DFL && srv.old.sa_handler != SIG_IGN);
	if (app_handler)
		log_msg(LOG_INFO, "%s already has a handler in this process; the REPL "
			"signal chains to it (PROF_REPL_SIGNAL picks another signal)",
			control_signal_name(sig, name, sizeof name));
	return 0;
}

/* True when the REPL signal's handler is no longer ours. */
static bool handler_replaced(void)
{
	struct sigaction cur;

	if (sigaction(srv.o.signal, NULL, &cur) != 0)
		return false;
	return !(cur.sa_flags & SA_SIGINFO) || cur.sa_sigaction != server_on_signal;
}

/* ------------------------------------------------------------ socket */

/* Opens <dir>/<pid>.sock: bound under a temporary name, made 0600, then
 * renamed into place. Failures are logged; the REPL stays closed. */
static void open_socket(void)
{
	struct sockaddr_un addr;
	struct err e;
	char tmp[CONTROL_PATH_MAX];
	int fd, n;

	if (!srv.have_dir)
		return;
	if (control_dir_prepare(srv.dir, true, &e) != 0) {
		log_msg(LOG_WARN, "REPL: %s", e.msg);
		return;
	}
	control_clean_stale(srv.dir);
	n = snprintf(tmp, sizeof tmp, "%s/.%d.%lld.tmp", srv.dir, (int)srv.pid,
		     (long long)(now_ns() % 1000000000));
	if (n < 0 || (size_t)n >= sizeof tmp) {
		log_msg(LOG_WARN, "REPL: socket path in '%s' is too long", srv.dir);
		return;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		log_msg(LOG_WARN, "REPL: cannot create a socket: %s", strerror(errno));
		return;
	}
	memset(&addr, 0, sizeof addr);
	addr.sun_family = AF_UNIX;
	memcpy(addr.sun_path, tmp, (size_t)n + 1);
	unlink(tmp);
	if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 ||
	    chmod(tmp, 0600) != 0 || listen(fd, 8) != 0 ||
	    rename(tmp, srv.sock) != 0) {
		log_msg(LOG_WARN, "REPL: cannot open the socket %s: %s", srv.sock,
			strerror(errno));
		unlink(tmp);
		close(fd);
		return;
	}
	if (ownfd_adopt(&srv.listen, fd) != 0) {
		unlink(srv.sock);
		return;
	}
	pthread_mutex_lock(&srv.lock);
	srv.sock_open = true;
	pthread_mutex_unlock(&srv.lock);
	log_msg(LOG_INFO, "REPL open at %s (prof attach %d)", srv.sock, (int)srv.pid);
}

/* Closes and removes the socket (and a trigger file left behind). */
static void close_socket(void)
{
	if (ownfd_fd(&srv.listen) >= 0) {
		ownfd_close(&srv.listen);
		unlink(srv.sock);
	}
	if (srv.have_dir)
		unlink(srv.trigger);
	pthread_mutex_lock(&srv.lock);
	srv.sock_open = false;
	pthread_mutex_unlock(&srv.lock);
}

/* True (and the file removed) when `prof attach` left a trigger file. */
static bool trigger_seen(void)
{
	struct stat st;

	if (!srv.have_dir || lstat(srv.trigger, &st) != 0)
		return false;
	unlink(srv.trigger);
	return st.st_uid == geteuid();
}

/* ------------------------------------------------------------ client */

/* Sends a frame to the client (long texts in several); a failure marks
 * it gone. */
static void client_say(struct client *c, char type, const char *text, size_t len)
{
	if (c->gone || ownfd_get(&c->fd, "a REPL client's connection") < 0) {
		c->gone = true;
		return;
	}
	do {
		size_t n = len > CONTROL_FRAME_MAX ? CONTROL_FRAME_MAX : len;

		if (control_send(ownfd_fd(&c->fd), type, text, n) != 0) {
			c->gone = true;
			return;
		}
		text += n;
		len -= n;
	} while (len > 0);
}

static void client_close(struct client *c)
{
	ownfd_close(&c->fd);
	c->gone = false;
	control_reader_free(&c->rd);
}

/* Sends `type` with a message to a connection we will not serve. */
static void turn_away(int fd, char type, const char *msg)
{
	struct timeval tv = { 1, 0 };

	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	control_send(fd, type, msg, strlen(msg));
	close(fd);
}

/* The greeting: who this is, and what the client may do. */
static void send_banner(struct client *c)
{
	char b[SERVER_BANNER_MAX], name[32];
	size_t n;

	n = (size_t)snprintf(b, sizeof b, "profhost %s: process %d (%s), policy %s\n",
			     PROFHOST_VERSION, (int)srv.pid, srv.program, srv.source);
	if (srv.parent && n < sizeof b)
		n += (size_t)snprintf(b + n, sizeof b - n,
				      "a child forked from process %d: profiling "
				      "stays with the parent; the REPL is this "
				      "process's own\n", (int)srv.parent);
	if (handler_replaced() && n < sizeof b)
		n += (size_t)snprintf(b + n, sizeof b - n,
				      "note: the application replaced profhost's %s "
				      "handler; attach works through the trigger file\n",
				      control_signal_name(srv.o.signal, name, sizeof name));
	if (n < sizeof b)
		n += (size_t)snprintf(b + n, sizeof b - n,
				      "prof.help() lists what you can do here; Ctrl-D "
				      "leaves (the process goes on)\n");
	if (n >= sizeof b)
		n = sizeof b - 1;
	client_say(c, CONTROL_HELLO, b, n);
}

/* Accepts waiting connections: a peer of another uid is refused, a second
 * client is told busy, else it becomes the client. */
static void accept_clients(void)
{
	char msg[256];

	for (;;) {
		struct ucred cred;
		socklen_t len = sizeof cred;
		struct timeval tv = { SERVER_SEND_TIMEOUT_S, 0 };
		int fd = accept4(ownfd_fd(&srv.listen), NULL, NULL, SOCK_CLOEXEC);

		if (fd < 0)
			return;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
		    cred.uid != geteuid()) {
			snprintf(msg, sizeof msg, "refused: uid %u may not attach to "
				 "process %d, which runs as uid %u",
				 (unsigned)cred.uid, (int)srv.pid, (unsigned)geteuid());
			log_msg(LOG_WARN, "REPL: refused a connection from uid %u "
				"(pid %d)", (unsigned)cred.uid, (int)cred.pid);
			turn_away(fd, CONTROL_REFUSED, msg);
			continue;
		}
		if (ownfd_fd(&srv.c.fd) >= 0) {
			snprintf(msg, sizeof msg, "busy: another client (pid %d) is "
				 "attached to process %d; try again when it leaves",
				 (int)srv.c.pid, (int)srv.pid);
			turn_away(fd, CONTROL_BUSY, msg);
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
		if (ownfd_adopt(&srv.c.fd, fd) != 0)
			continue;
		srv.c.pid = cred.pid;
		srv.c.gone = false;
		srv.c.last_active_ns = now_ns();
		log_msg(LOG_DEBUG, "REPL: client pid %d attached", (int)cred.pid);
		send_banner(&srv.c);
	}
}

/* policy_repl_io.out: results, print() and errors go to the client. */
static void client_out(void *ctx, bool error, const char *text, size_t len)
{
	client_say(ctx, error ? CONTROL_ERR : CONTROL_OUT, text, len);
}

/* policy_repl_io.poll, while a command runs: true on stop, on an
 * interrupt from the client, or when the client went away. A second client
 * is turned away meanwhile. */
static bool client_poll(void *ctx)
{
	struct client *c = ctx;
	struct pollfd p[2];
	bool intr = false;
	char type;
	const char *data;
	size_t len;
	int n = 0, rc;

	if (atomic_load(&srv.stopping) || c->gone)
		return true;
	if (ownfd_get(&c->fd, "a REPL client's connection") < 0) {
		c->gone = true;
		return true;
	}
	p[n].fd = ownfd_fd(&c->fd);
	p[n++].events = POLLIN;
	if (ownfd_get(&srv.listen, "the REPL's socket") >= 0) {
		p[n].fd = ownfd_fd(&srv.listen);
		p[n++].events = POLLIN;
	}
	if (poll(p, (nfds_t)n, 0) <= 0)
		return false;
	/* The client first: one that left frees its place before a new one
	 * is turned away as "busy". */
	if (p[0].revents) {
		rc = control_recv(ownfd_fd(&c->fd), &c->rd, false);
		if (rc == 0 || (rc < 0 && errno != EAGAIN)) {
			c->gone = true;
			return true;
		}
		while ((rc = control_next_frame(&c->rd, &type, &data, &len)) == 1) {
			if (type == CONTROL_INTERRUPT)
				intr = true;
			else if (type == CONTROL_QUIT)
				c->gone = true;
		}
		if (rc < 0)
			c->gone = true;
	}
	if (c->gone)
		return true;
	if (n > 1 && p[1].revents)
		accept_clients();
	return intr;
}

/* Runs one chunk for the client and sends DONE. */
static void run_command(struct client *c, const char *data, size_t len)
{
	struct policy_repl_io io = { client_out, client_poll, c };
	enum policy_status st;
	struct err e;
	char *chunk = malloc(len + 1);
	char done;

	if (!chunk) {
		client_say(c, CONTROL_ERR, "out of memory\n", 14);
		client_say(c, CONTROL_DONE, "1", 1);
		return;
	}
	memcpy(chunk, data, len); /* `data` lives in the reader, which moves */
	chunk[len] = '\0';
	e.msg[0] = '\0';
	st = policy_repl_eval(srv.o.policy, chunk, len, &io, &e);
	free(chunk);
	done = st == POLICY_OK ? CONTROL_DONE_OK
	     : st == POLICY_INCOMPLETE ? CONTROL_DONE_INCOMPLETE : CONTROL_DONE_ERROR;
	client_say(c, CONTROL_DONE, &done, 1);
	c->last_active_ns = now_ns();
}

/* The client's socket is readable: runs what it sent. */
static void client_read(struct client *c)
{
	char type;
	const char *data;
	size_t len;
	int rc = control_recv(ownfd_fd(&c->fd), &c->rd, false);

	if (rc == 0 || (rc < 0 && errno != EAGAIN)) {
		c->gone = true;
		return;
	}
	while (!c->gone && !atomic_load(&srv.stopping) &&
	       (rc = control_next_frame(&c->rd, &type, &data, &len)) == 1) {
		c->last_active_ns = now_ns();
		if (type == CONTROL_EVAL)
			run_command(c, data, len);
		else if (type == CONTROL_QUIT)
			c->gone = true;
		/* INTERRUPT with nothing running, or unknown: ignored */
	}
	if (rc < 0)
		c->gone = true;
}

/* Drops a client idle for longer than idle_s. */
static void check_idle(struct client *c)
{
	char msg[160];

	if (ownfd_fd(&c->fd) < 0 || !srv.o.idle_s ||
	    now_ns() - c->last_active_ns < (int64_t)srv.o.idle_s * 1000000000)
		return;
	snprintf(msg, sizeof msg, "idle for %u s: disconnected (prof attach %d "
		 "again to come back)", srv.o.idle_s, (int)srv.pid);
	client_say(c, CONTROL_NOTE, msg, strlen(msg));
	client_close(c);
}

/* How long poll() may sleep: until the next trigger-file look, the idle
 * deadline, or for ever. */
static int poll_timeout(void)
{
	int64_t t = -1;

	if ((ownfd_fd(&srv.listen) < 0 && srv.have_dir) || ownfd_fd(&srv.wake_r) < 0)
		t = SERVER_TRIGGER_POLL_MS;
	if (ownfd_fd(&srv.c.fd) >= 0 && srv.o.idle_s) {
		int64_t left = (srv.c.last_active_ns +
				(int64_t)srv.o.idle_s * 1000000000 - now_ns()) / 1000000 + 1;

		if (left < 0)
			left = 0;
		if (t < 0 || left < t)
			t = left;
	}
	return (int)t;
}

/* Makes the wake pipe (both ends owned, see ownfd.h). Returns 0 or -1
 * with errno. */
static int make_wake_pipe(void)
{
	int fds[2];

	if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
		return -1;
	if (ownfd_adopt(&srv.wake_r, fds[0]) != 0) {
		close(fds[1]);
		return -1;
	}
	if (ownfd_adopt(&srv.wake_w, fds[1]) != 0) {
		ownfd_close(&srv.wake_r);
		return -1;
	}
	return 0;
}

/* Before each poll: a descriptor the program closed or reused (a daemon
 * closing every inherited one) is forgotten, said once, and replaced:
 * a new wake pipe, the socket opened anew; a client's connection is
 * dropped. Without a wake pipe poll() times out once a second, so the
 * thread never spins on a dead descriptor. Control thread. */
static void check_descriptors(void)
{
	bool pipe_ok = ownfd_get(&srv.wake_r, "the REPL's wake pipe") >= 0;

	if (ownfd_get(&srv.wake_w, "the REPL's wake pipe") < 0 || !pipe_ok) {
		/* Retried at most once a poll time-out (a second) */
		ownfd_close(&srv.wake_r);
		ownfd_close(&srv.wake_w);
		if (make_wake_pipe() != 0)
			log_msg(LOG_DEBUG, "REPL: no new wake pipe: %s", strerror(errno));
	}
	if (ownfd_fd(&srv.listen) >= 0 &&
	    ownfd_get(&srv.listen, "the REPL's socket") < 0) {
		unlink(srv.sock);
		pthread_mutex_lock(&srv.lock);
		srv.sock_open = false;
		pthread_mutex_unlock(&srv.lock);
		open_socket();
	}
	if (ownfd_fd(&srv.c.fd) >= 0 &&
	    ownfd_get(&srv.c.fd, "a REPL client's connection") < 0)
		srv.c.gone = true;
}

static void *server_main(void *arg)
{
	char buf[64], msg[128];

	(void)arg;
	while (!atomic_load(&srv.stopping)) {
		struct pollfd p[3];
		int n = 0, iw = -1, il = -1, ic = -1;
		bool open = false;
		ssize_t got, i;

		check_descriptors();
		if (ownfd_fd(&srv.wake_r) >= 0) {
			iw = n;
			p[n].fd = ownfd_fd(&srv.wake_r);
			p[n++].events = POLLIN;
		}
		if (ownfd_fd(&srv.listen) >= 0) {
			il = n;
			p[n].fd = ownfd_fd(&srv.listen);
			p[n++].events = POLLIN;
		}
		if (ownfd_fd(&srv.c.fd) >= 0) {
			ic = n;
			p[n].fd = ownfd_fd(&srv.c.fd);
			p[n++].events = POLLIN;
		}
		if (poll(p, (nfds_t)n, poll_timeout()) < 0 && errno != EINTR) {
			log_msg(LOG_WARN, "REPL: poll failed: %s", strerror(errno));
			sleep(1);
			continue;
		}
		while (iw >= 0 && p[iw].revents && ownfd_check(&srv.wake_r) &&
		       (got = read(ownfd_fd(&srv.wake_r), buf, sizeof buf)) > 0)
			for (i = 0; i < got; i++)
				if (buf[i] == 'T')
					open = true;
		if (atomic_load(&srv.stopping))
			break;
		if (ownfd_fd(&srv.listen) < 0 && (open || trigger_seen()))
			open_socket();
		/* The client before new connections: one that just left frees
		 * its place first. */
		if (ic >= 0 && p[ic].revents)
			client_read(&srv.c);
		if (ownfd_fd(&srv.c.fd) >= 0 && srv.c.gone) {
			log_msg(LOG_DEBUG, "REPL: client pid %d left", (int)srv.c.pid);
			client_close(&srv.c);
		}
		if (il >= 0 && p[il].revents)
			accept_clients();
		check_idle(&srv.c);
	}
	if (ownfd_fd(&srv.c.fd) >= 0) {
		snprintf(msg, sizeof msg, "process %d is exiting", (int)srv.pid);
		client_say(&srv.c, CONTROL_EXIT, msg, strlen(msg));
		client_close(&srv.c);
	}
	close_socket();
	return NULL;
}

/* ------------------------------------------------------------ lifecycle */


/* Creates the wake pipe and starts the thread with every signal blocked.
 * Returns 0 or -1 with *e. */
static int start_thread(struct err *e)
{
	sigset_t all, old;
	int rc;

	if (make_wake_pipe() != 0)
		return err_errno(e, errno, "REPL: cannot create the control pipe");
	atomic_store(&srv.stopping, 0);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&srv.thread, NULL, server_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		ownfd_close(&srv.wake_w);
		ownfd_close(&srv.wake_r);
		return err_errno(e, rc, "REPL: cannot create the control thread");
	}
	pthread_setname_np(srv.thread, "profhost-ctl");
	srv.started = true;
	return 0;
}

/* This process's socket and trigger paths in srv.dir. */
static void set_paths(void)
{
	struct err e;

	srv.have_dir = srv.dir[0] &&
		control_sock_path(srv.sock, sizeof srv.sock, srv.dir, srv.pid, &e) == 0 &&
		control_trigger_path(srv.trigger, sizeof srv.trigger, srv.dir,
				     srv.pid, &e) == 0;
	if (!srv.have_dir)
		log_msg(LOG_DEBUG, "REPL: no socket path (%s)", e.msg);
}

int control_start(const struct control_opts *o, struct err *e)
{
	struct err local;

	if (!o || o->signal == 0)
		return 0;
	if (srv.started)
		return err_set(e, "REPL: the control thread is already running");
	srv.o = *o;
	snprintf(srv.program, sizeof srv.program, "%s", o->program ? o->program : "?");
	snprintf(srv.source, sizeof srv.source, "%s",
		 o->policy_source ? o->policy_source : "?");
	srv.o.program = srv.program;
	srv.o.policy_source = srv.source;
	srv.pid = getpid();
	if (control_dir_path(srv.dir, sizeof srv.dir, getenv("XDG_RUNTIME_DIR"),
			     &local) != 0) {
		log_msg(LOG_DEBUG, "REPL: %s", local.msg);
		srv.dir[0] = '\0';
	}
	set_paths();
	/* The thread first, so a signal right after the handler is installed
	 * already finds the pipe. */
	if (start_thread(e) != 0)
		return -1;
	if (install_handler(o->signal, e) != 0) {
		control_stop();
		return -1;
	}
	return 0;
}

void control_stop(void)
{
	struct timespec deadline;

	if (!srv.started || pthread_equal(pthread_self(), srv.thread))
		return;
	atomic_store(&srv.stopping, 1);
	if (ownfd_check(&srv.wake_w) && write(ownfd_fd(&srv.wake_w), "S", 1) < 0) {
		/* full: the thread is awake anyway (a lost pipe: it polls
		 * with a time-out) */
	}
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += SERVER_STOP_WAIT_S;
	if (pthread_timedjoin_np(srv.thread, NULL, &deadline) != 0) {
		log_msg(LOG_DEBUG, "REPL: the control thread did not stop in time");
		if (ownfd_fd(&srv.listen) >= 0)
			unlink(srv.sock);
	}
	srv.started = false;
}

void control_after_fork_child(void)
{
	struct err e;

	if (!srv.started)
		return;
	/* The parent's thread is not here; its descriptors are ours to
	 * close, its files (socket, trigger) stay the parent's. */
	srv.started = false;
	ownfd_close(&srv.c.fd);
	srv.c.gone = false;
	memset(&srv.c.rd, 0, sizeof srv.c.rd); /* may have been mid-change */
	ownfd_close(&srv.listen);
	ownfd_close(&srv.wake_w);
	ownfd_close(&srv.wake_r);
	pthread_mutex_init(&srv.lock, NULL);
	srv.sock_open = false;
	srv.parent = srv.pid;
	srv.pid = getpid();
	set_paths();
	if (start_thread(&e) != 0)
		log_msg(LOG_DEBUG, "%s (in forked child %d)", e.msg, (int)srv.pid);
}

void control_describe(char *sock, size_t size, int *sig)
{
	*sig = srv.started ? srv.o.signal : 0;
	pthread_mutex_lock(&srv.lock);
	snprintf(sock, size, "%s", srv.sock_open ? srv.sock : "");
	pthread_mutex_unlock(&srv.lock);
}
