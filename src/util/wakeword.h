/*
 * wakeword — waking a thread without a file descriptor.
 *
 * A wake word is a 32-bit set of request bits. wakeword_post() adds bits
 * and wakes the waiter (a futex); wakeword_take() takes every posted bit,
 * waiting at most `timeout_ns` (-1: no limit) while none is posted. The
 * host's threads sleep on these instead of pipes: a program that closes
 * every inherited descriptor (a daemon) or reuses their numbers cannot
 * make them spin, nor receive bytes meant for them.
 */
#ifndef PROFHOST_WAKEWORD_H
#define PROFHOST_WAKEWORD_H

#include <stdatomic.h>
#include <stdint.h>

/* Adds `bits` (nonzero) and wakes the waiters. Any thread;
 * async-signal-safe (an atomic and a raw futex syscall). */
void wakeword_post(_Atomic uint32_t *w, uint32_t bits);

/* Takes and returns the posted bits, waiting up to timeout_ns (-1: for
 * ever) while there are none; 0 on time-out. One waiting thread per word.
 * Async-signal-safe. */
uint32_t wakeword_take(_Atomic uint32_t *w, int64_t timeout_ns);

#endif
