"""The timing rule of the Python benchmark scripts: `warmup` untimed calls, then `rounds`
rounds of `repeat` timed calls; the result is the smallest round median, in seconds (one slow
stretch of a shared machine cannot flatter either side)."""
import statistics
import time


def timed(fn, repeat, warmup=2, rounds=3):
    for _ in range(warmup):
        fn()
    medians = []
    for _ in range(rounds):
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        medians.append(statistics.median(times))
    return min(medians)
