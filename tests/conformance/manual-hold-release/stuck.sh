#!/bin/sh
# Recreated: "stuck" on its first run (sleeps 8 s), quick on the next.
runs=$(cat "$RUNS" 2>/dev/null || echo 0)
runs=$((runs + 1))
echo "$runs" > "$RUNS"
echo "run $runs"
[ "$runs" -ge 2 ] || sleep 8
echo "finished"
