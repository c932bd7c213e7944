//! One shape for every name and id that crosses a boundary: a string newtype that can only
//! be built through its check, on the wire (serde `try_from`), on the command line
//! (`FromStr`) and in code (`parse`).

/// `validated_string!(/// doc  Name(vis String), check_fn, ErrorType);` where
/// `check_fn: fn(&str) -> Result<(), ErrorType>`.
macro_rules! validated_string {
    ($(#[$m:meta])* $name:ident($field_vis:vis String), $check:path, $err:ty) => {
        $(#[$m])*
        #[derive(
            Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash,
            serde::Serialize, serde::Deserialize,
        )]
        #[serde(try_from = "String", into = "String")]
        pub struct $name($field_vis String);

        impl $name {
            /// Checks a value given by a person or a wire message.
            pub fn parse(s: &str) -> Result<Self, $err> {
                $check(s)?;
                Ok($name(s.to_string()))
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
                self.0 == other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        /// Looking up by any text is harmless: only building one needs the check.
        impl std::borrow::Borrow<String> for $name {
            fn borrow(&self) -> &String {
                &self.0
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }
    };
}
