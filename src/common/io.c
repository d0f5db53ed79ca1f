/* io — writing a whole buffer to a file descriptor (see io.h). */
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

/* The loop of both calls: `sock` sends with MSG_NOSIGNAL, else writes. */
static int put_all(int fd, const char *p, size_t len, int sock)
{
	while (len > 0) {
		ssize_t w = sock ? send(fd, p, len, MSG_NOSIGNAL) : write(fd, p, len);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (w == 0) {
			errno = EIO;
			return -1;
		}
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

int io_write_all(int fd, const void *buf, size_t len)
{
	return put_all(fd, buf, len, 0);
}

int io_send_all(int fd, const void *buf, size_t len)
{
	return put_all(fd, buf, len, 1);
}

int io_fd_above_stdio(int fd)
{
	int hi, err;

	if (fd < 0 || fd > 2)
		return fd;
	hi = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	err = errno;
	close(fd);
	errno = err;
	return hi;
}
