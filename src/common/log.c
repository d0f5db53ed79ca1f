/* log — the host's messages on stderr (see log.h). */
#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "io.h"

static _Atomic int log_level = LOG_INFO;

void log_set_level(enum log_level level)
{
	atomic_store_explicit(&log_level, (int)level, memory_order_relaxed);
}

enum log_level log_get_level(void)
{
	return (enum log_level)atomic_load_explicit(&log_level, memory_order_relaxed);
}

int log_parse_level(const char *s, enum log_level *out)
{
	if (strcmp(s, "quiet") == 0)
		*out = LOG_WARN;
	else if (strcmp(s, "info") == 0)
		*out = LOG_INFO;
	else if (strcmp(s, "debug") == 0)
		*out = LOG_DEBUG;
	else
		return -1;
	return 0;
}

void log_text(enum log_level level, const char *text)
{
	if ((int)level > atomic_load_explicit(&log_level, memory_order_relaxed))
		return;
	(void)io_write_all(STDERR_FILENO, text, strlen(text));
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	char buf[2048];
	va_list ap;
	int n;
	size_t len;

	if ((int)level > atomic_load_explicit(&log_level, memory_order_relaxed))
		return;
	memcpy(buf, "profhost: ", 10);
	va_start(ap, fmt);
	n = vsnprintf(buf + 10, sizeof buf - 11, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	len = 10 + ((size_t)n < sizeof buf - 11 ? (size_t)n : sizeof buf - 12);
	buf[len++] = '\n';
	/* One write: lines from threads and processes do not interleave. */
	(void)io_write_all(STDERR_FILENO, buf, len);
}
