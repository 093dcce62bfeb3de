#!/bin/sh
# Recreated: lists the .dat files the job was given, with their contents.
for f in *.dat; do echo "$f: $(cat "$f")"; done
