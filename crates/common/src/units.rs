//! Human units in specs and flags: memory sizes (`512M`, `1Gi`, bytes) and durations
//! (integer milliseconds as YTsaurus writes them, or `500ms`, `30s`, `2h`, `1d`).

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    #[error(
        "'{0}' is not a memory size (expected bytes or a number with K, M, G or T; powers of 1024)"
    )]
    BadSize(String),
    #[error("'{0}' is not a duration (expected milliseconds or a number with ms, s, m, h or d)")]
    BadDuration(String),
}

/// Splits `"1.5G"` into `(1.5, "G")`; the suffix is trimmed.
fn split_number(text: &str) -> Option<(f64, &str)> {
    let t = text.trim();
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(end);
    Some((num.parse().ok()?, suffix.trim()))
}

/// A number of bytes, written and read with binary suffixes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(pub u64);

impl FromStr for ByteSize {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        let bad = || UnitError::BadSize(s.to_string());
        let (num, suffix) = split_number(s).ok_or_else(bad)?;
        let mult: u64 = match suffix.trim_end_matches(['b', 'B']) {
            "" => 1,
            "K" | "k" | "Ki" | "KI" => 1 << 10,
            "M" | "m" | "Mi" | "MI" => 1 << 20,
            "G" | "g" | "Gi" | "GI" => 1 << 30,
            "T" | "t" | "Ti" | "TI" => 1 << 40,
            _ => return Err(bad()),
        };
        let v = num * mult as f64;
        if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
            return Err(bad());
        }
        Ok(ByteSize(v.round() as u64))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u64); 4] = [
            ("T", 1 << 40),
            ("G", 1 << 30),
            ("M", 1 << 20),
            ("K", 1 << 10),
        ];
        for (name, size) in UNITS {
            if self.0 >= size && self.0.is_multiple_of(size) {
                return write!(f, "{}{}", self.0 / size, name);
            }
        }
        for (name, size) in UNITS {
            if self.0 >= size {
                return write!(f, "{:.1}{}", self.0 as f64 / size as f64, name);
            }
        }
        write!(f, "{}", self.0)
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NumberOrText::<ByteSize>::new("a memory size"))
    }
}

/// A span of time in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct DurationMs(pub u64);

impl DurationMs {
    pub fn as_std(self) -> std::time::Duration {
        std::time::Duration::from_millis(self.0)
    }
}

impl FromStr for DurationMs {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        let bad = || UnitError::BadDuration(s.to_string());
        let (num, suffix) = split_number(s).ok_or_else(bad)?;
        let mult = match suffix {
            "" | "ms" => 1.0,
            "s" => 1e3,
            "m" | "min" => 60e3,
            "h" => 3600e3,
            "d" => 86400e3,
            _ => return Err(bad()),
        };
        let v = num * mult;
        if !v.is_finite() || v < 0.0 {
            return Err(bad());
        }
        Ok(DurationMs(v.round() as u64))
    }
}

impl fmt::Display for DurationMs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_multiple_of(1000) {
            write!(f, "{}s", self.0 / 1000)
        } else {
            write!(f, "{}ms", self.0)
        }
    }
}

impl Serialize for DurationMs {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for DurationMs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NumberOrText::<DurationMs>::new("a duration"))
    }
}

/// Accepts a non-negative number (already in base units) or text parsed by `FromStr`.
struct NumberOrText<T> {
    what: &'static str,
    _t: std::marker::PhantomData<T>,
}

impl<T> NumberOrText<T> {
    fn new(what: &'static str) -> Self {
        Self {
            what,
            _t: std::marker::PhantomData,
        }
    }
}

trait FromBase: Sized {
    fn from_base(v: u64) -> Self;
}
impl FromBase for ByteSize {
    fn from_base(v: u64) -> Self {
        ByteSize(v)
    }
}
impl FromBase for DurationMs {
    fn from_base(v: u64) -> Self {
        DurationMs(v)
    }
}

impl<'de, T> de::Visitor<'de> for NumberOrText<T>
where
    T: FromBase + FromStr<Err = UnitError>,
{
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}", self.what)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        Ok(T::from_base(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        u64::try_from(v)
            .map(T::from_base)
            .map_err(|_| E::custom(format!("{} must not be negative, got {v}", self.what)))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        if v.is_finite() && v >= 0.0 {
            Ok(T::from_base(v.round() as u64))
        } else {
            Err(E::custom(format!(
                "{} must be a non-negative number, got {v}",
                self.what
            )))
        }
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        v.parse().map_err(E::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!("512M".parse::<ByteSize>().unwrap().0, 512 << 20);
        assert_eq!("1Gi".parse::<ByteSize>().unwrap().0, 1 << 30);
        assert_eq!("64Mi".parse::<ByteSize>().unwrap().0, 64 << 20);
        assert_eq!("1.5K".parse::<ByteSize>().unwrap().0, 1536);
        assert_eq!("1000".parse::<ByteSize>().unwrap().0, 1000);
        assert!("12Q".parse::<ByteSize>().is_err());
        assert!("-1G".parse::<ByteSize>().is_err());
        assert!("".parse::<ByteSize>().is_err());
        assert_eq!(ByteSize(1 << 30).to_string(), "1G");
    }

    #[test]
    fn durations() {
        assert_eq!("5000".parse::<DurationMs>().unwrap().0, 5000);
        assert_eq!("500ms".parse::<DurationMs>().unwrap().0, 500);
        assert_eq!("30s".parse::<DurationMs>().unwrap().0, 30_000);
        assert_eq!("2h".parse::<DurationMs>().unwrap().0, 7_200_000);
        assert_eq!("1d".parse::<DurationMs>().unwrap().0, 86_400_000);
        assert!("soon".parse::<DurationMs>().is_err());
    }

    #[test]
    fn deserialises_numbers_and_text() {
        let v: ByteSize = serde_json::from_str("\"1G\"").unwrap();
        assert_eq!(v.0, 1 << 30);
        let v: ByteSize = serde_json::from_str("2048").unwrap();
        assert_eq!(v.0, 2048);
        assert!(serde_json::from_str::<ByteSize>("-5").is_err());
        let d: DurationMs = serde_json::from_str("\"10s\"").unwrap();
        assert_eq!(d.0, 10_000);
    }
}
