#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Install the package (editable, from REMOTE_DIR) with its [tpu,gcs] extras on every worker.
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

JAX_SPEC="${JAX_SPEC:-}"

usage() {
  cat <<USAGE
usage: $(basename "$0") [flags]

On all workers: pip install -e "REMOTE_DIR[tpu,gcs]": the package's tpu extra (jax[tpu],
which brings the libtpu of that jax) and gcsfs (for the gs:// workdir). With --jax SPEC, pip
install -U "SPEC" first (a pinned JAX). Run copy.sh first.

Flags:
  --jax SPEC                pip requirement for JAX installed first [JAX_SPEC] (e.g. "jax[tpu]==0.10.2")
$COMMON_FLAGS_HELP
USAGE
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --jax) need_value "$1" "$#"; JAX_SPEC="$2"; shift 2 ;;
    *)
      parse_common_flag "$@"
      [[ "$SHIFT" -gt 0 ]] || usage_error "unknown argument: $1"
      shift "$SHIFT"
      ;;
  esac
done
require_target

py="$(quote "$PYTHON")"
jax_step=""
if [[ -n "$JAX_SPEC" ]]; then
  jax_step=" && $py -m pip install -U $(quote "$JAX_SPEC")"
fi
ssh_workers all "$py -m pip install -U pip${jax_step} && $py -m pip install -e $(quote "${REMOTE_DIR}[tpu,gcs]")"
