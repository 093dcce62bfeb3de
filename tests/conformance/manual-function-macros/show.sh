#!/bin/sh
# Recreated: shows the stdin the job was given and its current folder's base name.
echo "stdin: $(cat)"
echo "argument: $1"
