/*
 * test_util — the shared helpers of src/util: io_write_all/io_send_all
 * (whole buffers through short writes; a gone peer is an error, not a
 * SIGPIPE), grow_array (capacities, overflow refused with the array kept)
 * and the FNV-1a hashes (the published test values).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "common/grow.h"
#include "common/hash.h"
#include "util/htab.h"
#include "common/io.h"
#include "util/sortidx.h"

#define BIG (1u << 20) /* far more than a pipe holds (64 KiB) */

struct reader {
	int fd;
	unsigned char *got;
	size_t n;
};

static volatile sig_atomic_t ticks;

static void on_alarm(int sig)
{
	(void)sig;
	ticks++;
}

/* Reads the pipe to its end into r->got, slowly (4 KiB a millisecond), so
 * that the writer blocks and the timer interrupts it, mid-way (a short
 * write) or before it wrote anything (EINTR). SIGALRM blocked here. */
static void *read_all(void *p)
{
	struct reader *r = p;
	struct timespec ms = { 0, 1000000 };
	sigset_t alrm;
	ssize_t k;

	sigemptyset(&alrm);
	sigaddset(&alrm, SIGALRM);
	pthread_sigmask(SIG_BLOCK, &alrm, NULL);
	while (r->n < BIG && (k = read(r->fd, r->got + r->n, 4096)) > 0) {
		r->n += (size_t)k;
		nanosleep(&ms, NULL);
	}
	return NULL;
}

static void test_write_all_whole_buffer(void)
{
	unsigned char *buf = malloc(BIG);
	struct reader r = { 0 };
	struct itimerval every = { { 0, 2000 }, { 0, 2000 } }, off = { { 0, 0 }, { 0, 0 } };
	struct sigaction sa;
	pthread_t th;
	int fds[2];
	size_t i;

	CHECK(buf != NULL);
	r.got = calloc(1, BIG);
	CHECK(r.got != NULL);
	if (!buf || !r.got || pipe(fds) != 0)
		return;
	for (i = 0; i < BIG; i++)
		buf[i] = (unsigned char)(i * 7 + i / 251);
	r.fd = fds[0];
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_alarm; /* no SA_RESTART: write(2) comes back early */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
	pthread_create(&th, NULL, read_all, &r);
	setitimer(ITIMER_REAL, &every, NULL);
	CHECK_EQ_INT(io_write_all(fds[1], buf, BIG), 0);
	setitimer(ITIMER_REAL, &off, NULL);
	CHECK(ticks > 0); /* the write was interrupted */
	close(fds[1]);
	pthread_join(th, NULL);
	close(fds[0]);
	CHECK_EQ_INT(r.n, BIG);
	CHECK(memcmp(buf, r.got, BIG) == 0);
	CHECK_EQ_INT(io_write_all(-1, "x", 1), -1);
	CHECK_EQ_INT(errno, EBADF);
	CHECK_EQ_INT(io_write_all(-1, "", 0), 0); /* nothing to write */
	free(buf);
	free(r.got);
}

static void test_send_all_gone_peer(void)
{
	int sv[2];

	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	CHECK_EQ_INT(io_send_all(sv[0], "hello", 5), 0);
	close(sv[1]);
	/* SIGPIPE's default action would end this test here. */
	CHECK_EQ_INT(io_send_all(sv[0], "hello", 5), -1);
	CHECK_EQ_INT(errno, EPIPE);
	close(sv[0]);
}

static void test_grow_array(void)
{
	size_t cap = 0;
	int *a = NULL, *g;

	g = grow_array(a, &cap, 1, sizeof *a, 16);
	CHECK(g != NULL);
	CHECK_EQ_INT(cap, 16);
	a = g;
	CHECK(grow_array(a, &cap, 16, sizeof *a, 16) == a); /* had room */
	CHECK_EQ_INT(cap, 16);
	g = grow_array(a, &cap, 17, sizeof *a, 16);
	CHECK(g != NULL);
	CHECK_EQ_INT(cap, 32);
	a = g;
	g = grow_array(a, &cap, 1000, sizeof *a, 16);
	CHECK(g != NULL);
	CHECK_EQ_INT(cap, 1024);
	a = g;
	a[999] = 7;
	/* A size that overflows is refused; the array and cap stay. */
	CHECK(grow_array(a, &cap, SIZE_MAX / 2, sizeof *a, 16) == NULL);
	CHECK_EQ_INT(cap, 1024);
	CHECK_EQ_INT(a[999], 7);
	free(a);
}

/* grow_array_max: doubling cut at the limit, and nothing past it. */
static void test_grow_array_max(void)
{
	size_t cap = 0;
	int *a = NULL, *g;

	g = grow_array_max(a, &cap, 1, sizeof *a, 16, 40);
	CHECK(g != NULL);
	CHECK_EQ_INT(cap, 16);
	a = g;
	g = grow_array_max(a, &cap, 17, sizeof *a, 16, 40);
	CHECK(g != NULL);
	CHECK_EQ_INT(cap, 32);
	a = g;
	g = grow_array_max(a, &cap, 33, sizeof *a, 16, 40);
	CHECK(g != NULL);
	CHECK_EQ_INT(cap, 40); /* 64, cut to the limit */
	a = g;
	a[39] = 5;
	CHECK(grow_array_max(a, &cap, 41, sizeof *a, 16, 40) == NULL);
	CHECK_EQ_INT(cap, 40);
	CHECK_EQ_INT(a[39], 5);
	CHECK(grow_array_max(a, &cap, 40, sizeof *a, 16, 40) == a);
	free(a);
}

static void test_fnv(void)
{
	/* FNV-1a 32 test values (the FNV authors' list). */
	CHECK_EQ_INT(hash_fnv32("", 0), 0x811c9dc5u);
	CHECK_EQ_INT(hash_fnv32("a", 1), 0xe40c292cu);
	CHECK_EQ_INT(hash_fnv32("foobar", 6), 0xbf9cf968u);
	/* The 64-bit form: continuing from a prefix is hashing the whole. */
	CHECK(hash_fnv64(hash_fnv64(HASH_FNV64_SEED, "foo", 3), "bar", 3) ==
	      hash_fnv64(HASH_FNV64_SEED, "foobar", 6));
	CHECK(hash_fnv64_str(HASH_FNV64_SEED, "foobar") ==
	      hash_fnv64(HASH_FNV64_SEED, "foobar", 6));
	CHECK(hash_fnv64(HASH_FNV64_SEED, "a", 1) ==
	      (HASH_FNV64_SEED ^ 'a') * HASH_FNV64_PRIME);
}

/* htab: every key found after the table grew, new keys get a free slot,
 * and colliding hashes probe past each other, wrapping at the end. */
static const uint64_t *htab_keys;

static uint64_t key_hash(const void *ctx, size_t i)
{
	(void)ctx;
	return htab_keys[i] % 7; /* many collisions on purpose */
}

/* Entry index of `key` among keys[0..n), or n after adding it. */
static size_t htab_put(uint32_t **slots, size_t *nslots, uint64_t *keys, size_t *n,
		       uint64_t key)
{
	size_t k;

	if (htab_full(*n, *nslots))
		CHECK_EQ_INT(htab_rebuild(slots, nslots, *nslots ? *nslots * 2 : 4, 0, *n,
					  key_hash, NULL), 0);
	for (k = htab_first(key % 7, *nslots); (*slots)[k]; k = htab_next(k, *nslots))
		if (keys[(*slots)[k] - 1] == key)
			return (*slots)[k] - 1;
	keys[*n] = key;
	(*slots)[k] = (uint32_t)(*n + 1);
	return (*n)++;
}

static void test_htab(void)
{
	uint64_t keys[200];
	uint32_t *slots = NULL;
	size_t nslots = 0, n = 0, i, used;

	htab_keys = keys;
	CHECK(htab_full(0, 0));
	CHECK(!htab_full(1, 4));
	CHECK(htab_full(2, 4));
	CHECK_EQ_INT(htab_next(7, 8), 0);
	CHECK_EQ_INT(htab_first(13, 8), 5);
	for (i = 0; i < 200; i++)
		CHECK_EQ_INT(htab_put(&slots, &nslots, keys, &n, i * 1000003u), i);
	CHECK_EQ_INT(n, 200);
	CHECK_EQ_INT(nslots, 512);
	for (i = 0; i < 200; i++)
		CHECK_EQ_INT(htab_put(&slots, &nslots, keys, &n, i * 1000003u), i);
	CHECK_EQ_INT(n, 200);
	for (i = used = 0; i < nslots; i++)
		used += slots[i] != 0;
	CHECK_EQ_INT(used, 200);
	free(slots);
	/* Rebuilding from `first` leaves the entries before it out. */
	slots = NULL;
	nslots = 0;
	CHECK_EQ_INT(htab_rebuild(&slots, &nslots, 8, 2, 4, key_hash, NULL), 0);
	CHECK_EQ_INT(nslots, 8);
	for (i = used = 0; i < 8; i++) {
		used += slots[i] != 0;
		CHECK(slots[i] == 0 || slots[i] == 3 || slots[i] == 4);
	}
	CHECK_EQ_INT(used, 2);
	/* A size that overflows is refused; the table stays. */
	CHECK_EQ_INT(htab_rebuild(&slots, &nslots, SIZE_MAX / 2, 0, 0, key_hash, NULL), -1);
	CHECK_EQ_INT(nslots, 8);
	free(slots);
}

/* Keys for test_sortidx: idx sorts by key, ties by index. */
static const uint32_t *sort_keys;

static int by_key(uint32_t a, uint32_t b, void *ctx)
{
	(void)ctx;
	if (sort_keys[a] != sort_keys[b])
		return sort_keys[a] < sort_keys[b] ? -1 : 1;
	return a < b ? -1 : a > b;
}

static int by_key_q(const void *a, const void *b)
{
	return by_key(*(const uint32_t *)a, *(const uint32_t *)b, NULL);
}

/* sortidx_u32 gives qsort's order (a total one) for random keys, many
 * equal keys, sorted, reversed and organ-pipe input, small and large. */
static void test_sortidx(void)
{
	static const size_t sizes[] = { 0, 1, 2, 3, 15, 16, 17, 100, 1000, 100000 };
	size_t s, i, n;
	int shape;

	srand(3);
	for (s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
		for (shape = 0; shape < 5; shape++) {
			uint32_t *keys, *a, *b;

			n = sizes[s];
			keys = malloc((n + 1) * sizeof *keys);
			a = malloc((n + 1) * sizeof *a);
			b = malloc((n + 1) * sizeof *b);
			CHECK(keys && a && b);
			if (!keys || !a || !b)
				return;
			for (i = 0; i < n; i++) {
				switch (shape) {
				case 0: keys[i] = (uint32_t)rand(); break;
				case 1: keys[i] = (uint32_t)(rand() % 3); break;
				case 2: keys[i] = (uint32_t)i; break;
				case 3: keys[i] = (uint32_t)(n - i); break;
				default: keys[i] = (uint32_t)(i < n / 2 ? i : n - i); break;
				}
				a[i] = b[i] = (uint32_t)((i * 7919) % (n ? n : 1));
			}
			if (n > 1 && n % 7919 == 0)
				for (i = 0; i < n; i++)
					a[i] = b[i] = (uint32_t)i;
			sort_keys = keys;
			sortidx_u32(a, n, by_key, NULL);
			qsort(b, n, sizeof *b, by_key_q);
			CHECK(memcmp(a, b, n * sizeof *a) == 0);
			free(keys);
			free(a);
			free(b);
		}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* sortidx_f64 sorts values ascending as qsort does: random, many equal,
 * sorted, reversed and negative values, small and large. */
static void test_sortidx_f64(void)
{
	static const size_t sizes[] = { 0, 1, 2, 3, 17, 1000, 100000 };
	size_t s, i, n;
	int shape;

	srand(5);
	for (s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
		for (shape = 0; shape < 4; shape++) {
			double *a, *b;

			n = sizes[s];
			a = malloc((n + 1) * sizeof *a);
			b = malloc((n + 1) * sizeof *b);
			CHECK(a && b);
			if (!a || !b)
				return;
			for (i = 0; i < n; i++) {
				switch (shape) {
				case 0: a[i] = (double)rand() / 7.0 - 1e8; break;
				case 1: a[i] = (double)(rand() % 3); break;
				case 2: a[i] = (double)i; break;
				default: a[i] = -(double)i * 0.5; break;
				}
				b[i] = a[i];
			}
			sortidx_f64(a, n);
			qsort(b, n, sizeof *b, cmp_double);
			CHECK(memcmp(a, b, n * sizeof *a) == 0);
			free(a);
			free(b);
		}
}

int main(void)
{
	test_write_all_whole_buffer();
	test_send_all_gone_peer();
	test_grow_array();
	test_grow_array_max();
	test_fnv();
	test_htab();
	test_sortidx();
	test_sortidx_f64();
	return check_done();
}
