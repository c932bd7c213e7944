//! Quoting what a caller sent back to it (in an error) or into a log: at most a short
//! prefix, so a 500 KB hostile value gives a short error, not a 500 KB one.

/// How much of an input an error or log line quotes.
pub const QUOTE_CHARS: usize = 80;

/// At most `max` characters of `input`, control characters shown escaped, with `…`
/// where it was cut.
pub fn quote(input: &str, max: usize) -> String {
    let mut out = String::new();
    for (i, c) in input.chars().enumerate() {
        if i == max {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_are_cut_and_controls_escaped() {
        assert_eq!(quote("abc", 5), "abc");
        assert_eq!(quote(&"x".repeat(500_000), 3), "xxx…");
        assert_eq!(quote("a\0b\n", 10), "a\\u{0}b\\n");
    }
}
