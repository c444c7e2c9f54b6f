#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Stop training on every worker (SIGTERM to the process launch.sh recorded).
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<USAGE
usage: $(basename "$0") [flags]

On all workers: send SIGTERM to the process id in ~/PID_FILE (written by launch.sh) and
remove the file. The TPU VM keeps running; delete it with delete.sh.

$COMMON_FLAGS_HELP
USAGE
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    *)
      parse_common_flag "$@"
      [[ "$SHIFT" -gt 0 ]] || usage_error "unknown argument: $1"
      shift "$SHIFT"
      ;;
  esac
done
require_target

pid="\$HOME/$(quote "$PID_FILE")"
ssh_workers all "if [ -f $pid ]; then kill -TERM \"\$(cat $pid)\" || true; rm -f $pid; fi"
