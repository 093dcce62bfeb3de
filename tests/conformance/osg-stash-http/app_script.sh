#!/bin/bash
# Recreated: the tutorial's app_script.sh downloads random_words from Stash over HTTP (wget); here the file
# comes with the job. The rest is the tutorial's.
chmod 700 ./distribution
cat random_words | ./distribution
