//! Integers as decimal text, appended to a byte buffer without going through `fmt`: the
//! `MySQL` inserts and the Redis commands write thousands of them per call.

/// Appends `value` in decimal (`-` first when negative).
pub fn push_int(out: &mut Vec<u8>, value: i64) {
    if value < 0 {
        out.push(b'-');
    }
    push_uint(out, value.unsigned_abs());
}

/// The two-digit numbers `00` to `99`, side by side: a number is written two digits per division.
const PAIRS: [u8; 200] = {
    let mut pairs = [0_u8; 200];
    let mut n = 0;
    while n < 100 {
        // n < 100: both quotient and remainder are single digits.
        #[allow(clippy::cast_possible_truncation)]
        {
            pairs[2 * n] = b'0' + (n / 10) as u8;
            pairs[2 * n + 1] = b'0' + (n % 10) as u8;
        }
        n += 1;
    }
    pairs
};

/// Writes `value` in decimal at the end of `digits`; answers where its first digit is.
pub fn uint_digits(value: u64, digits: &mut [u8; 20]) -> usize {
    let mut at = digits.len();
    let mut rest = value;
    while rest >= 100 {
        // The remainder is below 100: an index into PAIRS.
        #[allow(clippy::cast_possible_truncation)]
        let pair = (rest % 100) as usize * 2;
        rest /= 100;
        at -= 2;
        digits[at..at + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    // Below 100 here.
    #[allow(clippy::cast_possible_truncation)]
    let rest = rest as usize;
    if rest >= 10 {
        at -= 2;
        digits[at..at + 2].copy_from_slice(&PAIRS[rest * 2..rest * 2 + 2]);
    } else {
        at -= 1;
        digits[at] = PAIRS[rest * 2 + 1];
    }
    at
}

/// Appends `value` in decimal.
pub fn push_uint(out: &mut Vec<u8>, value: u64) {
    let mut digits = [0_u8; 20];
    let at = uint_digits(value, &mut digits);
    out.extend_from_slice(&digits[at..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn as_rust_formats_them() {
        for value in [0, 1, -1, 9, 10, -10, 123_456_789, i64::MIN, i64::MAX] {
            let mut out = b"x".to_vec();
            push_int(&mut out, value);
            assert_eq!(out, format!("x{value}").into_bytes());
        }
        let mut out = Vec::new();
        push_uint(&mut out, u64::MAX);
        assert_eq!(out, u64::MAX.to_string().into_bytes());
    }

    #[test]
    fn every_digit_count_and_boundary() {
        let mut value: u64 = 1;
        for _ in 0..20 {
            for n in [value - 1, value, value + 1, value.saturating_mul(10) - 1] {
                let mut out = Vec::new();
                push_uint(&mut out, n);
                assert_eq!(out, n.to_string().into_bytes());
            }
            value = value.saturating_mul(10);
        }
        for n in 0..10_000_u64 {
            let mut out = Vec::new();
            push_uint(&mut out, n);
            assert_eq!(out, n.to_string().into_bytes());
        }
    }
}
