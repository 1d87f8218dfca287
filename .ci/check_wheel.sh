#!/usr/bin/env bash
# Install the package's wheel into a clean virtual environment, without the book or its
# tools, and check it there (.ci/check_wheel.py). Usage: bash .ci/check_wheel.sh [dist]
# torch is installed first and pinned, so pip takes the CPU wheel (a local one, or the one
# PIP_EXTRA_INDEX_URL points at) rather than resolving "torch>=2.1" to a CUDA build.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dist=$(cd "${1:-$root/dist}" && pwd)
wheel=$(ls "$dist"/candidate_sampling-*.whl)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
py="$work/venv/bin/python"
"$py" -m pip install --quiet --upgrade pip
# --no-compile: CI runs this in the background beside pip's main install; byte-compiling
# torch would take a core for about half a minute
"$py" -m pip install --quiet --no-compile "torch==2.13.0"
"$py" -m pip install --quiet --no-compile "$wheel"
echo "installed $(basename "$wheel") into a clean environment:"
"$py" -m pip list --format=freeze | sed 's/^/  /'
# run from an empty folder, so only the installed wheel (not src/) can be imported
cd "$work"
"$py" "$root/.ci/check_wheel.py" "$wheel"
