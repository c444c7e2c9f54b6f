#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Show (and follow) the training log of one worker or all of them.
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

WORKER="${WORKER:-0}"
LINES="${LINES:-100}"
FOLLOW="${FOLLOW:-1}"

usage() {
  cat <<USAGE
usage: $(basename "$0") [flags]

tail -n LINES [-F] ~/LOG_FILE on one worker (default 0, the one that writes metrics) or all.

Flags:
  --worker N|all            which worker [WORKER] (default 0)
  --lines N                 lines to show [LINES] (default 100)
  --no-follow               print and exit instead of following [FOLLOW=0]
$COMMON_FLAGS_HELP
USAGE
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --worker) need_value "$1" "$#"; WORKER="$2"; shift 2 ;;
    --lines) need_value "$1" "$#"; LINES="$2"; shift 2 ;;
    --no-follow) FOLLOW=0; shift ;;
    *)
      parse_common_flag "$@"
      [[ "$SHIFT" -gt 0 ]] || usage_error "unknown argument: $1"
      shift "$SHIFT"
      ;;
  esac
done
require_target
[[ "$WORKER" == all || "$WORKER" =~ ^[0-9]+$ ]] || usage_error "--worker must be a number or all"
[[ "$LINES" =~ ^[0-9]+$ ]] || usage_error "--lines must be a number"

follow=""
if [[ "$FOLLOW" == 1 ]]; then
  follow=" -F"
fi
ssh_workers "$WORKER" "tail -n $LINES$follow \$HOME/$(quote "$LOG_FILE")"
