#!/usr/bin/env bash
# Chromium for the web view's browser tests (tests/integration/test_web_ui.py drives it with
# Playwright; nothing is downloaded by Playwright itself).
#
#   tools/chromium.sh path     print the browser's path, or fail
#   tools/chromium.sh ensure   the same, installing Debian's `chromium` package first when it is
#                              missing and this runs as root (CI's fresh machine); anyone else is
#                              told what to install. CES_EVAL_CHROMIUM names another browser.
set -euo pipefail

find_browser() {
  local candidate
  for candidate in "${CES_EVAL_CHROMIUM:-}" /usr/bin/chromium /usr/bin/chromium-browser; do
    if [[ -n $candidate && -x $candidate ]]; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

case "${1:-}" in
  path)
    find_browser || { echo "chromium: not found (tools/chromium.sh ensure installs it)" >&2; exit 1; }
    ;;
  ensure)
    if find_browser; then
      exit 0
    fi
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
      find_browser
    else
      echo "Chromium was not found: install Debian's chromium package (apt-get install chromium)," >&2
      echo "or set CES_EVAL_CHROMIUM to a Chromium or Chrome binary." >&2
      exit 1
    fi
    ;;
  *)
    echo "usage: $0 {ensure|path}" >&2
    exit 2
    ;;
esac
