//! `SqliteInserts`: the embedded store's `enqueue_jobs.sql` turned into multi-row INSERTs.
//!
//! The store's statement inserts one job (`INSERT ... VALUES (:queue, :priority, ...)`). Run
//! once per job, every run reads and rewrites AUTOINCREMENT's counter (a row of
//! `sqlite_sequence`) and steps the statement anew; one statement whose `VALUES` lists many rows
//! does both once. The text stays the store's: its `VALUES` row is repeated, each named
//! parameter becoming a numbered `?N` bound from the job's field of that name.
//!
//! A parameter named in `SHARED` (the request's queue and time) is the same in every row: it is
//! numbered once for the whole statement and bound once, not once per row (a text bound is
//! copied into the statement and freed again when the statement goes back to its cache: about
//! 600 instructions a row for the queue name alone). A name repeated within the row is bound
//! once per row.

use std::fmt::Write as _;

/// Rows per statement, largest first: a batch is cut into as few statements as these make
/// (`chunks`), and only these few texts are ever prepared. Beside the powers of two, the round
/// sizes clients batch by (10, 25, 50 and 100 jobs) go in one statement each: every statement
/// costs the writer its own step, reset and savepoint pages (100 jobs in one statement instead
/// of 64 + 32 + 4 cut about 1% of a grouped job's instructions).
pub const CHUNKS: [usize; 12] = [128, 100, 64, 50, 32, 25, 16, 10, 8, 4, 2, 1];

/// Batches below this are cut into the fewest statements `CHUNKS` allow (`FIRST_CHUNK`); a
/// larger one takes `CHUNKS[0]` rows at a time until it is below.
const PLANNED: usize = 512;

/// For each batch size below `PLANNED`, the index in `CHUNKS` of the first statement of a
/// fewest-statements cut (the largest such chunk), worked out at compile time.
const FIRST_CHUNK: [usize; PLANNED] = plan_chunks();

const fn plan_chunks() -> [usize; PLANNED] {
    let mut statements = [0usize; PLANNED]; // fewest statements for each size
    let mut first = [0usize; PLANNED];
    let mut n = 1;
    while n < PLANNED {
        statements[n] = usize::MAX;
        let mut i = 0;
        while i < CHUNKS.len() {
            let rows = CHUNKS[i];
            // CHUNKS ends with 1, so every size has a cut; ties keep the larger chunk
            if rows <= n && statements[n - rows] + 1 < statements[n] {
                statements[n] = statements[n - rows] + 1;
                first[n] = i;
            }
            i += 1;
        }
        n += 1;
    }
    first
}

/// Parameters whose value is the request's, the same in every row: bound once per statement.
/// A caller binds the request's queue and time there, never a row's own.
pub const SHARED: [&str; 2] = ["queue", "now_ms"];

/// What one parameter of the row binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Queue,
    Priority,
    /// A keyed job's state (`enqueue_keyed_jobs.sql`), given beside the job.
    State,
    Attempts,
    CustomStatus,
    NowMs,
    RunAfterMs,
    Body,
    /// A keyed job's expiry (`enqueue_keyed_jobs.sql`; NULL: none), given beside the job.
    ExpireAtMs,
}

impl Field {
    fn named(name: &str) -> Option<Self> {
        Some(match name {
            "queue" => Self::Queue,
            "priority" => Self::Priority,
            "state" => Self::State,
            "attempts" => Self::Attempts,
            "custom_status" => Self::CustomStatus,
            "now_ms" => Self::NowMs,
            "run_after_ms" => Self::RunAfterMs,
            "body" => Self::Body,
            "expire_at_ms" => Self::ExpireAtMs,
            _ => return None,
        })
    }
}

/// The multi-row statements of one `enqueue_jobs.sql` text, one per entry of `CHUNKS`.
#[derive(Debug, Clone)]
pub struct SqliteInserts {
    /// The statement inserting `CHUNKS[i]` rows.
    texts: [String; CHUNKS.len()],
    /// The fields bound once per statement, at `?1`, `?2`, ... (`SHARED`).
    shared: Vec<Field>,
    /// The fields bound for each row, in order, after the shared ones and the rows before.
    fields: Vec<Field>,
}

impl SqliteInserts {
    /// Reads the statement: everything up to its last `VALUES`, then one parenthesized row of
    /// literals and `:name` parameters naming `Field`s.
    pub fn new(single_row: &str) -> Result<Self, String> {
        let (texts, params) =
            repeat_row(single_row, false).map_err(|e| format!("enqueue_jobs: {e}"))?;
        let (shared, fields) = params.resolve(|name| {
            Field::named(name).ok_or_else(|| format!("enqueue_jobs: unknown parameter :{name}"))
        })?;
        Ok(Self {
            texts,
            shared,
            fields,
        })
    }

    /// The fields bound once per statement, at `?1`, `?2`, ... in order.
    #[must_use]
    pub fn shared(&self) -> &[Field] {
        &self.shared
    }

    /// The fields bound for each row, in order, after the shared ones and those of the rows
    /// before.
    #[must_use]
    pub fn fields(&self) -> &[Field] {
        &self.fields
    }

    /// The statements inserting `jobs` (or rows of them), in order: each text with the jobs it
    /// takes.
    pub fn split<'a, J>(&'a self, jobs: &'a [J]) -> impl Iterator<Item = (&'a str, &'a [J])> {
        chunks(jobs).map(|(i, part)| (self.texts[i].as_str(), part))
    }
}

/// Any statement of the form `... VALUES (row) tail` (an `INSERT` with an `ON CONFLICT` tail,
/// say) turned into multi-row statements as `SqliteInserts` does, for rows of values the caller
/// gives in the order of `names` (each `:name` of the row must be one of them).
#[derive(Debug, Clone)]
pub struct MultiRow {
    /// The statement taking `CHUNKS[i]` rows.
    texts: [String; CHUNKS.len()],
    /// The values bound once per statement (`SHARED`), at `?1`, `?2`, ...: their indexes in
    /// `names`.
    shared: Vec<usize>,
    /// The values bound for each row, in order: their indexes in `names`.
    order: Vec<usize>,
}

impl MultiRow {
    pub fn new(single_row: &str, names: &[&str]) -> Result<Self, String> {
        let (texts, params) = repeat_row(single_row, true)?;
        let (shared, order) = params.resolve(|name| {
            names
                .iter()
                .position(|n| *n == name)
                .ok_or_else(|| format!("unknown parameter :{name}"))
        })?;
        Ok(Self {
            texts,
            shared,
            order,
        })
    }

    /// The values bound once per statement, at `?1`, `?2`, ...: their indexes in `names`. The
    /// caller binds them from any row: they are the request's (`SHARED`).
    #[must_use]
    pub fn shared(&self) -> &[usize] {
        &self.shared
    }

    /// The values bound for each row, in order, after the shared ones and those of the rows
    /// before: their indexes in `names`.
    #[must_use]
    pub fn order(&self) -> &[usize] {
        &self.order
    }

    /// The statements taking `rows`, in order: each text with the rows it takes.
    pub fn split<'a, R>(&'a self, rows: &'a [R]) -> impl Iterator<Item = (&'a str, &'a [R])> {
        chunks(rows).map(|(i, part)| (self.texts[i].as_str(), part))
    }
}

/// The names a repeated row binds: once per statement, then once per row (each name once, in
/// the order the row first names it).
#[derive(Debug)]
struct Params {
    shared: Vec<String>,
    row: Vec<String>,
}

impl Params {
    /// The shared names and the row's, each resolved by `resolve` (its error is the first met).
    fn resolve<T>(
        &self,
        resolve: impl Fn(&str) -> Result<T, String>,
    ) -> Result<(Vec<T>, Vec<T>), String> {
        let all = |names: &[String]| {
            names
                .iter()
                .map(|n| resolve(n))
                .collect::<Result<Vec<T>, String>>()
        };
        Ok((all(&self.shared)?, all(&self.row)?))
    }
}

/// The statement's one `VALUES` row repeated for each entry of `CHUNKS`, each `:name` a
/// numbered `?N`: a name of `SHARED` the same number in every row (the shared ones first, in
/// `SHARED`'s order), any other name one number per row (a name twice in the row, the same
/// one), numbered on from the row before. What follows the row is kept after the rows
/// (`keep_tail`), or must be nothing but a `;`.
fn repeat_row(
    single_row: &str,
    keep_tail: bool,
) -> Result<([String; CHUNKS.len()], Params), String> {
    let at = single_row
        .rfind("VALUES")
        .ok_or("no VALUES in the statement")?;
    let head = &single_row[..at + "VALUES".len()];
    let rest = single_row[at + "VALUES".len()..].trim_start();
    let end = row_end(rest).ok_or_else(|| format!("VALUES is not followed by a row: {rest}"))?;
    let (row, mut tail) = rest.split_at(end);
    if !keep_tail {
        if !tail.trim().trim_end_matches(';').trim_end().is_empty() {
            return Err(format!("VALUES is not followed by one row: {rest}"));
        }
        tail = "";
    }
    // The tail is copied as it is: a parameter there would never be bound (NULL).
    if let Some(name) = placeholders(tail)?.1.first() {
        return Err(format!(":{name} after the VALUES row"));
    }
    let (parts, names) = placeholders(row)?;
    let shared: Vec<String> = SHARED
        .iter()
        .filter(|s| names.iter().any(|n| n == *s))
        .map(|s| (*s).to_owned())
        .collect();
    let mut own: Vec<String> = Vec::new();
    for name in &names {
        if !shared.contains(name) && !own.contains(name) {
            own.push(name.clone());
        }
    }
    // Each `?` of the row: its number in the first row, and whether it moves on per row.
    let numbers: Vec<(usize, bool)> = names
        .iter()
        .map(|name| match shared.iter().position(|s| s == name) {
            Some(i) => (i + 1, false),
            None => (
                shared.len() + own.iter().position(|o| o == name).unwrap_or(0) + 1,
                true,
            ),
        })
        .collect();
    let texts = CHUNKS.map(|rows| {
        let mut text = String::with_capacity(head.len() + rows * (row.len() + 8) + tail.len() + 2);
        text.push_str(head);
        text.push(' ');
        for i in 0..rows {
            if i > 0 {
                text.push(',');
            }
            for (k, part) in parts.iter().enumerate() {
                if k > 0 {
                    let (first, moves) = numbers[k - 1];
                    let n = if moves { first + i * own.len() } else { first };
                    let _ = write!(text, "?{n}");
                }
                text.push_str(part);
            }
        }
        text.push_str(tail);
        text
    });
    Ok((texts, Params { shared, row: own }))
}

/// `rows` cut into `CHUNKS` in order, as few statements as they allow (below `PLANNED` rows):
/// each part with its index in `CHUNKS`.
fn chunks<R>(rows: &[R]) -> impl Iterator<Item = (usize, &[R])> {
    let mut rest = rows;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let i = FIRST_CHUNK.get(rest.len()).copied().unwrap_or(0);
        let (now, later) = rest.split_at(CHUNKS[i]);
        rest = later;
        Some((i, now))
    })
}

/// Where the parenthesized row at the start of `text` ends (just after its `)`), quoted
/// literals and nested parentheses skipped.
fn row_end(text: &str) -> Option<usize> {
    if !text.starts_with('(') {
        return None;
    }
    let mut depth = 0usize;
    let mut quoted = false;
    for (i, c) in text.char_indices() {
        match c {
            '\'' => quoted = !quoted,
            '(' if !quoted => depth += 1,
            ')' if !quoted => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// The row cut at each `:name` (one part more than names; quoted literals copied), and the
/// names in order.
fn placeholders(row: &str) -> Result<(Vec<String>, Vec<String>), String> {
    let mut template = String::with_capacity(row.len());
    let mut parts = Vec::new();
    let mut names = Vec::new();
    let mut chars = row.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\'' => {
                template.push(c);
                for (_, q) in chars.by_ref() {
                    template.push(q);
                    if q == '\'' {
                        break;
                    }
                }
            }
            ':' => {
                let start = i + 1;
                let mut end = start;
                while let Some(&(j, n)) = chars.peek() {
                    if n.is_ascii_alphanumeric() || n == '_' {
                        end = j + n.len_utf8();
                        chars.next();
                    } else {
                        break;
                    }
                }
                if end == start {
                    return Err("a ':' without a name".into());
                }
                names.push(row[start..end].to_owned());
                parts.push(std::mem::take(&mut template));
            }
            _ => template.push(c),
        }
    }
    parts.push(template);
    Ok((parts, names))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::jobs::NewJob;

    const ONE: &str =
        "-- a comment: with a colon\nINSERT INTO jobs (queue, priority, body, status)\n\
                       VALUES (:queue, :priority, :body, 'a:b''c', :now_ms, :now_ms)\n";

    /// The text of `texts` (one per entry of `CHUNKS`) taking `rows` rows.
    fn text_of(texts: &[String; CHUNKS.len()], rows: usize) -> &String {
        &texts[CHUNKS.iter().position(|&n| n == rows).unwrap()]
    }

    fn jobs(n: usize) -> Vec<NewJob> {
        (0..n)
            .map(|i| NewJob {
                priority: 1,
                body: vec![u8::try_from(i % 256).unwrap()],
                run_after_ms: 0,
                attempts_allowed: 1,
                custom_status: String::new(),
            })
            .collect()
    }

    #[test]
    fn rows_are_repeated_with_numbered_parameters_the_shared_ones_once() {
        let inserts = SqliteInserts::new(ONE).unwrap();
        assert_eq!(inserts.shared(), [Field::Queue, Field::NowMs]);
        assert_eq!(inserts.fields(), [Field::Priority, Field::Body]);
        let (eight, one) = (text_of(&inserts.texts, 8), text_of(&inserts.texts, 1));
        assert!(
            one.ends_with("VALUES (?1, ?3, ?4, 'a:b''c', ?2, ?2)"),
            "{one}"
        );
        assert!(one.starts_with("-- a comment: with a colon\n"));
        assert_eq!(eight.matches("(?1, ?").count(), 8);
        assert!(eight.contains("(?1, ?3, ?4, 'a:b''c', ?2, ?2),(?1, ?5, ?6, 'a:b''c', ?2, ?2),"));
        assert!(
            eight.ends_with(",(?1, ?17, ?18, 'a:b''c', ?2, ?2)"),
            "{eight}"
        );
    }

    #[test]
    fn a_name_twice_in_a_row_is_one_parameter_of_it() {
        let one = "INSERT INTO t (a, b, c, d) VALUES (:b, :queue, :a, :b)";
        let rows = MultiRow::new(one, &["queue", "a", "b"]).unwrap();
        assert_eq!(rows.shared(), [0]);
        assert_eq!(rows.order(), [2, 1]);
        let [.., two, single] = &rows.texts;
        assert!(single.ends_with("VALUES (?2, ?1, ?3, ?2)"), "{single}");
        assert!(
            two.ends_with("VALUES (?2, ?1, ?3, ?2),(?4, ?1, ?5, ?4)"),
            "{two}"
        );
    }

    #[test]
    fn a_batch_is_cut_into_the_fewest_chunks_in_order() {
        let inserts = SqliteInserts::new(ONE).unwrap();
        let batch = jobs(250);
        let parts: Vec<_> = inserts.split(&batch).collect();
        let sizes: Vec<usize> = parts.iter().map(|(_, jobs)| jobs.len()).collect();
        assert_eq!(
            sizes,
            [100, 100, 50],
            "three statements, not 128 + 100 + 16 + 4 + 2"
        );
        let again: Vec<u8> = parts
            .iter()
            .flat_map(|(_, jobs)| jobs.iter().map(|j| j.body[0]))
            .collect();
        assert_eq!(again, (0..250).collect::<Vec<u8>>());
        for (text, part) in &parts {
            assert_eq!(
                text.matches("),").count() + 1,
                part.len(),
                "each part its text"
            );
        }
        let sizes = |n: usize| -> Vec<usize> {
            chunks(&vec![(); n])
                .map(|(i, part)| {
                    assert_eq!(CHUNKS[i], part.len());
                    part.len()
                })
                .collect()
        };
        assert_eq!(sizes(100), [100]);
        assert_eq!(sizes(150), [100, 50]);
        assert_eq!(sizes(97), [64, 32, 1]);
        assert!(sizes(0).is_empty());
        // The fewest statements, worked out here the slow way, for every size planned.
        let mut fewest = vec![0usize; PLANNED + 300];
        for n in 1..fewest.len() {
            fewest[n] = CHUNKS
                .iter()
                .filter(|&&c| c <= n)
                .map(|&c| fewest[n - c] + 1)
                .min()
                .unwrap();
            let cut = sizes(n);
            assert_eq!(cut.iter().sum::<usize>(), n);
            if n < PLANNED {
                assert_eq!(cut.len(), fewest[n], "{n} rows: {cut:?}");
            } else {
                assert_eq!(cut[0], CHUNKS[0], "{n} rows: the largest first");
            }
        }
    }

    #[test]
    fn a_statement_it_cannot_read_is_refused() {
        assert!(SqliteInserts::new("INSERT INTO jobs SELECT 1").is_err());
        assert!(SqliteInserts::new("INSERT INTO jobs VALUES (:nope)")
            .unwrap_err()
            .contains(":nope"));
        assert!(SqliteInserts::new("INSERT INTO jobs VALUES (1), (2) x").is_err());
    }

    #[test]
    fn a_row_with_a_tail_is_repeated_before_the_tail() {
        let one = "INSERT INTO t (a, b, c) VALUES (:b, lower(':x'), :a)\n    ON CONFLICT (a) DO UPDATE SET b = excluded.b\n";
        let rows = MultiRow::new(one, &["a", "b"]).unwrap();
        assert_eq!(rows.order(), [1, 0]);
        assert!(rows.shared().is_empty());
        let (eight, single) = (text_of(&rows.texts, 8), text_of(&rows.texts, 1));
        assert_eq!(
            single,
            "INSERT INTO t (a, b, c) VALUES (?1, lower(':x'), ?2)\n    ON CONFLICT (a) DO UPDATE SET b = excluded.b\n"
        );
        assert_eq!(eight.matches(", lower(':x'), ?").count(), 8);
        assert!(eight.ends_with(
            "(?15, lower(':x'), ?16)\n    ON CONFLICT (a) DO UPDATE SET b = excluded.b\n"
        ));
        let sizes: Vec<usize> = rows.split(&[0; 73]).map(|(_, part)| part.len()).collect();
        assert_eq!(sizes, [64, 8, 1]);
        let sizes: Vec<usize> = rows.split(&[0; 127]).map(|(_, part)| part.len()).collect();
        assert_eq!(sizes, [100, 25, 2]);
        assert!(MultiRow::new(one, &["a"]).unwrap_err().contains(":b"));
        let bound_after = "INSERT INTO t (a) VALUES (:a) ON CONFLICT (a) DO UPDATE SET b = :a";
        assert!(MultiRow::new(bound_after, &["a"])
            .unwrap_err()
            .contains(":a after the VALUES row"));
        assert!(MultiRow::new("INSERT INTO t SELECT 1", &["a"]).is_err());
    }
}
