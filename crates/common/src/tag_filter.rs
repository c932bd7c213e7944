//! Boolean formulas over node tags (SPEC 4.1): a tree's `nodes_filter` and an
//! operation's `scheduling_tag_filter`.
//!
//! `!` binds tighter than `&`, which binds tighter than `|`; parentheses group; a tag is
//! true when the node has it; the empty formula is true. Filters arrive from admins and
//! users as text, so parsing reports the column and what it expected instead of failing
//! somewhere deeper, and nesting is bounded so that no input can exhaust the stack.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;

/// Deeper nesting than this is refused: real filters are a few levels deep, and the
/// bound keeps the recursive parser safe on hostile input.
const MAX_DEPTH: usize = 64;
/// Longest filter text; a filter names a few tags, not a document.
pub const MAX_FILTER_LEN: usize = 4096;
/// Longest tag.
pub const MAX_TAG_LEN: usize = 256;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("filter '{text}': at column {column}: {message}")]
pub struct TagFilterError {
    pub text: String,
    /// 1-based character column of the offending token (one past the end for "end").
    pub column: usize,
    pub message: String,
}

/// Whether `tag` is a valid tag name: `[A-Za-z0-9_./:-]+`, not all digits.
pub fn validate_tag(tag: &str) -> Result<(), String> {
    if tag.len() > MAX_TAG_LEN {
        return Err(format!(
            "tag '{}…' is invalid: {} bytes is longer than the limit of {MAX_TAG_LEN}",
            tag.chars().take(40).collect::<String>(),
            tag.len()
        ));
    }
    if tag.is_empty() || !tag.chars().all(is_tag_char) {
        return Err(format!(
            "tag '{tag}' is invalid: use letters, digits and _ . / : - only"
        ));
    }
    if tag.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!("tag '{tag}' is invalid: it must not be all digits"));
    }
    Ok(())
}

fn is_tag_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | ':' | '-')
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Expr {
    Tag(String),
    Not(Box<Expr>),
    And(Vec<Expr>),
    Or(Vec<Expr>),
}

impl Expr {
    fn eval(&self, tags: &BTreeSet<String>) -> bool {
        match self {
            Expr::Tag(t) => tags.contains(t),
            Expr::Not(e) => !e.eval(tags),
            Expr::And(es) => es.iter().all(|e| e.eval(tags)),
            Expr::Or(es) => es.iter().any(|e| e.eval(tags)),
        }
    }
}

/// A parsed filter; keeps its text, which is what admins set and read back.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TagFilter {
    text: String,
    /// `None`: the empty formula, true for every node.
    expr: Option<Expr>,
}

/// The empty formula, for a reference where no filter was given.
static ANY_NODE: TagFilter = TagFilter::ANY;

impl TagFilter {
    /// The empty formula: every node matches.
    pub const ANY: TagFilter = TagFilter {
        text: String::new(),
        expr: None,
    };

    /// `filter`, or the empty formula where there is none.
    pub fn or_any(filter: Option<&TagFilter>) -> &TagFilter {
        filter.unwrap_or(&ANY_NODE)
    }

    pub fn parse(text: &str) -> Result<Self, TagFilterError> {
        if text.len() > MAX_FILTER_LEN {
            return Err(TagFilterError {
                text: text.chars().take(40).chain("…".chars()).collect(),
                column: MAX_FILTER_LEN + 1,
                message: format!(
                    "{} bytes is longer than the limit of {MAX_FILTER_LEN}",
                    text.len()
                ),
            });
        }
        let tokens = tokenize(text)?;
        let mut p = Parser {
            text,
            tokens,
            pos: 0,
            depth: 0,
        };
        let expr = if p.tokens.is_empty() {
            None
        } else {
            let e = p.or()?;
            if let Some(t) = p.peek() {
                return Err(p.error_at(
                    t.column,
                    format!(
                        "expected '&', '|' or the end of the filter, found {}",
                        t.kind
                    ),
                ));
            }
            Some(e)
        };
        Ok(Self {
            text: text.to_string(),
            expr,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.expr.is_none()
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn matches(&self, tags: &BTreeSet<String>) -> bool {
        self.expr.as_ref().is_none_or(|e| e.eval(tags))
    }
}

impl fmt::Display for TagFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl TryFrom<String> for TagFilter {
    type Error = TagFilterError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        TagFilter::parse(&s)
    }
}

impl From<TagFilter> for String {
    fn from(f: TagFilter) -> String {
        f.text
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    Tag(String),
    Not,
    And,
    Or,
    Open,
    Close,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Kind::Tag(t) => write!(f, "tag '{t}'"),
            Kind::Not => f.write_str("'!'"),
            Kind::And => f.write_str("'&'"),
            Kind::Or => f.write_str("'|'"),
            Kind::Open => f.write_str("'('"),
            Kind::Close => f.write_str("')'"),
        }
    }
}

#[derive(Clone, Debug)]
struct Token {
    kind: Kind,
    column: usize,
}

fn tokenize(text: &str) -> Result<Vec<Token>, TagFilterError> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let column = i + 1;
        let kind = match c {
            c if c.is_whitespace() => {
                i += 1;
                continue;
            }
            '!' => Kind::Not,
            '&' => Kind::And,
            '|' => Kind::Or,
            '(' => Kind::Open,
            ')' => Kind::Close,
            c if is_tag_char(c) => {
                let start = i;
                while i < chars.len() && is_tag_char(chars[i]) {
                    i += 1;
                }
                let tag: String = chars[start..i].iter().collect();
                if tag.chars().all(|c| c.is_ascii_digit()) {
                    return Err(TagFilterError {
                        text: text.to_string(),
                        column,
                        message: format!("'{tag}' is not a tag: tags are not all digits"),
                    });
                }
                tokens.push(Token {
                    kind: Kind::Tag(tag),
                    column,
                });
                continue;
            }
            other => {
                return Err(TagFilterError {
                    text: text.to_string(),
                    column,
                    message: format!(
                        "unexpected character '{}': tags use letters, digits and _ . / : -; operators are ! & | ( )",
                        other.escape_debug()
                    ),
                })
            }
        };
        tokens.push(Token { kind, column });
        i += 1;
    }
    Ok(tokens)
}

struct Parser<'a> {
    text: &'a str,
    tokens: Vec<Token>,
    pos: usize,
    depth: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn error_at(&self, column: usize, message: String) -> TagFilterError {
        TagFilterError {
            text: self.text.to_string(),
            column,
            message,
        }
    }

    fn end_column(&self) -> usize {
        self.text.chars().count() + 1
    }

    fn or(&mut self) -> Result<Expr, TagFilterError> {
        self.joined(Kind::Or, Self::and, Expr::Or)
    }

    fn and(&mut self) -> Result<Expr, TagFilterError> {
        self.joined(Kind::And, Self::unary, Expr::And)
    }

    /// `operand (op operand)*`, one level of the precedence ladder.
    fn joined(
        &mut self,
        op: Kind,
        operand: fn(&mut Self) -> Result<Expr, TagFilterError>,
        combine: fn(Vec<Expr>) -> Expr,
    ) -> Result<Expr, TagFilterError> {
        let mut terms = vec![operand(self)?];
        while self.peek().is_some_and(|t| t.kind == op) {
            self.pos += 1;
            terms.push(operand(self)?);
        }
        Ok(if terms.len() == 1 {
            terms.pop().expect("one term")
        } else {
            combine(terms)
        })
    }

    fn unary(&mut self) -> Result<Expr, TagFilterError> {
        let Some(token) = self.peek().cloned() else {
            return Err(self.error_at(
                self.end_column(),
                "expected a tag, '!' or '(', found the end of the filter".into(),
            ));
        };
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error_at(
                token.column,
                format!("nested more than {MAX_DEPTH} levels deep"),
            ));
        }
        self.pos += 1;
        let result = match token.kind {
            Kind::Tag(t) => Ok(Expr::Tag(t)),
            Kind::Not => self.unary().map(|e| Expr::Not(Box::new(e))),
            Kind::Open => {
                let inner = self.or()?;
                match self.peek() {
                    Some(t) if t.kind == Kind::Close => {
                        self.pos += 1;
                        Ok(inner)
                    }
                    Some(t) => Err(self.error_at(
                        t.column,
                        format!(
                            "expected ')' to close the '(' at column {}, found {}",
                            token.column, t.kind
                        ),
                    )),
                    None => Err(self.error_at(
                        self.end_column(),
                        format!(
                            "expected ')' to close the '(' at column {}, found the end of the filter",
                            token.column
                        ),
                    )),
                }
            }
            other => Err(self.error_at(
                token.column,
                format!("expected a tag, '!' or '(', found {other}"),
            )),
        };
        self.depth -= 1;
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tags(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn eval(filter: &str, list: &[&str]) -> bool {
        TagFilter::parse(filter).unwrap().matches(&tags(list))
    }

    #[test]
    fn empty_filter_matches_every_node() {
        assert!(eval("", &[]));
        assert!(eval("   ", &["x"]));
        assert!(TagFilter::parse(" ").unwrap().is_empty());
    }

    #[test]
    fn precedence_not_and_or() {
        // a | b & !c  ==  a | (b & (!c))
        assert!(eval("a | b & !c", &["a", "c"]));
        assert!(eval("a | b & !c", &["b"]));
        assert!(!eval("a | b & !c", &["b", "c"]));
        assert!(!eval("(a | b) & !c", &["a", "c"]));
        assert!(eval("!!a", &["a"]));
        assert!(eval("!custom_tag", &["host:n1"]));
        assert!(!eval("!custom_tag", &["custom_tag"]));
        assert!(eval(
            "gpu_model:NVIDIA_A100 & arch:x86_64",
            &["gpu_model:NVIDIA_A100", "arch:x86_64"]
        ));
    }

    /// Parsing `text` fails at `column` with a message containing `says`.
    fn fails_at(text: &str, column: usize, says: &str) -> TagFilterError {
        let e = TagFilter::parse(text).unwrap_err();
        assert_eq!(e.column, column, "{e}");
        assert!(e.message.contains(says), "{e}");
        e
    }

    #[test]
    fn typical_mistakes_say_where_and_what() {
        fails_at("a & | b", 5, "expected a tag, '!' or '(', found '|'");
        fails_at("(a", 3, "expected ')' to close the '(' at column 1");
        fails_at(
            "a b",
            3,
            "expected '&', '|' or the end of the filter, found tag 'b'",
        );
        fails_at("a &", 4, "found the end of the filter");
        fails_at("a)", 2, "found ')'");
        fails_at("ssd && fast", 6, "found '&'");
        fails_at("a = b", 3, "unexpected character '='");
        let e = fails_at("42", 1, "all digits");
        assert!(e.to_string().starts_with("filter '42': at column 1"), "{e}");
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let deep = "(".repeat(1_000) + "a" + &")".repeat(1_000);
        assert!(TagFilter::parse(&deep)
            .unwrap_err()
            .message
            .contains("nested"));
        let nots = "!".repeat(4_000) + "a";
        assert!(TagFilter::parse(&nots).is_err());
        // Longer than any filter may be: refused before parsing, naming the limit.
        let long = "(".repeat(100_000) + "a" + &")".repeat(100_000);
        let e = TagFilter::parse(&long).unwrap_err();
        assert!(e.message.contains("limit of 4096"), "{e}");
        let shallow = "(".repeat(20) + "a" + &")".repeat(20);
        assert!(eval(&shallow, &["a"]));
    }

    #[test]
    fn serde_round_trips_text() {
        let f: TagFilter = serde_json::from_str("\"ssd & !slow\"").unwrap();
        assert_eq!(serde_json::to_string(&f).unwrap(), "\"ssd & !slow\"");
        assert!(serde_json::from_str::<TagFilter>("\"ssd &\"").is_err());
    }

    #[test]
    fn tag_names() {
        assert!(validate_tag("ssd").is_ok());
        assert!(validate_tag("gpu_model:NVIDIA_H100").is_ok());
        assert!(validate_tag("123").is_err());
        assert!(validate_tag("a b").is_err());
        assert!(validate_tag("").is_err());
    }

    /// A random formula and the value it must have, built alongside.
    fn formula() -> impl Strategy<Value = (String, Vec<bool>)> {
        // Values of tags t0..t3 are fixed per case by the outer test; here each leaf
        // carries its truth table over the 16 assignments.
        let leaf = (0usize..4).prop_map(|i| {
            let table: Vec<bool> = (0..16).map(|m| m & (1 << i) != 0).collect();
            (format!("t{i}"), table)
        });
        leaf.prop_recursive(6, 64, 2, |inner| {
            prop_oneof![
                inner
                    .clone()
                    .prop_map(|(s, t)| (format!("!{s}"), t.iter().map(|v| !v).collect())),
                (inner.clone(), inner.clone()).prop_map(|((a, ta), (b, tb))| (
                    format!("({a} & {b})"),
                    ta.iter().zip(&tb).map(|(x, y)| *x && *y).collect()
                )),
                (inner.clone(), inner).prop_map(|((a, ta), (b, tb))| (
                    format!("({a}|{b})"),
                    ta.iter().zip(&tb).map(|(x, y)| *x || *y).collect()
                )),
            ]
        })
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_text(s in "\\PC{0,64}") {
            let _ = TagFilter::parse(&s);
        }

        #[test]
        fn never_panics_on_operator_soup(s in "[a-c!&|() ]{0,48}") {
            if let Ok(f) = TagFilter::parse(&s) {
                let _ = f.matches(&tags(&["a", "c"]));
            }
        }

        #[test]
        fn evaluates_like_the_formula((text, table) in formula()) {
            let f = TagFilter::parse(&text).unwrap();
            for (m, expected) in table.iter().enumerate() {
                let set: BTreeSet<String> =
                    (0..4).filter(|i| m & (1 << i) != 0).map(|i| format!("t{i}")).collect();
                prop_assert_eq!(f.matches(&set), *expected, "{} under {:?}", text, set);
            }
        }
    }
}
