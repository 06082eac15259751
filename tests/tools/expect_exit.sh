#!/bin/sh
# expect_exit.sh [--ignore REGEX] STATUS STDERR_REGEX COMMAND...: runs COMMAND and succeeds only if
# it exits with STATUS and its standard error matches the extended regular expression
# STDERR_REGEX, or, when STDERR_REGEX is empty, is empty. Lines of standard error matching the
# --ignore REGEX (progress reports of a slow run) are left out first. A crash (a signal, a
# sanitizer's report) fails either way.
ignore_regex='^$'
if [ "$1" = "--ignore" ]; then
  ignore_regex=$2
  shift 2
fi
expected_status=$1
stderr_regex=$2
shift 2
stderr_file=$(mktemp)
"$@" >/dev/null 2>"$stderr_file"
status=$?
stderr_text=$(grep -Ev "$ignore_regex" "$stderr_file")
rm -f "$stderr_file"
printf '%s\n' "$stderr_text"
if [ "$status" -ne "$expected_status" ]; then
  echo "expected exit status $expected_status, got $status"
  exit 1
fi
if [ -z "$stderr_regex" ]; then
  if [ -n "$stderr_text" ]; then
    echo "expected nothing on standard error"
    exit 1
  fi
elif ! printf '%s\n' "$stderr_text" | grep -Eq "$stderr_regex"; then
  echo "expected standard error to match: $stderr_regex"
  exit 1
fi
