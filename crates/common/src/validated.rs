//! One shape for every name and id that crosses a boundary: a string newtype that can only
//! be built through its check, on the wire (serde `try_from`), on the command line
//! (`FromStr`) and in code (`parse`).
//!
//! Ids the core keeps in many indexes at once (an operation's, a job's, a pool's) hold
//! their text behind an `Arc<str>`: a copy for one more index is a count, not a heap
//! string, which is what a burst of 100,000 operations would otherwise pay per index.

/// `validated_string!(/// doc  Name(vis String), check_fn, ErrorType);` (or
/// `Name(vis Arc<str>)` for a shared id) where `check_fn: fn(&str) -> Result<(), ErrorType>`.
macro_rules! validated_string {
    ($(#[$m:meta])* $name:ident($field_vis:vis String), $check:path, $err:ty) => {
        $(#[$m])*
        #[derive(
            Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash,
            serde::Serialize, serde::Deserialize,
        )]
        #[serde(try_from = "String", into = "String")]
        pub struct $name($field_vis String);

        impl TryFrom<String> for $name {
            type Error = $err;
            fn try_from(s: String) -> Result<Self, $err> {
                $check(&s)?;
                Ok($name(s))
            }
        }

        impl From<$name> for String {
            fn from(v: $name) -> String {
                v.0
            }
        }

        /// Looking up by any text is harmless: only building one needs the check.
        impl std::borrow::Borrow<String> for $name {
            fn borrow(&self) -> &String {
                &self.0
            }
        }

        validated_string_common!($name, $check, $err);
    };
    ($(#[$m:meta])* $name:ident($field_vis:vis Arc<str>), $check:path, $err:ty) => {
        $(#[$m])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Deserialize)]
        #[serde(try_from = "String")]
        pub struct $name($field_vis std::sync::Arc<str>);

        impl TryFrom<String> for $name {
            type Error = $err;
            fn try_from(s: String) -> Result<Self, $err> {
                $check(&s)?;
                Ok($name(s.into()))
            }
        }

        impl From<$name> for String {
            fn from(v: $name) -> String {
                v.0.to_string()
            }
        }

        /// Written as the text it is, without a copy.
        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        validated_string_common!($name, $check, $err);
    };
}

/// What both storages of `validated_string!` share: the check on the way in, and reading
/// one as the text it is.
macro_rules! validated_string_common {
    ($name:ident, $check:path, $err:ty) => {
        impl $name {
            /// Checks a value given by a person or a wire message.
            pub fn parse(s: &str) -> Result<Self, $err> {
                $check(s)?;
                Ok($name(s.into()))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::str::FromStr for $name {
            type Err = $err;
            fn from_str(s: &str) -> Result<Self, $err> {
                $name::parse(s)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        /// Read as the text it is wherever text is read (lookups by `&str`, messages):
        /// only building one needs the check.
        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                &*self.0 == other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &*self.0 == other.as_str()
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                &*self.0 == *other
            }
        }
    };
}
