//! Cron expressions as a Velero Schedule takes them, and when such a schedule runs next.
//!
//! Velero reads `Schedule.spec.schedule` in the standard cron dialect of its Go cron library, and nac must accept
//! what Velero accepts and compute `status.nextRun` as Velero does. The language:
//! - five fields, `minute hour day-of-month month day-of-week`, separated by whitespace. Each field is a comma
//!   list of items; an item is `*` or `?` (every value), `n`, `a-b`, each optionally followed by `/step`, where
//!   `n/step` means `n-max/step`. Months and weekdays also take three-letter English names in any case
//!   (`JAN`, `mon`). Weekdays are 0 (Sunday) to 6.
//! - the day rule: when the day-of-month or the day-of-week field has an item `*`/`?` without a step above one,
//!   a day must match both fields (the starred one matches every day); otherwise either field may match
//!   (`0 0 1 * MON`: the first of the month and every Monday).
//! - descriptors: `@yearly`/`@annually`, `@monthly`, `@weekly`, `@daily`/`@midnight`, `@hourly`, and
//!   `@every <duration>` (Go syntax, `90m`, `1h30m`; whole seconds count, fractions are dropped).
//! - a `CRON_TZ=<zone> ` or `TZ=<zone> ` prefix evaluates the fields in that IANA zone; without one, in UTC (Velero
//!   runs in UTC containers). Zone data is bundled with nac, so it does not depend on the host's.
//!
//! Runs are at whole minutes of local time. Around daylight-saving changes, a local time that does not exist that
//! day is skipped, and one that occurs twice runs twice, as Velero's cron library does. A schedule with no run in
//! the next five years (`0 0 30 2 *`) has no next run; Velero would treat it as always due, so the admission
//! refuses it.
//!
//! nac is stricter than Velero in three corners, each refused with a clear message rather than guessed at:
//! signs on numbers (`+5`), `*-5` (Velero reads it as `*`), and `@every` below one second (Velero rounds it up).

use crate::duration::GoDuration;
use jiff::civil::{Date, DateTime};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{SignedDuration, Timestamp};

/// Why an expression is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(String);

/// A parsed schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule(Kind);

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Fields(Fields),
    /// `@every`: seconds between runs, at least one.
    Every(i64),
}

/// The fields as bit sets (bit `v` set: value `v` matches).
#[derive(Debug, Clone, PartialEq)]
struct Fields {
    minutes: u64,
    hours: u64,
    days: u64,
    months: u64,
    weekdays: u64,
    /// Day-of-month and day-of-week must both match (one of them was written as `*`).
    both_days: bool,
    tz: TimeZone,
}

/// One field's range and names.
struct Field {
    what: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

impl Field {
    const fn new(what: &'static str, min: u32, max: u32, names: &'static [&'static str]) -> Field {
        Field { what, min, max, names }
    }
}

const MINUTE: Field = Field::new("minute", 0, 59, &[]);
const HOUR: Field = Field::new("hour", 0, 23, &[]);
const DAY: Field = Field::new("day of month", 1, 31, &[]);
/// Names of months start at 1, of weekdays at 0.
const MONTH: Field = Field::new(
    "month",
    1,
    12,
    &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
);
const WEEKDAY: Field = Field::new("day of week", 0, 6, &["sun", "mon", "tue", "wed", "thu", "fri", "sat"]);

/// How far ahead a next run is looked for.
const HORIZON_DAYS: i64 = 5 * 366;
/// Offset changes (daylight saving) move local time by at most this much; candidates are looked at this far around.
const OFFSET_SLACK: SignedDuration = SignedDuration::from_hours(3);

impl Schedule {
    /// Parses an expression of the language above.
    pub fn parse(expression: &str) -> Result<Schedule, ParseError> {
        parse(expression).map(Schedule).map_err(ParseError)
    }

    /// The first run strictly after `after`; None when there is none within five years.
    pub fn next(&self, after: Timestamp) -> Option<Timestamp> {
        match &self.0 {
            // From the whole second, as Velero's library counts.
            Kind::Every(secs) => Timestamp::from_second(after.as_second().checked_add(*secs)?).ok(),
            Kind::Fields(f) => f.next(after),
        }
    }

    /// The shortest time between two consecutive runs from the day of `from` to a year after it; None with fewer
    /// than two runs.
    /// For `@every`, its interval.
    pub fn min_interval(&self, from: Timestamp) -> Option<SignedDuration> {
        match &self.0 {
            Kind::Every(secs) => Some(SignedDuration::from_secs(*secs)),
            Kind::Fields(f) => f.min_interval(from),
        }
    }
}

fn parse(expression: &str) -> Result<Kind, String> {
    let (tz, rest) = zone_prefix(expression)?;
    if rest.starts_with('@') {
        return descriptor(rest, tz);
    }
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let [minute, hour, day, month, weekday] = fields[..] else {
        return Err(format!(
            "expected five fields (minute hour day-of-month month day-of-week) or a descriptor such as @daily, \
             found {} field(s)",
            fields.len()
        ));
    };
    let (days, day_star) = field(day, &DAY)?;
    let (weekdays, weekday_star) = field(weekday, &WEEKDAY)?;
    Ok(Kind::Fields(Fields {
        minutes: field(minute, &MINUTE)?.0,
        hours: field(hour, &HOUR)?.0,
        days,
        months: field(month, &MONTH)?.0,
        weekdays,
        both_days: day_star || weekday_star,
        tz,
    }))
}

/// `CRON_TZ=<zone> ` / `TZ=<zone> ` and the rest; no prefix: UTC.
fn zone_prefix(expression: &str) -> Result<(TimeZone, &str), String> {
    let Some(prefixed) = expression
        .strip_prefix("CRON_TZ=")
        .or_else(|| expression.strip_prefix("TZ="))
    else {
        return Ok((TimeZone::UTC, expression));
    };
    let Some((name, rest)) = prefixed.split_once(' ') else {
        return Err(format!(
            "time zone prefix {expression:?} must be followed by a space and the schedule"
        ));
    };
    let tz = match name {
        // Velero's own process zone is UTC.
        "" | "UTC" | "Local" => TimeZone::UTC,
        // Zone names are case-sensitive where Velero reads them (jiff's lookup is not).
        _ => TimeZone::get(name)
            .ok()
            .filter(|tz| tz.iana_name() == Some(name))
            .ok_or_else(|| format!("unknown time zone {name:?}"))?,
    };
    Ok((tz, rest.trim()))
}

fn descriptor(text: &str, tz: TimeZone) -> Result<Kind, String> {
    let fixed = |minute: u64, hour: u64, day: Option<u32>, month: Option<u32>, weekday: Option<u32>| {
        let bits = |v: Option<u32>, f: &Field| v.map_or_else(|| span(f.min, f.max, 1), |v| 1 << v);
        Kind::Fields(Fields {
            minutes: minute,
            hours: hour,
            days: bits(day, &DAY),
            months: bits(month, &MONTH),
            weekdays: bits(weekday, &WEEKDAY),
            both_days: true,
            tz: tz.clone(),
        })
    };
    Ok(match text {
        "@yearly" | "@annually" => fixed(1, 1, Some(1), Some(1), None),
        "@monthly" => fixed(1, 1, Some(1), None, None),
        "@weekly" => fixed(1, 1, None, None, Some(0)),
        "@daily" | "@midnight" => fixed(1, 1, None, None, None),
        "@hourly" => fixed(1, span(0, 23, 1), None, None, None),
        _ => {
            let Some(duration) = text.strip_prefix("@every ") else {
                return Err(format!(
                    "unknown descriptor {text:?} (known: @yearly, @annually, @monthly, @weekly, @daily, @midnight, \
                     @hourly, @every <duration>)"
                ));
            };
            let d = GoDuration::parse(duration).map_err(|e| format!("@every: {e}"))?;
            let secs = i64::try_from(d.0 / 1_000_000_000).unwrap_or(i64::MAX);
            if secs < 1 {
                return Err(format!("@every {duration}: the interval must be at least one second"));
            }
            Kind::Every(secs)
        }
    })
}

/// Bits `from..=to` stepping by `step`.
fn span(from: u32, to: u32, step: u32) -> u64 {
    (from..=to).step_by(step as usize).fold(0, |bits, v| bits | 1 << v)
}

/// A field's bit set, and whether it has an item `*`/`?` without a step above one (for the day rule).
fn field(text: &str, f: &Field) -> Result<(u64, bool), String> {
    let mut bits = 0;
    let mut star = false;
    for item in text.split(',').filter(|i| !i.is_empty()) {
        let err = |why: String| format!("{} field {text:?}: {why}", f.what);
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => {
                let step = number(s).ok_or_else(|| err(format!("step {s:?} is not a number")))?;
                if step == 0 {
                    return Err(err("a step must be at least 1".into()));
                }
                (r, Some(step))
            }
            None => (item, None),
        };
        let (from, to) = if range == "*" || range == "?" {
            star |= step.unwrap_or(1) <= 1;
            (f.min, f.max)
        } else {
            let (a, b) = match range.split_once('-') {
                Some((a, b)) => (a, Some(b)),
                None => (range, None),
            };
            let value = |v: &str| -> Result<u32, String> {
                let n = number(v)
                    .or_else(|| {
                        let lower = v.to_ascii_lowercase();
                        let i = f.names.iter().position(|n| *n == lower)?;
                        Some(i as u32 + f.min)
                    })
                    .ok_or_else(|| err(format!("{v:?} is not a number or a name")))?;
                if !(f.min..=f.max).contains(&n) {
                    return Err(err(format!("{n} is outside {}-{}", f.min, f.max)));
                }
                Ok(n)
            };
            let from = value(a)?;
            let to = match (b, step) {
                (Some(b), _) => value(b)?,
                // `n/step`: from n to the end.
                (None, Some(_)) => f.max,
                (None, None) => from,
            };
            if from > to {
                return Err(err(format!("range {range:?} runs backwards")));
            }
            (from, to)
        };
        bits |= span(from, to, step.unwrap_or(1));
    }
    Ok((bits, star))
}

/// A plain decimal number (no sign).
fn number(s: &str) -> Option<u32> {
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

fn has(bits: u64, v: impl Into<i64>) -> bool {
    let v = v.into();
    (0..64).contains(&v) && bits & (1 << v) != 0
}

impl Fields {
    fn day_matches(&self, d: Date) -> bool {
        if !has(self.months, d.month()) {
            return false;
        }
        let (dom, dow) = (
            has(self.days, d.day()),
            has(self.weekdays, d.weekday().to_sunday_zero_offset()),
        );
        if self.both_days {
            dom && dow
        } else {
            dom || dow
        }
    }

    /// The runs of day `d`'s local times (hour, minute), in order.
    fn times(&self) -> impl Iterator<Item = (i8, i8)> + '_ {
        (0..24i8)
            .filter(|h| has(self.hours, *h))
            .flat_map(move |h| (0..60i8).filter(|m| has(self.minutes, *m)).map(move |m| (h, m)))
    }

    /// The instants local time `dt` stands for: none in a gap, two in a fold.
    fn instants(&self, dt: DateTime) -> impl Iterator<Item = Timestamp> {
        let offsets = match self.tz.to_ambiguous_timestamp(dt).offset() {
            AmbiguousOffset::Unambiguous { offset } => [Some(offset), None],
            AmbiguousOffset::Gap { .. } => [None, None],
            AmbiguousOffset::Fold { before, after } => [Some(before), Some(after)],
        };
        offsets
            .into_iter()
            .flatten()
            .filter_map(move |o| o.to_timestamp(dt).ok())
    }

    fn next(&self, after: Timestamp) -> Option<Timestamp> {
        // Local times from a little before `after`'s (a repeated hour's second pass) onward, in order; the
        // earliest instant after `after` among them, once local time is past it by more than any offset change.
        // In a zone whose offset never changes, the first one after `after` is the answer.
        let fixed = self.tz.to_fixed_offset().is_ok();
        let slack = if fixed { SignedDuration::ZERO } else { OFFSET_SLACK };
        let start = self.tz.to_datetime(after).checked_sub(slack).ok()?;
        let mut best: Option<(Timestamp, DateTime)> = None;
        let mut day = start.date();
        for _ in 0..=HORIZON_DAYS {
            if self.day_matches(day) {
                for (h, m) in self.times() {
                    let dt = day.at(h, m, 0, 0);
                    if dt < start {
                        continue;
                    }
                    if let Some((t, at)) = best {
                        if fixed || dt > at.checked_add(slack).ok()? {
                            return Some(t);
                        }
                    }
                    for t in self.instants(dt).filter(|t| *t > after) {
                        if best.is_none_or(|(b, _)| t < b) {
                            best = Some((t, dt));
                        }
                    }
                }
            }
            if let Some((t, at)) = best {
                if fixed || day > at.checked_add(slack).ok()?.date() {
                    return Some(t);
                }
            }
            day = day.tomorrow().ok()?;
        }
        best.map(|(t, _)| t)
    }

    fn min_interval(&self, from: Timestamp) -> Option<SignedDuration> {
        let end = from.checked_add(SignedDuration::from_hours(366 * 24)).ok()?;
        // In local time: the gaps within a day, and between the last run of a day and the first of the next day
        // that runs, over the year.
        let times: Vec<i64> = self.times().map(|(h, m)| i64::from(h) * 60 + i64::from(m)).collect();
        let (first, last) = (*times.first()?, *times.last()?);
        let within = times.windows(2).map(|w| w[1] - w[0]).min();
        let mut best: Option<i64> = None;
        let mut prev: Option<i64> = None;
        let mut day = self.tz.to_datetime(from).date();
        let last_day = self.tz.to_datetime(end).date();
        let mut index = 0i64;
        let mut days_run = 0;
        while day <= last_day {
            if self.day_matches(day) {
                days_run += 1;
                if let Some(p) = prev {
                    let across = (index - p) * 1440 - last + first;
                    best = Some(best.map_or(across, |b| b.min(across)));
                }
                prev = Some(index);
            }
            day = day.tomorrow().ok()?;
            index += 1;
        }
        if days_run > 0 {
            if let Some(w) = within {
                best = Some(best.map_or(w, |b| b.min(w)));
            }
        }
        let mut best = best.map(SignedDuration::from_mins);
        // Where the offset changes, local gaps are not real ones: the runs around each change are measured.
        let changes = self.tz.following(from).map(|t| t.timestamp()).take_while(|t| *t <= end);
        for change in changes {
            let stop = change.checked_add(OFFSET_SLACK).ok()?;
            let Some(mut run) = self.next(change.checked_sub(OFFSET_SLACK).ok()?.max(from)) else {
                break;
            };
            while run <= stop {
                let Some(after) = self.next(run).filter(|n| *n <= end) else {
                    break;
                };
                let gap = after.duration_since(run);
                best = Some(best.map_or(gap, |b| b.min(gap)));
                run = after;
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn next(expr: &str, after: &str) -> Option<String> {
        Schedule::parse(expr).unwrap().next(ts(after)).map(|t| t.to_string())
    }

    fn every(expr: &str) -> Option<i64> {
        Schedule::parse(expr)
            .unwrap()
            .min_interval(ts("2026-01-01T00:00:00Z"))
            .map(|d| d.as_secs())
    }

    #[test]
    fn the_language_velero_accepts() {
        for ok in [
            "* * * * *",
            "45 * * * *",
            "0 2 * * *",
            "*/15 9-17 * * MON-FRI",
            "0 0 1,15 * *",
            "0 0 * JAN,jul ?",
            "5/10 * * * *",
            "0 0 1-7 * *",
            "0   3  *  *  sun",
            "0 0 * * 0-6/2",
            "0,,5 * * * *",
            "@daily",
            "@every 1m",
            "@every 1h30m",
            "@every 1.5s",
            "CRON_TZ=Europe/Berlin 0 2 * * *",
            "TZ=America/New_York @daily",
            "TZ=UTC 0 0 * * *",
        ] {
            assert!(Schedule::parse(ok).is_ok(), "{ok}: {:?}", Schedule::parse(ok));
        }
    }

    #[test]
    fn refusals_say_what_is_wrong() {
        for (bad, says) in [
            ("", "five fields"),
            ("* * * *", "found 4"),
            ("* * * * * *", "found 6"),
            ("60 * * * *", "minute field \"60\": 60 is outside 0-59"),
            ("* 24 * * *", "hour field"),
            ("* * 0 * *", "day of month field \"0\": 0 is outside 1-31"),
            ("* * * 13 *", "month"),
            ("* * * * 7", "day of week field \"7\": 7 is outside 0-6"),
            ("5-1 * * * *", "runs backwards"),
            ("*/0 * * * *", "at least 1"),
            ("*/x * * * *", "step \"x\""),
            ("+5 * * * *", "not a number"),
            ("*-5 * * * *", "not a number"),
            ("* * * * MONDAY", "not a number or a name"),
            ("* * * mon *", "not a number or a name"),
            ("@fortnightly", "unknown descriptor"),
            ("@every", "unknown descriptor"),
            ("@every 0s", "at least one second"),
            ("@every 500ms", "at least one second"),
            ("@every 1d", "@every"),
            ("CRON_TZ=Mars/Olympus 0 0 * * *", "unknown time zone"),
            ("CRON_TZ=europe/berlin 0 0 * * *", "unknown time zone"),
            ("TZ=UTC", "followed by a space"),
        ] {
            let err = Schedule::parse(bad).unwrap_err().to_string();
            assert!(err.contains(says), "{bad:?}: {err}");
        }
    }

    #[test]
    fn next_runs() {
        // (expression, after, the next run; None: never)
        for (expr, after, want) in [
            // Strictly after, at whole minutes.
            ("45 * * * *", "2026-11-25T10:45:00Z", Some("2026-11-25T11:45:00Z")),
            ("45 * * * *", "2026-11-25T10:44:59.9Z", Some("2026-11-25T10:45:00Z")),
            ("* * * * *", "2026-11-25T10:00:30Z", Some("2026-11-25T10:01:00Z")),
            // Across a year, the end of February of a leap year, the 31st.
            ("0 0 1 1 *", "2026-06-01T00:00:00Z", Some("2027-01-01T00:00:00Z")),
            ("0 12 29 2 *", "2026-03-01T00:00:00Z", Some("2028-02-29T12:00:00Z")),
            ("0 0 31 * *", "2026-04-01T00:00:00Z", Some("2026-05-31T00:00:00Z")),
            // The day rule: either field (the 13th or a Friday), or both when one is starred.
            ("0 0 13 * 5", "2026-11-01T00:00:00Z", Some("2026-11-06T00:00:00Z")),
            ("0 0 13 * *", "2026-11-01T00:00:00Z", Some("2026-11-13T00:00:00Z")),
            ("0 0 * * 5", "2026-11-07T00:00:00Z", Some("2026-11-13T00:00:00Z")),
            // `*/2` is not a star: odd days or Fridays (2026-11-02 is a Monday).
            ("0 0 */2 * 5", "2026-11-01T00:00:00Z", Some("2026-11-03T00:00:00Z")),
            // Descriptors.
            ("@weekly", "2026-11-25T10:00:00Z", Some("2026-11-29T00:00:00Z")),
            ("@monthly", "2026-11-25T10:00:00Z", Some("2026-12-01T00:00:00Z")),
            ("@hourly", "2026-11-25T10:00:00Z", Some("2026-11-25T11:00:00Z")),
            // @every counts from the whole second.
            ("@every 1m", "2026-11-25T10:00:30.7Z", Some("2026-11-25T10:01:30Z")),
            ("@every 1.9s", "2026-11-25T10:00:30Z", Some("2026-11-25T10:00:31Z")),
            // Never: no 30th of February within five years.
            ("0 0 30 2 *", "2026-11-25T10:00:00Z", None),
            (", * * * *", "2026-11-25T10:00:00Z", None),
        ] {
            assert_eq!(next(expr, after).as_deref(), want, "{expr} after {after}");
        }
    }

    #[test]
    fn zones_and_daylight_saving() {
        // 02:00 in Berlin is 01:00 UTC in winter.
        assert_eq!(
            next("CRON_TZ=Europe/Berlin 0 2 * * *", "2026-11-25T10:00:00Z").unwrap(),
            "2026-11-26T01:00:00Z"
        );
        // Spring forward (New York, 2026-03-08 02:00 -> 03:00): 02:30 does not exist that day and is skipped.
        let ny = "CRON_TZ=America/New_York 30 2 * * *";
        assert_eq!(next(ny, "2026-03-07T12:00:00Z").unwrap(), "2026-03-09T06:30:00Z");
        // Fall back (2026-11-01 02:00 -> 01:00): 01:30 happens twice, and so does its run.
        let ny = "CRON_TZ=America/New_York 30 1 * * *";
        assert_eq!(next(ny, "2026-10-31T12:00:00Z").unwrap(), "2026-11-01T05:30:00Z");
        assert_eq!(next(ny, "2026-11-01T05:30:00Z").unwrap(), "2026-11-01T06:30:00Z");
        assert_eq!(next(ny, "2026-11-01T06:30:00Z").unwrap(), "2026-11-02T06:30:00Z");
        let d = Schedule::parse(ny).unwrap().min_interval(ts("2026-06-01T00:00:00Z"));
        assert_eq!(d, Some(SignedDuration::from_hours(1)), "the repeated run an hour apart");
    }

    #[test]
    fn shortest_intervals() {
        assert_eq!(every("* * * * *"), Some(60));
        assert_eq!(every("*/15 * * * *"), Some(900));
        assert_eq!(every("0 * * * *"), Some(3600));
        assert_eq!(every("0 1,23 * * *"), Some(2 * 3600), "23:00 to 01:00 the next day");
        assert_eq!(every("0 2 * * *"), Some(86_400));
        assert_eq!(every("0 2 * * 1"), Some(7 * 86_400));
        assert_eq!(every("0 0 1,2 * *"), Some(86_400));
        assert_eq!(every("@every 6h"), Some(6 * 3600));
        assert_eq!(every("0 0 1 1 *"), Some(365 * 86_400), "2026 has 365 days");
        assert_eq!(every("0 0 30 2 *"), None);
    }

    /// The next run by brute force: every minute from `after` on, for `limit` minutes.
    fn brute(f: &Fields, after: Timestamp, limit: i64) -> Option<Timestamp> {
        let mut t = Timestamp::from_second(after.as_second().div_euclid(60) * 60 + 60).unwrap();
        let end = t + SignedDuration::from_mins(limit);
        while t < end {
            let dt = f.tz.to_datetime(t);
            if !f.day_matches(dt.date()) {
                // UTC: the next day starts at the next multiple of a day.
                t = Timestamp::from_second((t.as_second().div_euclid(86_400) + 1) * 86_400).unwrap();
                continue;
            }
            if has(f.hours, dt.hour()) && has(f.minutes, dt.minute()) {
                return Some(t);
            }
            t += SignedDuration::from_mins(1);
        }
        None
    }

    proptest::proptest! {
        /// In UTC, the next run is the first matching minute after the given time.
        #[test]
        fn next_is_the_first_matching_minute(
            minute in proptest::sample::select(vec!["*", "0", "*/7", "5-20/5", "59", "0,30"]),
            hour in proptest::sample::select(vec!["*", "3", "22-23", "*/6", "0,12"]),
            day in proptest::sample::select(vec!["*", "1", "15-17", "31", "*/10", "?"]),
            month in proptest::sample::select(vec!["*", "2", "JAN-MAR", "*/4", "12"]),
            weekday in proptest::sample::select(vec!["*", "0", "MON-FRI", "6", "?"]),
            after in 1_700_000_000i64..1_900_000_000,
        ) {
            let expr = format!("{minute} {hour} {day} {month} {weekday}");
            let Kind::Fields(f) = Schedule::parse(&expr).unwrap().0 else { unreachable!() };
            let after = Timestamp::from_second(after).unwrap();
            let got = f.next(after);
            proptest::prop_assert_eq!(got, brute(&f, after, 2 * 366 * 1440), "{}", expr);
        }
    }
}
