//! The last five minutes of each service's traffic, for the dashboard's small
//! charts: every [`INTERVAL`], the connections each service finished and the
//! bytes it moved since the last sample, as rates per second.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;

/// How often a sample is taken.
pub(crate) const INTERVAL: Duration = Duration::from_secs(5);
/// Samples kept: five minutes.
pub(crate) const POINTS: usize = 60;

/// A service's running totals: connections finished, and bytes moved both
/// ways (finished sessions' bytes plus what live relays moved so far).
pub(crate) type Totals = BTreeMap<String, (u64, u64)>;

/// Rates per service, oldest first.
pub(crate) struct History {
    inner: Mutex<Inner>,
    /// When the daemon started, for its uptime.
    pub started: std::time::Instant,
}

impl Default for History {
    fn default() -> Self {
        History {
            inner: Mutex::default(),
            started: std::time::Instant::now(),
        }
    }
}

#[derive(Default)]
struct Inner {
    last: Option<Totals>,
    series: BTreeMap<String, Series>,
}

/// One service's rates, one value per sample, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub(crate) struct Series {
    pub connections_per_second: VecDeque<f64>,
    pub bytes_per_second: VecDeque<f64>,
}

impl History {
    /// Records `now`, the totals taken `elapsed` after the previous ones. A
    /// total that went down (a service removed and added again) counts from 0.
    pub(crate) fn sample(&self, now: Totals, elapsed: Duration) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let seconds = elapsed.as_secs_f64().max(0.001);
        if let Some(last) = inner.last.take() {
            for (service, &(connections, bytes)) in &now {
                let (c0, b0) = last.get(service).copied().unwrap_or((0, 0));
                let rate = |now: u64, before: u64| now.saturating_sub(before) as f64 / seconds;
                let series = inner.series.entry(service.clone()).or_default();
                push(&mut series.connections_per_second, rate(connections, c0));
                push(&mut series.bytes_per_second, rate(bytes, b0));
            }
            // A service gone from the totals has no more samples to show.
            inner.series.retain(|service, _| now.contains_key(service));
        }
        inner.last = Some(now);
    }

    /// Every service's rates.
    pub(crate) fn series(&self) -> BTreeMap<String, Series> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.series.clone()
    }
}

fn push(values: &mut VecDeque<f64>, value: f64) {
    if values.len() == POINTS {
        values.pop_front();
    }
    values.push_back(value);
}

/// Samples `totals()` into `history` every [`INTERVAL`], for ever; spawn it
/// once per daemon.
pub(crate) async fn keep(history: std::sync::Arc<History>, totals: impl Fn() -> Totals) {
    let mut ticks = tokio::time::interval(INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = tokio::time::Instant::now();
    loop {
        ticks.tick().await;
        let now = tokio::time::Instant::now();
        history.sample(totals(), now - last);
        last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(entries: &[(&str, u64, u64)]) -> Totals {
        entries
            .iter()
            .map(|(s, c, b)| ((*s).to_owned(), (*c, *b)))
            .collect()
    }

    #[test]
    fn rates_are_the_growth_per_second_and_keep_five_minutes() {
        let history = History::default();
        let step = Duration::from_secs(5);
        history.sample(totals(&[("web", 10, 1000)]), step);
        assert!(history.series().is_empty(), "one sample is no rate yet");
        history.sample(totals(&[("web", 60, 6000)]), step);
        let web = &history.series()["web"];
        assert_eq!(web.connections_per_second, [10.0]);
        assert_eq!(web.bytes_per_second, [1000.0]);
        for i in 0..100 {
            history.sample(totals(&[("web", 60 + i, 6000)]), step);
        }
        assert_eq!(history.series()["web"].connections_per_second.len(), POINTS);
    }

    #[test]
    fn a_total_that_goes_down_or_away_does_not_make_a_negative_rate() {
        let history = History::default();
        let step = Duration::from_secs(1);
        history.sample(totals(&[("a", 5, 5), ("b", 1, 1)]), step);
        history.sample(totals(&[("a", 2, 2)]), step);
        let series = history.series();
        assert_eq!(series["a"].connections_per_second, [0.0]);
        assert!(!series.contains_key("b"));
    }
}
