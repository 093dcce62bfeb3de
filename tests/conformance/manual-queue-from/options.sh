#!/bin/sh
# Recreated: prints its options and its stdin.
echo "options: $*"
cat
