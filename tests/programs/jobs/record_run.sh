#!/bin/sh
# Appends "ran N" to a log outside the scratch folder (to count runs), then takes its time.
echo "ran $1" >> "$2"
sleep "$3"
echo "done $1" > "done.$1"
