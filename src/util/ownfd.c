/* ownfd — see ownfd.h. */
#include "ownfd.h"

#include <sys/stat.h>
#include <unistd.h>

#include "../common/io.h"
#include "../common/log.h"

static _Atomic int ownfd_told;

int ownfd_adopt(struct ownfd *o, int fd)
{
	struct stat st;

	/* A program that closed its stdout would otherwise write its output
	 * into profhost's pipe or socket. */
	fd = io_fd_above_stdio(fd);
	if (fd < 0) {
		atomic_store(&o->fd, -1);
		return -1;
	}
	if (fstat(fd, &st) != 0) {
		close(fd);
		atomic_store(&o->fd, -1);
		return -1;
	}
	o->dev = st.st_dev;
	o->ino = st.st_ino;
	atomic_store(&o->fd, fd);
	return 0;
}

bool ownfd_check(const struct ownfd *o)
{
	int fd = atomic_load(&o->fd);
	struct stat st;

	return fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == o->dev &&
	       st.st_ino == o->ino;
}

int ownfd_get(struct ownfd *o, const char *what)
{
	int fd = atomic_load(&o->fd);

	if (fd < 0)
		return -1;
	if (ownfd_check(o))
		return fd;
	atomic_store(&o->fd, -1);
	ownfd_say_lost(what, fd);
	return -1;
}

void ownfd_close(struct ownfd *o)
{
	int fd = atomic_load(&o->fd);

	if (fd >= 0 && ownfd_check(o))
		close(fd);
	atomic_store(&o->fd, -1);
}

void ownfd_say_lost(const char *what, int fd)
{
	if (atomic_exchange(&ownfd_told, 1))
		return;
	log_msg(LOG_WARN, "the program closed or reused profhost's descriptor %d "
		"(%s); profhost no longer uses that number and opens what it "
		"needs anew", fd, what);
}
