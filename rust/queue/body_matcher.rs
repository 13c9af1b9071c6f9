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
//! - Linear is not cheap: the work per byte grows with the pattern's automaton, so
//!   `a(?-u:[\x00-\xff]){8000}b` took the `regex` crate 57 s on one 1 MiB body (its lazy DFA
//!   gives up on the ever-new states and its NFA simulation steps 8,000 states a byte), and
//!   nothing could stop it. A body whose worst case is small ([`DIRECT_WORK`]) is searched by the
//!   `regex` crate, fastest; a larger one by a lazy DFA this module walks itself, reading the
//!   clock every [`CLOCK_EVERY_BYTES`] bytes, so a search stops within a few milliseconds of its
//!   deadline whatever the body and the pattern.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use regex::bytes::{Regex, RegexBuilder};
use regex_automata::hybrid::dfa::{Cache, DFA};
use regex_automata::nfa::thompson;
use regex_automata::util::prefilter::Prefilter;
use regex_automata::util::syntax;
use regex_automata::{Input, MatchKind, Span};

/// Longest pattern accepted, in bytes of UTF-8.
pub const MAX_PATTERN_BYTES: usize = 4096;

/// Largest compiled program accepted (the `regex` crate's default is 10 MiB).
pub const SIZE_LIMIT: usize = 1 << 20;

/// Most memory the lazy DFA of one pattern may cache per searching thread.
pub const DFA_SIZE_LIMIT: usize = 1 << 20;

/// Largest worst case, in automaton states times body bytes, of a body searched by the `regex`
/// crate in one go; about 7 ns a unit when its lazy DFA gives up, so at most some 30 ms.
pub const DIRECT_WORK: usize = 1 << 22;

/// Bodies at most this long are searched by the `regex` crate whatever the pattern: with the
/// largest automata [`SIZE_LIMIT`] lets through (some 30,000 states) a few tens of ms at worst.
pub const DIRECT_BYTES: usize = 256;

/// Bytes the lazy DFA walks between two readings of the clock: a byte costs at most a new state
/// (a few tens of µs for the largest automata), and the clock some 20 ns.
pub const CLOCK_EVERY_BYTES: usize = 256;

/// What [`DIRECT_WORK`] costs at most, per unit, for a body that has to be searched in one go
/// without the lazy DFA (see [`BodyMatcher::body_matches`]).
const NANOS_PER_WORK_UNIT: u64 = 8;

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
    /// What large bodies are searched with, built for the first body longer than
    /// [`DIRECT_BYTES`] (on the thread that searches it: compiling a pattern, which a request
    /// does to check it, costs no more than the `regex` crate's own).
    walker: OnceLock<Walker>,
}

/// The pattern's automaton as this module walks it.
#[derive(Debug, Clone)]
struct Walker {
    /// The forward, unanchored lazy DFA of the pattern, walked for bodies too large for
    /// [`DIRECT_WORK`]; None if it cannot be built (the `regex` crate then searches every body,
    /// when the budget left covers its worst case).
    dfa: Option<DFA>,
    /// Literals one of which every match starts with, where the pattern has them and they are
    /// quick to look for (`needle`, `foo|bar`): whenever the walk is back in the start state it
    /// skips to the next place one occurs (memchr and friends, gigabytes a second), as the
    /// `regex` crate's own search does, instead of stepping through every byte.
    prefilter: Option<Prefilter>,
    /// States of the pattern's automaton: a search's worst case is about this many units a byte.
    states: usize,
}

impl Walker {
    /// The automaton of `pattern`, which the `regex` crate accepted.
    fn new(pattern: &str) -> Self {
        let unwalkable = Self {
            dfa: None,
            prefilter: None,
            states: usize::MAX,
        };
        // The syntax `regex::bytes` uses: Unicode on, and classes may match invalid UTF-8.
        let Ok(hir) = syntax::parse_with(pattern, &syntax::Config::new().utf8(false)) else {
            return unwalkable;
        };
        let prefilter =
            Prefilter::from_hir_prefix(MatchKind::LeftmostFirst, &hir).filter(Prefilter::is_fast);
        let nfa = thompson::Compiler::new()
            .configure(
                thompson::Config::new()
                    .utf8(false)
                    .nfa_size_limit(Some(SIZE_LIMIT))
                    .which_captures(thompson::WhichCaptures::None),
            )
            .build_from_hir(&hir);
        let Ok(nfa) = nfa else {
            // Accepted by `regex`: the only difference is the unanchored prefix.
            return unwalkable;
        };
        let states = nfa.states().len();
        let dfa = DFA::builder()
            .configure(
                DFA::config()
                    .cache_capacity(DFA_SIZE_LIMIT)
                    .skip_cache_capacity_check(true)
                    .unicode_word_boundary(true)
                    .minimum_cache_clear_count(None)
                    .specialize_start_states(prefilter.is_some()),
            )
            .build_from_nfa(nfa)
            .ok();
        Self {
            dfa,
            prefilter,
            states,
        }
    }

    /// Walks `body` through `dfa` (this walker's) a byte at a time, reading the clock every
    /// [`CLOCK_EVERY_BYTES`] bytes, and skipping ahead with the prefilter from the start state.
    /// A match state is entered one byte after the match ends, and the end of the body has a
    /// transition of its own.
    fn walk(&self, dfa: &DFA, cache: &mut Cache, body: &[u8], deadline: Option<Instant>) -> Walk {
        let start_at = |cache: &mut Cache, at: usize| {
            dfa.start_state_forward(cache, &Input::new(body).range(at..))
                .ok()
        };
        let Some(mut state) = start_at(cache, 0) else {
            return Walk::Quit;
        };
        let (mut at, mut clock_at) = (0, CLOCK_EVERY_BYTES);
        loop {
            if state.is_tagged() {
                if state.is_match() {
                    return Walk::Decided(true);
                } else if state.is_dead() {
                    return Walk::Decided(false);
                } else if state.is_quit() {
                    return Walk::Quit;
                } else if let (true, Some(prefilter)) = (state.is_start(), &self.prefilter) {
                    // No match is under way: the next can only start where a literal occurs.
                    match prefilter.find(body, Span::from(at..body.len())) {
                        None => return Walk::Decided(false),
                        Some(found) if found.start > at => {
                            at = found.start;
                            let Some(moved) = start_at(cache, at) else {
                                return Walk::Quit;
                            };
                            state = moved;
                            continue;
                        }
                        Some(_) => {}
                    }
                }
            }
            let Some(&byte) = body.get(at) else { break };
            // Without a minimum clear count the cache is cleared as often as it fills, never
            // given up on: the clock decides when to stop.
            let Ok(next) = dfa.next_state(cache, state, byte) else {
                return Walk::Quit;
            };
            state = next;
            at += 1;
            if at >= clock_at {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Walk::Spent;
                }
                clock_at = at + CLOCK_EVERY_BYTES;
            }
        }
        match dfa.next_eoi_state(cache, state) {
            Ok(end) => Walk::Decided(end.is_match()),
            Err(_) => Walk::Quit,
        }
    }
}

/// How a walk of the lazy DFA ended.
enum Walk {
    Decided(bool),
    /// The deadline passed first.
    Spent,
    /// The DFA cannot decide at some byte: a Unicode `\b` beside a non-ASCII byte.
    Quit,
}

impl BodyMatcher {
    /// Compiles `pattern`, or says why it cannot be used.
    pub fn new(pattern: &str) -> Result<Self, PatternError> {
        if pattern.len() > MAX_PATTERN_BYTES {
            return Err(PatternError::TooLong(pattern.len()));
        }
        let regex = RegexBuilder::new(pattern)
            .size_limit(SIZE_LIMIT)
            .dfa_size_limit(DFA_SIZE_LIMIT)
            .build()
            .map_err(|err| match err {
                regex::Error::CompiledTooBig(_) => PatternError::TooBig,
                regex::Error::Syntax(message) => PatternError::Syntax(syntax_reason(&message)),
                other => PatternError::Syntax(other.to_string()),
            })?;
        Ok(Self {
            regex,
            walker: OnceLock::new(),
        })
    }

    fn walker(&self) -> &Walker {
        self.walker.get_or_init(|| Walker::new(self.regex.as_str()))
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
    /// or [`BudgetExceeded`] once `budget` has passed. The clock is read before each body and
    /// within large ones, so a batch overruns its budget by milliseconds at most.
    pub fn match_indices(
        &self,
        bodies: &[Option<&[u8]>],
        budget: Duration,
    ) -> Result<Vec<usize>, BudgetExceeded> {
        let deadline = Instant::now().checked_add(budget);
        let mut cache = None;
        let mut found = Vec::new();
        for (i, body) in bodies.iter().enumerate() {
            let spent = BudgetExceeded {
                done: i,
                total: bodies.len(),
            };
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(spent);
            }
            let Some(body) = body else { continue };
            match self.body_matches(&mut cache, body, deadline) {
                Some(true) => found.push(i),
                Some(false) => {}
                None => return Err(spent),
            }
        }
        Ok(found)
    }

    /// Whether the pattern occurs in `body`, or None if that cannot be known by `deadline`.
    /// `cache`: the lazy DFA's, made on first use and kept for the batch.
    fn body_matches(
        &self,
        cache: &mut Option<Cache>,
        body: &[u8],
        deadline: Option<Instant>,
    ) -> Option<bool> {
        if body.len() <= DIRECT_BYTES {
            return Some(self.regex.is_match(body));
        }
        let walker = self.walker();
        let work = body.len().saturating_mul(walker.states);
        if work <= DIRECT_WORK {
            return Some(self.regex.is_match(body));
        }
        if let Some(dfa) = &walker.dfa {
            let cache = cache.get_or_insert_with(|| dfa.create_cache());
            match walker.walk(dfa, cache, body, deadline) {
                Walk::Decided(found) => return Some(found),
                Walk::Spent => return None,
                Walk::Quit => {}
            }
        }
        // Nothing here can stop the `regex` crate midway: search only if its worst case fits in
        // what is left of the budget.
        if let Some(deadline) = deadline {
            let nanos = u64::try_from(work)
                .unwrap_or(u64::MAX)
                .saturating_mul(NANOS_PER_WORK_UNIT);
            if Instant::now() + Duration::from_nanos(nanos) > deadline {
                return None;
            }
        }
        Some(self.regex.is_match(body))
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

    /// Bodies of about 64 KiB, each with a distinct tail, in ASCII and in two-byte UTF-8.
    fn large_bodies() -> Vec<Vec<u8>> {
        let tails: [&[u8]; 6] = [
            b"needle",
            b"needlex",
            b" a@b.com",
            b"\xffn",
            "\u{e9}en".as_bytes(),
            b"",
        ];
        let mut bodies = Vec::new();
        for tail in tails {
            // Fillers with near misses of the literal patterns, over and over.
            for filler in [&b"x"[..], "\u{e9}".as_bytes(), b"needl", b"nneedlx\xff"] {
                let mut body = filler.repeat((1 << 16) / filler.len());
                body.extend_from_slice(tail);
                bodies.push(body);
            }
        }
        bodies
    }

    #[test]
    fn the_walked_dfa_matches_as_the_regex_crate_searches() {
        let bodies = large_bodies();
        let patterns = [
            "needle",
            "^x",
            "^y",
            "needle$",
            r"\w+@\w+\.com",
            r"(?-u:\xff)n",
            "\u{e9}+n",
            r"[^x\u{e9}]",
            r"\bneedle\b",
            r"^(?s:.)*needlex$",
            "foo|needle",
            "nee(d|x)lex?$",
            r"needle\b",
            r"(?i)NEEDLE",
        ];
        assert!(BodyMatcher::new("foo|needle")
            .unwrap()
            .walker()
            .prefilter
            .is_some());
        for pattern in patterns {
            let matcher = BodyMatcher::new(pattern).unwrap();
            let walker = matcher.walker();
            let dfa = walker.dfa.as_ref().unwrap();
            let mut cache = dfa.create_cache();
            for body in &bodies {
                let tail = String::from_utf8_lossy(&body[body.len() - 8..]);
                let expected = matcher.regex.is_match(body);
                match walker.walk(dfa, &mut cache, body, None) {
                    Walk::Decided(found) => assert_eq!(found, expected, "{pattern} on ...{tail}"),
                    Walk::Quit => assert!(
                        pattern.contains(r"\b") && !body.is_ascii(),
                        "{pattern} on ...{tail}"
                    ),
                    Walk::Spent => unreachable!("no deadline"),
                }
            }
        }
    }

    #[test]
    fn a_costly_search_stops_at_its_deadline_within_one_body() {
        // Every byte a new DFA state of up to 8,000 NFA states: the `regex` crate takes a
        // minute over this body, and could not be stopped.
        let matcher = BodyMatcher::new(r"a(?-u:[\x00-\xff]){8000}c").unwrap();
        let body: Vec<u8> = (0..1u32 << 20)
            .map(|i| if i.count_ones() % 2 == 0 { b'a' } else { b'b' })
            .collect();
        let started = Instant::now();
        let spent = matcher.match_indices(&[None, Some(&body)], Duration::from_millis(300));
        assert_eq!(spent, Err(BudgetExceeded { done: 1, total: 2 }));
        let took = started.elapsed();
        assert!(took < Duration::from_secs(3), "stopped after {took:?}");
    }

    #[test]
    fn a_body_the_dfa_quits_on_is_searched_only_if_its_worst_case_fits_the_budget() {
        // A Unicode word boundary beside a non-ASCII byte: the lazy DFA cannot decide it.
        let cheap = BodyMatcher::new(r"\bneedle\b").unwrap();
        let mut body = "\u{e9}".repeat(1 << 19).into_bytes();
        body.extend_from_slice(b" needle");
        assert_eq!(
            cheap.match_indices(&[Some(&body)], Duration::from_secs(600)),
            Ok(vec![0])
        );
        let costly = BodyMatcher::new(r"\b\w{3}[a-z]{300}c").unwrap();
        let started = Instant::now();
        assert_eq!(
            costly.match_indices(&[Some(&body)], Duration::from_secs(1)),
            Err(BudgetExceeded { done: 0, total: 1 })
        );
        assert!(started.elapsed() < Duration::from_secs(1));
    }
}
