#!/bin/sh
# Recreated: prints its arguments; fails unless the job has completed twice before (its first argument).
echo "completions before this run: $1, batch: $2, number: $3"
[ "$1" -ge 2 ]
