# Sourced by the command-line tests (test_cli.sh, test_bench_cli.sh, test_cli_dist.sh): a fresh
# working directory, removed at exit, and the pass/fail counters they report with.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }
