//! Calendar windows (`align: calendar`): the local hour, day, week (from Monday), month (from
//! the 1st) or year in a time zone, the Koala "natural day".
//!
//! This is the one part of the algorithms that is not Lua-portable integer arithmetic: it reads
//! the tz database. It only computes a [`Window`]'s bounds, which are handed to the decision
//! function (and to the Redis script as arguments), so every store agrees. Days are 23 or 25
//! hours long across daylight-saving changes; a boundary that falls in a skipped hour (a
//! midnight that never happens) is the instant the clocks jump; one that happens twice is the
//! earlier one.

use chrono::Offset;
use chrono::{DateTime, Datelike, Duration, LocalResult, NaiveDate, NaiveDateTime, TimeZone};

use super::{Calendar, Window};
use crate::model::{Micros, Unit, MICROS_PER_SEC};

/// The calendar window of `now`; falls back to epoch alignment for units shorter than an hour
/// and for instants outside the tz database's range.
pub(crate) fn frame(now: Micros, cal: Calendar) -> Window {
    bounds(now, cal)
        .filter(|&(s, e)| s <= now && now < e)
        .map_or_else(
            || Window::epoch_aligned(now, cal.unit.micros()),
            |(window_start, window_end)| Window {
                now,
                window_start,
                window_end,
            },
        )
}

fn bounds(now: Micros, cal: Calendar) -> Option<(Micros, Micros)> {
    let secs = now.div_euclid(MICROS_PER_SEC);
    let utc = DateTime::from_timestamp(secs, 0)?;
    let local = utc.with_timezone(&cal.tz);
    let (start, end) = match cal.unit {
        Unit::Second | Unit::Minute => return None,
        Unit::Hour => {
            // The local hour under the offset in effect now (offsets of 30 or 45 minutes
            // shift the hour boundaries).
            let offset = i64::from(local.offset().fix().local_minus_utc());
            let start = secs - (secs + offset).rem_euclid(3_600);
            return Some((start * MICROS_PER_SEC, (start + 3_600) * MICROS_PER_SEC));
        }
        Unit::Day => {
            let d = local.date_naive();
            (d, d.succ_opt()?)
        }
        Unit::Week => {
            let d = local.date_naive();
            let monday = d - Duration::days(i64::from(d.weekday().num_days_from_monday()));
            (monday, monday + Duration::days(7))
        }
        Unit::Month => {
            let d = local.date_naive();
            let first = NaiveDate::from_ymd_opt(d.year(), d.month(), 1)?;
            let next = if d.month() == 12 {
                NaiveDate::from_ymd_opt(d.year() + 1, 1, 1)?
            } else {
                NaiveDate::from_ymd_opt(d.year(), d.month() + 1, 1)?
            };
            (first, next)
        }
        Unit::Year => {
            let y = local.year();
            (
                NaiveDate::from_ymd_opt(y, 1, 1)?,
                NaiveDate::from_ymd_opt(y + 1, 1, 1)?,
            )
        }
    };
    let start = instant(cal, start.and_hms_opt(0, 0, 0)?)?;
    let end = instant(cal, end.and_hms_opt(0, 0, 0)?)?;
    Some((start, end))
}

/// The instant a local time names: the earlier of two, or for a skipped local time the instant
/// the clocks jumped past it (read with the offset in effect before the jump).
fn instant(cal: Calendar, local: NaiveDateTime) -> Option<Micros> {
    let secs = match cal.tz.from_local_datetime(&local) {
        LocalResult::Single(t) => t.timestamp(),
        LocalResult::Ambiguous(a, _) => a.timestamp(),
        LocalResult::None => {
            // Gaps last hours at most: a day earlier the old offset was in effect.
            let before = cal
                .tz
                .offset_from_utc_datetime(&(local - Duration::days(1)))
                .fix()
                .local_minus_utc();
            local.and_utc().timestamp() - i64::from(before)
        }
    };
    secs.checked_mul(MICROS_PER_SEC)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono_tz::Tz;

    const H: Micros = 3_600 * MICROS_PER_SEC;

    fn at(tz: Tz, y: i32, m: u32, d: u32, h: u32, min: u32) -> Micros {
        tz.with_ymd_and_hms(y, m, d, h, min, 0)
            .earliest()
            .unwrap()
            .timestamp()
            * MICROS_PER_SEC
    }

    fn cal(unit: Unit, tz: Tz) -> Calendar {
        Calendar { unit, tz }
    }

    #[test]
    fn natural_day_in_shanghai() {
        let tz = chrono_tz::Asia::Shanghai;
        let f = frame(at(tz, 2024, 3, 5, 0, 30), cal(Unit::Day, tz));
        assert_eq!(f.window_start, at(tz, 2024, 3, 5, 0, 0));
        assert_eq!(f.window_end - f.window_start, 24 * H);
    }

    #[test]
    fn dst_days_are_23_and_25_hours() {
        let tz = chrono_tz::America::New_York;
        let spring = frame(at(tz, 2024, 3, 10, 12, 0), cal(Unit::Day, tz));
        assert_eq!(spring.window_end - spring.window_start, 23 * H);
        let autumn = frame(at(tz, 2024, 11, 3, 12, 0), cal(Unit::Day, tz));
        assert_eq!(autumn.window_end - autumn.window_start, 25 * H);
        assert_eq!(autumn.window_start, at(tz, 2024, 11, 3, 0, 0));
    }

    #[test]
    fn a_skipped_midnight_starts_when_clocks_jump() {
        // São Paulo skipped 2018-11-04 00:00-00:59 (UTC-3 -> UTC-2).
        let tz = chrono_tz::America::Sao_Paulo;
        let f = frame(at(tz, 2018, 11, 4, 12, 0), cal(Unit::Day, tz));
        assert_eq!(f.window_start, 1_541_300_400 * MICROS_PER_SEC); // 03:00Z
        assert_eq!(f.window_end - f.window_start, 23 * H);
    }

    #[test]
    fn weeks_start_on_monday_months_on_the_first() {
        let tz = chrono_tz::Europe::Berlin;
        // 2024-05-16 is a Thursday.
        let now = at(tz, 2024, 5, 16, 9, 0);
        let w = frame(now, cal(Unit::Week, tz));
        assert_eq!(w.window_start, at(tz, 2024, 5, 13, 0, 0));
        assert_eq!(w.window_end, at(tz, 2024, 5, 20, 0, 0));
        let m = frame(now, cal(Unit::Month, tz));
        assert_eq!(m.window_start, at(tz, 2024, 5, 1, 0, 0));
        assert_eq!(m.window_end, at(tz, 2024, 6, 1, 0, 0));
        let dec = frame(at(tz, 2024, 12, 31, 23, 0), cal(Unit::Month, tz));
        assert_eq!(dec.window_end, at(tz, 2025, 1, 1, 0, 0));
        let y = frame(now, cal(Unit::Year, tz));
        assert_eq!(y.window_start, at(tz, 2024, 1, 1, 0, 0));
    }

    #[test]
    fn local_hours_follow_half_hour_offsets() {
        let tz = chrono_tz::Asia::Kolkata; // UTC+5:30
        let f = frame(at(tz, 2024, 1, 1, 10, 45), cal(Unit::Hour, tz));
        assert_eq!(f.window_start, at(tz, 2024, 1, 1, 10, 0));
        assert_eq!(f.window_end - f.window_start, H);
    }

    #[test]
    fn short_units_and_far_times_fall_back_to_the_epoch() {
        let tz = chrono_tz::UTC;
        let f = frame(90 * MICROS_PER_SEC, cal(Unit::Minute, tz));
        assert_eq!((f.window_start, f.window_end), (60_000_000, 120_000_000));
        let far = i64::MAX / 2;
        let f = frame(far, cal(Unit::Day, tz));
        assert!(f.window_start <= far && far < f.window_end);
    }
}
