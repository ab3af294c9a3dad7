#!/usr/bin/env bash
# `make wheel-test`: urc as a user installs it. Build the wheel, install it into a fresh
# virtual environment outside the checkout (the CPU torch first, so nothing can pull a
# CUDA one), then from another directory: urc --version, urc run on bundled scenarios
# opened by name, and the workbench's first screen driven headless.
set -euo pipefail
CHECKOUT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PY:-python3}"
TORCH="${TORCH:-torch==2.13.0}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/urc-wheel-test.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
LOG="$WORK/pip.log"

step() { echo "wheel-test: $*" >&2; }
quiet() { "$@" >>"$LOG" 2>&1 || { cat "$LOG"; exit 1; }; }

step "building the wheel"
quiet "$CHECKOUT/.venv/bin/pip" wheel --no-deps --no-build-isolation -w "$WORK/dist" "$CHECKOUT"
step "installing it into a fresh venv in $WORK"
quiet "$PY" -m venv "$WORK/venv"
BIN="$WORK/venv/bin"
quiet "$BIN/pip" install "$TORCH"
quiet "$BIN/pip" install "$WORK"/dist/*.whl
"$BIN/python" -c "import torch, sys; sys.exit(0 if not torch.version.cuda else 'a CUDA torch was installed')"

mkdir "$WORK/elsewhere" && cd "$WORK/elsewhere"
step "$("$BIN/urc" --version)"
"$BIN/urc" --version | grep -q "follows SGLang 0.5.23"
"$BIN/urc" run tour bugs/sglang-18843-hit-count-never-counted tour_swa.toml
set +e
"$BIN/urc" run no-such-scenario 2>"$WORK/err"; rc=$?
set -e
[ "$rc" = 2 ] && [ "$(wc -l <"$WORK/err")" = 1 ] || { echo "an unknown name: exit $rc, $(cat "$WORK/err")"; exit 1; }
"$BIN/urc" tui >"$WORK/walk.txt"  # not a terminal: the tour's walk-through
grep -q "tour" "$WORK/walk.txt"
"$BIN/python" "$CHECKOUT/tools/wheel_first_screen.py"
[ -z "$(ls -A "$WORK/elsewhere")" ] || { echo "urc wrote into the current directory: $(ls "$WORK/elsewhere")"; exit 1; }
step "ok"
