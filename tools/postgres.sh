#!/usr/bin/env bash
# PostgreSQL server binaries for the tests (tests/support/postgres.py starts throw-away clusters
# from them; nothing here starts a server).
#
#   tools/postgres.sh bindir   print the folder holding initdb and postgres, or fail
#   tools/postgres.sh ensure   the same, installing Debian's `postgresql` package first when the
#                              binaries are missing and this runs as root (CI's fresh machine);
#                              a developer without them is told what to install. With
#                              CES_EVAL_TEST_POSTGRES_URL (use a running server) or
#                              CES_EVAL_SKIP_POSTGRES=1 the tests need no binaries: missing ones are
#                              only noted
#
# The search order matches find_bindir() in tests/support/postgres.py: the newest
# /usr/lib/postgresql/<version>/bin (Debian, Ubuntu), then `pg_config --bindir`, then the folder of
# an `initdb` on PATH (Homebrew, Fedora). A folder counts only if it holds both programs.
set -euo pipefail

usage() {
  echo "usage: $0 {ensure|bindir}" >&2
  exit 2
}

# A folder with the server programs we run; `pg_config --bindir` from libpq-dev alone has none.
has_server() {
  [[ -x $1/initdb && -x $1/postgres ]]
}

find_bindir() {
  local dir
  # Newest major version first (sort -V orders 9.6 before 15).
  while IFS= read -r dir; do
    if has_server "$dir"; then
      echo "$dir"
      return 0
    fi
  done < <(
    for dir in /usr/lib/postgresql/*/bin; do
      [[ -d $dir ]] && echo "$dir"
    done | sort -V -r
  )
  if command -v pg_config >/dev/null 2>&1; then
    dir=$(pg_config --bindir 2>/dev/null || true)
    if [[ -n $dir ]] && has_server "$dir"; then
      echo "$dir"
      return 0
    fi
  fi
  if dir=$(command -v initdb 2>/dev/null); then
    dir=$(dirname "$(readlink -f "$dir")")
    if has_server "$dir"; then
      echo "$dir"
      return 0
    fi
  fi
  return 1
}

missing() {
  cat >&2 <<'EOF'
PostgreSQL server binaries (initdb, postgres) were not found; the storage tests start
throw-away PostgreSQL servers from them. Install a PostgreSQL server (13 or newer), then rerun:
  Debian/Ubuntu:  sudo apt-get install --no-install-recommends postgresql
                  (or run `sudo tools/postgres.sh ensure`)
  Fedora:         sudo dnf install postgresql-server
  macOS:          brew install postgresql@16 (and put its bin folder on PATH)
Or point the tests at a server you already run:
  export CES_EVAL_TEST_POSTGRES_URL=postgresql://postgres@127.0.0.1:5432/postgres
Or skip the PostgreSQL tests: export CES_EVAL_SKIP_POSTGRES=1
EOF
}

ensure() {
  local dir
  if dir=$(find_bindir); then
    echo "$dir"
    return 0
  fi
  if [[ -n ${CES_EVAL_TEST_POSTGRES_URL:-} || ${CES_EVAL_SKIP_POSTGRES:-} == 1 ]]; then
    echo "tools/postgres.sh: no PostgreSQL server binaries; the tests use" \
      "CES_EVAL_TEST_POSTGRES_URL or skip (CES_EVAL_SKIP_POSTGRES=1)" >&2
    return 0
  fi
  if [[ $(id -u) -ne 0 ]]; then
    missing
    return 1
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "tools/postgres.sh: no apt-get on this machine; install PostgreSQL yourself." >&2
    missing
    return 1
  fi
  echo "tools/postgres.sh: installing Debian's postgresql package" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends postgresql >&2
  if dir=$(find_bindir); then
    echo "$dir"
    return 0
  fi
  echo "tools/postgres.sh: installed postgresql, but still no initdb/postgres found" >&2
  return 1
}

[[ $# -eq 1 ]] || usage
case $1 in
  ensure) ensure ;;
  bindir)
    if ! find_bindir; then
      missing
      exit 1
    fi
    ;;
  *) usage ;;
esac
