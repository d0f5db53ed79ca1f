/*
 * lineedit — a small line editor for `prof attach` (see lineedit.h): one line
 * at a time on a terminal in raw mode, with cursor movement, the usual
 * Emacs keys, and a history browsed with the arrows. The line scrolls
 * sideways when it is wider than the terminal. UTF-8 text moves by whole
 * characters (each counted one column wide).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "../common/grow.h"
#include "../common/io.h"
#include "lineedit.h"

#define LE_HISTORY_MAX 1000

struct lineedit {
	int in, out;
	struct termios saved;      /* the terminal's own mode */
	bool have_saved;
	bool raw;
	char **hist;
	size_t nhist;
	/* the line being edited */
	char *buf;
	size_t len, cap, pos;
	const char *prompt;
	int watch;                 /* another fd to wake up for; -1: none */
	bool keep;                 /* the next read goes on with this line */
};

/* The terminal to restore when a signal ends the process in raw mode. */
static int le_restore_fd = -1;
static struct termios le_restore_mode;

static bool is_cont(unsigned char c)
{
	return (c & 0xc0) == 0x80;
}

/* Columns taken by buf[a..b): one per character. */
static size_t cols_between(const char *buf, size_t a, size_t b)
{
	size_t n = 0;

	for (; a < b; a++)
		if (!is_cont((unsigned char)buf[a]))
			n++;
	return n;
}

/* Draws n bytes of s on the terminal; a failed write draws nothing more. */
static void le_write(struct lineedit *le, const char *s, size_t n)
{
	(void)io_write_all(le->out, s, n);
}

static void le_puts(struct lineedit *le, const char *s)
{
	le_write(le, s, strlen(s));
}

static int term_cols(struct lineedit *le)
{
	struct winsize ws;

	if (ioctl(le->out, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		return ws.ws_col;
	return 80;
}

static void on_fatal(int sig)
{
	if (le_restore_fd >= 0)
		tcsetattr(le_restore_fd, TCSAFLUSH, &le_restore_mode);
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Raw mode for editing a line: keys one by one, no echo, no signals from
 * keys (Ctrl-C is read as a key). The terminal's own mode is saved the
 * first time and restored by lineedit_free. */
static int enter_raw(struct lineedit *le)
{
	struct termios raw;

	if (!le->have_saved) {
		if (tcgetattr(le->in, &le->saved) != 0)
			return -1;
		le->have_saved = true;
		le_restore_fd = le->in;
		le_restore_mode = le->saved;
	}
	raw = le->saved;
	raw.c_iflag &= ~(unsigned)(BRKINT | ICRNL | INPCK | ISTRIP | IXON);
	raw.c_oflag &= ~(unsigned)OPOST;
	raw.c_cflag |= CS8;
	raw.c_lflag &= ~(unsigned)(ECHO | ICANON | IEXTEN | ISIG);
	raw.c_cc[VMIN] = 1;
	raw.c_cc[VTIME] = 0;
	/* TCSADRAIN, not TCSAFLUSH: keys typed ahead are kept. */
	if (tcsetattr(le->in, TCSADRAIN, &raw) != 0)
		return -1;
	le->raw = true;
	return 0;
}

/* Between lines (a command runs): output as usual, Ctrl-C a signal, but
 * no echo and no line discipline, so keys typed ahead (Ctrl-D included)
 * wait as they are for the next line. */
static void leave_raw(struct lineedit *le)
{
	struct termios wait;

	if (!le->raw)
		return;
	wait = le->saved;
	wait.c_lflag &= ~(unsigned)(ECHO | ICANON);
	wait.c_cc[VMIN] = 1;
	wait.c_cc[VTIME] = 0;
	tcsetattr(le->in, TCSADRAIN, &wait);
	le->raw = false;
}

struct lineedit *lineedit_new(int in_fd, int out_fd)
{
	struct lineedit *le = calloc(1, sizeof *le);

	if (!le)
		return NULL;
	le->in = in_fd;
	le->out = out_fd;
	signal(SIGTERM, on_fatal);
	signal(SIGHUP, on_fatal);
	signal(SIGQUIT, on_fatal);
	return le;
}

/* Redraws the prompt and the visible part of the line; puts the cursor. */
static void refresh(struct lineedit *le)
{
	size_t plen = strlen(le->prompt), start = 0, end, width, col;
	int cols = term_cols(le);
	char move[32];

	width = (size_t)cols > plen + 1 ? (size_t)cols - plen - 1 : 1;
	while (cols_between(le->buf, start, le->pos) > width) {
		start++;
		while (start < le->len && is_cont((unsigned char)le->buf[start]))
			start++;
	}
	end = start;
	while (end < le->len && cols_between(le->buf, start, end) < width) {
		end++;
		while (end < le->len && is_cont((unsigned char)le->buf[end]))
			end++;
	}
	le_puts(le, "\r");
	le_puts(le, le->prompt);
	le_write(le, le->buf + start, end - start);
	le_puts(le, "\x1b[0K\r");
	col = plen + cols_between(le->buf, start, le->pos);
	snprintf(move, sizeof move, "\x1b[%zuC", col);
	if (col > 0)
		le_puts(le, move);
}

/* Room for `more` bytes past the line and its NUL (grow_array). 0, or -1
 * when out of memory (the line is unchanged). */
static int reserve(struct lineedit *le, size_t more)
{
	char *p = grow_array(le->buf, &le->cap, le->len + more + 1, 1, 64);

	if (!p)
		return -1;
	le->buf = p;
	return 0;
}

static void insert(struct lineedit *le, const char *s, size_t n)
{
	if (reserve(le, n) != 0)
		return;
	memmove(le->buf + le->pos + n, le->buf + le->pos, le->len - le->pos);
	memcpy(le->buf + le->pos, s, n);
	le->len += n;
	le->pos += n;
	le->buf[le->len] = '\0';
}

/* Replaces the line with `s`, cursor at the end. */
static void set_line(struct lineedit *le, const char *s)
{
	size_t n = strlen(s);

	le->len = le->pos = 0;
	if (reserve(le, n) != 0)
		return;
	memcpy(le->buf, s, n + 1);
	le->len = le->pos = n;
}

/* Deletes buf[a..b). */
static void cut(struct lineedit *le, size_t a, size_t b)
{
	memmove(le->buf + a, le->buf + b, le->len - b);
	le->len -= b - a;
	le->buf[le->len] = '\0';
	if (le->pos > b)
		le->pos -= b - a;
	else if (le->pos > a)
		le->pos = a;
}

static size_t prev_char(struct lineedit *le, size_t i)
{
	if (i == 0)
		return 0;
	i--;
	while (i > 0 && is_cont((unsigned char)le->buf[i]))
		i--;
	return i;
}

static size_t next_char(struct lineedit *le, size_t i)
{
	if (i >= le->len)
		return le->len;
	i++;
	while (i < le->len && is_cont((unsigned char)le->buf[i]))
		i++;
	return i;
}

/* Reads one byte; -1 at end of input or on error, -2 when the watched
 * descriptor became readable first. EINTR (a window size change)
 * redraws. */
static int read_byte(struct lineedit *le)
{
	unsigned char c;

	for (;;) {
		struct pollfd p[2] = { { le->in, POLLIN, 0 }, { le->watch, POLLIN, 0 } };
		ssize_t n;

		if (poll(p, le->watch >= 0 ? 2 : 1, -1) < 0) {
			if (errno == EINTR) {
				refresh(le);
				continue;
			}
			return -1;
		}
		if (!p[0].revents && le->watch >= 0 && p[1].revents)
			return -2;
		n = read(le->in, &c, 1);

		if (n == 1)
			return c;
		if (n < 0 && errno == EINTR) {
			refresh(le);
			continue;
		}
		return -1;
	}
}

/* After ESC: the key an escape sequence names ('A' up, 'B' down, 'C'
 * right, 'D' left, 'H' home, 'F' end, 'X' delete), or 0. */
static int read_escape(struct lineedit *le)
{
	int c = read_byte(le), d, num = 0;

	if (c == 'O') {
		d = read_byte(le);
		return d == 'A' || d == 'B' || d == 'C' || d == 'D' || d == 'H' ||
		       d == 'F' ? d : 0;
	}
	if (c != '[')
		return 0;
	d = read_byte(le);
	if (d >= 'A' && d <= 'Z')
		return d == 'A' || d == 'B' || d == 'C' || d == 'D' || d == 'H' ||
		       d == 'F' ? d : 0;
	while (d >= '0' && d <= '9') {
		num = num * 10 + (d - '0');
		d = read_byte(le);
	}
	while (d == ';' || (d >= '0' && d <= '9'))
		d = read_byte(le); /* modifiers: ignored */
	if (d != '~')
		return d == 'H' || d == 'F' ? d : 0;
	switch (num) {
	case 1:
	case 7:
		return 'H';
	case 4:
	case 8:
		return 'F';
	case 3:
		return 'X';
	default:
		return 0;
	}
}

/* Moves through the history: -1 older, +1 newer. *hi is the entry shown
 * (nhist: the line being typed, kept in *pending). */
static void browse(struct lineedit *le, int dir, size_t *hi, char **pending)
{
	if (dir < 0 && *hi == 0)
		return;
	if (dir > 0 && *hi >= le->nhist)
		return;
	if (*hi == le->nhist) {
		free(*pending);
		*pending = strdup(le->buf ? le->buf : "");
	}
	*hi = dir < 0 ? *hi - 1 : *hi + 1;
	set_line(le, *hi == le->nhist ? (*pending ? *pending : "") : le->hist[*hi]);
	refresh(le);
}

/* What one key did to the line being read. */
enum key_done {
	KEY_EDITED,     /* the line or the cursor may have changed: redraw */
	KEY_SHOWN,      /* drawn already (a history entry) */
	KEY_INTERRUPT,  /* Ctrl-C: the read ends */
	KEY_EOF         /* Ctrl-D on an empty line: the read ends */
};

/* Ctrl-W: cuts the word before the cursor (and the spaces after it). */
static void cut_word(struct lineedit *le)
{
	size_t a = le->pos;

	while (a > 0 && le->buf[a - 1] == ' ')
		a--;
	while (a > 0 && le->buf[a - 1] != ' ')
		a--;
	cut(le, a, le->pos);
}

/* After ESC: reads the rest of an escape sequence and applies its key
 * (arrows, Home, End, Delete; others are ignored). *hi and *pending are
 * browse()'s. */
static enum key_done apply_escape(struct lineedit *le, size_t *hi, char **pending)
{
	switch (read_escape(le)) {
	case 'A':
		browse(le, -1, hi, pending);
		return KEY_SHOWN;
	case 'B':
		browse(le, 1, hi, pending);
		return KEY_SHOWN;
	case 'C':
		le->pos = next_char(le, le->pos);
		break;
	case 'D':
		le->pos = prev_char(le, le->pos);
		break;
	case 'H':
		le->pos = 0;
		break;
	case 'F':
		le->pos = le->len;
		break;
	case 'X':
		cut(le, le->pos, next_char(le, le->pos));
		break;
	}
	return KEY_EDITED;
}

/* Applies key `c` (a byte read, not Enter) to the line being read. *hi
 * and *pending are browse()'s. */
static enum key_done apply_key(struct lineedit *le, int c, size_t *hi, char **pending)
{
	switch (c) {
	case 3: /* Ctrl-C */
		le_puts(le, "^C\r\n");
		return KEY_INTERRUPT;
	case 4: /* Ctrl-D */
		if (le->len == 0) {
			le_puts(le, "\r\n");
			return KEY_EOF;
		}
		cut(le, le->pos, next_char(le, le->pos));
		break;
	case 127:
	case 8: /* backspace */
		cut(le, prev_char(le, le->pos), le->pos);
		break;
	case 1:
		le->pos = 0;
		break;
	case 5:
		le->pos = le->len;
		break;
	case 2:
		le->pos = prev_char(le, le->pos);
		break;
	case 6:
		le->pos = next_char(le, le->pos);
		break;
	case 11: /* Ctrl-K */
		cut(le, le->pos, le->len);
		break;
	case 21: /* Ctrl-U */
		cut(le, 0, le->pos);
		break;
	case 23: /* Ctrl-W */
		cut_word(le);
		break;
	case 12: /* Ctrl-L */
		le_puts(le, "\x1b[H\x1b[2J");
		break;
	case 16:
		browse(le, -1, hi, pending);
		return KEY_SHOWN;
	case 14:
		browse(le, 1, hi, pending);
		return KEY_SHOWN;
	case 9:
		insert(le, "  ", 2);
		break;
	case 27:
		return apply_escape(le, hi, pending);
	default:
		if (c >= 32) {
			char ch = (char)c;

			insert(le, &ch, 1);
		}
		break;
	}
	return KEY_EDITED;
}

/* Starts reading a line: raw mode, the prompt, the line kept from a
 * LINEEDIT_WAKE or a fresh one, drawn. Returns 0, or -1 (the terminal
 * left as it was). */
static int read_start(struct lineedit *le, const char *prompt, int watch_fd)
{
	if (enter_raw(le) != 0)
		return -1;
	le->prompt = prompt;
	le->watch = watch_fd;
	if (reserve(le, 64) != 0) {
		leave_raw(le);
		return -1;
	}
	if (!le->keep) {
		le->len = le->pos = 0;
		le->buf[0] = '\0';
	}
	le->keep = false;
	refresh(le);
	return 0;
}

char *lineedit_read(struct lineedit *le, const char *prompt, int watch_fd,
		    int *status)
{
	size_t hi = le->nhist;
	char *pending = NULL, *line = NULL;
	enum key_done done;
	int c;

	*status = LINEEDIT_ERROR;
	if (read_start(le, prompt, watch_fd) != 0)
		return NULL;
	for (;;) {
		c = read_byte(le);
		if (c == -2) {
			/* the caller looks at the other descriptor; the line
			 * waits for the next call */
			le_puts(le, "\r\x1b[0K");
			le->keep = true;
			*status = LINEEDIT_WAKE;
			break;
		}
		if (c < 0) {
			*status = le->len ? LINEEDIT_ERROR : LINEEDIT_EOF;
			break;
		}
		if (c == '\r' || c == '\n') {
			le->pos = le->len;
			refresh(le);
			le_puts(le, "\r\n");
			line = strdup(le->buf);
			*status = line ? LINEEDIT_OK : LINEEDIT_ERROR;
			break;
		}
		done = apply_key(le, c, &hi, &pending);
		if (done == KEY_INTERRUPT || done == KEY_EOF) {
			*status = done == KEY_INTERRUPT ? LINEEDIT_INTERRUPT : LINEEDIT_EOF;
			break;
		}
		if (done == KEY_EDITED)
			refresh(le);
	}
	leave_raw(le);
	free(pending);
	return line;
}

void lineedit_add_history(struct lineedit *le, const char *line)
{
	char *copy;

	if (!line[0] || (le->nhist && strcmp(le->hist[le->nhist - 1], line) == 0))
		return;
	if (!le->hist) {
		le->hist = calloc(LE_HISTORY_MAX, sizeof *le->hist);
		if (!le->hist)
			return;
	}
	copy = strdup(line);
	if (!copy)
		return;
	if (le->nhist == LE_HISTORY_MAX) {
		free(le->hist[0]);
		memmove(le->hist, le->hist + 1, (LE_HISTORY_MAX - 1) * sizeof *le->hist);
		le->nhist--;
	}
	le->hist[le->nhist++] = copy;
}

void lineedit_free(struct lineedit *le)
{
	size_t i;

	if (!le)
		return;
	if (le->have_saved)
		tcsetattr(le->in, TCSADRAIN, &le->saved);
	le_restore_fd = -1;
	for (i = 0; i < le->nhist; i++)
		free(le->hist[i]);
	free(le->hist);
	free(le->buf);
	free(le);
}
