#!/usr/bin/env python3
"""Recreated: the tutorial's wordcount.py (written for Python 2) in Python 3; words of the same count are
sorted by the word, so the order does not depend on the Python that runs it."""

import operator
import os
import sys

if len(sys.argv) != 2:
    print("Usage: %s DATA" % (os.path.basename(sys.argv[0])))
    sys.exit(1)
input_filename = sys.argv[1]

words = {}

with open(input_filename, "r") as my_file:
    for line in my_file:
        for word in line.split():
            words[word] = words.get(word, 0) + 1

input_stem = input_filename.split(".")[0]
output_filename = "counts." + input_stem + ".txt"
sorted_words = sorted(words.items(), key=operator.itemgetter(1, 0))
with open(output_filename, "w") as my_file:
    for word in sorted_words:
        my_file.write("%s %8d \n" % (word[0], word[1]))
