#!/usr/bin/env python3
"""Recreated: the tutorial minimises the Rosenbrock function by brute force over a box (it used SciPy's
optimize.brute); this searches the same box on a fixed grid, in plain Python, so the result is the same
wherever it runs."""

import sys


def rosenbrock(x: float, y: float) -> float:
    return (1 - x) ** 2 + 100 * (y - x * x) ** 2


def main() -> None:
    x_low, x_high, y_low, y_high = (float(value) for value in sys.argv[1:5])
    steps = 60
    best = None
    for i in range(steps + 1):
        x = x_low + (x_high - x_low) * i / steps
        for j in range(steps + 1):
            y = y_low + (y_high - y_low) * j / steps
            value = rosenbrock(x, y)
            if best is None or value < best[0]:
                best = (value, x, y)
    assert best is not None
    print(f"box x [{x_low:g}, {x_high:g}] y [{y_low:g}, {y_high:g}]")
    print(f"minimum {best[0]:.6f} at x = {best[1]:.4f}, y = {best[2]:.4f}")


if __name__ == "__main__":
    main()
