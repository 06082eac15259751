# Installs the dlprof build in BUILD_DIR into PREFIX, checks the exported targets are namespaced,
# then configures, builds and runs tests/consumer against the installed package (and the
# dependencies' prefixes in EXTRA_PREFIX_PATH) only.
file(REMOVE_RECURSE ${PREFIX} ${CONSUMER_BINARY})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX} COMMAND_ERROR_IS_FATAL ANY)
if(EXISTS ${BUILD_DIR}/tools/dlprof-report AND NOT EXISTS ${PREFIX}/bin/dlprof-report)
  message(FATAL_ERROR "dlprof-report was built but not installed into ${PREFIX}/bin")
endif()
file(GLOB_RECURSE targets_file ${PREFIX}/*/dlprofTargets.cmake)
if(NOT targets_file)
  message(FATAL_ERROR "dlprofTargets.cmake was not installed under ${PREFIX}")
endif()
file(READ ${targets_file} targets)
if(NOT targets MATCHES "add_library\\(dlprof::dlprof INTERFACE IMPORTED\\)")
  message(FATAL_ERROR "${targets_file} does not define dlprof::dlprof")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE} -B ${CONSUMER_BINARY} -G ${GENERATOR}
                        -DCMAKE_CXX_COMPILER=${CXX} "-DCMAKE_PREFIX_PATH=${PREFIX};${EXTRA_PREFIX_PATH}" -DCMAKE_BUILD_TYPE=
                COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${CMAKE_COMMAND} --build ${CONSUMER_BINARY} COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${CONSUMER_BINARY}/dlprof_consumer ${CONSUMER_BINARY}/trace COMMAND_ERROR_IS_FATAL ANY)
