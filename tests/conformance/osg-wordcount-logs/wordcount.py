#!/usr/bin/env python3
"""Recreated: counts the words of the book it is given and writes them, most frequent first, to
counts.BOOK.tsv; prints how many words it read."""
import collections
import sys

book = sys.argv[1]
with open(book) as text:
    words = text.read().lower().split()
counts = collections.Counter(words)
with open(f"counts.{book.rsplit('.', 1)[0]}.tsv", "w") as out:
    for word, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        out.write(f"{word}\t{count}\n")
print(f"{len(words)} words")
