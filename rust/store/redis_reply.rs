//! Redis replies (RESP2) read straight from the socket's bytes: where one reply ends
//! (`reply_end`), and the hot scripts' replies read into Rust values (`ids_reply`,
//! `claimed_reply`, `ack_reply`, `int_reply`), with no Python object per job.
//!
//! The reader trusts nothing: nesting is at most `MAX_DEPTH` deep, a line at most `MAX_LINE`
//! bytes, and a reply whose headers announce more than the caller's `max_bytes` is refused at
//! once, before its bytes arrive. A script's answers are read as `store.py` reads them: ids as
//! `int(id)`, times as `round(float(seconds) * 1000)` (`redis_rows`), jobs ordered by
//! (run after, id); -1 is a queue missing from `pln_{S}`, and an error reply comes back as its
//! text (`ERR ...`, `NOSCRIPT ...`, `OOM ...`) for Python to map as `shard_errors` does.

use crate::queue::jobs::ClaimedJob;
use crate::store::redis_rows::{count, local_id, ms, order, seconds, RowError, HEAD, WIDTH};

/// Deepest nesting of arrays read (our scripts answer flat arrays).
pub const MAX_DEPTH: usize = 8;
/// Longest header, integer or status line, in bytes (error texts are well under this).
pub const MAX_LINE: usize = 64 * 1024;
/// The fewest bytes any RESP value takes (`+\r\n`): a lower bound for the values still to come.
const MIN_VALUE: usize = 3;

/// What is wrong with a reply: the connection is out of step or the peer is not Redis.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    #[error("unknown RESP type byte {0:#04x} at {1}")]
    TypeByte(u8, usize),
    #[error("bad RESP header {0:?}")]
    Header(String),
    #[error("a line longer than {MAX_LINE} bytes")]
    LongLine,
    #[error("arrays nested deeper than {MAX_DEPTH}")]
    TooDeep,
    #[error("a reply of at least {0} bytes, over the limit of {1}")]
    TooBig(usize, usize),
    #[error("a bulk string not followed by CRLF")]
    BulkEnd,
    #[error("unexpected reply shape: {0}")]
    Shape(String),
    #[error("{0}")]
    Row(#[from] RowError),
}

/// How far a buffer holds a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// One whole reply ends at this offset.
    Complete(usize),
    /// Not whole yet; it cannot end before the buffer is this long (scan again then).
    Partial(usize),
}

/// The line at `at` (without its CRLF) and where the next value starts, or `None` when the
/// CRLF has not arrived.
fn line(buf: &[u8], at: usize) -> Result<Option<(&[u8], usize)>, ReplyError> {
    let rest = &buf[at..];
    let window = &rest[..rest.len().min(MAX_LINE + 2)];
    let mut from = 0;
    // A CR starts the end of the line only where LF follows; headers are short, so this is a
    // few bytes' scan.
    while let Some(n) = window[from..].iter().position(|&b| b == b'\r') {
        let cr = from + n;
        match window.get(cr + 1) {
            Some(b'\n') => return Ok(Some((&rest[..cr], at + cr + 2))),
            Some(_) => from = cr + 1,
            None => break,
        }
    }
    if rest.len() > MAX_LINE {
        Err(ReplyError::LongLine)
    } else {
        Ok(None)
    }
}

/// A header's or integer's decimal text, strictly (an optional `-`, then digits).
fn decimal(text: &[u8]) -> Result<i64, ReplyError> {
    let bad = || ReplyError::Header(String::from_utf8_lossy(text).into_owned());
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    if digits.is_empty() || digits.len() > 19 {
        return Err(bad());
    }
    // Up to 18 digits cannot overflow an i64 (nor its negation): one pass, checking each
    // digit. Only a 19th needs the overflow checks (as `str::parse::<i64>` of the digits).
    let mut n: i64 = 0;
    for (k, &d) in digits.iter().enumerate() {
        if !d.is_ascii_digit() {
            return Err(bad());
        }
        let digit = i64::from(d - b'0');
        n = if k < 18 {
            n * 10 + digit
        } else {
            n.checked_mul(10)
                .and_then(|n| n.checked_add(digit))
                .ok_or_else(bad)?
        };
    }
    Ok(if negative { -n } else { n })
}

/// The plain form of an integer header's text at `at` (after its type byte): an optional `-`,
/// 1 to 18 digits, CRLF. Its value and where the next value starts, read in one pass; `None`
/// for anything else (more digits, a stray byte, the CRLF not arrived yet), which `header`
/// reads through `line` and `decimal`, so that every other case answers exactly as they do.
#[inline]
fn plain_int(buf: &[u8], at: usize) -> Option<(i64, usize)> {
    let negative = buf.get(at) == Some(&b'-');
    let start = at + usize::from(negative);
    let mut i = start;
    let mut n: i64 = 0;
    while let Some(&b) = buf.get(i) {
        if !b.is_ascii_digit() {
            break;
        }
        if i - start == 18 {
            return None;
        }
        n = n * 10 + i64::from(b - b'0');
        i += 1;
    }
    if i == start || buf.get(i..i + 2) != Some(b"\r\n".as_slice()) {
        return None;
    }
    Some((if negative { -n } else { n }, i + 2))
}

/// One value's header line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header<'a> {
    /// The type byte.
    kind: u8,
    /// The text after it.
    body: &'a [u8],
    /// Its integer for `:`, `$` and `*`; 0 for any other type.
    n: i64,
    /// Where the next value starts.
    next: usize,
}

/// The header at `at`; `None` when its CRLF has not arrived.
fn header(buf: &[u8], at: usize) -> Result<Option<Header<'_>>, ReplyError> {
    if let Some(&kind @ (b':' | b'$' | b'*')) = buf.get(at) {
        if let Some((n, next)) = plain_int(buf, at + 1) {
            let body = &buf[at + 1..next - 2];
            return Ok(Some(Header {
                kind,
                body,
                n,
                next,
            }));
        }
    }
    let Some((text, next)) = line(buf, at)? else {
        return Ok(None);
    };
    let Some((&kind, body)) = text.split_first() else {
        return Err(ReplyError::Header(String::new()));
    };
    let n = match kind {
        b':' | b'$' | b'*' => decimal(body)?,
        _ => 0,
    };
    Ok(Some(Header {
        kind,
        body,
        n,
        next,
    }))
}

/// A header's whole text (type byte included), for its error.
fn header_error(kind: u8, body: &[u8]) -> ReplyError {
    let mut text = vec![kind];
    text.extend_from_slice(body);
    ReplyError::Header(String::from_utf8_lossy(&text).into_owned())
}

/// Where the first whole RESP2 value of `buf` ends, refusing one that would pass `max_bytes`.
pub fn reply_end(buf: &[u8], max_bytes: usize) -> Result<Scan, ReplyError> {
    // Values still to read of each open array, innermost last (each counts the one being read):
    // `open[..depth]`, on the stack (nesting is bounded by MAX_DEPTH).
    let mut open = [0_usize; MAX_DEPTH];
    let mut depth = 0;
    let mut at = 0;
    loop {
        if at >= buf.len() {
            return partial(&open[..depth], at + MIN_VALUE, max_bytes);
        }
        let Some(Header {
            kind,
            body,
            n,
            next,
        }) = header(buf, at)?
        else {
            return partial(&open[..depth], buf.len() + 1, max_bytes);
        };
        match kind {
            b'+' | b'-' | b':' => {}
            b'$' => {
                if n >= 0 {
                    let len = usize::try_from(n)
                        .map_err(|_| ReplyError::TooBig(usize::MAX, max_bytes))?;
                    let end = next.saturating_add(len).saturating_add(2);
                    if end > buf.len() {
                        return partial(&open[..depth], end, max_bytes);
                    }
                    if &buf[end - 2..end] != b"\r\n" {
                        return Err(ReplyError::BulkEnd);
                    }
                    at = end;
                } else if n != -1 {
                    return Err(header_error(kind, body));
                }
            }
            b'*' => {
                if n > 0 {
                    let n = usize::try_from(n).unwrap_or(usize::MAX);
                    if n.saturating_mul(MIN_VALUE) > max_bytes {
                        return Err(ReplyError::TooBig(n.saturating_mul(MIN_VALUE), max_bytes));
                    }
                    if depth >= MAX_DEPTH {
                        return Err(ReplyError::TooDeep);
                    }
                    open[depth] = n;
                    depth += 1;
                    at = next;
                    continue;
                } else if n < -1 {
                    return Err(header_error(kind, body));
                }
            }
            other => return Err(ReplyError::TypeByte(other, at)),
        }
        if kind != b'$' || at < next {
            at = next;
        }
        // One value done: close every array it completes.
        loop {
            if depth == 0 {
                return Ok(Scan::Complete(at));
            }
            open[depth - 1] -= 1;
            if open[depth - 1] > 0 {
                break;
            }
            depth -= 1;
        }
    }
}

/// `reply_end`'s answer for a value not all in yet, which ends at `end` at the earliest: the
/// fewest bytes the whole reply takes (the values after it in each `open` array, counted in,
/// each at least `MIN_VALUE` bytes), or `TooBig` past `max_bytes`. Worked out only then, not
/// for each value read.
fn partial(open: &[usize], end: usize, max_bytes: usize) -> Result<Scan, ReplyError> {
    // (each open array's count includes the value being read, or the array inside it being read)
    let after = open
        .iter()
        .map(|left| left - 1)
        .fold(0_usize, usize::saturating_add)
        .saturating_mul(MIN_VALUE);
    let need = end.saturating_add(after);
    if need > max_bytes {
        Err(ReplyError::TooBig(need, max_bytes))
    } else {
        Ok(Scan::Partial(need))
    }
}

/// One RESP value's head, read from a whole reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Item<'a> {
    Int(i64),
    Bulk(Option<&'a [u8]>),
    Array(Option<usize>),
    Status(&'a [u8]),
    Error(&'a [u8]),
}

/// A cursor over one reply: whole when checked by `reply_end` first; from `claimed_split`, maybe
/// not yet (a value not all there is `truncated`, as any other shape it does not expect).
struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn next(&mut self) -> Result<Item<'a>, ReplyError> {
        let truncated = || ReplyError::Shape("truncated".to_owned());
        let Header {
            kind,
            body,
            n,
            next,
        } = header(self.buf, self.at)?.ok_or_else(truncated)?;
        self.at = next;
        Ok(match kind {
            b':' => Item::Int(n),
            b'+' => Item::Status(body),
            b'-' => Item::Error(body),
            // (below -1 a length is no nil but a malformed header, as `reply_end` reads it)
            b'*' | b'$' if n < -1 => return Err(header_error(kind, body)),
            b'*' => Item::Array(usize::try_from(n).ok()),
            b'$' => match usize::try_from(n) {
                Ok(len) => {
                    let end = next.checked_add(len).filter(|&e| e + 2 <= self.buf.len());
                    let end = end.ok_or_else(truncated)?;
                    if &self.buf[end..end + 2] != b"\r\n" {
                        return Err(ReplyError::BulkEnd);
                    }
                    self.at = end + 2;
                    Item::Bulk(Some(&self.buf[next..end]))
                }
                Err(_) => Item::Bulk(None),
            },
            other => return Err(ReplyError::TypeByte(other, self.at)),
        })
    }

    /// A scalar, `None` for nil.
    fn scalar(&mut self) -> Result<Option<Scalar<'a>>, ReplyError> {
        match self.next()? {
            Item::Bulk(b) => Ok(b.map(Scalar::Text)),
            Item::Int(n) => Ok(Some(Scalar::Int(n))),
            other => Err(shape(&format!("a scalar, not {other:?}"))),
        }
    }

    /// A scalar read by `read` from its text (an integer's as its decimal), `None` for nil.
    /// `fast` reads an integer without making its text; where it answers `None`, the text is
    /// made and `read` has it, so both give the same value and the same error.
    fn read<T, E>(
        &mut self,
        fast: impl FnOnce(i64) -> Option<T>,
        read: impl FnOnce(&[u8]) -> Result<T, E>,
    ) -> Result<Option<T>, ReplyError>
    where
        ReplyError: From<E>,
    {
        match self.scalar()? {
            None => Ok(None),
            Some(scalar) => Ok(Some(convert(scalar, fast, read)?)),
        }
    }

    /// `read`, remembering in `last` the scalar it read and its value: a scalar equal to the
    /// one before (a batch's shared run after, creation or claim time) is not read again.
    fn read_again<T: Copy, E>(
        &mut self,
        last: &mut Option<(Scalar<'a>, T)>,
        fast: impl FnOnce(i64) -> Option<T>,
        read: impl FnOnce(&[u8]) -> Result<T, E>,
    ) -> Result<Option<T>, ReplyError>
    where
        ReplyError: From<E>,
    {
        let Some(scalar) = self.scalar()? else {
            return Ok(None);
        };
        if let Some((seen, value)) = *last {
            if seen == scalar {
                return Ok(Some(value));
            }
        }
        let value = convert(scalar, fast, read)?;
        *last = Some((scalar, value));
        Ok(Some(value))
    }
}

/// A scalar's value: `read` of its text, or `fast` of an integer (where `fast` answers `None`,
/// `read` of the integer's decimal text, so both give the same value and the same error).
fn convert<T, E>(
    scalar: Scalar<'_>,
    fast: impl FnOnce(i64) -> Option<T>,
    read: impl FnOnce(&[u8]) -> Result<T, E>,
) -> Result<T, ReplyError>
where
    ReplyError: From<E>,
{
    Ok(match scalar {
        Scalar::Text(text) => read(text)?,
        Scalar::Int(n) => {
            if let Some(value) = fast(n) {
                value
            } else {
                let mut text = Vec::with_capacity(20);
                crate::store::decimal::push_int(&mut text, n);
                read(&text)?
            }
        }
    })
}

/// A scalar value of a reply: an integer, or a bulk string's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scalar<'a> {
    Int(i64),
    Text(&'a [u8]),
}

/// Milliseconds from whole seconds, as `ms(seconds(text))` reads their decimal text.
fn ms_of_int(what: &'static str, seconds: i64) -> Option<i64> {
    // i64 to f64 rounds to nearest, as reading the decimal text does.
    #[allow(clippy::cast_precision_loss)]
    ms(what, seconds as f64, b"").ok()
}

fn shape(what: &str) -> ReplyError {
    ReplyError::Shape(what.to_owned())
}

/// A script's answer: its value, the queue missing (-1), or a server error's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScriptReply<T> {
    Value(T),
    QueueMissing,
    Error(String),
}

/// The head of a script reply: `Ok(Err(..))` for -1 or an error, else the array's length.
fn head(cursor: &mut Cursor<'_>) -> Result<Result<usize, ScriptReply<()>>, ReplyError> {
    match cursor.next()? {
        Item::Int(-1) => Ok(Err(ScriptReply::QueueMissing)),
        Item::Error(text) => Ok(Err(ScriptReply::Error(
            String::from_utf8_lossy(text).into_owned(),
        ))),
        Item::Array(Some(n)) => Ok(Ok(n)),
        other => Err(shape(&format!("an array, not {other:?}"))),
    }
}

fn other<T>(reply: ScriptReply<()>) -> ScriptReply<T> {
    match reply {
        ScriptReply::QueueMissing => ScriptReply::QueueMissing,
        ScriptReply::Error(e) => ScriptReply::Error(e),
        ScriptReply::Value(()) => unreachable!("head answers only -1 or an error"),
    }
}

/// A decimal integer value (an integer reply, or a bulk string of digits).
fn int_value(cursor: &mut Cursor<'_>, what: &'static str) -> Result<i64, ReplyError> {
    cursor
        .read(Some, |text| count(what, text))?
        .ok_or_else(|| shape(&format!("no {what}")))
}

/// `enqueue_jobs.lua`'s answer: the new local ids in job order.
pub fn ids_reply(reply: &[u8]) -> Result<ScriptReply<Vec<i64>>, ReplyError> {
    let mut cursor = Cursor { buf: reply, at: 0 };
    let n = match head(&mut cursor)? {
        Ok(n) => n,
        Err(r) => return Ok(other(r)),
    };
    let mut ids = Vec::with_capacity(n.min(reply.len()));
    for _ in 0..n {
        ids.push(int_value(&mut cursor, "id")?);
    }
    Ok(ScriptReply::Value(ids))
}

/// `ack_jobs.lua`'s answer `{changed, evicted}`: the evicted count.
pub fn ack_reply(reply: &[u8]) -> Result<ScriptReply<i64>, ReplyError> {
    let mut cursor = Cursor { buf: reply, at: 0 };
    match head(&mut cursor)? {
        Ok(2) => {
            int_value(&mut cursor, "changed")?;
            Ok(ScriptReply::Value(int_value(&mut cursor, "evicted")?))
        }
        Ok(n) => Err(shape(&format!("{n} values, not 2"))),
        Err(r) => Ok(other(r)),
    }
}

/// An integer answer (`count_jobs.lua`).
pub fn int_reply(reply: &[u8]) -> Result<ScriptReply<i64>, ReplyError> {
    let mut cursor = Cursor { buf: reply, at: 0 };
    match cursor.next()? {
        Item::Int(-1) => Ok(ScriptReply::QueueMissing),
        Item::Int(n) => Ok(ScriptReply::Value(n)),
        Item::Error(text) => Ok(ScriptReply::Error(
            String::from_utf8_lossy(text).into_owned(),
        )),
        other => Err(shape(&format!("an integer, not {other:?}"))),
    }
}

/// What a dequeue or reserve script answered.
#[derive(Debug, PartialEq)]
pub struct Claimed {
    /// The jobs, in (run after, id) order.
    pub jobs: Vec<ClaimedJob>,
    /// Records found missing (evicted).
    pub evicted: i64,
    /// The call stopped at one of its work budgets before its limit: due jobs may be left
    /// behind what it passed, so the place is not empty (the scripts' `cut`).
    pub cut: bool,
}

/// `dequeue_jobs.lua`'s answer `{evicted, cut, 7 values per job}`: the jobs in (run after, id)
/// order, the evicted count and whether the call stopped at a budget.
pub fn claimed_reply(reply: &[u8]) -> Result<ScriptReply<Claimed>, ReplyError> {
    claimed(&mut Cursor { buf: reply, at: 0 })
}

/// What `claimed_split` found at the start of a buffer.
#[derive(Debug, PartialEq)]
pub enum Split<T> {
    /// Not whole yet: `reply_end`'s `Scan::Partial`.
    Partial(usize),
    /// A dequeue reply (its jobs, or the queue missing) that ends at this offset.
    Read(usize, ScriptReply<T>),
    /// A whole reply that ends at this offset, and is something else: an error reply, or one
    /// `claimed_reply` refuses. Read it with `claimed_reply` for its answer.
    Whole(usize),
}

/// Where the first reply of `buf` ends, read as `claimed_reply` reads a dequeue reply, in one
/// walk instead of `reply_end`'s and then `claimed_reply`'s. Where the reply is read, it ends
/// exactly where `reply_end` says (the same headers, the same CRLF checks); anything else (not
/// all in yet, an error reply, a reply it refuses, one past `max_bytes`) is `reply_end`'s
/// answer, so the stream is split as `reply_end` splits it whatever comes.
pub fn claimed_split(buf: &[u8], max_bytes: usize) -> Result<Split<Claimed>, ReplyError> {
    let mut cursor = Cursor { buf, at: 0 };
    // (every value takes at least MIN_VALUE bytes, so within `max_bytes` no array header can
    // pass `reply_end`'s bound either)
    if let Ok(reply @ (ScriptReply::Value(_) | ScriptReply::QueueMissing)) = claimed(&mut cursor) {
        if cursor.at <= max_bytes {
            return Ok(Split::Read(cursor.at, reply));
        }
    }
    reply_end(buf, max_bytes).map(Split::from)
}

impl<T> From<Scan> for Split<T> {
    /// `reply_end`'s answer, as `claimed_split` gives it for a reply it does not read.
    fn from(scan: Scan) -> Self {
        match scan {
            Scan::Complete(end) => Split::Whole(end),
            Scan::Partial(need) => Split::Partial(need),
        }
    }
}

/// `claimed_reply` from the cursor's place; the cursor ends where the reply does.
fn claimed(cursor: &mut Cursor<'_>) -> Result<ScriptReply<Claimed>, ReplyError> {
    let reply = cursor.buf;
    let n = match head(cursor)? {
        Ok(n) => n,
        Err(r) => return Ok(other(r)),
    };
    if n < HEAD || (n - HEAD) % WIDTH != 0 {
        return Err(shape(&format!("{n} values, not {HEAD} + {WIDTH} per job")));
    }
    let evicted = int_value(cursor, "evicted")?;
    let cut = int_value(cursor, "cut")? != 0;
    let rows = (n - HEAD) / WIDTH;
    let mut keys = Vec::with_capacity(rows.min(reply.len()));
    let mut jobs = Vec::with_capacity(rows.min(reply.len()));
    // The jobs of one enqueue share their score and creation time, and every job of a claim
    // its update time (the claim's): each text is read once per run of equal ones.
    let (mut last_score, mut last_created, mut last_updated) = (None, None, None);
    for _ in 0..rows {
        let id = cursor
            .read(|n| u64::try_from(n).ok(), local_id)?
            .ok_or_else(|| shape("no id"))?;
        let local = i64::try_from(id).map_err(|_| shape("an id past i64"))?;
        #[allow(clippy::cast_precision_loss)] // rounded to nearest, as reading its text is
        let score = cursor
            .read_again(&mut last_score, |n| Some(n as f64), |t| seconds("score", t))?
            .ok_or_else(|| shape("no score"))?;
        let body = match cursor.next()? {
            Item::Bulk(Some(body)) => body.to_vec(),
            _ => return Err(shape("a body that is not a string")),
        };
        let mut attempts = |what: &'static str| -> Result<i64, ReplyError> {
            Ok(cursor.read(Some, |t| count(what, t))?.unwrap_or(0))
        };
        let attempts_allowed = attempts("al")?;
        let attempts_remaining = attempts("ar")?;
        let mut time = |what: &'static str, last| -> Result<i64, ReplyError> {
            let read =
                |t: &[u8]| -> Result<i64, ReplyError> { Ok(ms(what, seconds(what, t)?, t)?) };
            Ok(cursor
                .read_again(last, |n| ms_of_int(what, n), read)?
                .unwrap_or(0))
        };
        let created_at_ms = time("ca", &mut last_created)?;
        let updated_at_ms = time("ua", &mut last_updated)?;
        keys.push((score, id));
        jobs.push(ClaimedJob {
            local_id: local,
            body,
            attempts_allowed,
            attempts_remaining,
            created_at_ms,
            updated_at_ms,
        });
    }
    // Usually in order already (the scripts read PENDING in score order): then not sorted.
    let in_order = keys.windows(2).all(|pair| {
        let ((sa, ia), (sb, ib)) = (pair[0], pair[1]);
        sa.total_cmp(&sb).then(ia.cmp(&ib)).is_le()
    });
    if in_order {
        return Ok(ScriptReply::Value(Claimed { jobs, evicted, cut }));
    }
    let mut slots: Vec<Option<ClaimedJob>> = jobs.into_iter().map(Some).collect();
    let ordered = order(&keys)
        .into_iter()
        .filter_map(|i| slots[i].take())
        .collect();
    Ok(ScriptReply::Value(Claimed {
        jobs: ordered,
        evicted,
        cut,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 1 << 20;

    #[test]
    fn whole_values_end_where_they_end() {
        let cases: [&[u8]; 7] = [
            b"+OK\r\n",
            b"-ERR no\r\n",
            b":-12\r\n",
            b"$3\r\na\r\n\r\n",
            b"$-1\r\n",
            b"*-1\r\n",
            b"*3\r\n:1\r\n*2\r\n$0\r\n\r\n*0\r\n+x\r\n",
        ];
        for case in cases {
            let mut buf = case.to_vec();
            buf.extend_from_slice(b"+next\r\n");
            assert_eq!(
                reply_end(&buf, MAX),
                Ok(Scan::Complete(case.len())),
                "{case:?}"
            );
            // every proper prefix is partial, and its need is a true lower bound
            for cut in 0..case.len() {
                match reply_end(&case[..cut], MAX) {
                    Ok(Scan::Partial(need)) => {
                        assert!(need > cut && need <= case.len(), "{case:?} {cut} {need}");
                    }
                    other => panic!("{case:?} cut at {cut}: {other:?}"),
                }
            }
        }
    }

    /// `header` as `line` and `decimal` read it, without the one-pass form.
    fn slow_header(buf: &[u8]) -> Result<Option<Header<'_>>, ReplyError> {
        let Some((text, next)) = line(buf, 0)? else {
            return Ok(None);
        };
        let Some((&kind, body)) = text.split_first() else {
            return Err(ReplyError::Header(String::new()));
        };
        let n = if b":$*".contains(&kind) {
            decimal(body)?
        } else {
            0
        };
        Ok(Some(Header {
            kind,
            body,
            n,
            next,
        }))
    }

    #[test]
    fn the_one_pass_header_reads_as_line_and_decimal() {
        let mut cases: Vec<Vec<u8>> = Vec::new();
        for kind in [b':', b'$', b'*', b'+', b'-', b'?'] {
            for body in [
                "0",
                "7",
                "-1",
                "-0",
                "-",
                "",
                "+5",
                " 5",
                "5 ",
                "12x",
                "x12",
                "123456789012345678",
                "-123456789012345678",
                "1234567890123456789",
                "9223372036854775807",
                "-9223372036854775808",
                "99999999999999999999",
            ] {
                for tail in ["\r\n", "\r\n:1\r\n", "\r", "", "\rx\r\n", "\n"] {
                    let mut case = vec![kind];
                    case.extend_from_slice(body.as_bytes());
                    case.extend_from_slice(tail.as_bytes());
                    cases.push(case);
                }
            }
        }
        for case in &cases {
            assert_eq!(
                header(case, 0),
                slow_header(case),
                "{:?}",
                String::from_utf8_lossy(case)
            );
        }
    }

    #[test]
    fn hostile_replies_are_refused() {
        assert!(matches!(
            reply_end(b"?x\r\n", MAX),
            Err(ReplyError::TypeByte(b'?', 0))
        ));
        assert!(matches!(
            reply_end(b"$abc\r\n", MAX),
            Err(ReplyError::Header(_))
        ));
        assert!(matches!(
            reply_end(b"$-2\r\n", MAX),
            Err(ReplyError::Header(_))
        ));
        assert!(matches!(
            reply_end(b":\r\n", MAX),
            Err(ReplyError::Header(_))
        ));
        assert!(matches!(
            reply_end(b":99999999999999999999\r\n", MAX),
            Err(ReplyError::Header(_))
        ));
        assert!(matches!(
            reply_end(b"$2\r\nabcd", MAX),
            Err(ReplyError::BulkEnd)
        ));
        assert!(matches!(
            reply_end(b"$9999999999\r\n", MAX),
            Err(ReplyError::TooBig(..))
        ));
        assert!(matches!(
            reply_end(b"*9999999999\r\n", MAX),
            Err(ReplyError::TooBig(..))
        ));
        assert!(matches!(
            reply_end(&b"*1\r\n".repeat(9), MAX),
            Err(ReplyError::TooDeep)
        ));
        assert!(matches!(
            reply_end(&vec![b'+'; MAX_LINE + 3], usize::MAX),
            Err(ReplyError::LongLine)
        ));
        // an empty line has no type byte
        assert!(reply_end(b"\r\n", MAX).is_err());
    }

    #[test]
    fn script_replies() {
        assert_eq!(
            ids_reply(b"*2\r\n:5\r\n:6\r\n"),
            Ok(ScriptReply::Value(vec![5, 6]))
        );
        assert_eq!(ids_reply(b"*0\r\n"), Ok(ScriptReply::Value(vec![])));
        assert_eq!(ids_reply(b":-1\r\n"), Ok(ScriptReply::QueueMissing));
        assert_eq!(
            ids_reply(b"-NOSCRIPT No matching script\r\n"),
            Ok(ScriptReply::Error("NOSCRIPT No matching script".to_owned()))
        );
        assert!(ids_reply(b"+OK\r\n").is_err());
        assert!(ids_reply(b"*1\r\n$1\r\nx\r\n").is_err());
        assert_eq!(ack_reply(b"*2\r\n:3\r\n:1\r\n"), Ok(ScriptReply::Value(1)));
        assert!(ack_reply(b"*1\r\n:3\r\n").is_err());
        assert_eq!(int_reply(b":0\r\n"), Ok(ScriptReply::Value(0)));
        assert_eq!(int_reply(b":-1\r\n"), Ok(ScriptReply::QueueMissing));
    }

    fn bulk(out: &mut Vec<u8>, text: &[u8]) {
        out.extend_from_slice(format!("${}\r\n", text.len()).as_bytes());
        out.extend_from_slice(text);
        out.extend_from_slice(b"\r\n");
    }

    #[test]
    fn claimed_jobs_are_read_and_ordered() {
        let mut reply = b"*16\r\n:2\r\n:1\r\n".to_vec();
        for (id, score, ua) in [("10", "5.5", "7.0"), ("9", "5.5", "7.0005")] {
            bulk(&mut reply, id.as_bytes());
            bulk(&mut reply, score.as_bytes());
            bulk(&mut reply, b"body\r\n");
            bulk(&mut reply, b"3");
            reply.extend_from_slice(b"$-1\r\n"); // ar absent: 0
            bulk(&mut reply, b"1.7E9");
            bulk(&mut reply, ua.as_bytes());
        }
        assert_eq!(reply_end(&reply, MAX), Ok(Scan::Complete(reply.len())));
        let ScriptReply::Value(Claimed { jobs, evicted, cut }) = claimed_reply(&reply).unwrap()
        else {
            panic!("not a value")
        };
        assert_eq!(evicted, 2);
        assert!(cut);
        assert_eq!(jobs.iter().map(|j| j.local_id).collect::<Vec<_>>(), [9, 10]);
        assert_eq!(jobs[0].body, b"body\r\n");
        assert_eq!(jobs[0].attempts_allowed, 3);
        assert_eq!(jobs[0].attempts_remaining, 0);
        assert_eq!(jobs[0].created_at_ms, 1_700_000_000_000);
        assert_eq!(jobs[0].updated_at_ms, 7000); // 7000.5 rounds to even
        assert_eq!(
            claimed_reply(b"*2\r\n:0\r\n:0\r\n").unwrap(),
            ScriptReply::Value(Claimed {
                jobs: vec![],
                evicted: 0,
                cut: false
            })
        );
        assert!(claimed_reply(b"*1\r\n:0\r\n").is_err());
        assert!(claimed_reply(b"*3\r\n:0\r\n:0\r\n:1\r\n").is_err());
        assert_eq!(claimed_reply(b":-1\r\n"), Ok(ScriptReply::QueueMissing));
    }

    #[test]
    fn runs_of_equal_times_read_as_each_time_alone() {
        // Scores and times from small pools, so runs of equal texts (and an integer beside the
        // text of its value) come up; ids in any order. The answer must be each row read on
        // its own, then ordered by (score, id).
        let scores: [&[u8]; 6] = [b"5.5", b"1764347123.4560001", b"1.7E9", b"3", b":3", b"3.0"];
        let times: [&[u8]; 4] = [b"1700000000.123", b"7.0005", b":12", b"12"];
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            usize::try_from(x % n as u64).unwrap()
        };
        let value = |out: &mut Vec<u8>, text: &[u8]| {
            if let Some(int) = text.strip_prefix(b":") {
                out.extend_from_slice(b":");
                out.extend_from_slice(int);
                out.extend_from_slice(b"\r\n");
            } else {
                bulk(out, text);
            }
        };
        let read_ms = |text: &[u8]| {
            let text = text.strip_prefix(b":").unwrap_or(text);
            ms("t", seconds("t", text).unwrap(), text).unwrap()
        };
        for _ in 0..300 {
            let rows = 1 + next(12);
            let mut reply = format!("*{}\r\n:0\r\n:0\r\n", 2 + 7 * rows).into_bytes();
            let mut keys = Vec::new();
            let mut expected = Vec::new();
            let (mut score, mut ca, mut ua) = (next(6), next(4), next(4));
            for _ in 0..rows {
                // mostly the text before (a run), sometimes another
                if next(3) == 0 {
                    score = next(6);
                }
                if next(3) == 0 {
                    ca = next(4);
                }
                if next(3) == 0 {
                    ua = next(4);
                }
                let id = 1 + next(50) as u64;
                bulk(&mut reply, id.to_string().as_bytes());
                value(&mut reply, scores[score]);
                bulk(&mut reply, b"b");
                bulk(&mut reply, b"1");
                bulk(&mut reply, b"1");
                value(&mut reply, times[ca]);
                value(&mut reply, times[ua]);
                let text = scores[score].strip_prefix(b":").unwrap_or(scores[score]);
                keys.push((seconds("s", text).unwrap(), id));
                expected.push((id, read_ms(times[ca]), read_ms(times[ua])));
            }
            splits_as_two_walks(&reply);
            let ScriptReply::Value(Claimed { jobs, .. }) = claimed_reply(&reply).unwrap() else {
                panic!("not a value")
            };
            let want: Vec<_> = order(&keys).into_iter().map(|i| expected[i]).collect();
            let got: Vec<_> = jobs
                .iter()
                .map(|j| {
                    (
                        u64::try_from(j.local_id).unwrap(),
                        j.created_at_ms,
                        j.updated_at_ms,
                    )
                })
                .collect();
            assert_eq!(got, want);
        }
        // A bad text is refused wherever it stands in a run of equal ones.
        let mut reply = b"*16\r\n:0\r\n:0\r\n".to_vec();
        for id in [b"1", b"2"] {
            bulk(&mut reply, id);
            bulk(&mut reply, b"soon");
            for field in [b"b".as_slice(), b"1", b"1", b"1.0", b"1.0"] {
                bulk(&mut reply, field);
            }
        }
        assert!(claimed_reply(&reply).is_err());
    }

    /// `claimed_split` against `reply_end` then `claimed_reply`, on `case` followed by
    /// another reply and on every proper prefix of it.
    fn splits_as_two_walks(case: &[u8]) {
        let mut buf = case.to_vec();
        buf.extend_from_slice(b"+next\r\n");
        let want = match claimed_reply(case) {
            Ok(reply @ (ScriptReply::Value(_) | ScriptReply::QueueMissing)) => {
                Split::Read(case.len(), reply)
            }
            _ => Split::Whole(case.len()),
        };
        assert_eq!(reply_end(&buf, MAX), Ok(Scan::Complete(case.len())));
        assert_eq!(claimed_split(&buf, MAX), Ok(want), "{case:?}");
        for cut in 0..case.len() {
            let want = reply_end(&case[..cut], MAX).map(Split::from);
            assert_eq!(
                claimed_split(&case[..cut], MAX),
                want,
                "{case:?} cut at {cut}"
            );
        }
        // past the bound, as reply_end: a reply whose bytes are over it is read alone
        let small = case.len() - 1;
        let want = reply_end(case, small).map(Split::from);
        assert_eq!(claimed_split(case, small), want, "{case:?} over {small}");
    }

    #[test]
    fn a_dequeue_reply_splits_as_reply_end_splits_it() {
        let mut cases: Vec<Vec<u8>> = vec![
            b"*2\r\n:0\r\n:0\r\n".to_vec(),
            b"*1\r\n:0\r\n".to_vec(),
            b":-1\r\n".to_vec(),
            b"-NOSCRIPT No matching script\r\n".to_vec(),
            b"*3\r\n:0\r\n:0\r\n:1\r\n".to_vec(),
            b"*-1\r\n".to_vec(),
            b"+OK\r\n".to_vec(),
            b"*9\r\n:0\r\n:0\r\n*1\r\n:1\r\n:2\r\n$1\r\nb\r\n:1\r\n:1\r\n:1\r\n:1\r\n".to_vec(),
            // a length below -1 is a bad header, not a nil (found by fuzzing: the cursor read it
            // as a nil where reply_end refused it)
            b"*9\r\n:0\r\n:0\r\n:5\r\n:1\r\n$0\r\n\r\n$-2\r\n:3\r\n:0\r\n:0\r\n".to_vec(),
            b"*9\r\n:0\r\n:0\r\n:5\r\n:1\r\n$0\r\n\r\n*-2\r\n:3\r\n:0\r\n:0\r\n".to_vec(),
            b"*-2\r\n".to_vec(),
        ];
        for as_int in [true, false] {
            cases.push(one_job(as_int, 7, 5, 3, 1_700_000_000));
            cases.push(one_job(as_int, -1, 0, 0, 0)); // refused: a bad id
        }
        let mut many = b"*16\r\n:2\r\n:1\r\n".to_vec();
        for (id, score) in [("10", "5.5"), ("9", "5.5")] {
            for field in [id, score, "body\r\n", "3", "3", "1.7E9", "7.0"] {
                bulk(&mut many, field.as_bytes());
            }
        }
        cases.push(many.clone());
        // a body whose CRLF is missing: reply_end's BulkEnd, not a job
        let mut bad = many.clone();
        let body = bad.windows(6).position(|w| w == b"body\r\n").unwrap();
        bad[body + 6] = b'x';
        cases.push(bad);
        for case in &cases {
            if reply_end(case, MAX).is_ok() {
                splits_as_two_walks(case);
            } else {
                assert_eq!(
                    claimed_split(case, MAX).map(|_| ()),
                    reply_end(case, MAX).map(|_| ()),
                    "{case:?}"
                );
            }
        }
    }

    /// One job's reply with each number field an integer (`:n`) or its decimal text (`$`).
    fn one_job(as_int: bool, id: i64, score: i64, al: i64, ca: i64) -> Vec<u8> {
        let mut reply = b"*9\r\n:0\r\n:0\r\n".to_vec();
        for (k, n) in [id, score, 0, al, al, ca, ca].into_iter().enumerate() {
            if k == 2 {
                bulk(&mut reply, b"b");
            } else if as_int {
                reply.extend_from_slice(format!(":{n}\r\n").as_bytes());
            } else {
                bulk(&mut reply, n.to_string().as_bytes());
            }
        }
        reply
    }

    #[test]
    fn integers_read_as_their_decimal_text_reads() {
        let huge = 9_300_000_000_000_000; // seconds past the milliseconds' range
        for (id, score, al, ca) in [
            (7, 5, 3, 1_700_000_000),
            (1, -5, -2, -1_700_000_000),
            (i64::MAX, i64::MIN + 1, i64::MAX, 0),
            (-1, 0, 0, 0),
            (1, 0, 0, huge),
        ] {
            let as_int = claimed_reply(&one_job(true, id, score, al, ca));
            let as_text = claimed_reply(&one_job(false, id, score, al, ca));
            assert_eq!(as_int, as_text, "{id} {score} {al} {ca}");
        }
        let ok = claimed_reply(&one_job(true, 7, 5, 3, 1_700_000_000)).unwrap();
        let ScriptReply::Value(Claimed { jobs, .. }) = ok else {
            panic!("not a value")
        };
        assert_eq!(jobs[0].local_id, 7);
        assert_eq!(jobs[0].created_at_ms, 1_700_000_000_000);
        assert!(claimed_reply(&one_job(true, -1, 0, 0, 0)).is_err());
        assert!(claimed_reply(&one_job(true, 1, 0, 0, huge)).is_err());
        assert_eq!(
            ids_reply(b"*2\r\n:5\r\n$1\r\n6\r\n"),
            Ok(ScriptReply::Value(vec![5, 6]))
        );
    }
}
