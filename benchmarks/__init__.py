"""mwpy's benchmark harness (issue 5): mwpy against the tools a user would pick instead.

Run ``python -m benchmarks`` from the repository root (``--help`` lists the
options). Every scenario runs mwpy and its peers back to back on the same
machine, because on shared machines only ratios measured side by side mean
anything; docs/performance.md records the figures and how they were obtained.
"""
