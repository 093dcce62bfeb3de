#!/bin/sh
# Reads the shared input (a big file) and writes its checksum and a big output of its own.
sha256sum shared.bin | cut -d' ' -f1 > "sum.$1"
head -c 3000000 shared.bin > "big.$1"
