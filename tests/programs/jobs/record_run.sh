#!/bin/sh
# Appends "ran N" to a log outside the scratch folder (to count runs), then takes its time; given a
# GATE file as well (not "none"), it then waits for that file before it ends.
echo "ran $1" >> "$2"
sleep "$3"
if [ "${4:-none}" != none ]; then
  while [ ! -e "$4" ]; do sleep 0.05; done
fi
echo "done $1" > "done.$1"
