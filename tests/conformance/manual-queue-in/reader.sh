#!/bin/sh
# Recreated: echoes its stdin, which the queue variable "input" names.
echo "stdin was:"
cat
