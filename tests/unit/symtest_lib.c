/*
 * symtest_lib — a shared library for test_symbols, built twice: with its
 * symbol table, and stripped (only .dynsym left). It has a local function
 * reachable only through a pointer, an exported one, and a local function
 * with a C++ (mangled) name.
 */
#define SYMTEST_API __attribute__((visibility("default")))

__attribute__((noinline)) static int symtest_local(int x)
{
	return x * 3 + 1;
}

__attribute__((noinline)) int symtest_cxx(int x) __asm__("_ZN8profhost5probeEi");
__attribute__((noinline)) int symtest_cxx(int x)
{
	return x + 2;
}

SYMTEST_API int symtest_exported(int x)
{
	return symtest_local(x) + symtest_cxx(x);
}

SYMTEST_API void *symtest_local_addr(void)
{
	return (void *)&symtest_local;
}

SYMTEST_API void *symtest_cxx_addr(void)
{
	return (void *)&symtest_cxx;
}
