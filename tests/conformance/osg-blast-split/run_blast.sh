#!/bin/bash
# Recreated from the tutorial's script: the database arrives as an input file instead of through stashcp.

# get input file from arguments
inputfile=$1

# unzip the database
tar -xzvf pdbaa.tar.gz
rm pdbaa.tar.gz

# run blast query on input file
./blastx -db pdbaa/pdbaa -query $inputfile -out $inputfile.result
