#!/bin/bash
# short_transfer.sh: a short discovery job
# Recreated from the tutorial's script without what differs from run to run (date, host name, user,
# folder, "ls -l" and the 20 s sleep); it still copies its input to output$2.txt.
printf "The command line argument is: "; echo $@
printf "Job number is: "; echo $2
printf "Contents of $1 is "; cat $1
cat $1 > output$2.txt
echo
echo "Working hard..."
ls | grep -v '^_condor_' | sort
echo "Science complete!"
