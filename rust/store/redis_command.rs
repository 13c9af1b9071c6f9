//! Redis commands in RESP, the wire form a client sends: `*<n>\r\n`, then `$<len>\r\n<bytes>\r\n`
//! per argument. The Redis backend's scripts take hundreds of arguments a call (five per job);
//! hiredis packed them from Python objects at 0.13-0.25 µs each on the development machine.

use crate::store::decimal::{push_uint, uint_digits};

/// Appends a `$` or `*` marker, `n` in decimal and CRLF.
fn header(buf: &mut Vec<u8>, marker: u8, n: usize) {
    buf.push(marker);
    push_uint(buf, n as u64);
    buf.extend_from_slice(b"\r\n");
}

/// A command of a known number of arguments, written one argument at a time.
#[derive(Debug)]
pub struct Command {
    buf: Vec<u8>,
}

impl Command {
    /// A command of `args` arguments; `capacity` is a hint for the bytes to come.
    #[must_use]
    pub fn new(args: usize, capacity: usize) -> Self {
        let mut buf = Vec::with_capacity(capacity + 16);
        header(&mut buf, b'*', args);
        Self { buf }
    }

    /// One argument, as its bytes.
    pub fn bulk(&mut self, arg: &[u8]) {
        header(&mut self.buf, b'$', arg.len());
        self.buf.extend_from_slice(arg);
        self.buf.extend_from_slice(b"\r\n");
    }

    /// One argument, an integer in decimal, as Redis reads it: made on the stack, header and
    /// all (`$`, at most two digits of length, the sign and up to 20 digits), and appended in
    /// one copy.
    pub fn int(&mut self, arg: i64) {
        let mut digits = [0_u8; 20];
        let at = uint_digits(arg.unsigned_abs(), &mut digits);
        let len = digits.len() - at + usize::from(arg < 0);
        let mut out = [0_u8; 30];
        out[0] = b'$';
        let mut n = 1;
        if len >= 10 {
            out[n] = b'0' + u8::try_from(len / 10).unwrap_or(0);
            n += 1;
        }
        out[n] = b'0' + u8::try_from(len % 10).unwrap_or(0);
        out[n + 1..n + 3].copy_from_slice(b"\r\n");
        n += 3;
        if arg < 0 {
            out[n] = b'-';
            n += 1;
        }
        out[n..n + 20 - at].copy_from_slice(&digits[at..]);
        n += 20 - at;
        out[n..n + 2].copy_from_slice(b"\r\n");
        self.buf.extend_from_slice(&out[..n + 2]);
    }

    #[must_use]
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_counted_and_length_prefixed() {
        let mut cmd = Command::new(4, 0);
        cmd.bulk(b"EVALSHA");
        cmd.bulk(b"");
        cmd.int(-12);
        cmd.bulk("é\r\n".as_bytes());
        assert_eq!(
            cmd.into_bytes(),
            b"*4\r\n$7\r\nEVALSHA\r\n$0\r\n\r\n$3\r\n-12\r\n$4\r\n\xc3\xa9\r\n\r\n".to_vec()
        );
    }

    #[test]
    fn no_arguments() {
        assert_eq!(Command::new(0, 0).into_bytes(), b"*0\r\n".to_vec());
    }

    #[test]
    fn extreme_integers() {
        let mut cmd = Command::new(2, 0);
        cmd.int(i64::MIN);
        cmd.int(i64::MAX);
        let text = String::from_utf8(cmd.into_bytes()).unwrap();
        assert_eq!(
            text,
            "*2\r\n$20\r\n-9223372036854775808\r\n$19\r\n9223372036854775807\r\n"
        );
    }

    #[test]
    fn an_integer_is_the_bulk_string_of_its_decimal() {
        let mut value: i64 = 1;
        let mut values = vec![0, i64::MIN, i64::MAX, i64::MIN + 1];
        for _ in 0..19 {
            values.extend([value - 1, value, value + 1, -value, -value - 1, 1 - value]);
            value = value.saturating_mul(10);
        }
        for v in values {
            let mut int = Command::new(1, 0);
            int.int(v);
            let mut bulk = Command::new(1, 0);
            bulk.bulk(v.to_string().as_bytes());
            assert_eq!(int.into_bytes(), bulk.into_bytes(), "{v}");
        }
    }
}
