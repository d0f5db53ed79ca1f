/*
 * test_demangle — C++ frame names for flame graphs: the function's
 * qualified name alone (no return type, parameters, qualifiers, clone
 * suffixes, ABI tags), short template arguments kept and long ones as
 * "<...>", operators intact; and the demangler found at run time.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "util/demangle.h"

static char buf[1024];

static const char *shorten(const char *in)
{
	demangle_shorten(in, buf, sizeof buf);
	return buf;
}

static void test_shorten(void)
{
	CHECK_EQ_STR(shorten("torch::autograd::Engine::evaluate_function("
			     "std::shared_ptr<torch::autograd::GraphTask>&, "
			     "torch::autograd::Node*, torch::autograd::InputBuffer&, "
			     "std::shared_ptr<torch::autograd::ReadyQueue> const&)"),
		     "torch::autograd::Engine::evaluate_function");
	/* A return type goes; long or nested template arguments become
	 * "<...>"; a clone suffix goes with the parameters. */
	CHECK_EQ_STR(shorten("void at::native::(anonymous namespace)::cpu_kernel_vec<"
			     "at::native::(anonymous namespace)::add_kernel("
			     "at::TensorIteratorBase&, c10::Scalar const&)::{lambda()#1}::"
			     "operator()() const::{lambda(float, float)#1}, "
			     "at::vec::Vectorized<float> >(at::TensorIteratorBase&, float, "
			     "long) [clone .isra.0]"),
		     "at::native::(anonymous namespace)::cpu_kernel_vec<...>");
	CHECK_EQ_STR(shorten("std::vector<long, std::allocator<long> >::push_back(long const&)"),
		     "std::vector<...>::push_back");
	CHECK_EQ_STR(shorten("c10::function_ref<void (char**, long const*, long, long)>::"
			     "callback_fn<foo>(long, char**, long const*, long, long)"),
		     "c10::function_ref<...>::callback_fn<foo>");
	/* Short, flat template arguments stay. */
	CHECK_EQ_STR(shorten("at::TensorBase::data_ptr<float>() const"),
		     "at::TensorBase::data_ptr<float>");
	CHECK_EQ_STR(shorten("unsigned long c10::hash<int>(int const&)"), "c10::hash<int>");
	CHECK_EQ_STR(shorten("std::pair<at::Tensor, at::Tensor> f<at::Tensor, at::Tensor>()"),
		     "f<at::Tensor, at::Tensor>");
	/* Local names: the enclosing function's parameters as "(...)", a
	 * lambda's too. */
	CHECK_EQ_STR(shorten("at::native::(anonymous namespace)::add_kernel("
			     "at::TensorIteratorBase&, c10::Scalar const&)::{lambda()#1}::"
			     "operator()() const"),
		     "at::native::(anonymous namespace)::add_kernel(...)::{lambda()#1}::"
		     "operator()");
	CHECK_EQ_STR(shorten("foo(int)::{lambda(float, float)#2}::operator()(float, float) const"),
		     "foo(...)::{lambda(...)#2}::operator()");
	CHECK_EQ_STR(shorten("foo(int)::counter"), "foo(...)::counter");
	CHECK_EQ_STR(shorten("g()::counter"), "g()::counter");
	/* Operators keep their symbols, spaces and template arguments. */
	CHECK_EQ_STR(shorten("std::basic_ostream<char, std::char_traits<char> >& "
			     "std::operator<< <std::char_traits<char> >(std::basic_ostream<"
			     "char, std::char_traits<char> >&, char const*)"),
		     "std::operator<< <...>");
	CHECK_EQ_STR(shorten("bool Cmp::operator<(Cmp const&) const"), "Cmp::operator<");
	CHECK_EQ_STR(shorten("Foo::operator bool() const"), "Foo::operator bool");
	CHECK_EQ_STR(shorten("Foo::operator unsigned long() const"), "Foo::operator unsigned long");
	CHECK_EQ_STR(shorten("operator new(unsigned long)"), "operator new");
	CHECK_EQ_STR(shorten("operator delete[](void*)"), "operator delete[]");
	CHECK_EQ_STR(shorten("std::less<int>::operator()(int const&, int const&) const"),
		     "std::less<int>::operator()");
	CHECK_EQ_STR(shorten("it::operator->() const"), "it::operator->");
	/* ABI tags go; names without parameters stay as they are. */
	CHECK_EQ_STR(shorten("c10::str[abi:cxx11](char const*)"), "c10::str");
	CHECK_EQ_STR(shorten("ns::table"), "ns::table");
	CHECK_EQ_STR(shorten("vtable for at::Tensor"), "at::Tensor");
	/* Cut at the buffer's size, NUL-ended. */
	CHECK_EQ_INT(demangle_shorten("torch::autograd::Engine::evaluate_function()",
				      buf, 8), 7);
	CHECK_EQ_STR(buf, "torch::");
}

static void test_demangler(void)
{
	demangle_fn fn = demangle_find(true); /* libstdc++ is installed */
	char *full;

	CHECK(fn != NULL);
	CHECK(demangle_is_mangled("_ZN8profhost5probeEi"));
	CHECK(!demangle_is_mangled("probe"));
	full = demangle_full(fn, "_ZN8profhost5probeEi");
	CHECK_EQ_STR(full, "profhost::probe(int)");
	free(full);
	CHECK(demangle_frame(fn, "_ZNSt6vectorIlSaIlEE9push_backERKl", buf, sizeof buf));
	CHECK_EQ_STR(buf, "std::vector<...>::push_back");
	/* Not C++, or not a valid name: false, the buffer untouched. */
	strcpy(buf, "kept");
	CHECK(!demangle_frame(fn, "malloc", buf, sizeof buf));
	CHECK(!demangle_frame(fn, "_Z!!", buf, sizeof buf));
	CHECK_EQ_STR(buf, "kept");
}

int main(void)
{
	test_shorten();
	test_demangler();
	return check_done();
}
