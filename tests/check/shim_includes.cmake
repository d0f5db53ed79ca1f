# check_shim_includes — the shim (libprofhost.so) is libc-only: it sits
# first in the target's symbol lookup, so it may include nothing that
# would have it link Lua, cJSON, libunwind, zlib or CUPTI.
#
#   cmake -DSHIM_DIR=<src/shim> -DSHARED=<files> -DPUBLIC_DIR=<include>
#         [-DSHIM_SOURCES=<files>] -P tests/check/shim_includes.cmake
#
# Checks every .c/.h in SHIM_DIR and every file in SHARED (the libc-only
# files the shim compiles from other folders, with their headers). Each
# may include
#   - a C11, POSIX or Linux system header (the list below),
#   - a header in SHIM_DIR, one of SHARED, or one under PUBLIC_DIR (the
#     public ABI, profhost/prof.h), which are checked the same way,
#   - the NVTX3 headers, only from nvtx_abi_check.c (header-only, to prove
#     nvtx_abi.h matches them).
# SHIM_SOURCES, when given, is the shim target's source list: each must be
# in SHIM_DIR or SHARED, so a file from elsewhere cannot slip in through
# CMakeLists.txt. Lists are separated by '|'. On failure, prints one line
# per offending include naming the file and the include, and exits 1.
cmake_minimum_required(VERSION 3.18)

foreach(v SHIM_DIR SHARED PUBLIC_DIR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "check_shim_includes: -D${v}=... is required")
  endif()
endforeach()

# C11 (7.1.2), POSIX.1-2017 and the glibc/Linux headers the shim uses.
set(system_headers
  assert.h complex.h ctype.h errno.h fenv.h float.h inttypes.h iso646.h
  limits.h locale.h math.h setjmp.h signal.h stdalign.h stdarg.h
  stdatomic.h stdbool.h stddef.h stdint.h stdio.h stdlib.h stdnoreturn.h
  string.h tgmath.h threads.h time.h uchar.h wchar.h wctype.h
  aio.h cpio.h dirent.h dlfcn.h fcntl.h fnmatch.h glob.h grp.h iconv.h
  langinfo.h libgen.h monetary.h mqueue.h netdb.h nl_types.h poll.h
  pthread.h pwd.h regex.h sched.h search.h semaphore.h spawn.h strings.h
  syslog.h tar.h termios.h unistd.h utime.h wordexp.h
  link.h elf.h features.h malloc.h execinfo.h ucontext.h
  # compiler-provided intrinsics (clock.h reads the TSC)
  x86intrin.h immintrin.h)

string(REPLACE "|" ";" shared_list "${SHARED}")
get_filename_component(shim_dir "${SHIM_DIR}" ABSOLUTE)
get_filename_component(public_dir "${PUBLIC_DIR}" ABSOLUTE)

set(allowed "")
file(GLOB shim_files "${shim_dir}/*.c" "${shim_dir}/*.h")
set(files ${shim_files})
foreach(f IN LISTS shared_list)
  get_filename_component(a "${f}" ABSOLUTE)
  list(APPEND files "${a}")
endforeach()
set(allowed ${files})

set(failures "")
set(queue ${files})
set(seen "")
while(queue)
  list(POP_FRONT queue f)
  if(f IN_LIST seen)
    continue()
  endif()
  list(APPEND seen "${f}")
  if(NOT EXISTS "${f}")
    list(APPEND failures "${f}: listed as a shim file but missing")
    continue()
  endif()
  get_filename_component(dir "${f}" DIRECTORY)
  get_filename_component(name "${f}" NAME)
  file(STRINGS "${f}" lines REGEX "^[ \t]*#[ \t]*include")
  foreach(line IN LISTS lines)
    if(NOT line MATCHES "^[ \t]*#[ \t]*include[ \t]*([<\"])([^>\"]+)[>\"]")
      list(APPEND failures "${f}: '${line}': an include the check cannot read")
      continue()
    endif()
    set(kind "${CMAKE_MATCH_1}")
    set(inc "${CMAKE_MATCH_2}")
    set(ok FALSE)
    if(kind STREQUAL "\"")
      get_filename_component(target "${inc}" ABSOLUTE BASE_DIR "${dir}")
      get_filename_component(pub "${inc}" ABSOLUTE BASE_DIR "${public_dir}")
      if(target IN_LIST allowed)
        set(ok TRUE)
      elseif(EXISTS "${pub}" AND NOT EXISTS "${target}")
        # The public ABI (include/profhost/prof.h): checked the same way.
        set(ok TRUE)
        list(APPEND queue "${pub}")
        list(APPEND allowed "${pub}")
      endif()
    else()
      if(inc IN_LIST system_headers OR inc MATCHES "^(sys|linux|asm|asm-generic|bits)/")
        set(ok TRUE)
      elseif(inc MATCHES "^nvtx3/" AND name STREQUAL "nvtx_abi_check.c")
        set(ok TRUE)
      endif()
    endif()
    if(NOT ok)
      if(kind STREQUAL "\"")
        set(shown "\"${inc}\"")
      else()
        set(shown "<${inc}>")
      endif()
      list(APPEND failures
        "${f}: #include ${shown}: the shim is libc-only, it may include only system headers, src/shim/ headers and the shared libc-only files (docs/architecture.md, \"Two libraries\")")
    endif()
  endforeach()
endwhile()

if(DEFINED SHIM_SOURCES AND NOT SHIM_SOURCES STREQUAL "")
  string(REPLACE "|" ";" srcs "${SHIM_SOURCES}")
  foreach(s IN LISTS srcs)
    get_filename_component(a "${s}" ABSOLUTE)
    if(NOT a IN_LIST allowed)
      list(APPEND failures
        "${a}: compiled into libprofhost.so but neither in src/shim/ nor one of the shared libc-only files (move it to src/shim/ or add it to the check's list)")
    endif()
  endforeach()
endif()

if(failures)
  foreach(m IN LISTS failures)
    message("${m}")
  endforeach()
  message(FATAL_ERROR "check_shim_includes: the shim reaches beyond libc")
endif()
list(LENGTH seen n)
message(STATUS "check_shim_includes: ${n} files, all libc-only")
