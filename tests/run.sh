#!/bin/bash
# Runs every test suite and prints the totals as its last line:
#   N passed, N failed, N skipped
# A suite is an executable tests/**/t_*.{sh,py} or a C test program built
# from tests/unit/*.c. Each prints one line per check:
#   ok - NAME | not ok - NAME: why | skip - NAME: why
# A suite that exits non-zero without reporting a failure counts one failure.
# Environment: ILPD (the binary under test), PYTHON, SANITIZE, SHARED (../shared).
set -u
cd "$(dirname "$0")/.."
export ILPD="${ILPD:-$PWD/ilpd}" PYTHON="${PYTHON:-/usr/bin/python3}" SANITIZE="${SANITIZE:-0}"
export SHARED="${SHARED:-$(cd .. && pwd)/shared}"
export TESTS_TMP="$(mktemp -d /tmp/ilpd-tests.XXXXXX)"
trap 'rm -rf "$TESTS_TMP"' EXIT
only="${1:-}"
passed=0 failed=0 skipped=0
failures=()
for suite in $(ls tests/t_*.sh tests/t_*.py tests/*/t_*.sh tests/*/t_*.py 2>/dev/null | sort); do
    [ -n "$only" ] && [[ "$suite" != *"$only"* ]] && continue
    echo "== $suite"
    start=$(date +%s)
    out="$TESTS_TMP/out.$$"
    "$suite" 2>&1 | tee "$out"
    rc=${PIPESTATUS[0]}
    p=$(grep -c '^ok - ' "$out"); f=$(grep -c '^not ok - ' "$out"); s=$(grep -c '^skip - ' "$out")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1; echo "not ok - $suite: exited with status $rc"
        failures+=("$suite: exited with status $rc")
    fi
    while IFS= read -r line; do failures+=("$line"); done < <(grep '^not ok - ' "$out")
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    echo "   ($(( $(date +%s) - start ))s)"
done
if [ "${#failures[@]}" -gt 0 ]; then
    echo "== failures"
    printf '%s\n' "${failures[@]}"
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
