//! Values admins type on the command line: JSON, or YSON text as YTsaurus users write it
//! (`{cpu=4;memory=1073741824}`, `[a;b]`, `%true`, `#`, bare words as strings).
//! Both become a `serde_json::Value`; errors say where parsing stopped and what was expected.

use serde_json::{Map, Number, Value};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("cannot parse value at offset {offset}: {message} (in `{text}`)")]
pub struct ValueParseError {
    pub offset: usize,
    pub message: String,
    pub text: String,
}

/// Parses JSON if the text is JSON, otherwise YSON text.
pub fn parse_value(text: &str) -> Result<Value, ValueParseError> {
    if let Ok(v) = serde_json::from_str::<Value>(text) {
        return Ok(v);
    }
    let mut p = Parser {
        s: text.as_bytes(),
        pos: 0,
        text,
        depth: 0,
    };
    let v = p.value()?;
    p.skip_ws();
    if p.pos < p.s.len() {
        return Err(p.error("unexpected text after the value"));
    }
    Ok(v)
}

/// Bounds nesting so that hostile input cannot overflow the stack.
const MAX_DEPTH: usize = 64;

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
    text: &'a str,
    depth: usize,
}

impl Parser<'_> {
    fn error(&self, message: &str) -> ValueParseError {
        ValueParseError {
            offset: self.pos,
            message: message.to_string(),
            text: self.text.to_string(),
        }
    }

    fn skip_ws(&mut self) {
        while self.pos < self.s.len() && self.s[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.s.get(self.pos).copied()
    }

    fn value(&mut self) -> Result<Value, ValueParseError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error("nesting is too deep"));
        }
        if self.peek() == Some(b'<') {
            // Attributes on a value carry nothing the scheduler reads: parse and drop.
            self.pos += 1;
            self.map_body(b'>')?;
        }
        let v = match self.peek() {
            None => Err(self.error("expected a value, found the end")),
            Some(b'{') => {
                self.pos += 1;
                self.map_body(b'}').map(Value::Object)
            }
            Some(b'[') => {
                self.pos += 1;
                self.list_body()
            }
            Some(b'"') => self.quoted().map(Value::String),
            Some(b'#') => {
                self.pos += 1;
                Ok(Value::Null)
            }
            Some(b'%') => self.percent(),
            Some(c) if c == b'-' || c == b'+' || c.is_ascii_digit() => self.number(),
            Some(c) if c.is_ascii_alphabetic() || c == b'_' => Ok(Value::String(self.word())),
            Some(_) => Err(self.error("expected a value")),
        };
        self.depth -= 1;
        v
    }

    fn map_body(&mut self, close: u8) -> Result<Map<String, Value>, ValueParseError> {
        let mut map = Map::new();
        loop {
            match self.peek() {
                Some(c) if c == close => {
                    self.pos += 1;
                    return Ok(map);
                }
                None => return Err(self.error(&format!("expected '{}'", close as char))),
                _ => {}
            }
            let key = match self.peek() {
                Some(b'"') => self.quoted()?,
                Some(c) if c.is_ascii_alphanumeric() || c == b'_' => self.word(),
                _ => return Err(self.error("expected a key")),
            };
            if self.peek() != Some(b'=') {
                return Err(self.error(&format!("expected '=' after key '{key}'")));
            }
            self.pos += 1;
            let v = self.value()?;
            map.insert(key, v);
            match self.peek() {
                Some(b';') => self.pos += 1,
                Some(c) if c == close => {}
                _ => {
                    return Err(self.error(&format!(
                        "expected ';' or '{}' after a value",
                        close as char
                    )))
                }
            }
        }
    }

    fn list_body(&mut self) -> Result<Value, ValueParseError> {
        let mut items = Vec::new();
        loop {
            match self.peek() {
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Value::Array(items));
                }
                None => return Err(self.error("expected ']'")),
                _ => {}
            }
            items.push(self.value()?);
            match self.peek() {
                Some(b';') => self.pos += 1,
                Some(b']') => {}
                _ => return Err(self.error("expected ';' or ']' after a list item")),
            }
        }
    }

    fn quoted(&mut self) -> Result<String, ValueParseError> {
        let start = self.pos;
        self.pos += 1;
        let mut out = Vec::new();
        while let Some(&c) = self.s.get(self.pos) {
            self.pos += 1;
            match c {
                b'"' => {
                    return String::from_utf8(out).map_err(|_| self.error("string is not UTF-8"))
                }
                b'\\' => {
                    let Some(&e) = self.s.get(self.pos) else {
                        break;
                    };
                    self.pos += 1;
                    out.push(match e {
                        b'n' => b'\n',
                        b't' => b'\t',
                        b'r' => b'\r',
                        other => other,
                    });
                }
                other => out.push(other),
            }
        }
        self.pos = start;
        Err(self.error("unterminated string"))
    }

    fn word(&mut self) -> String {
        let start = self.pos;
        while self.pos < self.s.len()
            && (self.s[self.pos].is_ascii_alphanumeric() || b"_-.".contains(&self.s[self.pos]))
        {
            self.pos += 1;
        }
        self.text[start..self.pos].to_string()
    }

    fn percent(&mut self) -> Result<Value, ValueParseError> {
        self.pos += 1;
        let w = self.word();
        match w.as_str() {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ => Err(self.error(&format!("unknown literal %{w} (expected %true or %false)"))),
        }
    }

    fn number(&mut self) -> Result<Value, ValueParseError> {
        let start = self.pos;
        while self.pos < self.s.len()
            && (self.s[self.pos].is_ascii_alphanumeric() || b"+-.".contains(&self.s[self.pos]))
        {
            self.pos += 1;
        }
        let raw = &self.text[start..self.pos];
        let digits = raw.strip_suffix('u').unwrap_or(raw);
        if let Ok(i) = digits.parse::<i64>() {
            return Ok(Value::Number(i.into()));
        }
        if let Ok(u) = digits.parse::<u64>() {
            return Ok(Value::Number(u.into()));
        }
        match digits.parse::<f64>().ok().and_then(Number::from_f64) {
            Some(n) => Ok(Value::Number(n)),
            // Not a number: a bare word that starts with a digit, such as a size "4G".
            None if raw.chars().all(|c| c.is_ascii_alphanumeric() || c == '.') => {
                Ok(Value::String(raw.to_string()))
            }
            None => {
                self.pos = start;
                Err(self.error(&format!("'{raw}' is not a number")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn yson_and_json() {
        assert_eq!(
            parse_value("{cpu=4;memory=1073741824}").unwrap(),
            json!({"cpu": 4, "memory": 1073741824})
        );
        assert_eq!(parse_value(r#"{"cpu": 4}"#).unwrap(), json!({"cpu": 4}));
        assert_eq!(
            parse_value("[weight; start_time]").unwrap(),
            json!(["weight", "start_time"])
        );
        assert_eq!(parse_value("%false").unwrap(), json!(false));
        assert_eq!(parse_value("fifo").unwrap(), json!("fifo"));
        assert_eq!(parse_value("2.5").unwrap(), json!(2.5));
        assert_eq!(parse_value("4G").unwrap(), json!("4G"));
        assert_eq!(parse_value("#").unwrap(), Value::Null);
        assert_eq!(
            parse_value(r#"{a="x;y";b={c=[1;2;];};}"#).unwrap(),
            json!({"a": "x;y", "b": {"c": [1, 2]}})
        );
    }

    #[test]
    fn errors_say_where() {
        let e = parse_value("{cpu=4").unwrap_err();
        assert!(
            e.message.contains("'}'") || e.message.contains("';'"),
            "{e}"
        );
        let e = parse_value("{cpu 4}").unwrap_err();
        assert!(e.message.contains("'='"), "{e}");
        assert_eq!(e.offset, 5);
        assert!(parse_value("\"abc").is_err());
        assert!(parse_value("%maybe").is_err());
        assert!(parse_value(&"[".repeat(1000)).is_err());
        assert!(parse_value("").is_err());
    }
}
