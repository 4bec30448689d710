#!/usr/bin/env bash
# `buf breaking` of protos/ against the previous main (wire and JSON compatibility, buf.yaml).
#
# The base is `origin/main` when this checkout is on another commit, else the commit before HEAD.
# Both sides are built into self-contained images with the same staged third-party protos
# (build/third_party), so no network registry is needed. A base without protos/ (the first
# contract commit) has nothing to break; the script says so and succeeds.
set -euo pipefail
cd "$(dirname "$0")/.."
buf=node_modules/.bin/buf

base=""
if git rev-parse -q --verify origin/main >/dev/null && [[ $(git rev-parse origin/main) != $(git rev-parse HEAD) ]]; then
  base=$(git merge-base HEAD origin/main)
elif git rev-parse -q --verify HEAD~1 >/dev/null; then
  base=$(git rev-parse HEAD~1)
fi
if [[ -z $base ]]; then
  echo "buf breaking: no previous main commit in this clone; nothing to compare" >&2
  exit 0
fi
if ! git cat-file -e "$base:protos" 2>/dev/null; then
  echo "buf breaking: ${base:0:12} has no protos/; nothing to compare" >&2
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/base"
git archive "$base" protos | tar -x -C "$work/base"
cp -r build/third_party "$work/base/third_party"
cat >"$work/base/buf.yaml" <<'YAML'
version: v2
modules:
  - path: protos
  - path: third_party
YAML
(cd "$work/base" && "$OLDPWD/$buf" build --exclude-imports -o "$work/base.binpb")
"$buf" build --exclude-imports -o "$work/head.binpb"
"$buf" breaking "$work/head.binpb" --against "$work/base.binpb" \
  --config '{"version":"v2","breaking":{"use":["WIRE_JSON"]}}'
echo "buf breaking: no wire/JSON breaking change against ${base:0:12}" >&2
