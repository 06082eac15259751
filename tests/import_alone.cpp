// dlprof::import alone, for check_reader_headers.cmake: the headers a program that only reads
// traces (and crash files) compiles.
#include <dlprof/import/chrome_trace.hpp>
#include <dlprof/import/crash_dump.hpp>
