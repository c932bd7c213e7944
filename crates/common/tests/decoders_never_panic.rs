//! Hostile input (SPEC 5.12): every decoder that reads what crosses a boundary — wire
//! messages, specs, YSON/JSON values, units, tag filters, credentials — returns a value
//! or an error for any input, never panics and never hangs. Inputs are arbitrary bytes
//! and valid encodings cut short or with bytes flipped.

use proptest::prelude::*;
use std::collections::BTreeMap;
use ytsched_common::api::{self, ApiRequest, ApiResponse};
use ytsched_common::codec::{decode, encode};
use ytsched_common::identity::Credentials;
use ytsched_common::protocol::{
    FinishedJob, HeartbeatReply, HeartbeatRequest, JobStartSpec, PROTOCOL_VERSION,
};
use ytsched_common::resources::ResourceVector;
use ytsched_common::spec::VanillaSpec;
use ytsched_common::states::JobState;
use ytsched_common::tag_filter::TagFilter;
use ytsched_common::units::{ByteSize, DurationMs};
use ytsched_common::yson::parse_value;
use ytsched_common::{IncarnationId, JobId, NodeId, OperationId};

fn heartbeat() -> HeartbeatRequest {
    HeartbeatRequest {
        protocol_version: PROTOCOL_VERSION,
        node_id: NodeId::parse("n1").unwrap(),
        incarnation_id: IncarnationId::random(),
        seq: 3,
        hostname: "h".into(),
        system_tags: vec!["arch:x86_64".into()],
        tags: vec!["ssd".into()],
        resource_limits: ResourceVector {
            cpu: 4.0,
            memory: 1e9,
            gpu: 0.0,
            user_slots: 8.0,
        },
        resource_usage: ResourceVector::ZERO,
        running_jobs: vec![],
        finished_jobs: vec![FinishedJob {
            job_id: JobId::parse("op-1").unwrap(),
            operation_id: OperationId::parse("op").unwrap(),
            state: JobState::Completed,
            error: None,
            start_time: 1,
            finish_time: 2,
            statistics: Default::default(),
            stdout_tail: "out".into(),
            stderr_tail: String::new(),
            attempt_of: None,
        }],
        timeout_ms: 5_000,
        last_reply_seq: None,
        file_cache: Some(Default::default()),
    }
}

fn job_start() -> JobStartSpec {
    JobStartSpec {
        job_id: JobId::parse("op-1").unwrap(),
        operation_id: OperationId::parse("op").unwrap(),
        task_name: "t".into(),
        job_index: 0,
        job_count: 1,
        command: "echo hi".into(),
        environment: BTreeMap::from([("A".to_string(), "b".to_string())]),
        stdin: Some("in".into()),
        resources: ResourceVector::ZERO,
        disk_space: Some(1 << 30),
        interruption_signal: Some(ytsched_common::spec::InterruptionSignal::Usr1),
        start_token: Some("00".repeat(16)),
        files: vec![ytsched_common::files::FileRef {
            digest: ytsched_common::files::Sha256Digest::of(b"run.py"),
            file_name: ytsched_common::files::SandboxFileName::parse("run.py").unwrap(),
            executable: true,
        }],
        layers: vec![ytsched_common::files::Sha256Digest::of(b"layer")],
    }
}

/// Valid encodings of every wire message, to cut and flip.
fn samples() -> Vec<Vec<u8>> {
    let spec: ytsched_common::spec::ValidSpec =
        serde_json::from_str(r#"{"tasks": {"t": {"command": "x", "job_count": 2}}}"#).unwrap();
    vec![
        encode(&heartbeat()).unwrap(),
        encode(&HeartbeatReply::rejected("no".into(), 1000)).unwrap(),
        encode(&job_start()).unwrap(),
        encode(&ApiRequest {
            protocol_version: PROTOCOL_VERSION,
            body: api::StartOperation {
                spec,
                idempotency_token: None,
            },
        })
        .unwrap(),
        encode(&ApiRequest {
            protocol_version: PROTOCOL_VERSION,
            body: api::AdminSet {
                path: "//sys/pool_trees/default/a/@weight".into(),
                value: "2".into(),
            },
        })
        .unwrap(),
    ]
}

/// Tries every decoder on `bytes`; only a panic or a hang fails.
fn decode_everything(bytes: &[u8]) {
    let _ = decode::<HeartbeatRequest>(bytes);
    let _ = decode::<HeartbeatReply>(bytes);
    let _ = decode::<JobStartSpec>(bytes);
    let _ = decode::<ApiRequest<api::StartOperation>>(bytes);
    let _ = decode::<ApiRequest<api::AdminSet>>(bytes);
    let _ = decode::<ApiRequest<api::AdminCreate>>(bytes);
    let _ = decode::<ApiRequest<api::GetJobOutput>>(bytes);
    let _ = decode::<ApiResponse<api::OperationInfo>>(bytes);
    if let Ok(spec) = decode::<VanillaSpec>(bytes) {
        let _ = spec.validate();
    }
    let text = String::from_utf8_lossy(bytes);
    let _ = parse_value(&text);
    let _ = TagFilter::parse(&text);
    let _ = text.parse::<ByteSize>();
    let _ = text.parse::<DurationMs>();
    let _ = Credentials::parse(&text, "fuzz");
    if let Ok(spec) = serde_yaml_ng::from_str::<VanillaSpec>(&text) {
        let _ = spec.validate();
    }
    if let Ok(spec) = serde_json::from_str::<VanillaSpec>(&text) {
        let _ = spec.validate();
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        decode_everything(&bytes);
    }

    #[test]
    fn cut_and_flipped_messages_never_panic(
        which in 0usize..5,
        cut in any::<prop::sample::Index>(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
    ) {
        let mut bytes = samples()[which].clone();
        let len = cut.index(bytes.len() + 1);
        bytes.truncate(len);
        for (at, b) in flips {
            if !bytes.is_empty() {
                let i = at.index(bytes.len());
                bytes[i] ^= b;
            }
        }
        decode_everything(&bytes);
    }

    #[test]
    fn text_soup_never_panics(text in "[-a-z0-9 :{}\\[\\];=\"'#&|!()@/.,<>$%^*+]{0,400}") {
        decode_everything(text.as_bytes());
    }
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let deep = vec![0x91u8; 1_000_000];
    decode_everything(&deep);
    let text = "[".repeat(100_000);
    assert!(parse_value(&text).is_err());
    assert!(TagFilter::parse(&"(".repeat(3000)).is_err());
}

#[test]
fn ids_that_could_escape_a_directory_cannot_be_decoded() {
    let mut start = job_start();
    start.job_id = JobId("../../x".into());
    let bytes = encode(&start).unwrap();
    let e = decode::<JobStartSpec>(&bytes).unwrap_err().to_string();
    assert!(e.contains("job id '../../x' is invalid"), "{e}");
}

/// A message that claims more entries than it holds must not make the decoder reserve
/// room for them (it aborted the process once: the tasks map trusted the claimed count).
#[test]
fn a_claimed_count_is_not_trusted() {
    // {"tasks": map32 claiming 2^32 - 1 entries, and nothing after}
    let mut bytes = vec![0x81, 0xa5];
    bytes.extend_from_slice(b"tasks");
    bytes.extend_from_slice(&[0xdf, 0xff, 0xff, 0xff, 0xff]);
    assert!(decode::<VanillaSpec>(&bytes).is_err());
    // The same claim for a list of strings (owners) and a map of trees.
    for field in ["owners", "pool_trees"] {
        let mut bytes = vec![0x81, 0xa0 | field.len() as u8];
        bytes.extend_from_slice(field.as_bytes());
        bytes.extend_from_slice(&[0xdd, 0xff, 0xff, 0xff, 0xff]);
        assert!(decode::<VanillaSpec>(&bytes).is_err(), "{field}");
    }
}
