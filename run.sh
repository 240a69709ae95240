#!/usr/bin/env bash
# kernellab's quick start: `./run.sh lab [jupyterlab args]` sets everything up and starts JupyterLab on a working copy
# of the notebooks (my-notebooks/) and prints its URL,
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
        local log="${TMPDIR:-/tmp}/kernellab-apt.log" t0=$SECONDS
        echo "run.sh: installing$missing (apt-get, without recommended packages; output in $log) ..." >&2
        if { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing; } \
                >"$log" 2>&1; then
            echo "run.sh:   done in $((SECONDS - t0)) s" >&2
        else
            tail -5 "$log" >&2
            echo "run.sh: could not install$missing (see $log); the parts that need them will skip" >&2
        fi
    else
        echo "run.sh: missing$missing (not root or no apt-get); the parts that need them will skip" >&2
    fi
}

say() { echo "run.sh: $*" >&2; }

# Runs "$@", saying what it is and how long it took, so setup never sits silent for minutes.
step() {
    local what="$1" t0=$SECONDS
    shift
    say "$what ..."
    if "$@"; then
        say "  done in $((SECONDS - t0)) s"
    else
        local rc=$?
        say "  failed (exit $rc) after $((SECONDS - t0)) s"
        return "$rc"
    fi
}

# A GPU machine (an NVIDIA driver that answers) gets the gpu extra (cuda-python) so kernels run on the GPU.
has_nvidia() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

# `setup lab` or `setup test`: the venv, torch, kernellab with its extras, and the system packages that command
# uses. The pip part is skipped when .venv/.kernellab-setup says it was done for this pyproject.toml and run.sh
# (their hash) with these extras, so a second call starts in seconds.
setup() {
    local mode="${1:-lab}" extras="lab" stamp=.venv/.kernellab-setup key
    [ "$mode" = test ] && extras="test,lab"
    has_nvidia && extras="$extras,gpu"
    key="$(cat pyproject.toml run.sh | sha256sum | cut -c1-16) $(python3 -c 'import sys;print(sys.version.split()[0])' 2>/dev/null) $extras"
    if [ -x .venv/bin/python ] && [ -f "$stamp" ] && grep -qxF "$key" "$stamp"; then
        say "setup: up to date (.venv, extras $extras); delete $stamp to reinstall"
    else
        if [ ! -x .venv/bin/python ]; then
            step "creating the virtual environment .venv" python3 -m venv .venv
        fi
        # torch first and pinned: on these machines 2.13.0 is a local CPU build; any other spec pulls CUDA.
        if ! .venv/bin/python -c "import torch" 2>/dev/null; then
            step "installing torch 2.13.0 (the largest download, up to a few minutes)" \
                .venv/bin/pip install -q --progress-bar off torch==2.13.0
        fi
        if ! step "installing kernellab and its extras [$extras] (jupyterlab and friends: a minute or two the first time)" \
                .venv/bin/pip install -q --progress-bar off -e ".[$extras]"; then
            case "$extras" in
                *,gpu)
                    extras="${extras%,gpu}"
                    say "could not install the gpu extra (cuda-python); kernels will run on the CPU interpreter"
                    step "installing kernellab and its extras [$extras]" \
                        .venv/bin/pip install -q --progress-bar off -e ".[$extras]"
                    ;;
                *) return 1 ;;
            esac
        fi
        if [ "$mode" = test ] && ! .venv/bin/python -c "import playwright" 2>/dev/null; then
            # the browser test drives Debian's chromium through Playwright's Python package (no browser download)
            step "installing playwright" .venv/bin/pip install -q --progress-bar off playwright \
                || say "could not install playwright; the browser test will skip"
        fi
        echo "$key" >> "$stamp"
    fi
    if [ "$mode" = test ]; then
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
        say "ruff check ..."
        .venv/bin/ruff check kernellab tests benchmarks
        say "pytest $* (the whole suite takes a while; -x stops at the first failure)"
        exec .venv/bin/python -m pytest -q "$@"
        ;;
    *)
        echo "usage: ./run.sh [lab|test|demo] [args...]" >&2
        exit 2
        ;;
esac
