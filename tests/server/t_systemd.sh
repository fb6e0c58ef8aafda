#!/bin/bash
# The systemd units verify, and the main unit's exposure score is OK (<= 2.0).
if ! command -v systemd-analyze >/dev/null; then echo "skip - systemd: systemd-analyze absent"; exit 0; fi
dir="$TESTS_TMP/systemd"
mkdir -p "$dir"
for unit in ilpd.service ilpd@.service; do
    sed "s|/usr/local/bin/ilpd|$ILPD|g" "systemd/$unit" > "$dir/$unit"
    out=$(cd "$dir" && systemd-analyze verify "$dir/$unit" 2>&1)
    if [ $? -eq 0 ] && ! grep -qiE "error|invalid|unknown" <<<"$out"; then echo "ok - systemd-analyze verify $unit"
    else echo "not ok - systemd-analyze verify $unit: $out"; fi
done
score=$(systemd-analyze security --offline=true "$dir/ilpd.service" 2>/dev/null | sed -n 's/.*Overall exposure level for .*: \([0-9.]*\).*/\1/p')
if [ -n "$score" ] && awk "BEGIN{exit !($score <= 2.0)}"; then echo "ok - systemd-analyze security: exposure $score (<= 2.0)"
else echo "not ok - systemd-analyze security: exposure '$score' (want <= 2.0)"; fi
