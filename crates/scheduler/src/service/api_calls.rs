//! The API path: admission (rate, in-flight bound, reply subject) and then the core or
//! the archive for each request, each in its own task.

use super::*;
use crate::gates::rate_limits::Verdict;
use crate::gates::refusals::Refusal;
use futures::StreamExt;
use std::sync::Arc;
use tracing::warn;
use ytsched_common::api::{self, ApiError, ApiMethod, ApiResponse};
use ytsched_common::codec::encode;
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
        // Admission: the caller's own rate first, then room among requests in flight.
        if let Verdict::Limited { answer } = self
            .rate_limits
            .check(caller.user.as_str(), std::time::Instant::now())
        {
            let limit = self.rate_limits.limit();
            self.refusals.count(Refusal::RateLimited, || {
                format!("user '{}' is over {}/s", caller.user, limit.per_second)
            });
            if answer {
                self.busy(
                    reply_to,
                    format!(
                        "busy: user '{}' sends more than {} requests per second (burst {}); retry later",
                        caller.user, limit.per_second, limit.burst
                    ),
                )
                .await;
            }
            return None;
        }
        if let Err(over) = self
            .cost_budgets
            .check(caller.user.as_str(), std::time::Instant::now())
        {
            self.refused_over_budget(&caller, over, reply_to).await;
            return None;
        }
        if method == api::StartOperation::METHOD && self.refused_as_store_behind(&reply_to).await {
            return None;
        }
        let Ok(permit) = self.api_slots.clone().try_acquire_owned() else {
            self.refusals
                .count(Refusal::Busy, || "every API slot is taken".to_string());
            self.busy(
                reply_to,
                "busy: the scheduler is serving as many requests as it takes at once; retry".into(),
            )
            .await;
            return None;
        };
        Some(Admitted {
            caller,
            method: method.to_string(),
            reply_to,
            permit,
        })
    }

    /// An identity whose calls cost more than its budget waits until it refills; the
    /// answer names the budget and when to retry.
    async fn refused_over_budget(
        &self,
        caller: &ytsched_common::identity::Caller,
        over: crate::gates::cost_budgets::OverBudget,
        reply_to: async_nats::Subject,
    ) {
        let budget = self.cost_budgets.budget();
        let limit = match over.what {
            "core time" => format!(
                "{} ms of scheduler time per second",
                budget.core_per_second.as_millis()
            ),
            _ => format!("{} bytes of answers per second", budget.bytes_per_second),
        };
        self.refusals.count(Refusal::OverBudget, || {
            format!("user '{}' is over its {} budget", caller.user, over.what)
        });
        self.busy(
            reply_to,
            format!(
                "busy: user '{}' has spent its budget of {limit} (--api-{}-budget); retry in {} ms",
                caller.user,
                if over.what == "core time" {
                    "core"
                } else {
                    "byte"
                },
                over.retry_after.as_millis().max(1)
            ),
        )
        .await;
    }

    /// New work waits while the store is far behind: answered "busy" (the CLI retries
    /// with the same idempotency token) instead of queued in memory. Aborts, reads and
    /// admin changes are not asked here: they shrink the load or are needed to manage it.
    async fn refused_as_store_behind(&self, reply_to: &async_nats::Subject) -> bool {
        let backlog = self.writer.backlog();
        if backlog <= self.max_write_backlog {
            return false;
        }
        self.refusals.count(Refusal::StoreBehind, || {
            format!("the store is {backlog} writes behind")
        });
        self.busy(
            reply_to.clone(),
            format!(
                "busy: the scheduler's store is {backlog} writes behind (more than {}); retry in a second",
                self.max_write_backlog
            ),
        )
        .await;
        true
    }

    /// Answers one admitted request: from the core (and what it still needs from the
    /// store), or from the archive for an operation retired there.
    async fn serve_one(self: Arc<Self>, admitted: Admitted, payload: bytes::Bytes) {
        let Admitted {
            caller,
            method,
            reply_to,
            permit,
        } = admitted;
        let _permit = permit;
        if method == api::ListEvents::METHOD {
            // The event log is read from its stream; the core is not asked.
            let bytes = crate::events::pages::answer(&self.event_log, &payload).await;
            let now = std::time::Instant::now();
            self.cost_budgets
                .charge(caller.user.as_str(), now, Default::default(), bytes.len());
            self.api_reply(reply_to, bytes).await;
            return;
        }
        let max_record = self.max_record_bytes;
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
            let answered = (!names_archived_operation(core, &method, &payload)).then(|| {
                let mut then = None;
                let bytes = dispatch(core, &caller, &method, &payload, max_record, &mut then);
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
            Some((_, Some(then))) => then.answer(&self, &caller).await,
            None => answer_from_archive(&self.archive, &caller, &method, &payload).await,
        };
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
        self.cost_budgets.charge(
            caller.user.as_str(),
            std::time::Instant::now(),
            held,
            bytes.len(),
        );
        self.api_reply(reply_to, bytes).await;
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
