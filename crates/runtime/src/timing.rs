//! A timing helper: warm-up runs, timed repeats, median seconds.

use std::time::{Duration, Instant};

/// How to time a computation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimingOptions {
    /// Untimed runs first (page faults, caches, thread-pool start-up).
    pub warmup: usize,
    /// Timed runs (at least one is made).
    pub repeats: usize,
    /// Warm-up goes on (untimed) until it has also lasted this long: a few launches of a
    /// millisecond kernel do not bring the caches, TLBs and clock to a steady state.
    pub warmup_time: Duration,
}

impl Default for TimingOptions {
    fn default() -> Self {
        TimingOptions {
            warmup: 2,
            repeats: 10,
            warmup_time: Duration::ZERO,
        }
    }
}

/// The timed samples of one measurement, in seconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    /// One per timed run, in run order.
    pub samples: Vec<f64>,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Timing {
    /// Summarizes samples (seconds); an empty list gives zeros.
    pub fn from_samples(samples: Vec<f64>) -> Timing {
        let median = median(&samples);
        let min = samples.iter().copied().fold(f64::INFINITY, f64::min);
        let max = samples.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let fix = |x: f64| if x.is_finite() { x } else { 0.0 };
        Timing {
            samples,
            median: fix(median),
            min: fix(min),
            max: fix(max),
        }
    }
}

/// The median of `values` (mean of the two middle values for an even count; 0 when empty).
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Times `run`: `opts.warmup` untimed calls (more until `opts.warmup_time` has passed), then
/// `opts.repeats` (at least 1) timed ones. Before every call (untimed) `prepare` runs, e.g. to
/// validate arguments or reset outputs. The first error stops the measurement.
pub fn time_with<E>(
    opts: TimingOptions,
    mut prepare: impl FnMut() -> Result<(), E>,
    mut run: impl FnMut() -> Result<(), E>,
) -> Result<Timing, E> {
    let begin = Instant::now();
    let mut done = 0;
    while done < opts.warmup || (done > 0 && begin.elapsed() < opts.warmup_time) {
        prepare()?;
        run()?;
        done += 1;
    }
    let repeats = opts.repeats.max(1);
    let mut samples = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        prepare()?;
        let start = Instant::now();
        run()?;
        samples.push(start.elapsed().as_secs_f64());
    }
    Ok(Timing::from_samples(samples))
}

/// [`time_with`] without a preparation step.
pub fn time<E>(opts: TimingOptions, run: impl FnMut() -> Result<(), E>) -> Result<Timing, E> {
    time_with(opts, || Ok(()), run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn warmup_lasts_its_minimum_time() {
        // Each call sleeps 5 ms: 20 ms of warm-up takes at least 4 calls, then 3 timed ones.
        let mut calls = 0;
        let opts = TimingOptions {
            warmup: 1,
            repeats: 3,
            warmup_time: Duration::from_millis(20),
        };
        let t = time(opts, || -> Result<(), ()> {
            calls += 1;
            std::thread::sleep(Duration::from_millis(5));
            Ok(())
        })
        .unwrap();
        assert!(calls >= 4 + 3, "{calls} calls");
        assert_eq!(t.samples.len(), 3);
        // No warm-up asked: no warm-up call, whatever the time.
        let mut calls = 0;
        let opts = TimingOptions {
            warmup: 0,
            repeats: 2,
            warmup_time: Duration::from_millis(20),
        };
        time(opts, || -> Result<(), ()> {
            calls += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(calls, 2);
    }
}
