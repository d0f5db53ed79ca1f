/*
 * log — the host's messages on stderr.
 *
 * Every line starts with "profhost: " and is written with one write(2), so
 * lines from several threads or processes do not interleave. Levels follow
 * PROF_LOG: quiet (errors and warnings only), info (the default: plus what
 * was written and one-time notices), debug (plus internals).
 */
#ifndef PROFHOST_LOG_H
#define PROFHOST_LOG_H

enum log_level {
	LOG_ERROR = 0, /* always shown */
	LOG_WARN = 1,  /* always shown */
	LOG_INFO = 2,
	LOG_DEBUG = 3
};

/* Sets the threshold (LOG_WARN shows errors and warnings only). Call once at
 * start-up, before other threads log. */
void log_set_level(enum log_level level);

/* Current threshold. */
enum log_level log_get_level(void);

/* Parses a PROF_LOG value: "quiet", "info", "debug". Returns 0 and sets
 * *out, or -1 for anything else. */
int log_parse_level(const char *s, enum log_level *out);

/* Prints one line at `level` if the threshold allows it. The message is cut
 * at 2 KiB. Any thread; not async-signal-safe (vsnprintf). */
void log_msg(enum log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Writes a block of text (several lines, printed as is, no prefix) if the
 * threshold allows `level`: reports such as the window summary. Any thread. */
void log_text(enum log_level level, const char *text);

#endif
