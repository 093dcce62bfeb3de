#!/bin/bash
# Recreated from the tutorial's wrapper without "module load py-scipy" (the test pool has no modules).
# set TMPDIR variable
export TMPDIR=$_CONDOR_SCRATCH_DIR

python3 ./rosen_brock_brute_opt.py  $1 $2 $3 $4
