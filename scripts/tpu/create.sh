#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Create a TPU VM or pod slice, directly or through a queued resource.
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

SPOT="${SPOT:-0}"

usage() {
  cat <<USAGE
usage: $(basename "$0") [flags]

Create the TPU VM (or pod slice) TPU_NAME of ACCELERATOR_TYPE in ZONE. With
--queued-resource ID (or QUEUED_RESOURCE), request it as a queued resource instead
(the usual way to get pod slices and spot capacity); watch it with
  gcloud compute tpus queued-resources describe ID --zone ZONE

Flags:
  --spot                    spot (preemptible) capacity [SPOT=1]
$COMMON_FLAGS_HELP
USAGE
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --spot) SPOT=1; shift ;;
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
if [[ "$SPOT" == 1 ]]; then
  EXTRA=(--spot)
fi

if [[ -n "$QUEUED_RESOURCE" ]]; then
  run "$GCLOUD" compute tpus queued-resources create "$QUEUED_RESOURCE" "--node-id=$TPU_NAME" \
    "--zone=$ZONE" "${PROJECT_ARGS[@]}" "--accelerator-type=$ACCELERATOR_TYPE" \
    "--runtime-version=$RUNTIME_VERSION" "${EXTRA[@]}"
else
  run "$GCLOUD" compute tpus tpu-vm create "$TPU_NAME" "--zone=$ZONE" "${PROJECT_ARGS[@]}" \
    "--accelerator-type=$ACCELERATOR_TYPE" "--version=$RUNTIME_VERSION" "${EXTRA[@]}"
fi
