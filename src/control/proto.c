/* proto — the control socket's frames (see control.h). */
#include "control.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "../common/io.h"

#define PROTO_HEADER 5

int control_send(int fd, char type, const void *data, size_t len)
{
	unsigned char hdr[PROTO_HEADER];

	if (len > CONTROL_FRAME_MAX) {
		errno = EMSGSIZE;
		return -1;
	}
	hdr[0] = (unsigned char)type;
	hdr[1] = (unsigned char)(len >> 24);
	hdr[2] = (unsigned char)(len >> 16);
	hdr[3] = (unsigned char)(len >> 8);
	hdr[4] = (unsigned char)len;
	if (io_send_all(fd, hdr, sizeof hdr) != 0)
		return -1;
	return len ? io_send_all(fd, data, len) : 0;
}

/* Drops the bytes of the frame handed out last. */
static void reader_compact(struct control_reader *r)
{
	if (!r->used)
		return;
	memmove(r->buf, r->buf + r->used, r->len - r->used);
	r->len -= r->used;
	r->used = 0;
}

int control_recv(int fd, struct control_reader *r, bool wait)
{
	ssize_t n;

	reader_compact(r);
	if (r->cap - r->len < 4096) {
		size_t cap = r->cap ? r->cap * 2 : 8192;
		char *p;

		if (cap > CONTROL_FRAME_MAX + PROTO_HEADER + 8192)
			cap = CONTROL_FRAME_MAX + PROTO_HEADER + 8192;
		if (cap <= r->len) {
			errno = EMSGSIZE;
			return -1;
		}
		p = realloc(r->buf, cap);
		if (!p)
			return -1;
		r->buf = p;
		r->cap = cap;
	}
	do
		n = recv(fd, r->buf + r->len, r->cap - r->len,
			 wait ? 0 : MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -1;
	if (n == 0)
		return 0;
	r->len += (size_t)n;
	return 1;
}

int control_next_frame(struct control_reader *r, char *type, const char **data,
		       size_t *len)
{
	const unsigned char *h;
	size_t n;

	reader_compact(r);
	if (r->len < PROTO_HEADER)
		return 0;
	h = (const unsigned char *)r->buf;
	n = ((size_t)h[1] << 24) | ((size_t)h[2] << 16) | ((size_t)h[3] << 8) | h[4];
	if (n > CONTROL_FRAME_MAX)
		return -1;
	if (r->len < PROTO_HEADER + n)
		return 0;
	*type = (char)h[0];
	*data = r->buf + PROTO_HEADER;
	*len = n;
	r->used = PROTO_HEADER + n;
	return 1;
}

void control_reader_free(struct control_reader *r)
{
	free(r->buf);
	memset(r, 0, sizeof *r);
}
