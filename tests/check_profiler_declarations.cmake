# Fails when a file that includes <dlprof/profiler.hpp> in a program linking dlprof::runtime
# (DLPROF_RUNTIME_LIBRARY=1) parses the Profiler's runtime: its definitions, its parts (the window,
# the flight recorder, the publisher, capture control), the trace writer, the launcher's settings,
# or fmt's formatting engine (<fmt/format.h>); the library compiles those once.
#   cmake -DCXX=... -DSOURCE=... -DINCLUDE_DIR=... [-DDEFINITIONS=...] -P check_profiler_declarations.cmake
cmake_minimum_required(VERSION 3.16)
set(runtime_patterns "/dlprof/detail/profiler_runtime\\.hpp$" "/dlprof/detail/window/" "/dlprof/detail/control/"
                     "/dlprof/export/" "/dlprof/settings\\.hpp$" "/dlprof/format/launch_protocol\\.hpp$" "/fmt/format\\.h$")

execute_process(COMMAND ${CXX} -std=c++17 -M -MG -DDLPROF_RUNTIME_LIBRARY=1 ${DEFINITIONS} -I${INCLUDE_DIR} ${SOURCE}
                OUTPUT_VARIABLE dependencies ERROR_VARIABLE errors RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "listing the headers of ${SOURCE} failed:\n${errors}")
endif()
string(REGEX MATCHALL "[^ \\\\\n]+\\.(hpp|h)" headers "${dependencies}")
list(REMOVE_DUPLICATES headers)
if(NOT headers MATCHES "/dlprof/profiler\\.hpp")
  message(FATAL_ERROR "${SOURCE} does not include dlprof/profiler.hpp: the check checks nothing")
endif()
set(offending)
foreach(header IN LISTS headers)
  foreach(pattern IN LISTS runtime_patterns)
    if(header MATCHES "${pattern}")
      list(APPEND offending ${header})
    endif()
  endforeach()
endforeach()
if(offending)
  list(JOIN offending "\n  " listed)
  message(FATAL_ERROR "${SOURCE}, built against dlprof::runtime, parses the Profiler's runtime:\n  ${listed}")
endif()
list(LENGTH headers count)
message(STATUS "${SOURCE}: ${count} headers, none of the Profiler's runtime")
