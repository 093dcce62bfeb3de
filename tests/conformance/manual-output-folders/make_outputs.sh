#!/bin/sh
# Recreated: the job of the manual's example, which leaves this structure in its scratch folder:
# o1, o2, d1 (directory) holding o3 and o4.
mkdir d1
echo "o1 of $1" > o1
echo "o2 of $1" > o2
echo "o3 of $1" > d1/o3
echo "o4 of $1" > d1/o4
