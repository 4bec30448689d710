#!/usr/bin/env bash
# Load generators for the benchmark harness (bench/run.py).
#
#   bench/tools.sh check    exit 0 when h2load, wrk and taskset are all on PATH, else list what is
#                           missing and exit 1
#   bench/tools.sh ensure   the same, installing Debian's packages first (nghttp2-client for
#                           h2load, wrk, util-linux for taskset) when something is missing and
#                           this runs as root (CI's fresh machine); anyone else is told what to
#                           install
set -euo pipefail

usage() {
  echo "usage: $0 {ensure|check}" >&2
  exit 2
}

# program:Debian package
TOOLS=(h2load:nghttp2-client wrk:wrk taskset:util-linux)

missing_packages() {
  local entry
  for entry in "${TOOLS[@]}"; do
    if ! command -v "${entry%%:*}" >/dev/null 2>&1; then
      echo "${entry#*:}"
    fi
  done
}

check() {
  local missing
  missing=$(missing_packages)
  if [[ -n $missing ]]; then
    echo "bench/tools.sh: missing load generators; install these Debian packages:" \
      $missing >&2
    return 1
  fi
}

ensure() {
  local missing
  missing=$(missing_packages)
  [[ -z $missing ]] && return 0
  if [[ $(id -u) -ne 0 ]]; then
    echo "bench/tools.sh: missing programs; as root run: apt-get install -y" $missing >&2
    echo "  (or run \`sudo bench/tools.sh ensure\`)" >&2
    return 1
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "bench/tools.sh: no apt-get on this machine; install h2load (nghttp2), wrk and" \
      "taskset (util-linux) yourself." >&2
    return 1
  fi
  echo "bench/tools.sh: installing Debian packages:" $missing >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  # shellcheck disable=SC2086 # one word per package
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
  check
}

[[ $# -eq 1 ]] || usage
case $1 in
  ensure) ensure ;;
  check) check ;;
  *) usage ;;
esac
