//! The `MySQL` backend's multi-row enqueue `INSERT`, rendered in one pass.
//!
//! Each row is `(0, attempts, attempts, 'custom_status', 'now', 'now', 'run_after', X'body')`, the
//! columns of `enqueue_jobs.sql`, written byte for byte as `PyMySQL` 1.1+/2.x writes the same
//! parameters through the store's connection: ints in decimal, strings quoted with `PyMySQL`'s
//! escape table (or only `'` doubled under `NO_BACKSLASH_ESCAPES`), bytes as a lowercase hex
//! literal (which no `sql_mode` or connection charset can misread), times as naive UTC
//! `'YYYY-MM-DD HH:MM:SS.ffffff'`. Values are never copied in unescaped.
//!
//! Rows are cut into statements so that each one stays within a byte budget (a row bigger than
//! the budget still goes, alone): the caller derives the budget from `max_allowed_packet`.

use crate::store::decimal::push_int;

/// Earliest TIMESTAMP: 1970-01-01 00:00:01 UTC (times are clamped into the column's range).
pub const TS_MIN_MS: i64 = 1_000;
/// Latest TIMESTAMP: 2038-01-19 03:14:07 UTC (not 03:14:07.999, which `MySQL` rounds up to 03:14:08,
/// past the range, when it writes a `TIMESTAMP(0)` column of the original's: `db_time.py`).
pub const TS_MAX_MS: i64 = 2_147_483_647_000;

/// One job's values (`custom_status` not yet cut to the column's limit).
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    pub attempts_allowed: i64,
    pub custom_status: &'a str,
    pub run_after_ms: i64,
    pub body: &'a [u8],
}

/// How statements are written.
#[derive(Debug, Clone, Copy)]
pub struct Format<'a> {
    /// The statement up to its rows (`INSERT INTO ... VALUES `).
    pub head: &'a str,
    /// What follows the rows (empty, or ` RETURNING local_id`).
    pub tail: &'a str,
    /// Most bytes a statement should take; 0 puts every row in its own statement.
    pub budget: usize,
    /// Longest `custom_status`, in characters (Python's `s[:limit]`).
    pub custom_status_limit: usize,
    /// The session's `NO_BACKSLASH_ESCAPES` status flag: quote strings by doubling `'` only.
    pub no_backslash_escapes: bool,
}

/// Statements being built; `finish` gives `(rows, statement)` pairs in row order.
pub struct Statements<'a> {
    format: Format<'a>,
    now: Vec<u8>,
    /// The last `run_after` written, and its literal (most jobs of a batch share one).
    run_after: (i64, Vec<u8>),
    done: Vec<(usize, Vec<u8>)>,
    current: Vec<u8>,
    rows: usize,
}

impl<'a> Statements<'a> {
    /// `now_ms` is written into `created_at` and `updated_at` of every row.
    #[must_use]
    pub fn new(format: Format<'a>, now_ms: i64) -> Self {
        let mut now = Vec::with_capacity(28);
        push_datetime(&mut now, now_ms);
        Self {
            format,
            run_after: (now_ms, now.clone()),
            now,
            done: Vec::new(),
            current: Vec::new(),
            rows: 0,
        }
    }

    /// Appends one row, starting a new statement first if it would pass the budget.
    pub fn push(&mut self, row: &Row<'_>) {
        if self.rows == 0 {
            self.current.extend_from_slice(self.format.head.as_bytes());
        }
        let mark = self.current.len();
        if self.rows > 0 {
            self.current.extend_from_slice(b", ");
        }
        self.push_values(row);
        let full = self.current.len() + self.format.tail.len() > self.format.budget;
        if self.rows > 0 && full {
            let mut moved = Vec::with_capacity(self.format.head.len() + self.current.len() - mark);
            moved.extend_from_slice(self.format.head.as_bytes());
            moved.extend_from_slice(&self.current[mark + 2..]);
            self.current.truncate(mark);
            self.seal();
            self.current = moved;
        }
        self.rows += 1;
    }

    /// The `(rows, statement)` pairs, in row order.
    #[must_use]
    pub fn finish(mut self) -> Vec<(usize, Vec<u8>)> {
        if self.rows > 0 {
            self.seal();
        }
        self.done
    }

    fn seal(&mut self) {
        let mut statement = std::mem::take(&mut self.current);
        statement.extend_from_slice(self.format.tail.as_bytes());
        self.done.push((self.rows, statement));
        self.rows = 0;
    }

    fn push_values(&mut self, row: &Row<'_>) {
        if row.run_after_ms != self.run_after.0 {
            self.run_after.0 = row.run_after_ms;
            self.run_after.1.clear();
            push_datetime(&mut self.run_after.1, row.run_after_ms);
        }
        let out = &mut self.current;
        out.reserve(100 + row.custom_status.len() + 2 * row.body.len());
        out.extend_from_slice(b"(0, ");
        push_int(out, row.attempts_allowed);
        out.extend_from_slice(b", ");
        push_int(out, row.attempts_allowed);
        out.extend_from_slice(b", ");
        push_quoted(
            out,
            cut_chars(row.custom_status, self.format.custom_status_limit),
            self.format.no_backslash_escapes,
        );
        out.extend_from_slice(b", ");
        out.extend_from_slice(&self.now);
        out.extend_from_slice(b", ");
        out.extend_from_slice(&self.now);
        out.extend_from_slice(b", ");
        out.extend_from_slice(&self.run_after.1);
        out.extend_from_slice(b", X'");
        push_hex(out, row.body);
        out.extend_from_slice(b"')");
    }
}

/// The first `limit` characters (Unicode scalar values, as Python counts them).
#[must_use]
pub fn cut_chars(s: &str, limit: usize) -> &str {
    if s.len() <= limit {
        return s; // never more characters than bytes
    }
    match s.char_indices().nth(limit) {
        Some((end, _)) => &s[..end],
        None => s,
    }
}

/// `s` as a quoted SQL string, as `PyMySQL`'s `Connection.escape` writes a `str`.
pub fn push_quoted(out: &mut Vec<u8>, s: &str, no_backslash_escapes: bool) {
    out.push(b'\'');
    // Every character escaped is ASCII, so escaping byte by byte keeps UTF-8 intact.
    let mut start = 0;
    for (at, &b) in s.as_bytes().iter().enumerate() {
        let escaped: &[u8] = if no_backslash_escapes {
            match b {
                b'\'' => b"''",
                _ => continue,
            }
        } else {
            match b {
                0 => b"\\0",
                b'\n' => b"\\n",
                b'\r' => b"\\r",
                0x1a => b"\\Z",
                b'"' => b"\\\"",
                b'\'' => b"\\'",
                b'\\' => b"\\\\",
                _ => continue,
            }
        };
        out.extend_from_slice(&s.as_bytes()[start..at]);
        out.extend_from_slice(escaped);
        start = at + 1;
    }
    out.extend_from_slice(&s.as_bytes()[start..]);
    out.push(b'\'');
}

fn push_hex(out: &mut Vec<u8>, bytes: &[u8]) {
    /// Both hex digits of every byte value, in one table: a lookup per byte.
    const PAIRS: [[u8; 2]; 256] = {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut pairs = [[0u8; 2]; 256];
        let mut b = 0;
        while b < 256 {
            pairs[b] = [DIGITS[b >> 4], DIGITS[b & 0xf]];
            b += 1;
        }
        pairs
    };
    out.reserve(2 * bytes.len());
    out.extend(bytes.iter().flat_map(|&b| PAIRS[usize::from(b)]));
}

/// `ms` since the epoch, clamped to TIMESTAMP's range, as a quoted naive UTC datetime with
/// microseconds, e.g. `'2026-01-02 03:04:05.678000'`.
pub fn push_datetime(out: &mut Vec<u8>, ms: i64) {
    let ms = ms.clamp(TS_MIN_MS, TS_MAX_MS);
    let (days, in_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (year, month, day) = civil_from_days(days);
    let secs = in_day / 1000;
    let mut text = *b"'YYYY-MM-DD hh:mm:ss.mmm000'";
    for (at, width, value) in [
        (1, 4, year),
        (6, 2, month),
        (9, 2, day),
        (12, 2, secs / 3600),
        (15, 2, secs / 60 % 60),
        (18, 2, secs % 60),
        (21, 3, in_day % 1000),
    ] {
        let mut value = value;
        for k in (at..at + width).rev() {
            text[k] = b'0' + u8::try_from(value % 10).unwrap_or(0);
            value /= 10;
        }
    }
    out.extend_from_slice(&text);
}

/// (year, month, day) of a day count since 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn datetime(ms: i64) -> String {
        let mut s = Vec::new();
        push_datetime(&mut s, ms);
        String::from_utf8(s).unwrap()
    }

    fn quoted(s: &str, no_backslash_escapes: bool) -> String {
        let mut out = Vec::new();
        push_quoted(&mut out, s, no_backslash_escapes);
        String::from_utf8(out).unwrap()
    }

    fn format(budget: usize) -> Format<'static> {
        Format {
            head: "INSERT INTO t VALUES ",
            tail: "",
            budget,
            custom_status_limit: 5,
            no_backslash_escapes: false,
        }
    }

    fn row(body: &[u8]) -> Row<'_> {
        Row {
            attempts_allowed: 2,
            custom_status: "",
            run_after_ms: 0,
            body,
        }
    }

    #[test]
    fn datetimes_are_clamped_and_show_microseconds() {
        assert_eq!(datetime(i64::MIN), "'1970-01-01 00:00:01.000000'");
        assert_eq!(datetime(1_000), "'1970-01-01 00:00:01.000000'");
        assert_eq!(datetime(951_782_400_123), "'2000-02-29 00:00:00.123000'");
        assert_eq!(datetime(1_767_323_045_678), "'2026-01-02 03:04:05.678000'");
        assert_eq!(datetime(i64::MAX), "'2038-01-19 03:14:07.000000'");
    }

    #[test]
    fn strings_are_escaped_like_pymysql() {
        assert_eq!(
            quoted("a'b\"c\\d\0e\nf\rg\u{1a}h€", false),
            r#"'a\'b\"c\\d\0e\nf\rg\Zh€'"#
        );
        assert_eq!(quoted("a'b\\c", true), r"'a''b\c'");
        assert_eq!(quoted("", false), "''");
    }

    #[test]
    fn custom_status_is_cut_by_characters() {
        assert_eq!(cut_chars("€€€€€€€", 5), "€€€€€");
        assert_eq!(cut_chars("abc", 5), "abc");
    }

    #[test]
    fn one_row_renders_every_column() {
        let mut statements = Statements::new(format(1 << 20), 1_000);
        statements.push(&Row {
            attempts_allowed: 3,
            custom_status: "st'atus!",
            run_after_ms: 2_000,
            body: b"\x00\xff'",
        });
        let out = statements.finish();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, 1);
        assert_eq!(
            String::from_utf8(out[0].1.clone()).unwrap(),
            "INSERT INTO t VALUES (0, 3, 3, 'st\\'at', '1970-01-01 00:00:01.000000', \
             '1970-01-01 00:00:01.000000', '1970-01-01 00:00:02.000000', X'00ff27')"
        );
    }

    #[test]
    fn rows_are_cut_into_statements_under_the_budget() {
        let one = {
            let mut s = Statements::new(format(1 << 20), 1_000);
            s.push(&row(b"abc"));
            s.finish().remove(0).1.len()
        };
        // Two rows fit a budget of two rows' worth; the third starts a new statement.
        let mut s = Statements::new(format(2 * one + 2), 1_000);
        for _ in 0..5 {
            s.push(&row(b"abc"));
        }
        let out = s.finish();
        let counts: Vec<usize> = out.iter().map(|(n, _)| *n).collect();
        assert_eq!(counts, [2, 2, 1]);
        assert!(out
            .iter()
            .all(|(_, sql)| sql.starts_with(b"INSERT INTO t VALUES (0, ")));
        assert!(out.iter().all(|(_, sql)| sql.len() <= 2 * one + 2));
    }

    #[test]
    fn zero_budget_gives_a_statement_per_row_and_a_big_row_goes_alone() {
        let mut s = Statements::new(format(0), 1_000);
        s.push(&row(b"a"));
        s.push(&row(b"b"));
        let out = s.finish();
        assert_eq!(out.iter().map(|(n, _)| *n).collect::<Vec<_>>(), [1, 1]);
        assert!(Statements::new(format(0), 0).finish().is_empty());
    }
}
