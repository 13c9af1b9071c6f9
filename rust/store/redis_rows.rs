//! Reading the job rows of the Redis store's dequeue and reserve replies.
//!
//! The scripts answer `{evicted, cut, then 7 values per job: id, score, bd, al, ar, ca, ua}`, with
//! the ids and times as text: an id in decimal, a score or time as seconds since the epoch in
//! Redis' or Java's float notation (`1700000000.123`, `1.7E9`). This module turns the text into
//! numbers exactly as the Python store did: `int(id)`, and `round(float(s) * 1000.0)` for times,
//! rounding halves to even as Python's `round` does.

/// Values per job in a reply: id, score, bd, al, ar, ca, ua.
pub const WIDTH: usize = 7;

/// Values before the jobs in a reply: the evicted count and the call's cut.
pub const HEAD: usize = 2;

/// A number field that is not what the layout says it holds.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{what} {text:?} is not {expected}")]
pub struct RowError {
    pub what: &'static str,
    pub text: String,
    pub expected: &'static str,
}

fn error(what: &'static str, text: &[u8], expected: &'static str) -> RowError {
    RowError {
        what,
        text: String::from_utf8_lossy(text).into_owned(),
        expected,
    }
}

/// ASCII text parsed as `T`, surrounding ASCII whitespace allowed (as Python's `int()` and
/// `float()` allow it).
fn parse<T: std::str::FromStr>(
    what: &'static str,
    text: &[u8],
    expected: &'static str,
) -> Result<T, RowError> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.trim_ascii().parse::<T>().ok())
        .ok_or_else(|| error(what, text, expected))
}

/// Seconds as float text, as Python's `float()` reads it.
pub fn seconds(what: &'static str, text: &[u8]) -> Result<f64, RowError> {
    match plain_decimal(text) {
        Some(value) => Ok(value),
        None => parse(what, text, "a number of seconds"),
    }
}

/// `text` read as a float when it is plain `digits[.digits]` of at most 15 digits in all (the
/// times the scripts write): the digits as an integer (exact in f64) divided by a power of ten
/// (exact up to 1e22), which IEEE division rounds correctly, as `str::parse` would. None for
/// anything else.
fn plain_decimal(text: &[u8]) -> Option<f64> {
    const POWERS: [f64; 16] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
    ];
    // One pass: the digits as one integer, and where the point was (at most one, not first).
    let mut n: u64 = 0;
    let mut digits = 0;
    let mut point: Option<usize> = None;
    for &b in text {
        if b.is_ascii_digit() {
            digits += 1;
            if digits > 15 {
                return None;
            }
            n = n * 10 + u64::from(b - b'0');
        } else if b == b'.' && point.is_none() && digits > 0 {
            point = Some(digits);
        } else {
            return None;
        }
    }
    if digits == 0 {
        return None;
    }
    let fraction = point.map_or(0, |at| digits - at);
    #[allow(clippy::cast_precision_loss)] // below 10**15: exact
    Some(n as f64 / POWERS[fraction])
}

/// Milliseconds from seconds: `round(seconds * 1000.0)`, halves to even.
pub fn ms(what: &'static str, seconds: f64, text: &[u8]) -> Result<i64, RowError> {
    let ms = (seconds * 1000.0).round_ties_even();
    // i64's range, exclusive of the end that f64 cannot hold exactly (NaN is in no range)
    if (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&ms) {
        #[allow(clippy::cast_possible_truncation)] // in range and integral, checked above
        Ok(ms as i64)
    } else {
        Err(error(what, text, "a time in milliseconds' range"))
    }
}

/// A decimal local id.
pub fn local_id(text: &[u8]) -> Result<u64, RowError> {
    match plain_digits(text) {
        Some(n) => Ok(n),
        None => parse("id", text, "a decimal local id"),
    }
}

/// A decimal count (attempts allowed or remaining).
pub fn count(what: &'static str, text: &[u8]) -> Result<i64, RowError> {
    match plain_digits(text).and_then(|n| i64::try_from(n).ok()) {
        Some(n) => Ok(n),
        None => parse(what, text, "a decimal integer"),
    }
}

/// `text` as a number when it is 1 to 18 ASCII digits and nothing else (what the scripts
/// write); None for anything else, left to `parse`.
fn plain_digits(text: &[u8]) -> Option<u64> {
    if text.is_empty() || text.len() > 18 {
        return None;
    }
    let mut n: u64 = 0;
    for &d in text {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u64::from(d - b'0');
    }
    Some(n)
}

/// Row indexes in `(score, id)` order, the order the store hands jobs out in; stable, so equal
/// keys keep the reply's order (Python's `sort`).
#[must_use]
pub fn order(keys: &[(f64, u64)]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by(|&a, &b| {
        let (sa, ia) = keys[a];
        let (sb, ib) = keys[b];
        sa.total_cmp(&sb).then(ia.cmp(&ib))
    });
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_read_our_and_javas_notation() {
        assert_eq!(seconds("ca", b"1700000000.123"), Ok(1_700_000_000.123));
        assert_eq!(seconds("ca", b"1.7E9"), Ok(1.7e9));
        assert_eq!(seconds("ca", b" 12.5\n"), Ok(12.5));
        assert!(seconds("ca", b"soon").is_err());
        assert_eq!(seconds("ca", b"12."), Ok(12.0));
        assert_eq!(seconds("ca", b".5"), Ok(0.5)); // not plain: read by str::parse
        assert!(seconds("ca", b"1.2.3").is_err());
        assert_eq!(seconds("ca", b"123456789.012345"), Ok(123_456_789.012_345));
        assert_eq!(
            seconds("ca", b"1234567890.1234567"),
            Ok(1_234_567_890.123_456_7)
        );
        assert_eq!(
            plain_decimal(b"1234567890.12345"),
            Some(1_234_567_890.123_45)
        );
        assert_eq!(plain_decimal(b"1234567890.123456"), None); // 16 digits: str::parse's
        assert_eq!(plain_decimal(b".5"), None);
        assert_eq!(plain_decimal(b"5."), Some(5.0));
        assert!(seconds("ca", b"").is_err());
    }

    #[test]
    fn milliseconds_round_halves_to_even_like_python() {
        assert_eq!(ms("t", 0.0005, b""), Ok(0)); // 0.5 -> 0
        assert_eq!(ms("t", 0.0015, b""), Ok(2)); // 1.5 -> 2
        assert_eq!(ms("t", 0.0025, b""), Ok(2)); // 2.5 -> 2
        assert_eq!(ms("t", 1_700_000_000.123, b""), Ok(1_700_000_000_123));
        assert_eq!(ms("t", -1.5, b""), Ok(-1500));
        assert!(ms("t", f64::INFINITY, b"inf").is_err());
        // the plain-decimal fast paths agree with str::parse
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let digits = usize::try_from(x % 16).unwrap_or(0) + 1;
            let text = format!(
                "{:0digits$}",
                (x >> 4) % 10_u64.pow(u32::try_from(digits).unwrap_or(0))
            );
            let point = usize::try_from((x >> 60) % 17).unwrap_or(0);
            let text = if point < text.len() {
                format!(
                    "{}.{}",
                    &text[..text.len() - point],
                    &text[text.len() - point..]
                )
            } else {
                text
            };
            let want: f64 = text.parse().unwrap_or(f64::NAN);
            let got = seconds("t", text.as_bytes()).unwrap_or(f64::NAN);
            assert_eq!(got.to_bits(), want.to_bits(), "{text}");
        }
        for text in [
            "0",
            "7",
            "123456789012345678",
            "1763900000.123",
            "1.5",
            " 12",
            "1e3",
            ".5",
            "5.",
            "-1",
        ] {
            let want: Option<f64> = text.trim_ascii().parse().ok();
            assert_eq!(seconds("t", text.as_bytes()).ok(), want, "{text}");
            let want: Option<u64> = text.trim_ascii().parse().ok();
            assert_eq!(local_id(text.as_bytes()).ok(), want, "{text}");
            let want: Option<i64> = text.trim_ascii().parse().ok();
            assert_eq!(count("c", text.as_bytes()).ok(), want, "{text}");
        }
        assert!(ms("t", f64::NAN, b"nan").is_err());
        assert!(ms("t", 1e17, b"1e17").is_err());
    }

    #[test]
    fn ids_and_counts_are_decimal() {
        assert_eq!(local_id(b"42"), Ok(42));
        assert_eq!(local_id(b"18446744073709551615"), Ok(u64::MAX));
        assert!(local_id(b"-1").is_err());
        assert!(local_id(b"4x").is_err());
        assert_eq!(count("al", b"-3"), Ok(-3));
        assert_eq!(
            count("al", b"two").unwrap_err().to_string(),
            "al \"two\" is not a decimal integer"
        );
    }

    #[test]
    fn order_is_by_score_then_id_and_stable() {
        let keys = [(2.0, 1), (1.0, 10), (1.0, 9), (1.0, 9), (0.5, 100)];
        assert_eq!(order(&keys), vec![4, 2, 3, 1, 0]);
        assert!(order(&[]).is_empty());
    }
}
