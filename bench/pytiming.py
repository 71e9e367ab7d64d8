"""The timing rule of the Python benchmark scripts: untimed calls for at least `warmup` calls
and `warm_seconds` seconds, then `rounds` rounds of `repeat` timed calls; the result is the
smallest round median, in seconds (one slow stretch of a shared machine cannot flatter either
side). The warm-up is timed, not counted only: the first pair a fresh process measured after
two calls came out 6-8x slower than the same pair measured again in that process (pubmed,
`aggregate_python.py`, session 42), so two calls do not warm a process."""
import statistics
import time


def timed(fn, repeat, warmup=2, rounds=3, warm_seconds=0.25):
    start, calls = time.perf_counter(), 0
    while calls < warmup or time.perf_counter() - start < warm_seconds:
        fn()
        calls += 1
    medians = []
    for _ in range(rounds):
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        medians.append(statistics.median(times))
    return min(medians)
