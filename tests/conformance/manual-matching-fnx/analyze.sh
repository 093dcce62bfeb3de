#!/bin/sh
# Recreated: reads the input file its argument names, from the job's own (flat) folder.
echo "argument: $1"
cat "$1"
