/*
 * oprec — the raw record of one torch operator (EVBUF_TORCH_OP), written by
 * src/capture/torch/torchops.c and read by the assembler (assemble.c).
 *
 * Record: ts = the operator's start; id = its GPU link (external
 * correlation id, 0: none); a = 0. Payload: struct oprec_hdr, then the
 * name, the input dims and the input types (name_len, dims_len, types_len
 * bytes, not NUL-ended), then with OPREC_STACK the operator's Python call
 * stack (a uint32_t node id: src/capture/torch/opstacks.h; its entries come in
 * EVBUF_OPSTACK records). The whole payload is at most EVBUF_NAME_MAX
 * bytes: the writer leaves the shapes out (OPREC_SHAPES_CUT) rather than
 * cut them.
 */
#ifndef PROFHOST_OPREC_H
#define PROFHOST_OPREC_H

#include <stdint.h>

/* oprec_hdr.scope: torchops_abi.h's enum torchops_scope. */
enum { OPREC_FUNCTION = 0, OPREC_BACKWARD = 1, OPREC_USER = 2 };

/* oprec_hdr.flags */
enum {
	OPREC_FLOPS = 1,      /* `flops` holds the operator's FLOP count */
	OPREC_SHAPES = 2,     /* dims and types follow the name */
	OPREC_SHAPES_CUT = 4, /* shapes were asked for but did not fit */
	OPREC_SEQ = 8,        /* `seq` and `fwd_tid` are set (seq >= 0) */
	OPREC_STACK = 16      /* a call stack node id follows the types */
};

struct oprec_hdr {
	int64_t end;
	int64_t seq;
	uint64_t fwd_tid;
	uint64_t flops;
	uint16_t name_len, dims_len, types_len;
	uint8_t scope, flags;
};

#endif
