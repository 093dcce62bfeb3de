#!/bin/sh
# A job whose new files have names that drive a terminal (tests/test_hostile_text.py).
printf 'x' > "$(printf 'clip\033]52;c;cHduZWQ=\007')"
printf 'x' > "$(printf 'forged\033[1A\033[2Kall jobs ok\033]0;pwned\007')"
exit 0
