"""The analysers: what the kernels and the families are measured by.

``trace`` and ``depth`` (counts, span and path length of a traced forward),
``schedule`` (a greedy P-processor schedule and Brent's bounds), ``gradpath`` and
``clipping`` (gradient paths over distance), ``walltime`` (time over T, crossover,
exponents), ``compare`` (kernels against peers, as ratios), ``peakmem`` (peak memory
in a fresh process), ``lessons`` (the lessons' fixtures and experiments) and
``claims`` (the lessons' claims against the measurements).
"""
