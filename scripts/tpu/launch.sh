#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Start training on every worker of the TPU VM / pod slice, in the background.
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

WORKDIR="${WORKDIR:-}"
CONFIG="${CONFIG:-configs/tpu_cifar10.py}"
LOCAL_PYTHON="${LOCAL_PYTHON:-python3}"
SKIP_COMPILE_CHECK="${SKIP_COMPILE_CHECK:-0}"

usage() {
  cat <<USAGE
usage: $(basename "$0") --workdir gs://BUCKET/RUN [flags] [-- EXTRA_MAIN_FLAGS...]

First, here: the compile check, the run compiled for ACCELERATOR_TYPE with the TPU compiler
and without a TPU (needs libtpu here: pip install -e '.[tpu]'):
  LOCAL_PYTHON -m wgan_jax.compile --config CONFIG --topology ACCELERATOR_TYPE [--config.*]
It refuses a config that does not fit a chip or does not split over the chips, and then
nothing is launched. Then on all workers, in REMOTE_DIR:
  nohup PYTHON -m wgan_jax.main --config CONFIG --workdir WORKDIR EXTRA... > ~/LOG_FILE 2>&1 &
and write the process id to ~/PID_FILE (stop.sh uses it). Every worker runs the same command;
JAX joins them into one job. The workdir must be a gs:// path all workers share.

Flags:
  --workdir gs://...        shared workdir [WORKDIR] (required)
  --config PATH             config file, relative to REMOTE_DIR [CONFIG]
                            (default configs/tpu_cifar10.py)
  --skip-compile-check      launch without the compile check [SKIP_COMPILE_CHECK=1]
  -- ARGS...                further flags for wgan_jax.main, e.g. -- --config.seed=1
                            (its --config.* overrides go to the compile check too)
$COMMON_FLAGS_HELP
USAGE
}

EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --workdir) need_value "$1" "$#"; WORKDIR="$2"; shift 2 ;;
    --config) need_value "$1" "$#"; CONFIG="$2"; shift 2 ;;
    --skip-compile-check) SKIP_COMPILE_CHECK=1; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    *)
      parse_common_flag "$@"
      [[ "$SHIFT" -gt 0 ]] || usage_error "unknown argument: $1"
      shift "$SHIFT"
      ;;
  esac
done
require_target
[[ -n "$WORKDIR" ]] || usage_error "no workdir: pass --workdir gs://... or set WORKDIR"
[[ "$WORKDIR" == gs://* ]] || usage_error "--workdir must be a gs:// path shared by all workers, got $WORKDIR"

if [[ "$SKIP_COMPILE_CHECK" != 1 ]]; then
  overrides=()
  for arg in "${EXTRA[@]}"; do
    if [[ "$arg" == --config.* ]]; then overrides+=("$arg"); fi
  done
  # Run from this checkout, where CONFIG is (relative paths as on the workers).
  (cd "$(dirname "${BASH_SOURCE[0]}")/../.." &&
    run "$LOCAL_PYTHON" -m wgan_jax.compile --config "$CONFIG" --topology "$ACCELERATOR_TYPE" \
      "${overrides[@]}") ||
    { echo "launch.sh: the compile check refused the run (above); nothing was launched" \
      "(--skip-compile-check launches anyway)" >&2; exit 2; }
fi

main="$(quote_all "$PYTHON" -m wgan_jax.main --config "$CONFIG" --workdir "$WORKDIR" "${EXTRA[@]}")"
log="\$HOME/$(quote "$LOG_FILE")"
pid="\$HOME/$(quote "$PID_FILE")"
ssh_workers all "cd $(quote "$REMOTE_DIR") && { nohup $main > $log 2>&1 < /dev/null & echo \$! > $pid; }"
