//! A spec checked once, where it enters: parsed from a request (the bus's
//! `start_operation`), a scenario or the command line, it becomes a `ValidSpec`, and
//! admission takes that rather than checking again what the boundary checked.

use super::{SpecError, VanillaSpec};
use serde::{Deserialize, Serialize};

/// A `VanillaSpec` that passed `validate`: the only way to make one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "VanillaSpec", into = "VanillaSpec")]
pub struct ValidSpec(VanillaSpec);

impl TryFrom<VanillaSpec> for ValidSpec {
    type Error = SpecError;

    fn try_from(spec: VanillaSpec) -> Result<Self, SpecError> {
        spec.validate()?;
        Ok(ValidSpec(spec))
    }
}

impl From<ValidSpec> for VanillaSpec {
    fn from(valid: ValidSpec) -> Self {
        valid.0
    }
}

impl std::ops::Deref for ValidSpec {
    type Target = VanillaSpec;

    fn deref(&self) -> &VanillaSpec {
        &self.0
    }
}

impl ValidSpec {
    pub fn into_inner(self) -> VanillaSpec {
        self.0
    }
}

/// What admission takes: a spec checked at its boundary, or one a trusted caller (a
/// test, a replayed log) hands in unchecked, which is checked now.
pub trait IntoValidSpec {
    fn into_valid(self) -> Result<ValidSpec, SpecError>;
}

impl IntoValidSpec for ValidSpec {
    fn into_valid(self) -> Result<ValidSpec, SpecError> {
        Ok(self)
    }
}

impl IntoValidSpec for VanillaSpec {
    fn into_valid(self) -> Result<ValidSpec, SpecError> {
        ValidSpec::try_from(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ApiRequest, StartOperation};
    use crate::codec::{decode, encode};

    /// A request whose spec is invalid does not decode: the refusal names the field, and
    /// nothing past the boundary ever holds that spec.
    #[test]
    fn an_invalid_spec_is_refused_where_it_is_decoded() {
        let spec = |cpu: f64| -> VanillaSpec {
            serde_json::from_value(serde_json::json!(
                {"tasks": {"main": {"command": "x", "job_count": 1, "cpu_limit": cpu}}}
            ))
            .unwrap()
        };
        let wire = |spec: VanillaSpec| {
            // The wire form of a request, as a client that skipped the check sends it.
            #[derive(Serialize)]
            struct Raw {
                spec: VanillaSpec,
                idempotency_token: Option<String>,
            }
            encode(&ApiRequest {
                protocol_version: 1,
                body: Raw {
                    spec,
                    idempotency_token: None,
                },
            })
            .unwrap()
        };
        let err = decode::<ApiRequest<StartOperation>>(&wire(spec(-1.0))).unwrap_err();
        assert!(err.to_string().contains("tasks.main.cpu_limit"), "{err}");
        let ok = decode::<ApiRequest<StartOperation>>(&wire(spec(2.0))).unwrap();
        assert_eq!(*ok.body.spec, spec(2.0));
        assert!(ValidSpec::try_from(spec(-1.0)).is_err());
    }
}
