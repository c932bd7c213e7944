//! MessagePack with named fields: the only encoding on the bus. Named fields let old and
//! new binaries skip fields they do not know instead of misreading positions.

use serde::{de::DeserializeOwned, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("cannot encode message: {0}")]
    Encode(#[from] rmp_serde::encode::Error),
    #[error("malformed message ({len} bytes): {source}")]
    Decode {
        len: usize,
        source: rmp_serde::decode::Error,
    },
}

pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, CodecError> {
    Ok(rmp_serde::to_vec_named(msg)?)
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    rmp_serde::from_slice(bytes).map_err(|source| CodecError::Decode {
        len: bytes.len(),
        source,
    })
}
