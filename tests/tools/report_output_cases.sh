#!/bin/sh
# report_output_cases.sh refuses|writes REPORT_CLI TRACE SCRATCH_DIR: dlprof-report's -o on paths
# that are not new plain files, with a copy of TRACE as the input in SCRATCH_DIR.
#   refuses: -o onto the input trace (its path, another spelling of it, a link to it, or the
#            trace as a file of an input directory) exits 2 naming the trace, and leaves the
#            trace as it was;
#   writes:  -o through a symbolic link replaces the link's target and keeps the link; -o
#            /dev/null leaves the device; -o /dev/stdout (a link to a pipe here) and -o a FIFO
#            write the report into the pipe for its reader.
set -u
mode=$1
cli=$2
trace=$3
scratch=$4
fail() {
  echo "FAIL: $*"
  exit 1
}
rm -rf "$scratch" && mkdir -p "$scratch/run" || fail "cannot make $scratch"
input=$scratch/run/rank0.pt.trace.json
cp "$trace" "$input" || fail "cannot copy $trace"

case $mode in
refuses)
  ln -s run/rank0.pt.trace.json "$scratch/link.json"
  for pair in "$input|$input" "$scratch/run/../run/rank0.pt.trace.json|$input" "$scratch/link.json|$input" \
              "$input|$scratch/run"; do
    output=${pair%%|*}
    source=${pair#*|}
    message=$("$cli" -o "$output" "$source" 2>&1 >/dev/null)
    status=$?
    [ "$status" -eq 2 ] || fail "-o $output $source: exit status $status, not 2: $message"
    printf '%s\n' "$message" | grep -Eq "^dlprof-report: -o '.*' is the input trace '.*/rank0\.pt\.trace\.json': write the report to another file$" ||
      fail "-o $output $source: $message"
    cmp -s "$trace" "$input" || fail "-o $output $source changed the input trace"
  done
  [ -L "$scratch/link.json" ] || fail "the link to the input was replaced"
  ;;
writes)
  mkdir "$scratch/reports"
  ln -s reports/report.txt "$scratch/latest.txt"
  "$cli" -o "$scratch/latest.txt" "$input" || fail "-o a link"
  [ -L "$scratch/latest.txt" ] || fail "the link was replaced by a file"
  grep -q '^== Rank 0' "$scratch/reports/report.txt" || fail "the link's target holds no report"

  "$cli" -o /dev/null "$input" || fail "-o /dev/null"
  if [ ! -c /dev/null ]; then
    [ "$(id -u)" = 0 ] && rm -f /dev/null && mknod -m 666 /dev/null c 1 3  # the machine's /dev/null back
    fail "/dev/null was replaced"
  fi

  "$cli" -o /dev/stdout "$input" | cat >"$scratch/stdout.txt" || fail "-o /dev/stdout"
  [ -L /dev/stdout ] || fail "/dev/stdout was replaced"
  grep -q '^== Rank 0' "$scratch/stdout.txt" || fail "-o /dev/stdout wrote no report to the pipe"

  mkfifo "$scratch/pipe.txt" || fail "mkfifo"
  timeout 30 cat "$scratch/pipe.txt" >"$scratch/from-pipe.txt" &  # no writer ever comes if the FIFO is replaced
  reader=$!
  "$cli" -o "$scratch/pipe.txt" "$input" || fail "-o a FIFO"
  wait "$reader"
  [ -p "$scratch/pipe.txt" ] || fail "the FIFO was replaced"
  grep -q '^== Rank 0' "$scratch/from-pipe.txt" || fail "the FIFO's reader got no report"
  ;;
*)
  fail "unknown mode '$mode'"
  ;;
esac
echo ok
