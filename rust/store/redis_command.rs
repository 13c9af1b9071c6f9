//! Redis commands in RESP, the wire form a client sends: `*<n>\r\n`, then `$<len>\r\n<bytes>\r\n`
//! per argument. The Redis backend's scripts take hundreds of arguments a call (five per job);
//! hiredis packed them from Python objects at 0.13-0.25 µs each on the development machine.

use crate::store::decimal::{push_int, push_uint};

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
    /// An integer's text, reused from one to the next.
    scratch: Vec<u8>,
}

impl Command {
    /// A command of `args` arguments; `capacity` is a hint for the bytes to come.
    #[must_use]
    pub fn new(args: usize, capacity: usize) -> Self {
        let mut buf = Vec::with_capacity(capacity + 16);
        header(&mut buf, b'*', args);
        Self {
            buf,
            scratch: Vec::with_capacity(20),
        }
    }

    /// One argument, as its bytes.
    pub fn bulk(&mut self, arg: &[u8]) {
        header(&mut self.buf, b'$', arg.len());
        self.buf.extend_from_slice(arg);
        self.buf.extend_from_slice(b"\r\n");
    }

    /// One argument, an integer in decimal, as Redis reads it.
    pub fn int(&mut self, arg: i64) {
        let mut text = std::mem::take(&mut self.scratch);
        text.clear();
        push_int(&mut text, arg);
        self.bulk(&text);
        self.scratch = text;
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
}
