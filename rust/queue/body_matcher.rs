//! Body filters (`bodyRegexToMatch`): a regular expression searched anywhere in a job body, in
//! time linear in the body's length whatever the pattern (the `regex` crate: no backtracking).
//!
//! - Bodies are bytes (`regex::bytes::Regex`), so none is decoded first. Unicode mode stays on:
//!   on a valid UTF-8 body `.`, `\w`, `[^a]` and friends match one code point, exactly as they do
//!   on the decoded text. An invalid UTF-8 byte is matched by no Unicode class and not by `.`
//!   (Python's lenient decode used to turn it into U+FFFD, which `.` matched); `(?-u:.)` matches
//!   any byte.
//! - A pattern the engine cannot take is refused with [`PatternError`]: longer than
//!   [`MAX_PATTERN_BYTES`], a feature without a linear-time algorithm (backreferences,
//!   look-ahead and look-behind) or any other syntax error, or a compiled program over
//!   [`SIZE_LIMIT`] (e.g. `\w{5000}`), so compiling stays cheap too.
//! - A batch of bodies is matched against a deadline ([`BodyMatcher::match_indices`]): past it,
//!   the batch stops with [`BudgetExceeded`] instead of returning a partial answer.

use std::time::{Duration, Instant};

use regex::bytes::{Regex, RegexBuilder};

/// Longest pattern accepted, in bytes of UTF-8.
pub const MAX_PATTERN_BYTES: usize = 4096;

/// Largest compiled program accepted (the `regex` crate's default is 10 MiB).
pub const SIZE_LIMIT: usize = 1 << 20;

/// Most memory the lazy DFA of one pattern may cache per searching thread.
pub const DFA_SIZE_LIMIT: usize = 1 << 20;

/// Why a pattern is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error("the pattern is {0} bytes long; at most {MAX_PATTERN_BYTES} are accepted")]
    TooLong(usize),
    #[error("{0}")]
    Syntax(String),
    #[error(
        "the compiled pattern would exceed {SIZE_LIMIT} bytes; use a smaller repetition or class"
    )]
    TooBig,
}

/// A batch that ran past its deadline; `done` bodies had been matched by then.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("time budget spent after matching {done} of {total} bodies")]
pub struct BudgetExceeded {
    pub done: usize,
    pub total: usize,
}

/// The one-line reason inside the `regex` crate's multi-line syntax error (which repeats the
/// pattern and underlines the culprit): "backreferences are not supported", and so on.
fn syntax_reason(message: &str) -> String {
    message
        .lines()
        .rev()
        .find_map(|line| line.trim().strip_prefix("error: "))
        .unwrap_or(message)
        .trim()
        .to_owned()
}

/// A compiled body filter. Cheap to share between threads.
#[derive(Debug, Clone)]
pub struct BodyMatcher {
    regex: Regex,
}

impl BodyMatcher {
    /// Compiles `pattern`, or says why it cannot be used.
    pub fn new(pattern: &str) -> Result<Self, PatternError> {
        if pattern.len() > MAX_PATTERN_BYTES {
            return Err(PatternError::TooLong(pattern.len()));
        }
        RegexBuilder::new(pattern)
            .size_limit(SIZE_LIMIT)
            .dfa_size_limit(DFA_SIZE_LIMIT)
            .build()
            .map(|regex| Self { regex })
            .map_err(|err| match err {
                regex::Error::CompiledTooBig(_) => PatternError::TooBig,
                regex::Error::Syntax(message) => PatternError::Syntax(syntax_reason(&message)),
                other => PatternError::Syntax(other.to_string()),
            })
    }

    /// The pattern as given.
    #[must_use]
    pub fn pattern(&self) -> &str {
        self.regex.as_str()
    }

    /// Whether the pattern occurs anywhere in `body`.
    #[must_use]
    pub fn is_match(&self, body: &[u8]) -> bool {
        self.regex.is_match(body)
    }

    /// Positions in `bodies` of the bodies the pattern occurs in (a `None` body never matches),
    /// or [`BudgetExceeded`] once `budget` has passed. The clock is read before each body, so a
    /// batch overruns its budget by at most one body's match (linear in that body's length).
    pub fn match_indices(
        &self,
        bodies: &[Option<&[u8]>],
        budget: Duration,
    ) -> Result<Vec<usize>, BudgetExceeded> {
        let deadline = Instant::now().checked_add(budget);
        let mut found = Vec::new();
        for (i, body) in bodies.iter().enumerate() {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(BudgetExceeded {
                    done: i,
                    total: bodies.len(),
                });
            }
            if body.is_some_and(|b| self.regex.is_match(b)) {
                found.push(i);
            }
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_quantifiers_match_in_linear_time() {
        let matcher = BodyMatcher::new("(a+)+$").unwrap();
        let mut body = vec![b'a'; 100_000];
        body.push(b'!');
        assert!(!matcher.is_match(&body));
        body.pop();
        assert!(matcher.is_match(&body));
    }

    #[test]
    fn search_is_anywhere_and_unicode_aware() {
        let matcher = BodyMatcher::new("^h.llo$").unwrap();
        assert!(matcher.is_match("hällo".as_bytes()));
        assert!(!BodyMatcher::new("^h..llo$")
            .unwrap()
            .is_match("hällo".as_bytes()));
        assert!(BodyMatcher::new("wor").unwrap().is_match(b"hello world"));
    }

    #[test]
    fn refusals_say_why_in_one_line() {
        let backref = BodyMatcher::new(r"(a)\1").unwrap_err();
        assert_eq!(
            backref,
            PatternError::Syntax("backreferences are not supported".into())
        );
        let look = BodyMatcher::new(r"a(?=b)").unwrap_err().to_string();
        assert!(look.contains("look-around"), "{look}");
        assert_eq!(
            BodyMatcher::new(r"\w{5000}").unwrap_err(),
            PatternError::TooBig
        );
        let long = "a".repeat(MAX_PATTERN_BYTES + 1);
        assert_eq!(
            BodyMatcher::new(&long).unwrap_err(),
            PatternError::TooLong(MAX_PATTERN_BYTES + 1)
        );
    }

    #[test]
    fn batches_report_positions_and_stop_at_the_budget() {
        let matcher = BodyMatcher::new("b").unwrap();
        let bodies = [Some(&b"abc"[..]), None, Some(&b"xyz"[..]), Some(&b"b"[..])];
        assert_eq!(
            matcher.match_indices(&bodies, Duration::from_secs(60)),
            Ok(vec![0, 3])
        );
        assert_eq!(
            matcher.match_indices(&bodies, Duration::ZERO),
            Err(BudgetExceeded { done: 0, total: 4 })
        );
        assert_eq!(matcher.match_indices(&[], Duration::ZERO), Ok(vec![]));
    }
}
