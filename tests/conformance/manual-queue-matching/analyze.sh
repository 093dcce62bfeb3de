#!/bin/sh
# Recreated: reads the file named after -infile and says what it holds.
[ "$1" = "-infile" ] || { echo "usage: analyze.sh -infile FILE" >&2; exit 2; }
echo "$2 has $(wc -l < "$2") lines:"
sort "$2"
