//! Go `time.Duration` strings as Velero writes them (`720h0m0s`, `1h30m`, `90s`, `1.5h`).
//!
//! Policies compare TTLs by value, so `720h` and `720h0m0s` are the same TTL.

use std::fmt;

/// A non-negative duration with nanosecond resolution, parsed from Go's syntax.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GoDuration(pub u128);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: {reason} (expected Go duration syntax such as 720h0m0s, 24h or 90m)")]
pub struct DurationError {
    pub input: String,
    pub reason: &'static str,
}

const NS: u128 = 1;
const US: u128 = 1_000;
const MS: u128 = 1_000_000;
const S: u128 = 1_000_000_000;
const M: u128 = 60 * S;
const H: u128 = 60 * M;

impl GoDuration {
    pub fn from_secs(s: u64) -> Self {
        GoDuration(s as u128 * S)
    }

    /// As a std Duration (saturating: a Go duration fits in i64 nanoseconds, a std one in far more).
    pub fn as_std(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(u64::try_from(self.0).unwrap_or(u64::MAX))
    }

    pub fn is_zero(&self) -> bool {
        self.0 == 0
    }

    pub fn parse(input: &str) -> Result<Self, DurationError> {
        let err = |reason| DurationError {
            input: input.to_string(),
            reason,
        };
        let s = input.strip_prefix('+').unwrap_or(input);
        if s.starts_with('-') {
            return Err(err("negative durations are not allowed"));
        }
        if s == "0" {
            return Ok(GoDuration(0));
        }
        if s.is_empty() {
            return Err(err("empty"));
        }
        let b = s.as_bytes();
        let mut i = 0;
        let mut total: u128 = 0;
        while i < b.len() {
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            let int_part = &s[start..i];
            let mut frac_part = "";
            if i < b.len() && b[i] == b'.' {
                i += 1;
                let fs = i;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
                frac_part = &s[fs..i];
            }
            if int_part.is_empty() && frac_part.is_empty() {
                return Err(err("missing number"));
            }
            let us = i;
            while i < b.len() && !(b[i].is_ascii_digit() || b[i] == b'.') {
                i += 1;
            }
            let unit = match &s[us..i] {
                "ns" => NS,
                "us" | "µs" | "μs" => US,
                "ms" => MS,
                "s" => S,
                "m" => M,
                "h" => H,
                "" => return Err(err("missing unit")),
                _ => return Err(err("unknown unit")),
            };
            let whole: u128 = if int_part.is_empty() {
                0
            } else {
                int_part.parse().map_err(|_| err("number too large"))?
            };
            let mut v = whole.checked_mul(unit).ok_or_else(|| err("overflow"))?;
            if !frac_part.is_empty() {
                // Scale the fraction by the unit without floating point. Digits past the 19th cannot change a
                // nanosecond of any unit (an hour is 3.6e12 ns) and would overflow u128 (10^30 * 3.6e12), so
                // they are dropped, as Go's parser does.
                let digits = frac_part.len().min(19) as u32;
                let frac: u128 = frac_part[..digits as usize].parse().map_err(|_| err("bad fraction"))?;
                v += frac * unit / 10u128.pow(digits);
            }
            total = total.checked_add(v).ok_or_else(|| err("overflow"))?;
            // Go's Duration is an int64 of nanoseconds.
            if total > i64::MAX as u128 {
                return Err(err("overflow"));
            }
        }
        Ok(GoDuration(total))
    }
}

impl fmt::Display for GoDuration {
    /// Formats like Go's `Duration.String()` for whole seconds and up: `720h0m0s`, `1h30m0s`, `90s` → `1m30s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        if n == 0 {
            return write!(f, "0s");
        }
        if n < S {
            return match n {
                n if n < US => write!(f, "{n}ns"),
                n if n < MS => write!(f, "{}µs", trim_frac(n, US)),
                n => write!(f, "{}ms", trim_frac(n, MS)),
            };
        }
        let h = n / H;
        let m = (n % H) / M;
        let secs = trim_frac(n % M, S);
        if h > 0 {
            write!(f, "{h}h{m}m{secs}s")
        } else if m > 0 {
            write!(f, "{m}m{secs}s")
        } else {
            write!(f, "{secs}s")
        }
    }
}

fn trim_frac(n: u128, unit: u128) -> String {
    let whole = n / unit;
    let rem = n % unit;
    if rem == 0 {
        return whole.to_string();
    }
    let width = (unit as f64).log10().round() as usize;
    let frac = format!("{rem:0width$}");
    format!("{whole}.{}", frac.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_velero_forms() {
        assert_eq!(GoDuration::parse("720h0m0s").unwrap(), GoDuration(720 * H));
        assert_eq!(GoDuration::parse("720h").unwrap(), GoDuration(720 * H));
        assert_eq!(GoDuration::parse("1h30m").unwrap(), GoDuration(90 * M));
        assert_eq!(GoDuration::parse("1.5h").unwrap(), GoDuration(90 * M));
        assert_eq!(GoDuration::parse("0").unwrap(), GoDuration(0));
        assert_eq!(GoDuration::parse("300ms").unwrap(), GoDuration(300 * MS));
    }

    #[test]
    fn long_fractions_keep_their_value() {
        // Found by the `policy` fuzz target (fuzz/regressions/policy): 28 fraction digits overflowed u128, a
        // panic with overflow checks and 30.5 s instead of 30 min without them.
        assert_eq!(
            GoDuration::parse("0.5000000000000000000000000000h").unwrap(),
            GoDuration(30 * M)
        );
        assert_eq!(
            GoDuration::parse("1.99999999999999999999999999999999h").unwrap(),
            GoDuration(2 * H - 1)
        );
        assert_eq!(GoDuration::parse("0.000000001000000000000000s").unwrap(), GoDuration(1));
    }

    #[test]
    fn rejects_garbage_with_a_reason() {
        for bad in ["", "h", "10", "10d", "-1h", "1h-", "abc", "99999999999999999999h"] {
            let e = GoDuration::parse(bad).unwrap_err();
            assert!(e.to_string().contains("invalid duration"), "{bad}: {e}");
        }
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(GoDuration(720 * H).to_string(), "720h0m0s");
        assert_eq!(GoDuration(90 * S).to_string(), "1m30s");
        assert_eq!(GoDuration(0).to_string(), "0s");
        assert_eq!(GoDuration(1500 * MS).to_string(), "1.5s");
    }

    proptest! {
        #[test]
        fn display_round_trips(secs in 0u64..9_223_372_036) {
            let d = GoDuration::from_secs(secs);
            prop_assert_eq!(GoDuration::parse(&d.to_string()).unwrap(), d);
        }
    }
}
