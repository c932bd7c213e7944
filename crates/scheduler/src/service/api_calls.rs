//! The API path: admission (rate, in-flight bound, reply subject) and then the core or
//! the archive for each request, each in its own task.

use super::*;
use crate::gates::rate_limits::Verdict;
use crate::gates::refusals::Refusal;
use futures::StreamExt;
use std::sync::Arc;
use tracing::warn;
use ytsched_common::api::{self, ApiError, ApiMethod, ApiRequest, ApiResponse};
use ytsched_common::codec::encode;
use ytsched_common::identity::Caller;
use ytsched_common::identity::Role;
use ytsched_common::protocol::PROTOCOL_VERSION;
use ytsched_common::subjects::Subjects;

/// A request let in: who asked, what, where to answer, and its slot among those in
/// flight (released when it is answered).
struct Admitted {
    caller: ytsched_common::identity::Caller,
    method: String,
    reply_to: async_nats::Subject,
    permit: tokio::sync::OwnedSemaphorePermit,
}

impl Driver {
    pub(super) async fn serve_api(
        self: Arc<Self>,
        mut sub: impl futures::Stream<Item = async_nats::Message> + Unpin,
    ) {
        while let Some(msg) = sub.next().await {
            let Some(admitted) = self.admit(&msg).await else {
                continue;
            };
            // Every line logged while serving it (the core's events among them) says
            // whose request it was and what it asked.
            let span =
                tracing::info_span!("api", user = %admitted.caller.user, method = %admitted.method);
            tokio::spawn(tracing::Instrument::instrument(
                self.clone().serve_one(admitted, msg.payload),
                span,
            ));
        }
    }

    /// Lets a request in, or refuses it (counted, and answered "busy" where the caller
    /// should retry): it needs a reply subject that is the caller's own inbox, an API
    /// subject, the caller's rate, and a free slot.
    async fn admit(&self, msg: &async_nats::Message) -> Option<Admitted> {
        let Some(reply_to) = msg.reply.clone() else {
            self.refusals.count(Refusal::NoReply, || {
                format!("request on {} without a reply subject", msg.subject)
            });
            return None;
        };
        // nats-server let this subject through only for the user it names.
        let Some((caller, method)) = self.subjects.parse_api(msg.subject.as_str()) else {
            self.refusals.count(Refusal::MalformedSubject, || {
                format!(
                    "request on '{}', not an API subject",
                    ytsched_common::quote::quote(&msg.subject, ytsched_common::quote::QUOTE_CHARS)
                )
            });
            return None;
        };
        // Answered only on the caller's own inbox: any other reply subject would make
        // the scheduler publish there for them.
        if !Subjects::reply_allowed(Role::User, caller.user.as_str(), &reply_to) {
            self.refusals.count(Refusal::ForeignReply, || {
                format!(
                    "request of '{}' asks for its answer on '{}', not its own inbox",
                    caller.user,
                    ytsched_common::quote::quote(&reply_to, ytsched_common::quote::QUOTE_CHARS)
                )
            });
            return None;
        }
        let permit = match self.admission(&caller, method) {
            Ok(permit) => permit,
            Err(answer) => {
                if let Some(message) = answer {
                    self.busy(reply_to, message).await;
                }
                return None;
            }
        };
        Some(Admitted {
            caller,
            method: method.to_string(),
            reply_to,
            permit,
        })
    }

    /// The checks every caller passes, whichever way it came (the bus or the HTTP face):
    /// its own rate, its cost budget, the store's backlog for new work, and a free slot.
    /// `Err` is counted; it holds the "busy, retry" answer to give, if any.
    fn admission(
        &self,
        caller: &ytsched_common::identity::Caller,
        method: &str,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, Option<String>> {
        let now = std::time::Instant::now();
        if let Verdict::Limited { answer } = self.rate_limits.check(caller.user.as_str(), now) {
            let limit = self.rate_limits.limit();
            self.refusals.count(Refusal::RateLimited, || {
                format!("user '{}' is over {}/s", caller.user, limit.per_second)
            });
            return Err(answer.then(|| {
                format!(
                    "busy: user '{}' sends more than {} requests per second (burst {}); retry later",
                    caller.user, limit.per_second, limit.burst
                )
            }));
        }
        if let Err(over) = self.cost_budgets.check(caller.user.as_str(), now) {
            return Err(Some(self.refused_over_budget(caller, over)));
        }
        if method == api::StartOperation::METHOD {
            self.refused_as_store_behind().map_err(Some)?;
        }
        self.api_slots.clone().try_acquire_owned().map_err(|_| {
            self.refusals
                .count(Refusal::Busy, || "every API slot is taken".to_string());
            Some(
                "busy: the scheduler is serving as many requests as it takes at once; retry".into(),
            )
        })
    }

    /// An identity whose calls cost more than its budget waits until it refills; the
    /// answer names the budget and when to retry.
    fn refused_over_budget(
        &self,
        caller: &ytsched_common::identity::Caller,
        over: crate::gates::cost_budgets::OverBudget,
    ) -> String {
        let budget = self.cost_budgets.budget();
        let (limit, flag) = match over.what {
            "core time" => (
                format!(
                    "{} ms of scheduler time per second",
                    budget.core_per_second.as_millis()
                ),
                "core",
            ),
            _ => (
                format!("{} bytes of answers per second", budget.bytes_per_second),
                "byte",
            ),
        };
        self.refusals.count(Refusal::OverBudget, || {
            format!("user '{}' is over its {} budget", caller.user, over.what)
        });
        format!(
            "busy: user '{}' has spent its budget of {limit} (--api-{flag}-budget); retry in {} ms",
            caller.user,
            over.retry_after.as_millis().max(1)
        )
    }

    /// New work waits while the store is far behind: answered "busy" (the CLI retries
    /// with the same idempotency token) instead of queued in memory. Aborts, reads and
    /// admin changes are not asked here: they shrink the load or are needed to manage it.
    fn refused_as_store_behind(&self) -> Result<(), String> {
        let backlog = self.writer.backlog();
        if backlog <= self.max_write_backlog {
            return Ok(());
        }
        self.refusals.count(Refusal::StoreBehind, || {
            format!("the store is {backlog} writes behind")
        });
        Err(format!(
            "busy: the scheduler's store is {backlog} writes behind (more than {}); retry in a second",
            self.max_write_backlog
        ))
    }

    /// Answers one request admitted from the bus, on the caller's inbox; an answer larger
    /// than NATS carries becomes an error that says so.
    async fn serve_one(self: Arc<Self>, admitted: Admitted, payload: bytes::Bytes) {
        let Admitted {
            caller,
            method,
            reply_to,
            permit,
        } = admitted;
        // The slot is held until the reply is sent, as before the API path was split.
        let _permit = permit;
        let bytes = self.answer_call(&caller, &method, &payload).await;
        let max = self.api_client.server_info().max_payload;
        let bytes = if bytes.len() > max {
            // NATS would drop the reply and the caller would only see a timeout.
            warn!(
                method,
                bytes = bytes.len(),
                max,
                "API reply too large for NATS"
            );
            encode(&ApiResponse::<()> {
                protocol_version: PROTOCOL_VERSION,
                result: Err(ApiError::limit_reached(format!(
                    "the answer to {method} is {} bytes, more than NATS's max_payload of {max}; ask for less (e.g. one operation with get-operation, or the web page / JSON API of --http)",
                    bytes.len()
                ))),
            })
            .unwrap_or_default()
        } else {
            bytes
        };
        self.api_reply(reply_to, bytes).await;
    }

    /// Answers one admitted request, however it came: from the event log, from the core
    /// (and what it still needs from the store), or from the archive for an operation
    /// retired there. What it cost is charged to the caller's budget.
    async fn answer_call(&self, caller: &Caller, method: &str, payload: &[u8]) -> Vec<u8> {
        if method == api::ListEvents::METHOD {
            // The event log is read from its stream; the core is not asked.
            let bytes = crate::events::pages::answer(&self.event_log, payload).await;
            let now = std::time::Instant::now();
            self.cost_budgets
                .charge(caller.user.as_str(), now, Default::default(), bytes.len());
            return bytes;
        }
        if crate::files::is_file_method(method) {
            // The file store is not the core's: its calls never take the core lock.
            let bytes = self.files.answer(caller, method, payload).await;
            self.cost_budgets.charge(
                caller.user.as_str(),
                std::time::Instant::now(),
                Default::default(),
                bytes.len(),
            );
            return bytes;
        }
        let mut held = std::time::Duration::ZERO;
        // Through the gate to the core, one user call at a time, in turn by identity.
        let pass = self.api_gate.enter(caller.user.as_str()).await;
        let Queued {
            result: answered,
            effects,
            stored,
            ..
        } = self.queue_core(|core| {
            let started = std::time::Instant::now();
            let answered = (!names_archived_operation(core, method, payload)).then(|| {
                let mut then = None;
                let bytes = dispatch(core, self, caller, method, payload, &mut then);
                (bytes, then)
            });
            held = started.elapsed();
            answered
        });
        drop(pass);
        self.carry_out(effects, stored).await;
        if method == api::StartOperation::METHOD {
            self.share_updates.notify_one();
        }
        let bytes = match answered {
            Some((bytes, None)) => bytes,
            Some((_, Some(then))) => then.answer(self, caller).await,
            None => answer_from_archive(&self.archive, caller, method, payload).await,
        };
        self.cost_budgets.charge(
            caller.user.as_str(),
            std::time::Instant::now(),
            held,
            bytes.len(),
        );
        bytes
    }
}

/// The API as callers inside the scheduler's process reach it (the HTTP face's YTsaurus
/// commands): with the identity the face authenticated, through the same admission,
/// gate, access rules and budgets as a call on the bus, so no way in may do more than
/// the bus lets that user do.
#[derive(Clone)]
pub struct ApiPort(Arc<Driver>);

impl ApiPort {
    pub(super) fn new(driver: Arc<Driver>) -> ApiPort {
        ApiPort(driver)
    }

    /// Calls `method` as `caller`; the answer is an encoded `ApiResponse`, a "busy,
    /// retry" one when admission turned the call away.
    pub async fn call_encoded(&self, caller: &Caller, method: &str, payload: &[u8]) -> Vec<u8> {
        match self.0.admission(caller, method) {
            Ok(permit) => {
                let span = tracing::info_span!("api", user = %caller.user, method, via = "http");
                // In a task of its own, as a bus call is: an HTTP client that hangs up
                // never cuts a call off halfway (an upload holding the write of a file).
                let (driver, caller, method) = (self.0.clone(), caller.clone(), method.to_string());
                let payload = payload.to_vec();
                let answer = tokio::spawn(tracing::Instrument::instrument(
                    async move {
                        let bytes = driver.answer_call(&caller, &method, &payload).await;
                        drop(permit);
                        bytes
                    },
                    span,
                ));
                answer.await.unwrap_or_else(|e| {
                    super::encode_reply::<()>(Err(ApiError::of(
                        api::ErrorKind::Internal,
                        format!("the call failed: {e}"),
                    )))
                })
            }
            Err(answer) => encode(&ApiResponse::<()> {
                protocol_version: PROTOCOL_VERSION,
                result: Err(ApiError::unavailable(answer.unwrap_or_else(|| {
                    format!(
                        "busy: user '{}' is over its request rate; retry later",
                        caller.user
                    )
                }))),
            })
            .unwrap_or_default(),
        }
    }

    /// Calls `M` as `caller` and decodes its answer.
    pub async fn call<M: ApiMethod>(
        &self,
        caller: &Caller,
        body: M,
    ) -> Result<M::Response, ApiError> {
        let request = ApiRequest {
            protocol_version: PROTOCOL_VERSION,
            body,
        };
        let payload = encode(&request)
            .map_err(|e| ApiError::new(format!("cannot encode {}: {e}", M::METHOD)))?;
        let bytes = self.call_encoded(caller, M::METHOD, &payload).await;
        ytsched_common::codec::decode::<ApiResponse<M::Response>>(&bytes)
            .map_err(|e| {
                ApiError::of(
                    api::ErrorKind::Internal,
                    format!("cannot decode the answer to {}: {e}", M::METHOD),
                )
            })?
            .result
    }
}

/// Whether a requester that waits `timeout_ms` (0: not said) for its reply has given up on
/// a request received at `received`. A margin keeps the reply from being sent just as it
/// stops listening.
pub(super) fn given_up(received: std::time::Instant, timeout_ms: u64) -> bool {
    const MARGIN: std::time::Duration = std::time::Duration::from_millis(250);
    timeout_ms > 0 && received.elapsed() + MARGIN >= std::time::Duration::from_millis(timeout_ms)
}

#[cfg(test)]
mod given_up_tests {
    use super::given_up;
    use std::time::{Duration, Instant};

    #[test]
    fn a_request_past_its_requesters_patience_is_dropped() {
        let now = Instant::now();
        assert!(!given_up(now, 5_000), "fresh");
        assert!(!given_up(now, 0), "no patience said: always answered");
        let old = now - Duration::from_secs(6);
        assert!(given_up(old, 5_000), "waited longer than the agent does");
        assert!(!given_up(old, 0));
        let nearly = now - Duration::from_millis(4_900);
        assert!(
            given_up(nearly, 5_000),
            "too close to the end to be read in time"
        );
    }
}
