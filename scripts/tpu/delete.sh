#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Delete the TPU VM (or its queued resource, with the TPU VM it holds).
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

YES="${YES:-0}"

usage() {
  cat <<USAGE
usage: $(basename "$0") [flags]

Delete the TPU VM TPU_NAME; with --queued-resource ID (or QUEUED_RESOURCE), delete the
queued resource ID and its TPU VM (--force). gcloud asks for confirmation unless --yes.

Flags:
  --yes                     do not ask for confirmation (gcloud --quiet) [YES=1]
$COMMON_FLAGS_HELP
USAGE
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --yes) YES=1; shift ;;
    *)
      parse_common_flag "$@"
      [[ "$SHIFT" -gt 0 ]] || usage_error "unknown argument: $1"
      shift "$SHIFT"
      ;;
  esac
done
require_target
project_args
EXTRA=()
if [[ "$YES" == 1 ]]; then
  EXTRA=(--quiet)
fi

if [[ -n "$QUEUED_RESOURCE" ]]; then
  run "$GCLOUD" compute tpus queued-resources delete "$QUEUED_RESOURCE" "--zone=$ZONE" \
    "${PROJECT_ARGS[@]}" --force "${EXTRA[@]}"
else
  run "$GCLOUD" compute tpus tpu-vm delete "$TPU_NAME" "--zone=$ZONE" "${PROJECT_ARGS[@]}" \
    "${EXTRA[@]}"
fi
