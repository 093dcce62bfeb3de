#!/bin/sh
# Recreated: says which code it exits with, and exits with it.
echo "exiting with $1"
exit "$1"
