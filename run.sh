#!/usr/bin/env bash
# kernellab's quick start: `./run.sh lab` sets everything up and starts the main job,
# `./run.sh test` sets everything up and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")"

setup() {
    if [ ! -x .venv/bin/python ]; then
        python3 -m venv .venv
    fi
    # torch first and pinned: on these machines 2.13.0 is a local CPU build; any other spec pulls CUDA.
    if ! .venv/bin/python -c "import torch" 2>/dev/null; then
        .venv/bin/pip install -q torch==2.13.0
    fi
    .venv/bin/pip install -q -e ".[test]"
}

cmd="${1:-lab}"
shift || true
case "$cmd" in
    lab|demo)
        setup
        exec .venv/bin/kernellab demo "$@"
        ;;
    test)
        setup
        .venv/bin/ruff check kernellab tests benchmarks
        exec .venv/bin/python -m pytest -q "$@"
        ;;
    *)
        echo "usage: ./run.sh [lab|test] [args...]" >&2
        exit 2
        ;;
esac
