#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Put the code on every worker: a tarball of a local checkout, or a git clone.
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

SOURCE_DIR="${SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
REPO_URL="${REPO_URL:-}"
REPO_REF="${REPO_REF:-}"
TARBALL="${TARBALL:-${TMPDIR:-/tmp}/wgan_jax-code.tar.gz}"

usage() {
  cat <<USAGE
usage: $(basename "$0") [flags]

Copy the code to REMOTE_DIR (default wgan_jax, under the home directory) on all workers.
By default a tarball of SOURCE_DIR (this checkout, without .git, caches and workdirs) is
copied and unpacked, replacing REMOTE_DIR; with --repo URL the workers git-clone URL
(or fetch it, when REMOTE_DIR is already a clone) and check out --ref.

Flags:
  --source DIR              local checkout to copy [SOURCE_DIR] (default: this repository)
  --repo URL                git-clone URL on the workers instead [REPO_URL]
  --ref REF                 branch, tag or commit to check out with --repo [REPO_REF]
  --tarball PATH            where to write the local tarball [TARBALL]
$COMMON_FLAGS_HELP
USAGE
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --source) need_value "$1" "$#"; SOURCE_DIR="$2"; shift 2 ;;
    --repo) need_value "$1" "$#"; REPO_URL="$2"; shift 2 ;;
    --ref) need_value "$1" "$#"; REPO_REF="$2"; shift 2 ;;
    --tarball) need_value "$1" "$#"; TARBALL="$2"; shift 2 ;;
    *)
      parse_common_flag "$@"
      [[ "$SHIFT" -gt 0 ]] || usage_error "unknown argument: $1"
      shift "$SHIFT"
      ;;
  esac
done
require_target
if [[ -n "$REPO_REF" && -z "$REPO_URL" ]]; then
  usage_error "--ref needs --repo"
fi

dir="$(quote "$REMOTE_DIR")"
if [[ -n "$REPO_URL" ]]; then
  remote="if [ -d $dir/.git ]; then git -C $dir fetch --tags origin; else git clone $(quote "$REPO_URL") $dir; fi"
  if [[ -n "$REPO_REF" ]]; then
    remote+=" && git -C $dir checkout $(quote "$REPO_REF")"
  fi
  ssh_workers all "$remote"
  exit 0
fi

[[ -f "$SOURCE_DIR/pyproject.toml" ]] || usage_error "no pyproject.toml in --source $SOURCE_DIR"
name="$(basename "$TARBALL")"
run tar -czf "$TARBALL" --exclude=.git --exclude=__pycache__ --exclude=.pytest_cache \
  --exclude=.ruff_cache --exclude=.venv --exclude=workdirs -C "$SOURCE_DIR" .
scp_workers "$TARBALL" "$name"
ssh_workers all "rm -rf $dir && mkdir -p $dir && tar -xzf $(quote "$name") -C $dir && rm -f $(quote "$name")"
