//! `SqliteInserts`: the embedded store's `enqueue_jobs.sql` turned into multi-row INSERTs.
//!
//! The store's statement inserts one job (`INSERT ... VALUES (:queue, :priority, ...)`). Run
//! once per job, every run reads and rewrites AUTOINCREMENT's counter (a row of
//! `sqlite_sequence`) and steps the statement anew; one statement whose `VALUES` lists many rows
//! does both once. The text stays the store's: its `VALUES` row is repeated, each named
//! parameter becoming a positional `?` bound from the job's field of that name.

/// Rows per statement, largest first: a batch is cut into as few statements as these make
/// (100 jobs: 64 + 32 + 4; any batch below 128 in at most seven), and only these few texts
/// are ever prepared.
pub const CHUNKS: [usize; 7] = [64, 32, 16, 8, 4, 2, 1];

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
    /// The field bound at each `?` of one row, in order.
    fields: Vec<Field>,
}

impl SqliteInserts {
    /// Reads the statement: everything up to its last `VALUES`, then one parenthesized row of
    /// literals and `:name` parameters naming `Field`s.
    pub fn new(single_row: &str) -> Result<Self, String> {
        let (texts, names) =
            repeat_row(single_row, false).map_err(|e| format!("enqueue_jobs: {e}"))?;
        let fields = names
            .iter()
            .map(|name| {
                Field::named(name).ok_or_else(|| format!("enqueue_jobs: unknown parameter :{name}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { texts, fields })
    }

    /// The fields bound at each `?` of one row.
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
    /// For each `?` of one row, in order: the index in `names` of the value it binds.
    order: Vec<usize>,
}

impl MultiRow {
    pub fn new(single_row: &str, names: &[&str]) -> Result<Self, String> {
        let (texts, params) = repeat_row(single_row, true)?;
        let order = params
            .iter()
            .map(|name| {
                names
                    .iter()
                    .position(|n| n == name)
                    .ok_or_else(|| format!("unknown parameter :{name}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { texts, order })
    }

    /// For each `?` of one row, in order: the index in `names` of the value it binds.
    #[must_use]
    pub fn order(&self) -> &[usize] {
        &self.order
    }

    /// The statements taking `rows`, in order: each text with the rows it takes.
    pub fn split<'a, R>(&'a self, rows: &'a [R]) -> impl Iterator<Item = (&'a str, &'a [R])> {
        chunks(rows).map(|(i, part)| (self.texts[i].as_str(), part))
    }
}

/// The statement's one `VALUES` row repeated for each entry of `CHUNKS` (each `:name` a
/// positional `?`), with the parameters' names in order. What follows the row is kept after the
/// rows (`keep_tail`), or must be nothing but a `;`.
fn repeat_row(
    single_row: &str,
    keep_tail: bool,
) -> Result<([String; CHUNKS.len()], Vec<String>), String> {
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
    let (template, names) = placeholders(row)?;
    let texts = CHUNKS.map(|rows| {
        let mut text =
            String::with_capacity(head.len() + rows * (template.len() + 1) + tail.len() + 2);
        text.push_str(head);
        text.push(' ');
        for i in 0..rows {
            if i > 0 {
                text.push(',');
            }
            text.push_str(&template);
        }
        text.push_str(tail);
        text
    });
    Ok((texts, names))
}

/// `rows` cut into `CHUNKS`, largest first: each part with its entry of `CHUNKS`.
fn chunks<R>(rows: &[R]) -> impl Iterator<Item = (usize, &[R])> {
    let mut rest = rows;
    std::iter::from_fn(move || {
        let (i, n) = CHUNKS.iter().enumerate().find(|&(_, &n)| n <= rest.len())?;
        let (now, later) = rest.split_at(*n);
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

/// The row with each `:name` replaced by `?`, and the names in order (quoted literals copied).
fn placeholders(row: &str) -> Result<(String, Vec<String>), String> {
    let mut template = String::with_capacity(row.len());
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
                template.push('?');
            }
            _ => template.push(c),
        }
    }
    Ok((template, names))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::jobs::NewJob;

    const ONE: &str =
        "-- a comment: with a colon\nINSERT INTO jobs (queue, priority, body, status)\n\
                       VALUES (:queue, :priority, :body, 'a:b''c', :now_ms, :now_ms)\n";

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
    fn rows_are_repeated_with_positional_parameters() {
        let inserts = SqliteInserts::new(ONE).unwrap();
        assert_eq!(
            inserts.fields(),
            [
                Field::Queue,
                Field::Priority,
                Field::Body,
                Field::NowMs,
                Field::NowMs
            ]
        );
        let row = "(?, ?, ?, 'a:b''c', ?, ?)";
        let [_, _, _, eight, _, _, one] = &inserts.texts;
        assert!(one.ends_with(&format!("VALUES {row}")), "{one}");
        assert!(one.starts_with("-- a comment: with a colon\n"));
        assert_eq!(eight.matches(row).count(), 8);
    }

    #[test]
    fn a_batch_is_cut_into_the_largest_chunks_in_order() {
        let inserts = SqliteInserts::new(ONE).unwrap();
        let batch = jobs(100);
        let parts: Vec<_> = inserts.split(&batch).collect();
        let sizes: Vec<usize> = parts.iter().map(|(_, jobs)| jobs.len()).collect();
        assert_eq!(sizes, [64, 32, 4]);
        let again: Vec<u8> = parts
            .iter()
            .flat_map(|(_, jobs)| jobs.iter().map(|j| j.body[0]))
            .collect();
        assert_eq!(again, (0..100).collect::<Vec<u8>>());
        assert_eq!(inserts.split::<NewJob>(&[]).count(), 0);
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
        let [_, _, _, eight, _, _, single] = &rows.texts;
        assert_eq!(
            single,
            "INSERT INTO t (a, b, c) VALUES (?, lower(':x'), ?)\n    ON CONFLICT (a) DO UPDATE SET b = excluded.b\n"
        );
        assert_eq!(eight.matches("(?, lower(':x'), ?)").count(), 8);
        assert!(eight.ends_with("?)\n    ON CONFLICT (a) DO UPDATE SET b = excluded.b\n"));
        let sizes: Vec<usize> = rows.split(&[0; 73]).map(|(_, part)| part.len()).collect();
        assert_eq!(sizes, [64, 8, 1]);
        let sizes: Vec<usize> = rows.split(&[0; 127]).map(|(_, part)| part.len()).collect();
        assert_eq!(sizes, [64, 32, 16, 8, 4, 2, 1]);
        assert!(MultiRow::new(one, &["a"]).unwrap_err().contains(":b"));
        assert!(MultiRow::new("INSERT INTO t SELECT 1", &["a"]).is_err());
    }
}
