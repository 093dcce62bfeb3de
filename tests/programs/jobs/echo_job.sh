#!/bin/sh
# A Condor job: prints its arguments and an environment variable, copies stdin, writes files.
echo "args: $*"
echo "GREETING=$GREETING"
echo "to stderr" >&2
while read -r line; do echo "stdin: $line"; done
echo "made by $1" > "made.$1"
mkdir -p folder/deeper && echo "deep $1" > folder/deeper/file && echo "top $1" > folder/top
exit "${EXIT_WITH:-0}"
