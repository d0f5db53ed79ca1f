/*
 * lineedit — a small line editor for a terminal (private to src/cli), for
 * `prof attach`'s prompt. One editor per terminal; main thread only.
 */
#ifndef PROFHOST_LINEEDIT_H
#define PROFHOST_LINEEDIT_H

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

/* Restores the terminal's mode and frees the editor (NULL: nothing). */
void lineedit_free(struct lineedit *le);

#endif
