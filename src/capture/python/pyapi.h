/*
 * pyapi — the CPython C API as the Python bridge uses it: looked up in the
 * process at run time (python.c's pyb_lookup), never linked. Objects are
 * opaque; only the stable ABI's layouts are relied on (PyMethodDef).
 */
#ifndef PROFHOST_PYAPI_H
#define PROFHOST_PYAPI_H

#include <sys/types.h>

typedef struct pyobj pyobj;

/* CPython's PyMethodDef, as its stable ABI lays it out. */
struct py_methoddef {
	const char *ml_name;
	pyobj *(*ml_meth)(pyobj *self, pyobj *arg);
	int ml_flags;
	const char *ml_doc;
};
#define PY_METH_NOARGS 0x0004
#define PY_METH_O 0x0008

struct py_syms {
	int (*IsInitialized)(void);
	int (*AddPendingCall)(int (*fn)(void *), void *arg);
	pyobj *(*ImportModule)(const char *name);
	pyobj *(*GetAttrString)(pyobj *o, const char *name);
	pyobj *(*CallFunctionObjArgs)(pyobj *fn, ...);
	pyobj *(*CallObject)(pyobj *fn, pyobj *args);
	pyobj *(*LongFromVoidPtr)(void *p);
	pyobj *(*UnicodeFromString)(const char *s);
	pyobj *(*UnicodeDecodeFSDefault)(const char *s);
	pyobj *(*SysGetObject)(const char *name);
	int (*ListAppend)(pyobj *list, pyobj *item);
	int (*SequenceContains)(pyobj *seq, pyobj *item);
	pyobj *(*ErrOccurred)(void);
	void (*ErrClear)(void);
	void (*ErrPrint)(void);
	int (*ErrExceptionMatches)(pyobj *exc);
	pyobj **ExcKeyboardInterrupt;
	pyobj **ExcSystemExit;
	void (*DecRef)(pyobj *o);
	int (*IsFinalizing)(void);       /* optional: _Py_IsFinalizing or
					    Py_IsFinalizing (3.13) */
	/* The step builtin's (optional, all or none: see pylean.h) */
	pyobj *(*CFunctionNewEx)(struct py_methoddef *def, pyobj *self, pyobj *module);
	ssize_t (*ListSize)(pyobj *list);
	pyobj *(*ListGetItem)(pyobj *list, ssize_t i);      /* borrowed */
	ssize_t (*TupleSize)(pyobj *tuple);
	pyobj *(*TupleGetItem)(pyobj *tuple, ssize_t i);    /* borrowed */
	long long (*LongAsLongLong)(pyobj *o);
	pyobj *(*LongFromLong)(long v);
	const char *(*UnicodeAsUTF8AndSize)(pyobj *o, ssize_t *len);
	void *(*SaveThread)(void);
	void (*RestoreThread)(void *tstate);
	void (*IncRef)(pyobj *o);
	pyobj *None;                     /* &_Py_NoneStruct */
	/* The lean builtins' (optional, all or none: see pylean.h); the frame
	 * functions are CPython 3.11's */
	pyobj *(*TuplePack)(ssize_t n, ...);
	pyobj *(*ListNew)(ssize_t n);
	ssize_t (*ObjectSize)(pyobj *o);
	pyobj *(*EvalGetFrame)(void);                     /* borrowed */
	pyobj *(*FrameGetBack)(pyobj *frame);             /* new */
	pyobj *(*FrameGetCode)(pyobj *frame);             /* new */
	int (*FrameGetLasti)(pyobj *frame);
};

#endif
