/*
 * control — live control of a running process: a signal (or a trigger
 * file) wakes a control thread, which opens a UNIX socket; `prof attach`
 * connects and types Lua that runs in the policy's VM (a REPL).
 *
 * Two sides share this header:
 *   - the wire protocol, the socket directory and the signal names, used by
 *     the server (in libprofhost-core.so) and by `prof attach` (src/cli),
 *     built into the static library ph_control;
 *   - the server itself (the control thread) and prof.stacks()'s stack
 *     taking, built into the core only (ph_control_host).
 *
 * Files, in a directory owned by the user with mode 0700:
 * $XDG_RUNTIME_DIR/profhost when that variable names a directory the user
 * owns, else /tmp/profhost-<uid>. In it, <pid>.sock is a process's socket
 * (mode 0600, bound under a temporary name and renamed into place, removed
 * at exit) and <pid>.attach is the trigger file `prof attach` creates for a
 * process whose signal handler the application replaced.
 *
 * The protocol: frames of one type byte, a 4-byte big-endian length and
 * that many bytes. After the peer check the server sends HELLO (the
 * banner), BUSY or REFUSED (then closes). The client sends EVAL with a
 * chunk; the server answers with OUT and ERR frames (print output, results,
 * error text with a traceback) and one DONE whose payload is "0" (ran),
 * "1" (Lua error) or "2" (incomplete: send the chunk again with more
 * lines). INTERRUPT stops the running command. NOTE frames carry notices
 * (idle time-out), EXIT says the process is ending.
 */
#ifndef PROFHOST_CONTROL_H
#define PROFHOST_CONTROL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../common/err.h"

/* ------------------------------------------------------------ both sides */

enum control_frame {
	/* server -> client */
	CONTROL_HELLO = 'H',
	CONTROL_OUT = 'O',
	CONTROL_ERR = 'E',
	CONTROL_DONE = 'R',
	CONTROL_BUSY = 'B',
	CONTROL_REFUSED = 'F',
	CONTROL_NOTE = 'N',
	CONTROL_EXIT = 'X',
	/* client -> server */
	CONTROL_EVAL = 'C',
	CONTROL_INTERRUPT = 'I',
	CONTROL_QUIT = 'Q'
};

/* DONE payloads. */
#define CONTROL_DONE_OK '0'
#define CONTROL_DONE_ERROR '1'
#define CONTROL_DONE_INCOMPLETE '2'

#define CONTROL_FRAME_MAX (1u << 20)   /* longest payload accepted */
#define CONTROL_PATH_MAX 108           /* sizeof sun_path */

/* Sends one frame, all of it (blocking; no SIGPIPE). Returns 0, or -1 with
 * errno set. Any thread. */
int control_send(int fd, char type, const void *data, size_t len);

/* Bytes received and not yet handed out as frames. */
struct control_reader {
	char *buf;
	size_t len, cap, used; /* used: consumed by the last frame returned */
};

/* Reads what the socket has (one recv; with `wait` false it does not
 * block). Returns 1 when bytes came, 0 at end of stream, -1 on error with
 * errno set (EAGAIN: nothing yet). */
int control_recv(int fd, struct control_reader *r, bool wait);

/* Takes the next complete frame: returns 1 with *type, *data (valid until
 * the next call) and *len, 0 when no frame is complete yet, -1 when the
 * peer sent a frame longer than CONTROL_FRAME_MAX. */
int control_next_frame(struct control_reader *r, char *type, const char **data,
		       size_t *len);

void control_reader_free(struct control_reader *r);

/* The socket directory for this effective uid (see above); `xdg` is the
 * XDG_RUNTIME_DIR in force (the target's, for `prof attach`), may be NULL.
 * Returns 0, or -1 with *e when the path does not fit. */
int control_dir_path(char *out, size_t size, const char *xdg, struct err *e);

/* Checks that `dir` is a real directory (not a link) owned by the
 * effective uid, and makes its mode 0700 if group or others had access.
 * With `create`, a missing directory is created 0700 first (its parent
 * must exist). Returns 0, or -1 with *e naming the problem. */
int control_dir_prepare(const char *dir, bool create, struct err *e);

/* "<dir>/<pid>.sock" and "<dir>/<pid>.attach". Return 0, or -1 with *e
 * when the path does not fit a UNIX socket address. */
int control_sock_path(char *out, size_t size, const char *dir, pid_t pid,
		      struct err *e);
int control_trigger_path(char *out, size_t size, const char *dir, pid_t pid,
			 struct err *e);

/* Removes sockets, trigger files and temporary sockets of processes that
 * no longer exist from `dir`. Returns how many were removed. */
int control_clean_stale(const char *dir);

/* Parses a PROF_REPL_SIGNAL value: USR1, USR2 (with or without SIG, any
 * case), a number naming SIGUSR1, SIGUSR2 or a real-time signal, or 0 (the
 * REPL is off; *sig = 0). Returns 0, or -1 with *e saying what is
 * accepted. */
int control_parse_signal(const char *s, int *sig, struct err *e);

/* "SIGUSR1", "SIGUSR2", "SIGRTMIN+3" or "signal N" into buf. */
const char *control_signal_name(int sig, char *buf, size_t size);

/* ------------------------------------------------------------ the server */

struct policy;

struct control_opts {
	int signal;                 /* PROF_REPL_SIGNAL; 0: no REPL at all */
	unsigned idle_s;            /* an idle client is dropped after this;
				       0: never */
	struct policy *policy;      /* where commands run */
	const char *program;        /* for the banner */
	const char *policy_source;
};

/*
 * Installs the signal handler (chaining to one the application had, which
 * is said once) and starts the control thread (all signals blocked). The
 * thread sleeps in poll(); it opens the socket when the signal arrives or
 * the trigger file appears (checked once a second until the socket is
 * open), and serves one client at a time: a second one is told "busy", a
 * peer of another uid is refused, an idle one is dropped after idle_s.
 * Returns 0, or -1 with *e (the REPL is then off). Start-up thread, once.
 */
int control_start(const struct control_opts *o, struct err *e);

/* The process is ending: tells an attached client, stops the thread
 * (bounded wait) and removes the socket. Any thread but the control
 * thread; safe when the REPL is off. */
void control_stop(void);

/* In a child after fork() (the only thread there): forgets the parent's
 * socket and client without touching them, and starts the child's own
 * pipe and control thread, so the child is attachable under its own pid. */
void control_after_fork_child(void);

/* What prof.status() says of the REPL: the socket path ("" until it is
 * open) and the signal (0: off). Any thread. */
void control_describe(char *sock, size_t size, int *sig);

/* ------------------------------------------------------------ stacks */

#define CONTROL_STACK_FRAMES 64
#define CONTROL_STACK_THREADS 256

enum control_stack_state {
	CONTROL_STACK_OK = 0,      /* frames taken */
	CONTROL_STACK_BLOCKED,     /* the thread blocks the signal */
	CONTROL_STACK_GONE,        /* it exited meanwhile */
	CONTROL_STACK_TIMEOUT      /* it did not answer in time */
};

struct control_stack {
	pid_t tid;
	char name[16];
	enum control_stack_state state;
	bool self;                 /* the calling thread (unwound in place) */
	bool truncated;            /* deeper frames were not taken */
	uintptr_t pthread;         /* its pthread_self() (OK only): what
				      Python's faulthandler names it by */
	int nframes;
	uintptr_t ip[CONTROL_STACK_FRAMES]; /* [0] innermost: where the thread
					       is; then return addresses */
};

/*
 * Takes every thread's native stack now: each thread is sent a real-time
 * signal with tgkill (one the application leaves at its default, chosen
 * and installed on first use) and its handler unwinds with libunwind into a
 * preallocated slot; the calling thread unwinds itself. Threads that block
 * the signal are reported, not waited for; each other thread gets at most
 * 200 ms, the whole call about 2 s. Fills up to `max` entries in /proc task
 * order and returns how many, or -1 with *e. Serialized; any thread.
 */
int control_stacks_take(struct control_stack *out, size_t max, struct err *e);

#endif
