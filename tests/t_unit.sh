#!/bin/sh
# Runs every C unit test program built from tests/unit/*.c.
status=0
for t in "$UNIT_DIR"/*; do
    [ -x "$t" ] && [ -f "$t" ] || continue
    case "$t" in *.d) continue ;; esac
    "$t" || status=1
done
exit $status
