#!/bin/sh
# run_cuda_example.sh EXAMPLE LOG_DIR: runs examples/cuda_training_loop for a few steps. Passes when
# it trains and writes its trace, or, on a machine without a usable GPU, when it says so and exits
# with status 2; anything else (a crash, another status, a silent failure) fails.
example=$1
log_dir=$2
rm -rf "$log_dir"
output=$("$example" --steps 6 --log-dir "$log_dir" 2>&1)
status=$?
printf '%s\n' "$output"
case $status in
  0) printf '%s\n' "$output" | grep -q '^Trace: ' || { echo "no 'Trace:' line"; exit 1; } ;;
  2) printf '%s\n' "$output" | grep -qE '^cuda_training_loop: no (usable )?CUDA device' ||
       { echo "exit status 2 without saying that no CUDA device is usable"; exit 1; } ;;
  *) echo "unexpected exit status $status"; exit 1 ;;
esac
