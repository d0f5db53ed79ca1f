/*
 * memrec — the raw record of one tensor allocation or free torch reported
 * (EVBUF_TORCH_MEM, prof.capture{profile_memory}), written by
 * src/capture/torchops.c and read by the assembler (assemble.c), which
 * makes it Kineto's "[memory]" instant event.
 *
 * Record: ts = when torch reported it; id = 0; a = memrec_a(): the c10
 * device type in bits 0-7, the device index + 1 in bits 8-23 (0: none,
 * the CPU's -1), so that the record is stored compact. Payload: struct
 * memrec.
 */
#ifndef PROFHOST_MEMREC_H
#define PROFHOST_MEMREC_H

#include <stdint.h>

struct memrec {
	uint64_t addr;
	int64_t bytes;           /* > 0 allocated, < 0 freed */
	int64_t total_allocated; /* the allocator's totals after it */
	int64_t total_reserved;
};

static inline uint64_t memrec_a(int32_t device_type, int32_t device_index)
{
	return (uint64_t)((uint32_t)device_type & 0xffu) |
	       (uint64_t)(((uint32_t)(device_index + 1)) & 0xffffu) << 8;
}

static inline int32_t memrec_device_type(uint64_t a)
{
	return (int32_t)(a & 0xff);
}

static inline int32_t memrec_device_index(uint64_t a)
{
	return (int32_t)((a >> 8) & 0xffff) - 1;
}

#endif
