#!/bin/bash
# Executable name: fastqc.sh
# Recreated: the tutorial's wrapper runs FastQC from a container; this one writes what FastQC names its
# outputs (an .html report and a .zip archive) with a deterministic summary of the .fastq file.
base="${1%.fastq}"
reads=$(( $(wc -l < "$1") / 4 ))
printf '<html><body>%s: %d reads, %d bases</body></html>\n' "$1" "$reads" "$(grep -v '^[@+]' "$1" | awk 'NR % 2 == 1' | tr -d '\n' | wc -c)" > "${base}_fastqc.html"
echo "archive of $1" > "${base}_fastqc.zip"
echo "Analysis complete for $1"
