"""Monte Carlo pi: throw darts at the unit square, count those inside the circle (CL-MW's monte-carlo-pi).

Each task is one trial set: ``--trials-per-set`` random points in the unit
square, of which the slave counts those within distance 1 of the origin. Four
times the fraction inside estimates pi. The master keeps the algorithm's own
target number of trial sets pending (``darts.target_number`` and
``darts.upto_target_number()``) until ``--max-trial-sets`` have answered.

Every trial set draws from its own generator, seeded from ``--seed`` and the
set's index, so a run is reproducible whichever slave computes which set. A
set lost as unrunnable is simply submitted again with the same arguments.

Run it on local slaves:

    mwpy local examples/monte_carlo_pi.py --slaves 2
    mwpy local examples/monte_carlo_pi.py --slaves 2 -- --max-trial-sets 1000 --seed 7

The last line reads ``pi ≈ 3.141593 ± 0.000519 from 10000000 points``
(± one standard error).
"""

import argparse
import math
import random

import mwpy


@mwpy.task
def darts(trials: int, seed: int, trial_set: int) -> tuple[int, int]:
    """Throw ``trials`` darts; return (darts thrown, darts inside the quarter circle)."""
    rand = random.Random(f"{seed}/{trial_set}").random
    inside = 0
    for _ in range(trials):
        x = rand()
        y = rand()
        if x * x + y * y <= 1.0:
            inside += 1
    return trials, inside


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Estimate pi by Monte Carlo on the slaves.")
    parser.add_argument("--max-trial-sets", type=int, default=100, help="trial sets (tasks) to run (default 100)")
    parser.add_argument("--trials-per-set", type=int, default=100_000, help="darts per trial set (default 100000)")
    parser.add_argument("--seed", type=int, help="seed for a reproducible run (default: a fresh one, printed)")
    parser.add_argument("--target", type=int, default=100, help="trial sets to keep pending (default 100)")
    options = parser.parse_args(argv)
    if options.max_trial_sets < 1 or options.trials_per_set < 1:
        parser.error("--max-trial-sets and --trials-per-set must be positive")
    return options


@mwpy.master
def main(mw: mwpy.Master, argv: list[str]) -> int:
    options = parse_arguments(argv)
    seed: int = random.SystemRandom().randrange(2**32) if options.seed is None else options.seed
    print(f"seed {seed}: {options.max_trial_sets} trial sets of {options.trials_per_set} darts")
    darts.target_number = options.target
    mw.tasks_total = options.max_trial_sets  # for the progress bar of mwpy local / mwpy status --watch
    next_set = answered = 0
    thrown = inside = 0
    while answered < options.max_trial_sets:
        for _ in range(min(darts.upto_target_number(), options.max_trial_sets - next_set)):
            darts.submit(options.trials_per_set, seed, next_set)
            next_set += 1

        mw.loop()
        for task in mw.unrunnable_tasks():
            print(f"Trial set {task.args[2]} was lost; submitting it again")
            darts.submit(*task.args)
        for result in mw.results():
            if not result.ok:
                print(f"A trial set failed on {result.slave_id}: {result.error}")
                return 1
            answered += 1
            thrown += result.value[0]
            inside += result.value[1]

    fraction = inside / thrown
    estimate = 4.0 * fraction
    standard_error = 4.0 * math.sqrt(fraction * (1.0 - fraction) / thrown)
    print(f"{inside} of {thrown} darts inside the circle; error {estimate - math.pi:+.6f}")
    print(f"pi ≈ {estimate:.6f} ± {standard_error:.6f} from {thrown} points")
    return 0


if __name__ == "__main__":
    mwpy.run()
