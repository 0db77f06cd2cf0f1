//! Cron schedules as upstream parses them (robfig/cron's standard parser): five fields (minute, hour,
//! day of month, month, day of week) with `*`, `?`, lists, ranges, steps and JAN–DEC / SUN–SAT names, or a
//! descriptor (`@yearly`, `@annually`, `@monthly`, `@weekly`, `@daily`, `@midnight`, `@hourly`). A
//! `TZ=`/`CRON_TZ=` prefix is refused: the time zone belongs in `spec.timeZone`.

use k8s_openapi::jiff::civil::{Date, DateTime, Time};
use k8s_openapi::jiff::tz::TimeZone;
use k8s_openapi::jiff::{Timestamp, ToSpan};

/// A parsed schedule: the allowed values of each field as bit sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    minute: u64,
    hour: u64,
    dom: u64,
    month: u64,
    dow: u64,
    /// Day of month or day of week was `*`/`?`: then both must match, else either.
    dom_star: bool,
    dow_star: bool,
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

fn value(s: &str, names: &[&str], offset: u32) -> Result<u32, String> {
    let lower = s.to_ascii_lowercase();
    if let Some(i) = names.iter().position(|n| *n == lower) {
        return u32::try_from(i)
            .map(|i| i + offset)
            .map_err(|e| e.to_string());
    }
    s.parse::<u32>()
        .map_err(|_| format!("failed to parse int from {s}: invalid syntax"))
}

/// One field: `*`, `?`, `a`, `a-b`, with `/step`, comma-separated. Returns the bits and whether it was a star.
fn field(s: &str, min: u32, max: u32, names: &[&str], offset: u32) -> Result<(u64, bool), String> {
    let mut bits = 0u64;
    let mut star = false;
    for part in s.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, st)) => {
                let st = st
                    .parse::<u32>()
                    .map_err(|_| format!("failed to parse int from {st}: invalid syntax"))?;
                (r, Some(st))
            }
            None => (part, None),
        };
        let (lo, hi) = if range == "*" || range == "?" {
            if step.is_none() {
                star = true;
            }
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a, names, offset)?, value(b, names, offset)?)
        } else {
            let a = value(range, names, offset)?;
            // `a/step` runs from a to the end of the range.
            (a, if step.is_some() { max } else { a })
        };
        if lo < min {
            return Err(format!(
                "beginning of range ({lo}) below minimum ({min}): {part}"
            ));
        }
        if hi > max {
            return Err(format!("end of range ({hi}) above maximum ({max}): {part}"));
        }
        if lo > hi {
            return Err(format!(
                "beginning of range ({lo}) beyond end of range ({hi}): {part}"
            ));
        }
        let step = step.unwrap_or(1);
        if step == 0 {
            return Err(format!("step of range should be a positive number: {part}"));
        }
        let mut v = lo;
        while v <= hi {
            bits |= 1u64 << v;
            v = v.saturating_add(step);
        }
    }
    Ok((bits, star))
}

impl Schedule {
    /// Parses `spec` as upstream does.
    pub fn parse(spec: &str) -> Result<Schedule, String> {
        let spec = spec.trim();
        if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
            return Err("cannot use TZ or CRON_TZ in schedule, use timeZone field instead".into());
        }
        let expanded = match spec {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            s if s.starts_with('@') => return Err(format!("unrecognized descriptor: {s}")),
            s => s,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(format!(
                "expected exactly 5 fields, found {}: {spec}",
                fields.len()
            ));
        }
        let (minute, _) = field(fields[0], 0, 59, &[], 0)?;
        let (hour, _) = field(fields[1], 0, 23, &[], 0)?;
        let (dom, dom_star) = field(fields[2], 1, 31, &[], 0)?;
        let (month, _) = field(fields[3], 1, 12, &MONTHS, 1)?;
        let (dow, dow_star) = field(fields[4], 0, 6, &DAYS, 0)?;
        Ok(Schedule {
            minute,
            hour,
            dom,
            month,
            dow,
            dom_star,
            dow_star,
        })
    }

    fn day_matches(&self, d: Date) -> bool {
        let dom = self.dom & (1u64 << d.day()) != 0;
        let dow = self.dow & (1u64 << d.weekday().to_sunday_zero_offset()) != 0;
        if self.dom_star || self.dow_star {
            dom && dow
        } else {
            dom || dow
        }
    }

    /// The first scheduled time strictly after `after`, in `tz`; `None` if none within five years.
    pub fn next(&self, after: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let local = tz.to_datetime(after);
        // Start from the next whole minute.
        let start = local
            .with()
            .second(0)
            .subsec_nanosecond(0)
            .build()
            .ok()?
            .checked_add(1.minute())
            .ok()?;
        let mut day = start.date();
        for _ in 0..(366 * 5) {
            if self.month & (1u64 << day.month()) != 0 && self.day_matches(day) {
                for h in 0..24i8 {
                    if self.hour & (1u64 << h) == 0 {
                        continue;
                    }
                    for m in 0..60i8 {
                        if self.minute & (1u64 << m) == 0 {
                            continue;
                        }
                        let dt = DateTime::from_parts(day, Time::new(h, m, 0, 0).ok()?);
                        if dt < start {
                            continue;
                        }
                        // A time skipped by a DST gap moves forward, as Go's time.Date does.
                        let Ok(ts) = tz.to_ambiguous_timestamp(dt).compatible() else {
                            continue;
                        };
                        if ts > after {
                            return Some(ts);
                        }
                    }
                }
            }
            day = day.tomorrow().ok()?;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn parses_upstream_syntax() {
        assert!(Schedule::parse("*/15 0-6,22 ? JAN-mar mon-FRI").is_ok());
        assert_eq!(Schedule::parse("@hourly"), Schedule::parse("0 * * * *"));
        assert_eq!(Schedule::parse("@annually"), Schedule::parse("@yearly"));
        assert!(Schedule::parse("TZ=UTC * * * * *")
            .unwrap_err()
            .contains("timeZone"));
        assert!(Schedule::parse("CRON_TZ=UTC 0 * * * *").is_err());
        assert!(Schedule::parse("* * * *").is_err());
        assert!(Schedule::parse("60 * * * *").is_err());
        assert!(Schedule::parse("* * * * 7").is_err());
        assert!(Schedule::parse("@every 5m").is_err());
        assert!(Schedule::parse("*/0 * * * *").is_err());
    }

    #[test]
    fn next_times() {
        let utc = TimeZone::UTC;
        let every = Schedule::parse("* * * * *").unwrap();
        assert_eq!(
            every.next(ts("2024-01-01T00:00:30Z"), &utc),
            Some(ts("2024-01-01T00:01:00Z"))
        );
        assert_eq!(
            every.next(ts("2024-01-01T00:01:00Z"), &utc),
            Some(ts("2024-01-01T00:02:00Z"))
        );
        let monthly = Schedule::parse("@monthly").unwrap();
        assert_eq!(
            monthly.next(ts("2024-01-15T10:00:00Z"), &utc),
            Some(ts("2024-02-01T00:00:00Z"))
        );
        // Day of month OR day of week when neither is a star: the 13th or any Friday.
        let either = Schedule::parse("0 0 13 * 5").unwrap();
        assert_eq!(
            either.next(ts("2024-09-01T00:00:00Z"), &utc),
            Some(ts("2024-09-06T00:00:00Z"))
        );
        let leap = Schedule::parse("0 0 29 2 *").unwrap();
        assert_eq!(
            leap.next(ts("2024-03-01T00:00:00Z"), &utc),
            Some(ts("2028-02-29T00:00:00Z"))
        );
    }

    #[test]
    fn next_in_a_time_zone() {
        let tz = TimeZone::get("America/New_York").unwrap();
        let daily = Schedule::parse("0 9 * * *").unwrap();
        // 09:00 EST is 14:00 UTC.
        assert_eq!(
            daily.next(ts("2024-01-10T12:00:00Z"), &tz),
            Some(ts("2024-01-10T14:00:00Z"))
        );
    }
}
