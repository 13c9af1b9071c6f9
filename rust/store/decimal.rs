//! Integers as decimal text, appended to a byte buffer without going through `fmt`: the
//! `MySQL` inserts and the Redis commands write thousands of them per call.

/// Appends `value` in decimal (`-` first when negative).
pub fn push_int(out: &mut Vec<u8>, value: i64) {
    if value < 0 {
        out.push(b'-');
    }
    push_uint(out, value.unsigned_abs());
}

/// Appends `value` in decimal.
pub fn push_uint(out: &mut Vec<u8>, value: u64) {
    let mut digits = [0_u8; 20];
    let mut at = digits.len();
    let mut rest = value;
    loop {
        at -= 1;
        // The remainder is below 10: a digit.
        digits[at] = b'0' + u8::try_from(rest % 10).unwrap_or(0);
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
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
}
