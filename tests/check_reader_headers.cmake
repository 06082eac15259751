# Fails when SOURCE, compiled as the offline reader is, includes a header of the recording
# runtime: one that installs a signal handler, a fork hook or std::terminate, starts a thread, or
# touches the rings. The reader may use the ring record's plain layout (recording/record.hpp), a
# DLPROF_RANGE_F's kept arguments and their formatting (recording/format_arguments.hpp,
# window/formatted_name.hpp), the clock's conversion (recording/clock.hpp), the window's
# assembly (window/assemble.hpp) and the pure helpers of traces (text.hpp, sorted_runs.hpp,
# forward_ops.hpp, stack_symbols.hpp).
#   cmake -DCXX=... -DSOURCE=... -DINCLUDE_DIR=... [-DDEFINITIONS=...] -P check_reader_headers.cmake
cmake_minimum_required(VERSION 3.16)
set(allowed_detail_headers
    detail/text.hpp
    detail/sorted_runs.hpp
    detail/forward_ops.hpp
    detail/stack_symbols.hpp
    detail/recording/clock.hpp
    detail/recording/record.hpp
    detail/recording/format_arguments.hpp
    detail/window/formatted_name.hpp
    detail/window/assemble.hpp)
set(runtime_headers profiler.hpp range.hpp annotate.hpp collective.hpp cuda.hpp cupti.hpp settings.hpp torch.hpp
                    torch_modules.hpp torch_distributed.hpp)

execute_process(COMMAND ${CXX} -std=c++17 -M -MG ${DEFINITIONS} -I${INCLUDE_DIR} ${SOURCE}
                OUTPUT_VARIABLE dependencies ERROR_VARIABLE errors RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "listing the headers of ${SOURCE} failed:\n${errors}")
endif()
string(REGEX MATCHALL "[^ \\\\\n]+dlprof/[^ \\\\\n]+\\.hpp" headers "${dependencies}")
list(REMOVE_DUPLICATES headers)
set(offending)
foreach(header IN LISTS headers)
  string(REGEX REPLACE ".*include/dlprof/" "" relative "${header}")
  if(relative MATCHES "^detail/" AND NOT relative IN_LIST allowed_detail_headers)
    list(APPEND offending ${relative})
  elseif(relative IN_LIST runtime_headers)
    list(APPEND offending ${relative})
  endif()
endforeach()
list(LENGTH headers count)
if(count EQUAL 0)
  message(FATAL_ERROR "no dlprof header found in the dependencies of ${SOURCE}: the check checks nothing")
endif()
if(offending)
  list(JOIN offending "\n  " listed)
  message(FATAL_ERROR "${SOURCE} includes the recording runtime's headers:\n  ${listed}")
endif()
message(STATUS "${SOURCE}: ${count} dlprof headers, none of the recording runtime")
