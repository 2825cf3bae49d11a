#!/usr/bin/env bash
# Start N workers of one training run on this machine, on loopback ports, and wait for them.
#
#   scripts/launch_local_workers.sh N COMMAND [ARGS...]
#   scripts/launch_local_workers.sh 2 run_classifier_mgpu.py --task_name=sentiment \
#       --do_train --data_dir=... --output_dir=out/two_workers ...
#
# COMMAND is an entry point (a .py file runs with $PYTHON) or any program; every worker gets
# the same ARGS and its own TF_CONFIG (worker 0, the chief, first). With one box the workers
# share --output_dir, as machines would share a filesystem; only the chief writes there.
#
# Environment:
#   PYTHON          interpreter for .py commands (default: python)
#   BASE_PORT       use ports BASE_PORT..BASE_PORT+N-1 (default: free ports picked here)
#   WORKER_LOG_DIR  write worker i's output to WORKER_LOG_DIR/worker_i.log (default: this
#                   terminal, lines tagged [worker i] by the workers' own log format)
#
# Exit status: 0 if every worker succeeded, else the first failing worker's status. A worker
# that dies makes the others stop by themselves (--collective_timeout_s); Ctrl-C stops all.
set -uo pipefail

usage() {
  echo "usage: $0 N COMMAND [ARGS...]   (N >= 1 workers on 127.0.0.1)" >&2
  exit 2
}
[ $# -ge 2 ] || usage
N="$1"
shift
case "$N" in
  '' | *[!0-9]*) echo "error: N must be a positive integer, got '$N'" >&2; exit 2 ;;
esac
[ "$N" -ge 1 ] || { echo "error: N must be at least 1, got $N" >&2; exit 2; }

PYTHON="${PYTHON:-python}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
COMMAND=("$@")
case "$1" in
  *.py) COMMAND=("$PYTHON" "$@") ;;
esac

if [ -n "${BASE_PORT:-}" ]; then
  PORTS=()
  for ((i = 0; i < N; i++)); do PORTS+=($((BASE_PORT + i))); done
else
  # Ask the kernel for N distinct free ports (held together, then released).
  read -r -a PORTS <<< "$("$PYTHON" - "$N" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
)"
fi
[ "${#PORTS[@]}" -eq "$N" ] || { echo "error: could not pick $N free ports (PYTHON=$PYTHON)" >&2; exit 2; }
HOSTS=""
for port in "${PORTS[@]}"; do HOSTS+="${HOSTS:+,}\"127.0.0.1:$port\""; done

PIDS=()
stop_all() {
  for pid in ${PIDS[@]+"${PIDS[@]}"}; do kill "$pid" 2>/dev/null; done
}
trap 'stop_all; exit 130' INT
trap 'stop_all; exit 143' TERM

[ -n "${WORKER_LOG_DIR:-}" ] && mkdir -p "$WORKER_LOG_DIR"
for ((i = 0; i < N; i++)); do
  tf_config="{\"cluster\": {\"worker\": [$HOSTS]}, \"task\": {\"type\": \"worker\", \"index\": $i}}"
  echo "launch_local_workers: worker $i: TF_CONFIG='$tf_config'" >&2
  if [ -n "${WORKER_LOG_DIR:-}" ]; then
    TF_CONFIG="$tf_config" "${COMMAND[@]}" > "$WORKER_LOG_DIR/worker_$i.log" 2>&1 &
  else
    TF_CONFIG="$tf_config" "${COMMAND[@]}" &
  fi
  PIDS+=($!)
done

# The chief (worker 0) decides when the run is over: once it has exited, the
# other workers get GRACE_S seconds to finish; one still running then is
# frozen (its peers are gone) and is stopped, so this script always ends.
GRACE_S=${GRACE_S:-60}
status=0
report() {  # $1 = worker, $2 = exit code
  if [ "$2" -ne 0 ]; then
    echo "launch_local_workers: worker $1 exited with status $2" >&2
    [ "$status" -eq 0 ] && status=$2
  fi
}
wait "${PIDS[0]}"
report 0 $?
deadline=$((SECONDS + GRACE_S))
for ((i = 1; i < N; i++)); do
  while kill -0 "${PIDS[$i]}" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
  if kill -0 "${PIDS[$i]}" 2>/dev/null; then
    echo "launch_local_workers: worker $i still running ${GRACE_S}s after the chief" \
      "exited: stopping it" >&2
    kill "${PIDS[$i]}" 2>/dev/null
    sleep 1
    kill -9 "${PIDS[$i]}" 2>/dev/null
    wait "${PIDS[$i]}" 2>/dev/null
    [ "$status" -eq 0 ] && status=124
    continue
  fi
  wait "${PIDS[$i]}"
  report "$i" $?
done
exit "$status"
