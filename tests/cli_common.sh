# Sourced by the command-line tests (test_cli.sh, test_cli_lm.sh, test_bench_cli.sh,
# test_cli_dist.sh): a fresh working directory, removed at exit, the pass/fail counters they report
# with, `expect` for a command's error and `have_python` for the checks that need PyTorch.
support=$(cd "$(dirname "${BASH_SOURCE[0]}")/support" && pwd) # helper scripts (tests/support)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

# expect CODE PATTERN command...: exit status CODE, exactly one stderr line matching PATTERN
expect() {
    local code=$1 pattern=$2
    shift 2
    "$@" > out.txt 2> err.txt
    local rc=$? lines
    lines=$(wc -l < err.txt)
    if [[ $rc -ne $code ]]; then fail "$* exited $rc, expected $code ($(head -c 300 err.txt))"
    elif [[ $lines -ne 1 ]]; then fail "$*: expected a one-line error, got $lines lines: $(head -c 300 err.txt)"
    elif ! grep -q -- "$pattern" err.txt; then fail "$*: error '$(cat err.txt)' does not match '$pattern'"
    else pass "$* -> $rc: $(cat err.txt)"; fi
}
# have_python WHAT: whether NB_PYTHON is a Python to run (a failure of WHAT when it is not)
have_python() {
    [[ -n "${NB_PYTHON:-}" && -x "${NB_PYTHON}" ]] && return 0
    fail "$1: NB_PYTHON ('${NB_PYTHON:-}') is not an executable Python (scripts/setup.sh makes .venv)"
    return 1
}
