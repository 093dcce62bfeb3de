#!/bin/sh
# Recreated: prints the common files and its own input, and the modes they arrived with.
echo "job $1"
cat A1.txt A2.txt "own.$1"
stat -c '%a %n' A1.txt A2.txt "own.$1"
