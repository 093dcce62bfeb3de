#!/bin/sh
# Recreated: a short job that is never suspended.
echo "working"
exit 0
