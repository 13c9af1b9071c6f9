//! Job descriptors: `{queue}:s{shard}:p{priority}:{local_id}`, e.g. `test_queue:s1d1:p1:42`.
//!
//! A descriptor routes every ack, lookup and checkpoint to its shard and priority without a search.
//! Invariants of every descriptor this module accepts or produces:
//! - exactly 4 colon-separated parts;
//! - queue and shard names are non-empty and made of ASCII letters, digits and `_` (Python's
//!   ASCII `\w`), so neither can contain the `:` separator;
//! - the priority is a decimal integer in `1..=127`;
//! - the local id is an unsigned 64-bit decimal integer, digits only (no sign, no spaces).
//!
//! Leading zeros in the numbers are accepted when decoding (`p01` is priority 1), so
//! `encode(decode(s))` is canonical but not always byte-equal to `s`. Encoding never emits them.

use crate::error::{DescriptorError, Malformation};

/// Smallest and largest priority a descriptor may carry.
pub const PRIORITY_RANGE: std::ops::RangeInclusive<i64> = 1..=127;

/// A decoded descriptor, borrowing its names from the input string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor<'a> {
    pub queue: &'a str,
    pub shard: &'a str,
    pub priority: u8,
    pub local_id: u64,
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn is_word(s: &str) -> bool {
    s.bytes().all(is_word_byte)
}

/// A byte of a shard name: `\w`, `-` or `.` (the original took any name without `:`; a Redis
/// shard named `redis-1` or `cache.a` must be served as it is).
fn is_shard_byte(b: u8) -> bool {
    is_word_byte(b) || b == b'-' || b == b'.'
}

/// `s` as an unsigned decimal of digits only (no sign: `str::parse` would take a leading `+`),
/// read in one pass; `None` when it is empty, holds anything else, or passes `u64::MAX`.
fn digits(s: &str) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    s.bytes().try_fold(0_u64, |n, b| {
        if b.is_ascii_digit() {
            n.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        } else {
            None
        }
    })
}

/// Checks a queue name (non-empty ASCII `\w`).
pub fn check_queue(queue: &str) -> Result<(), Malformation> {
    if queue.is_empty() {
        Err(Malformation::EmptyQueue)
    } else if is_word(queue) {
        Ok(())
    } else {
        Err(Malformation::QueueChars(shown(queue)))
    }
}

/// Checks a shard name, without its `s` prefix (non-empty ASCII `\w`, `-` and `.`).
pub fn check_shard(shard: &str) -> Result<(), Malformation> {
    if shard.is_empty() {
        Err(Malformation::EmptyShard)
    } else if shard.bytes().all(is_shard_byte) {
        Ok(())
    } else {
        Err(Malformation::ShardChars(shown(shard)))
    }
}

/// Checks a priority and narrows it to the `u8` a descriptor stores.
pub fn check_priority(priority: i64) -> Result<u8, Malformation> {
    if PRIORITY_RANGE.contains(&priority) {
        u8::try_from(priority).map_err(|_| Malformation::Priority(priority.to_string()))
    } else {
        Err(Malformation::Priority(priority.to_string()))
    }
}

fn split4(s: &str) -> Result<[&str; 4], Malformation> {
    // One pass over the bytes for the three colons (ASCII, so each is a char boundary).
    let mut cuts = [0_usize; 3];
    let mut found = 0;
    for (at, &b) in s.as_bytes().iter().enumerate() {
        if b == b':' {
            if found == cuts.len() {
                return Err(Malformation::PartCount(s.split(':').count()));
            }
            cuts[found] = at;
            found += 1;
        }
    }
    if found < cuts.len() {
        return Err(Malformation::PartCount(found + 1));
    }
    let [a, b, c] = cuts;
    Ok([&s[..a], &s[a + 1..b], &s[b + 1..c], &s[c + 1..]])
}

fn parse_parts(s: &str) -> Result<Descriptor<'_>, Malformation> {
    let [queue, shard_part, priority_part, local_id] = split4(s)?;
    check_queue(queue)?;
    let shard = shard_part
        .strip_prefix('s')
        .ok_or_else(|| Malformation::ShardPrefix(shown(shard_part)))?;
    check_shard(shard)?;
    let priority_text = priority_part
        .strip_prefix('p')
        .ok_or_else(|| Malformation::PriorityPrefix(shown(priority_part)))?;
    let priority = digits(priority_text)
        .and_then(|p| i64::try_from(p).ok())
        .and_then(|p| check_priority(p).ok())
        .ok_or_else(|| Malformation::Priority(shown(priority_text)))?;
    let local_id = digits(local_id).ok_or_else(|| Malformation::LocalId(shown(local_id)))?;
    Ok(Descriptor {
        queue,
        shard,
        priority,
        local_id,
    })
}

/// A well-formed descriptor read straight from its bytes (no splitting, no `str::parse`); `None`
/// for anything else, which `parse_parts` reads (and names what is wrong with). It accepts
/// exactly what `parse_parts` accepts, with the same result: the ACKs of a dequeue bring a
/// hundred descriptors, and the splitting, the checks and `str::parse` of `parse_parts` walked
/// each several times.
fn parse_quick(s: &str) -> Option<Descriptor<'_>> {
    let bytes = s.as_bytes();
    // Where the run of bytes at `from` that `take` accepts ends, when it is not empty.
    let run = |from: usize, take: fn(u8) -> bool| {
        let len = bytes[from..].iter().take_while(|&&b| take(b)).count();
        (len > 0).then_some(from + len)
    };
    let part = |from: usize, take: fn(u8) -> bool| {
        run(from, take).filter(|&end| bytes.get(end) == Some(&b':'))
    };
    let queue_end = part(0, is_word_byte)?;
    let shard_at = queue_end + 2;
    if bytes.get(queue_end + 1) != Some(&b's') {
        return None;
    }
    let shard_end = part(shard_at, is_shard_byte)?;
    if bytes.get(shard_end + 1) != Some(&b'p') {
        return None;
    }
    let priority_at = shard_end + 2;
    let priority_end = run(priority_at, |b| b.is_ascii_digit())?;
    if bytes.get(priority_end) != Some(&b':') {
        return None;
    }
    let id_at = priority_end + 1;
    if run(id_at, |b| b.is_ascii_digit())? != bytes.len() {
        return None;
    }
    let priority = digits(&s[priority_at..priority_end])?;
    let local_id = digits(&s[id_at..])?;
    let priority = i64::try_from(priority)
        .ok()
        .and_then(|p| check_priority(p).ok())?;
    Some(Descriptor {
        queue: &s[..queue_end],
        shard: &s[shard_at..shard_end],
        priority,
        local_id,
    })
}

/// Decodes one descriptor.
pub fn decode(s: &str) -> Result<Descriptor<'_>, DescriptorError> {
    if let Some(descriptor) = parse_quick(s) {
        return Ok(descriptor);
    }
    parse_parts(s).map_err(|reason| DescriptorError::Malformed {
        descriptor: shown(s),
        reason,
    })
}

/// The most characters of a caller's text an error message repeats.
pub const SHOWN_CHARS: usize = 80;

/// `s` as an error names it: whole up to [`SHOWN_CHARS`] characters, else its first ones and
/// `...` (a peer's 10 MB descriptor must not come back whole in the error, nor fill a log).
fn shown(s: &str) -> String {
    match s.char_indices().nth(SHOWN_CHARS) {
        None => s.to_owned(),
        Some((end, _)) => format!("{}...", &s[..end]),
    }
}

/// Decodes a batch; the error names the first bad descriptor and its index.
///
/// The descriptors of a batch mostly share their queue, shard and priority: a descriptor that
/// starts with the one before's `{queue}:s{shard}:p{priority}:` and goes on with digits only is
/// that prefix's descriptor with its own local id, read without checking the prefix again
/// (`decode` would accept it, with the same parts). Anything else goes through `decode`.
pub fn decode_batch<'a, I>(descriptors: I) -> Result<Vec<Descriptor<'a>>, DescriptorError>
where
    I: IntoIterator<Item = &'a str>,
{
    let descriptors = descriptors.into_iter();
    let mut out = Vec::with_capacity(descriptors.size_hint().0);
    let mut last: Option<(&str, Descriptor<'a>)> = None;
    for (index, s) in descriptors.enumerate() {
        if let Some((prefix, before)) = last {
            if let Some(local_id) = s.strip_prefix(prefix).and_then(digits) {
                out.push(Descriptor { local_id, ..before });
                continue;
            }
        }
        let descriptor = decode(s).map_err(|e| e.at_index(index))?;
        last = s.rfind(':').map(|colon| (&s[..=colon], descriptor));
        out.push(descriptor);
    }
    Ok(out)
}

/// Appends the decimal digits of `n` (no sign, no leading zeros).
fn push_decimal(out: &mut String, n: u64) {
    let mut digits = [0_u8; 20];
    let at = crate::store::decimal::uint_digits(n, &mut digits);
    // ASCII digits only: always UTF-8.
    out.push_str(std::str::from_utf8(&digits[at..]).unwrap_or_default());
}

/// Builds descriptors for one queue and shard, reusing one buffer.
///
/// The names are checked once, in [`Encoder::new`]; each [`Encoder::encode`] only checks its
/// priority and appends two numbers to the shared `{queue}:s{shard}:p` prefix.
#[derive(Debug, Clone)]
pub struct Encoder {
    buf: String,
    prefix_len: usize,
}

impl Encoder {
    pub fn new(queue: &str, shard: &str) -> Result<Self, DescriptorError> {
        check_queue(queue).map_err(DescriptorError::InvalidPart)?;
        check_shard(shard).map_err(DescriptorError::InvalidPart)?;
        let mut buf = String::with_capacity(queue.len() + shard.len() + 28);
        buf.push_str(queue);
        buf.push_str(":s");
        buf.push_str(shard);
        buf.push_str(":p");
        let prefix_len = buf.len();
        Ok(Self { buf, prefix_len })
    }

    /// The descriptor for `(priority, local_id)`, valid until the next call.
    pub fn encode(&mut self, priority: i64, local_id: u64) -> Result<&str, DescriptorError> {
        let priority = check_priority(priority).map_err(DescriptorError::InvalidPart)?;
        self.buf.truncate(self.prefix_len);
        push_decimal(&mut self.buf, u64::from(priority));
        self.buf.push(':');
        push_decimal(&mut self.buf, local_id);
        Ok(&self.buf)
    }
}

/// Encodes one descriptor, validating every part.
pub fn encode(
    queue: &str,
    shard: &str,
    priority: i64,
    local_id: u64,
) -> Result<String, DescriptorError> {
    Ok(Encoder::new(queue, shard)?
        .encode(priority, local_id)?
        .to_owned())
}

/// Checks that the encoder's parallel inputs have the same length.
pub fn check_lengths(priorities: usize, local_ids: usize) -> Result<(), DescriptorError> {
    if priorities == local_ids {
        Ok(())
    } else {
        Err(DescriptorError::LengthMismatch {
            priorities,
            local_ids,
        })
    }
}

/// Encodes one descriptor per `(priorities[i], local_ids[i])`, all for one queue and shard.
///
/// The names are checked once per batch; an out-of-range priority fails the whole batch with its
/// index.
pub fn encode_batch(
    queue: &str,
    shard: &str,
    priorities: &[i64],
    local_ids: &[u64],
) -> Result<Vec<String>, DescriptorError> {
    check_lengths(priorities.len(), local_ids.len())?;
    let mut encoder = Encoder::new(queue, shard)?;
    priorities
        .iter()
        .zip(local_ids)
        .enumerate()
        .map(|(index, (&priority, &local_id))| {
            encoder
                .encode(priority, local_id)
                .map(str::to_owned)
                .map_err(|e| e.at_index(index))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_repeats_at_most_the_first_characters_of_a_long_descriptor() {
        let long_id = format!("q:s1:p1:{}", "9".repeat(5000));
        let message = decode(&long_id).unwrap_err().to_string();
        assert!(message.len() < 300, "{message}");
        assert!(
            message.contains(&format!("\"{}...\"", &long_id[..SHOWN_CHARS])),
            "{message}"
        );
        let long_queue = format!("{}:s1:p1:1", "\u{e9}".repeat(3000));
        let message = decode(&long_queue).unwrap_err().to_string();
        assert!(message.len() < 600, "{message}"); // cut on a character, not in one
        let short = "q:s1:px:1";
        assert_eq!(
            decode(short).unwrap_err().to_string(),
            "invalid job descriptor \"q:s1:px:1\": priority \"x\" is not a decimal integer in 1..=127"
        );
    }

    fn malformation(s: &str) -> Malformation {
        match decode(s) {
            Err(DescriptorError::Malformed { descriptor, reason }) => {
                assert_eq!(descriptor, s);
                reason
            }
            other => panic!("{s:?} decoded to {other:?}"),
        }
    }

    #[test]
    fn decodes_the_contract_example() {
        let d = decode("test_queue:s1d1:p1:42").unwrap();
        assert_eq!(
            d,
            Descriptor {
                queue: "test_queue",
                shard: "1d1",
                priority: 1,
                local_id: 42
            }
        );
        let d = decode("q:sredis-1.a:p2:7").unwrap();
        assert_eq!((d.shard, d.priority, d.local_id), ("redis-1.a", 2, 7));
    }

    #[test]
    fn round_trips_extremes() {
        for (q, s, p, id) in [
            ("q", "1", 1, 0),
            ("Q_9", "x_Y", 127, u64::MAX),
            ("_", "_", 64, 1),
        ] {
            let text = encode(q, s, p, id).unwrap();
            let d = decode(&text).unwrap();
            assert_eq!(
                (d.queue, d.shard, i64::from(d.priority), d.local_id),
                (q, s, p, id)
            );
        }
    }

    #[test]
    fn decimal_digits_match_std() {
        for n in [
            0,
            1,
            9,
            10,
            99,
            100,
            12_345,
            u64::from(u32::MAX),
            u64::MAX - 1,
            u64::MAX,
        ] {
            let mut out = String::from("x");
            push_decimal(&mut out, n);
            assert_eq!(out, format!("x{n}"));
        }
    }

    #[test]
    fn encoder_reuses_its_prefix() {
        let mut encoder = Encoder::new("q", "2").unwrap();
        assert_eq!(
            encoder.encode(127, u64::MAX).unwrap(),
            "q:s2:p127:18446744073709551615"
        );
        assert_eq!(encoder.encode(1, 0).unwrap(), "q:s2:p1:0");
        assert!(encoder.encode(0, 0).is_err());
        assert_eq!(encoder.encode(5, 6).unwrap(), "q:s2:p5:6");
    }

    #[test]
    fn accepts_leading_zeros_when_decoding() {
        let d = decode("q:s1:p007:0042").unwrap();
        assert_eq!((d.priority, d.local_id), (7, 42));
    }

    #[test]
    fn names_every_malformation() {
        use Malformation as M;
        let cases = [
            ("", M::PartCount(1)),
            ("q:s1:p1", M::PartCount(3)),
            ("q:s1:p1:2:3", M::PartCount(5)),
            (":s1:p1:2", M::EmptyQueue),
            ("a-b:s1:p1:2", M::QueueChars("a-b".into())),
            ("qué:s1:p1:2", M::QueueChars("qué".into())),
            ("q:1:p1:2", M::ShardPrefix("1".into())),
            ("q:s:p1:2", M::EmptyShard),
            ("q:s1 :p1:2", M::ShardChars("1 ".into())),
            ("q:sa*b:p1:2", M::ShardChars("a*b".into())),
            ("q:s{1}:p1:2", M::ShardChars("{1}".into())),
            ("q:s1:1:2", M::PriorityPrefix("1".into())),
            ("q:s1:p:2", M::Priority(String::new())),
            ("q:s1:p0:2", M::Priority("0".into())),
            ("q:s1:p128:2", M::Priority("128".into())),
            ("q:s1:p+1:2", M::Priority("+1".into())),
            ("q:s1:p-1:2", M::Priority("-1".into())),
            (
                "q:s1:p99999999999999999999:2",
                M::Priority("99999999999999999999".into()),
            ),
            ("q:s1:p1:", M::LocalId(String::new())),
            ("q:s1:p1:+2", M::LocalId("+2".into())),
            ("q:s1:p1:-2", M::LocalId("-2".into())),
            ("q:s1:p1:2x", M::LocalId("2x".into())),
            (
                "q:s1:p1:18446744073709551616",
                M::LocalId("18446744073709551616".into()),
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(malformation(input), expected, "input {input:?}");
        }
    }

    #[test]
    fn the_one_pass_reading_agrees_with_the_parts() {
        let parts: [&[&str]; 4] = [
            &["q", "", "Q_9", "a-b", "qué", "s1", "q:x"],
            &[
                "s1", "1", "s", "s1 ", "sx_Y", "s1:", "ss", "sredis-1", "scache.a", "s-", "s*",
            ],
            &[
                "p1",
                "p",
                "p0",
                "p007",
                "p127",
                "p128",
                "p+1",
                "p-1",
                "1",
                "p99999999999999999999",
            ],
            &[
                "0",
                "42",
                "",
                "+2",
                "2x",
                "0042",
                "18446744073709551615",
                "18446744073709551616",
            ],
        ];
        let mut seen = 0;
        for q in parts[0] {
            for s in parts[1] {
                for p in parts[2] {
                    for id in parts[3] {
                        for text in [format!("{q}:{s}:{p}:{id}"), format!("{q}:{s}:{p}:{id}:")] {
                            let quick = parse_quick(&text);
                            let parts = parse_parts(&text).ok();
                            assert_eq!(quick, parts, "{text:?}");
                            seen += usize::from(quick.is_some());
                        }
                    }
                }
            }
        }
        assert!(seen > 100, "{seen} well-formed cases");
        for text in ["", ":", ":::", "q:s1:p1", "q:s1:p1:2:3", "q:s1:p1:2\n"] {
            assert_eq!(parse_quick(text), None, "{text:?}");
        }
    }

    #[test]
    fn message_names_descriptor_and_problem() {
        let msg = decode("q:s1:p0:2").unwrap_err().to_string();
        assert_eq!(
            msg,
            r#"invalid job descriptor "q:s1:p0:2": priority "0" is not a decimal integer in 1..=127"#
        );
    }

    #[test]
    fn batch_decode_reports_first_bad_index() {
        let err = decode_batch(["q:s1:p1:1", "q:s1:p1:2", "bad", "also:bad"]).unwrap_err();
        assert!(matches!(err, DescriptorError::AtIndex { index: 2, .. }));
        assert!(err
            .to_string()
            .starts_with("descriptor at index 2: invalid job descriptor \"bad\""));
    }

    #[test]
    fn batch_decode_answers_as_one_by_one() {
        // Runs of one prefix, with ids that are not ids in them, and changes of every part.
        let texts = [
            "q:s1:p1:1",
            "q:s1:p1:22",
            "q:s1:p1:007",
            "q:s1:p1:",
            "q:s1:p1:3x",
            "q:s1:p1:18446744073709551616",
            "q:s1:p1:18446744073709551615",
            "q:s1:p1:-4",
            "q:s1:p1:4:5",
            "q:s1:p2:5",
            "q:s1:p1:6",
            "q:s2:p1:7",
            "r:s2:p1:8",
            "q:s1:p1:9",
            "q:s1:p1 :10",
            "q:s1:p128:11",
            "q:s1:p128:12",
            "q:s1:p1:13",
        ];
        for (i, text) in texts.iter().enumerate() {
            let expected = decode(text).map_err(|e| e.at_index(i));
            // each text after the texts before it, the good ones only (a batch stops at an error)
            let before: Vec<&str> = texts[..i]
                .iter()
                .copied()
                .filter(|t| decode(t).is_ok())
                .collect();
            let mut batch = before.clone();
            batch.push(text);
            let got = decode_batch(batch.iter().copied());
            match (&expected, got) {
                (Ok(d), Ok(all)) => assert_eq!(all.last(), Some(d), "{text}"),
                (Err(_), Err(e)) => assert_eq!(
                    e,
                    decode(text).unwrap_err().at_index(before.len()),
                    "{text}"
                ),
                (want, got) => panic!("{text}: {want:?} but {got:?}"),
            }
        }
    }

    #[test]
    fn batch_encode_checks_lengths_names_and_priorities() {
        assert_eq!(
            encode_batch("q", "1", &[1, 2], &[7]).unwrap_err(),
            DescriptorError::LengthMismatch {
                priorities: 2,
                local_ids: 1
            }
        );
        assert_eq!(
            encode_batch("q:x", "1", &[1], &[7]).unwrap_err(),
            DescriptorError::InvalidPart(Malformation::QueueChars("q:x".into()))
        );
        let err = encode_batch("q", "1", &[1, 200], &[7, 8]).unwrap_err();
        assert_eq!(err.to_string(), "descriptor at index 1: cannot encode job descriptor: priority \"200\" is not a decimal integer in 1..=127");
        assert_eq!(
            encode_batch("q", "1", &[1, 3], &[7, 8]).unwrap(),
            ["q:s1:p1:7", "q:s1:p3:8"]
        );
        assert!(encode_batch("q", "1", &[], &[]).unwrap().is_empty());
    }

    #[test]
    fn batch_round_trip() {
        let priorities: Vec<i64> = (0..1000).map(|i| i % 127 + 1).collect();
        let ids: Vec<u64> = (0..1000).map(|i| i * 7_919).collect();
        let encoded = encode_batch("queue", "3d2", &priorities, &ids).unwrap();
        let decoded = decode_batch(encoded.iter().map(String::as_str)).unwrap();
        for ((d, p), id) in decoded.iter().zip(&priorities).zip(&ids) {
            assert_eq!(
                (d.queue, d.shard, i64::from(d.priority), d.local_id),
                ("queue", "3d2", *p, *id)
            );
        }
    }
}
