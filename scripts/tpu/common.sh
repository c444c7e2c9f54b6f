#!/usr/bin/env bash
# shellcheck disable=SC2034  # the variables set here are read by the scripts sourcing this file
# Shared settings and helpers for the TPU VM scripts in this directory (sourced, not run).
#
# Settings come from environment variables, overridden by the common flags below:
#   TPU_NAME          TPU VM / pod slice name (required)                --name
#   ZONE              e.g. us-central2-b (required)                     --zone
#   PROJECT           GCP project (default: gcloud's configured one)    --project
#   ACCELERATOR_TYPE  e.g. v4-8, v4-32, v5litepod-16 (default v4-8)     --accelerator-type
#   RUNTIME_VERSION   TPU VM image (default tpu-ubuntu2204-base)        --runtime-version
#   QUEUED_RESOURCE   queued-resource id; set it to use queued resources --queued-resource
#   REMOTE_DIR        code directory on every worker, relative to home (default wgan_jax)
#   LOG_FILE          training log on every worker, relative to home (default wgan_jax.log)
#   PID_FILE          training pid on every worker, relative to home (default wgan_jax.pid)
#   PYTHON            python on the workers (default python3)
#   DRY_RUN=1         print the commands instead of running them        --dry-run
# Usage errors exit with status 2.

set -euo pipefail

TPU_NAME="${TPU_NAME:-}"
ZONE="${ZONE:-}"
PROJECT="${PROJECT:-}"
ACCELERATOR_TYPE="${ACCELERATOR_TYPE:-v4-8}"
RUNTIME_VERSION="${RUNTIME_VERSION:-tpu-ubuntu2204-base}"
QUEUED_RESOURCE="${QUEUED_RESOURCE:-}"
REMOTE_DIR="${REMOTE_DIR:-wgan_jax}"
LOG_FILE="${LOG_FILE:-wgan_jax.log}"
PID_FILE="${PID_FILE:-wgan_jax.pid}"
PYTHON="${PYTHON:-python3}"
DRY_RUN="${DRY_RUN:-0}"
GCLOUD="${GCLOUD:-gcloud}"

COMMON_FLAGS_HELP="Common flags (or the environment variables in brackets):
  --name NAME               TPU VM or pod slice name [TPU_NAME] (required)
  --zone ZONE               zone [ZONE] (required)
  --project PROJECT         project [PROJECT] (default: gcloud config)
  --accelerator-type TYPE   e.g. v4-8, v4-32 [ACCELERATOR_TYPE] (default v4-8)
  --runtime-version VER     TPU VM image [RUNTIME_VERSION] (default tpu-ubuntu2204-base)
  --queued-resource ID      use the queued resource ID [QUEUED_RESOURCE]
  --dry-run                 print the gcloud commands instead of running them [DRY_RUN=1]
  -h, --help                show this help"

# usage_error MESSAGE: print MESSAGE and a hint on stderr, exit 2.
usage_error() {
  echo "error: $1" >&2
  echo "run '$(basename "$0") --help' for usage" >&2
  exit 2
}

# need_value FLAG COUNT: the flag FLAG must be followed by a value.
need_value() {
  if [[ "$2" -lt 2 ]]; then
    usage_error "$1 needs a value"
  fi
}

# parse_common_flag "$@": consume one common flag; sets SHIFT to the number of words used
# (0 when the first word is not a common flag).
parse_common_flag() {
  SHIFT=0
  case "$1" in
    --name) need_value "$1" "$#"; TPU_NAME="$2"; SHIFT=2 ;;
    --zone) need_value "$1" "$#"; ZONE="$2"; SHIFT=2 ;;
    --project) need_value "$1" "$#"; PROJECT="$2"; SHIFT=2 ;;
    --accelerator-type) need_value "$1" "$#"; ACCELERATOR_TYPE="$2"; SHIFT=2 ;;
    --runtime-version) need_value "$1" "$#"; RUNTIME_VERSION="$2"; SHIFT=2 ;;
    --queued-resource) need_value "$1" "$#"; QUEUED_RESOURCE="$2"; SHIFT=2 ;;
    --dry-run) DRY_RUN=1; SHIFT=1 ;;
    *) SHIFT=0 ;;
  esac
}

# require_target: TPU_NAME and ZONE must be set.
require_target() {
  [[ -n "$TPU_NAME" ]] || usage_error "no TPU name: pass --name or set TPU_NAME"
  [[ -n "$ZONE" ]] || usage_error "no zone: pass --zone or set ZONE"
}

# quote WORD: WORD as one shell word (unchanged when it needs no quoting).
quote() {
  if [[ "$1" =~ ^[A-Za-z0-9_./:=@%+,-]+$ ]]; then
    printf '%s' "$1"
  else
    printf "'%s'" "${1//\'/\'\\\'\'}"
  fi
}

# quote_all WORD...: the words quoted and joined by spaces.
quote_all() {
  local out="" word
  for word in "$@"; do
    out+="${out:+ }$(quote "$word")"
  done
  printf '%s' "$out"
}

# run COMMAND...: print COMMAND (DRY_RUN=1) or echo it to stderr and run it.
run() {
  if [[ "$DRY_RUN" == 1 ]]; then
    quote_all "$@"
    echo
  else
    echo "+ $(quote_all "$@")" >&2
    "$@"
  fi
}

# project_args: set PROJECT_ARGS to the --project flag (empty when PROJECT is unset).
project_args() {
  PROJECT_ARGS=()
  if [[ -n "$PROJECT" ]]; then
    PROJECT_ARGS=("--project=$PROJECT")
  fi
}

# ssh_workers WORKER COMMAND: run the shell COMMAND on WORKER ("all" or an index).
ssh_workers() {
  project_args
  run "$GCLOUD" compute tpus tpu-vm ssh "$TPU_NAME" "--zone=$ZONE" "${PROJECT_ARGS[@]}" \
    "--worker=$1" "--command=$2"
}

# scp_workers LOCAL REMOTE: copy LOCAL to REMOTE (relative to home) on every worker.
scp_workers() {
  project_args
  run "$GCLOUD" compute tpus tpu-vm scp "$1" "$TPU_NAME:$2" "--zone=$ZONE" \
    "${PROJECT_ARGS[@]}" --worker=all
}
