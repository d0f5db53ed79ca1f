# The capture seam (src/capture/source.h): capture sources know the host
# only through that header, and the host names a source only in its list
# of sources (src/host/capture.c). Fails naming each file that breaks it:
#   - a file of src/capture including a header of src/host (host.h, the
#     host's side of the seam host/capture.h, any other);
#   - a file of src/host but capture.c including a header of src/capture
#     other than the seam, capture/source.h.
# With -DOBJECTS=<object files, '|'-separated> and -DNM=<nm>, also checks
# what the objects compiled from src/capture call: no function of the
# host's (window_*, hostthread_*, host_fail, live_*, exitpath_*, the
# capture_*_all calls), so no call goes from a source back into the host
# but through struct capture_host.
#   cmake -DSRC=<repository>/src [-DOBJECTS=a.o|b.o -DNM=nm] -P capture_seam.cmake
if(NOT SRC)
  message(FATAL_ERROR "capture_seam: pass -DSRC=<repository>/src")
endif()
set(bad "")
file(GLOB_RECURSE sources ${SRC}/capture/*.c ${SRC}/capture/*.h)
if(NOT sources)
  message(FATAL_ERROR "capture_seam: no sources under ${SRC}/capture")
endif()
foreach(f ${sources})
  file(STRINGS ${f} hits REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]([^\">]*/)?host(\\.h|/[^\">]*)[\">]")
  foreach(h ${hits})
    string(STRIP "${h}" h)
    list(APPEND bad "${f}: ${h} (a capture source sees the host only through src/capture/source.h)")
  endforeach()
endforeach()
file(GLOB hostfiles ${SRC}/host/*.c ${SRC}/host/*.h)
foreach(f ${hostfiles})
  get_filename_component(name ${f} NAME)
  # capture.c lists the sources (the shim's half of NVTX is src/shim's).
  if(name STREQUAL "capture.c")
    continue()
  endif()
  file(STRINGS ${f} hits REGEX "^[ \t]*#[ \t]*include[ \t]*\"[^\"]*capture/")
  foreach(h ${hits})
    if(h MATCHES "\"(\\.\\./)*capture/source\\.h\"")
      continue() # the seam itself
    endif()
    string(STRIP "${h}" h)
    list(APPEND bad "${f}: ${h} (only src/host/capture.c names capture sources, the others see src/capture/source.h)")
  endforeach()
endforeach()
if(OBJECTS AND NM)
  string(REPLACE "|" ";" objects "${OBJECTS}")
  set(checked 0)
  foreach(o ${objects})
    if(NOT o MATCHES "/src/capture/")
      continue()
    endif()
    math(EXPR checked "${checked} + 1")
    execute_process(COMMAND ${NM} -u ${o} OUTPUT_VARIABLE undef RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      list(APPEND bad "${o}: ${NM} -u failed")
      continue()
    endif()
    string(REGEX MATCHALL "[ \t]U (window_[a-z_]+|hostthread_[a-z_]+|host_fail|live_[a-z_]+|exitpath_[a-z_]+|capture_[a-z_]+_all)\n"
           calls "${undef}")
    foreach(c ${calls})
      string(STRIP "${c}" c)
      string(REGEX REPLACE "^U " "" c "${c}")
      list(APPEND bad "${o} calls the host's ${c} (call the host through struct capture_host)")
    endforeach()
  endforeach()
  if(checked EQUAL 0)
    list(APPEND bad "no object file compiled from src/capture among OBJECTS")
  endif()
endif()
if(bad)
  list(JOIN bad "\n" text)
  message(FATAL_ERROR "capture seam broken:\n${text}")
endif()
message(STATUS "capture seam: ${SRC}/capture includes nothing of src/host and calls no host function")
