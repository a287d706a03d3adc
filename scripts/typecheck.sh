#!/usr/bin/env bash
# Type-check the package as it is imported. The subpackages live in top-level folders mapped by
# setuptools' package-dir, which the editable install resolves with an import hook that mypy cannot
# follow: checked from the folders, every `sparring.envs...` import would be `Any`. So check a tree
# of links laid out as the installed package (sparring/, sparring/envs -> envs/, ...).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir "$stage/sparring"
for f in "$root"/sparring/*.py; do ln -s "$f" "$stage/sparring/"; done
for d in envs agents training containers; do ln -s "$root/$d" "$stage/sparring/$d"; done
cd "$stage"
"$root/.venv/bin/mypy" --config-file "$root/pyproject.toml" --cache-dir "$root/.mypy_cache" -p sparring
