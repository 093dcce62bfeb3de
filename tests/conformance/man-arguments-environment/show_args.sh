#!/bin/sh
# Recreated: prints its arguments as the man page lists them, and the three variables of its environment example.
n=0
for a in "$@"; do n=$((n + 1)); echo "argument $n: $a"; done
echo "one=$one"
echo "two=$two"
echo "three=$three"
