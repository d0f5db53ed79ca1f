/*
 * pymodrec — the raw record of one nn.Module call (EVBUF_PY_MODULE),
 * written by the Python bridge (src/capture/python.c, from
 * profhost/_modules.py) and read by the assembler (assemble.c), which
 * makes it a python_function event with the args torch's with_modules
 * writes (TensorBoard's module view reads them).
 *
 * Record: ts = the call's start (the host's clock); id = the call's Python
 * id (>= 1, unique in the process); a = 0. Payload: struct pymodrec_hdr,
 * then the name, torch's `nn.Module: <class>_<module id>` (name_len bytes),
 * then the module's path in its model, as named_modules() gives it
 * (path_len bytes, 0: a root module, or one not registered in its root),
 * neither NUL-ended. The whole payload is at most EVBUF_NAME_MAX bytes.
 */
#ifndef PROFHOST_PYMODREC_H
#define PROFHOST_PYMODREC_H

#include <stdint.h>

struct pymodrec_hdr {
	int64_t end;           /* the call's end (the host's clock) */
	uint64_t parent_id;    /* the Python id of the module call it was
				  made in, 0: none (a root) */
	uint64_t module_id;    /* torch's module id: the module's number
				  among those of its class, in the order the
				  bridge first saw them */
	uint16_t name_len, path_len;
	uint32_t pad;
};

#endif
