#!/bin/bash
# A bounded locust run (20 users, 20 s) against the real server on the
# built-in demo model (models/, committed: no ../shared needed): zero
# failures other than 529s that carry retry-after.
M=models/ilpd-demo-F16.gguf
[ -f "$M" ] || { echo "not ok - locust: $M absent (it is committed)"; exit 0; }
command -v locust >/dev/null || { echo "skip - locust: locust is not installed"; exit 0; }
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$ILPD" serve -m "$M" --port "$port" --queue 4 2>"$TESTS_TMP/locust-server.log" &
pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
out="$TESTS_TMP/locust"
locust -f scripts/load/locustfile.py --headless -u 20 -r 10 -t 20s --host "http://127.0.0.1:$port" \
    --csv "$out" --only-summary >"$TESTS_TMP/locust.log" 2>&1
rc=$?
kill -TERM $pid; wait $pid; src=$?
total=$(awk -F, '/^,Aggregated/ {print $3}' "$out"_stats.csv)
fails=$(awk -F, '/^,Aggregated/ {print $4}' "$out"_stats.csv)
if [ "$rc" -eq 0 ] && [ -n "$total" ] && [ "$total" -gt 0 ] && [ "$fails" = "0" ]; then
    echo "ok - locust: $total requests, 0 failures (529 with retry-after counted as expected)"
else
    echo "not ok - locust: exit $rc, requests '$total', failures '$fails': $(tail -5 "$TESTS_TMP/locust.log")"
fi
[ "$src" -eq 0 ] && echo "ok - the server exits 0 after the load test" || echo "not ok - server exit status $src"
