#!/bin/sh
# Recreated: a job that writes to stdout and stderr in turn.
echo "out one $1"
echo "err one $1" >&2
echo "out two $1"
echo "err two $1" >&2
