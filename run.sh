#!/usr/bin/env bash
# kernellab's quick start: `./run.sh lab` sets everything up and starts JupyterLab on the notebooks,
# `./run.sh test` sets everything up and runs the whole test suite, `./run.sh demo` compiles and runs a
# kernel and prints its passes.
set -euo pipefail
cd "$(dirname "$0")"

# Debian packages, best effort: as root with apt-get, install those of `$@` whose program is missing
# (chromium drives the browser test, graphviz's dot draws the graph view). Without them, those parts skip.
system_packages() {
    local missing=""
    for pkg in "$@"; do
        case "$pkg" in
            chromium) [ -x /usr/bin/chromium ] || command -v chromium >/dev/null 2>&1 || missing="$missing chromium" ;;
            graphviz) command -v dot >/dev/null 2>&1 || missing="$missing graphviz" ;;
        esac
    done
    [ -n "$missing" ] || return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "run.sh: installing$missing (apt-get)" >&2
        if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing; }; then
            echo "run.sh: could not install$missing; the parts that need them will skip" >&2
        fi
    else
        echo "run.sh: missing$missing (not root or no apt-get); the parts that need them will skip" >&2
    fi
}

# `setup lab` or `setup test`: the venv, torch, kernellab with its test and lab extras, and the system
# packages that command uses.
setup() {
    if [ ! -x .venv/bin/python ]; then
        python3 -m venv .venv
    fi
    # torch first and pinned: on these machines 2.13.0 is a local CPU build; any other spec pulls CUDA.
    if ! .venv/bin/python -c "import torch" 2>/dev/null; then
        .venv/bin/pip install -q torch==2.13.0
    fi
    .venv/bin/pip install -q -e ".[test,lab]"
    if [ "${1:-}" = test ]; then
        # the browser test drives Debian's chromium through Playwright's Python package (no browser download)
        if ! .venv/bin/python -c "import playwright" 2>/dev/null; then
            .venv/bin/pip install -q playwright || echo "run.sh: could not install playwright; the browser test will skip" >&2
        fi
        system_packages chromium graphviz
    else
        system_packages graphviz
    fi
}

cmd="${1:-lab}"
shift || true
case "$cmd" in
    lab)
        setup lab
        exec .venv/bin/kernellab lab "$@"
        ;;
    demo)
        setup demo
        exec .venv/bin/kernellab demo "$@"
        ;;
    test)
        setup test
        .venv/bin/ruff check kernellab tests benchmarks
        exec .venv/bin/python -m pytest -q "$@"
        ;;
    *)
        echo "usage: ./run.sh [lab|test|demo] [args...]" >&2
        exit 2
        ;;
esac
