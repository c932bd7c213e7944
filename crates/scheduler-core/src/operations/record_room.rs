//! An operation's record must fit the store (issue 38 point 12): a submission or a
//! parameter change whose record the store could not take is refused before it is
//! answered, naming the limit. "Not written" must never follow an acknowledgement.

use ytsched_common::api::ApiError;
use ytsched_common::spec::VanillaSpec;

/// Bytes of an operation's record kept for what is not its spec: a history of at most
/// 64 entries of at most 1 KiB, up to 16 inline attempts with 1 KiB of output each, and
/// its header.
pub const RECORD_MARGIN: usize = 160 * 1024;

/// Refuses `spec` when its operation's record could exceed `max_record_bytes` (the
/// store's limit), counting the room the rest of the record may take.
pub fn check(spec: &VanillaSpec, max_record_bytes: usize) -> Result<(), ApiError> {
    let bytes = ytsched_common::codec::encode(spec).map_or(usize::MAX, |b| b.len());
    let room = max_record_bytes.saturating_sub(RECORD_MARGIN);
    if bytes > room {
        return Err(ApiError::limit_reached(format!(
            "the spec takes {bytes} bytes encoded; an operation's record may take at most {max_record_bytes} bytes (the store's limit), of which {RECORD_MARGIN} are kept for its history and attempts"
        )));
    }
    Ok(())
}
