#!/bin/sh
# expect_gpu_validate_failure.sh CHECK COMMAND...: runs scripts/gpu_validate.py (COMMAND) and
# succeeds only if it exits with status 1 and reports exactly check CHECK as failed: a crash or a
# different failed check is a test failure.
check=$1
shift
output=$("$@" 2>&1)
status=$?
printf '%s\n' "$output"
if [ "$status" -ne 1 ]; then
  echo "expected exit status 1, got $status"
  exit 1
fi
if ! printf '%s\n' "$output" | grep -qxF "FAILED: ($check)"; then
  echo "expected the last line to be: FAILED: ($check)"
  exit 1
fi
