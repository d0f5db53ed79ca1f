# check_internal_includes — an internal header (src/<dir>/<name>_internal.h,
# e.g. cupti_internal.h, policy_internal.h) is shared by one module's files
# only, as its opening comment says: it may be included by
# src/<dir>/<name>*.c and *.h and by test, bench and fuzz programs whose
# file name contains <name>; nothing else.
#
#   cmake -DROOT=<dir> -P tests/check/internal_includes.cmake
#
# ROOT holds src/ and tests/. On failure, prints one line per offending
# include naming the file and the header, and exits 1.
cmake_minimum_required(VERSION 3.18)

if(NOT DEFINED ROOT)
  message(FATAL_ERROR "check_internal_includes: -DROOT=... is required")
endif()
get_filename_component(root "${ROOT}" ABSOLUTE)

file(GLOB_RECURSE internals "${root}/src/*_internal.h")
file(GLOB_RECURSE sources "${root}/src/*.c" "${root}/src/*.h"
     "${root}/tests/*.c" "${root}/tests/*.h")

set(failures "")
foreach(f IN LISTS sources)
  file(STRINGS "${f}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"[^\"]*_internal\\.h\"")
  if(NOT lines)
    continue()
  endif()
  get_filename_component(dir "${f}" DIRECTORY)
  get_filename_component(fname "${f}" NAME)
  foreach(line IN LISTS lines)
    string(REGEX MATCH "\"([^\"]+)\"" _ "${line}")
    set(inc "${CMAKE_MATCH_1}")
    # Resolve like the compiler: next to the file, then from src/ (the
    # tests' include directory).
    get_filename_component(target "${inc}" ABSOLUTE BASE_DIR "${dir}")
    if(NOT target IN_LIST internals)
      get_filename_component(target "${inc}" ABSOLUTE BASE_DIR "${root}/src")
    endif()
    if(NOT target IN_LIST internals)
      continue() # not one of ours
    endif()
    get_filename_component(idir "${target}" DIRECTORY)
    get_filename_component(iname "${target}" NAME)
    string(REGEX REPLACE "_internal\\.h$" "" module "${iname}")
    file(RELATIVE_PATH rel "${root}" "${f}")
    set(ok FALSE)
    if(dir STREQUAL idir)
      string(FIND "${fname}" "${module}" at)
      if(at EQUAL 0)
        set(ok TRUE)
      endif()
    elseif(rel MATCHES "^tests/(unit|bench|fuzz)/")
      string(FIND "${fname}" "${module}" at)
      if(NOT at EQUAL -1)
        set(ok TRUE)
      endif()
    endif()
    if(NOT ok)
      file(RELATIVE_PATH irel "${root}" "${target}")
      list(APPEND failures
        "${rel}: #include \"${inc}\": ${irel} is internal to ${module}*.c (include the module's public header instead)")
    endif()
  endforeach()
endforeach()

if(failures)
  foreach(m IN LISTS failures)
    message("${m}")
  endforeach()
  message(FATAL_ERROR "check_internal_includes: internal headers included from outside their module")
endif()
list(LENGTH internals n)
message(STATUS "check_internal_includes: ${n} internal headers, each included only by its module")
