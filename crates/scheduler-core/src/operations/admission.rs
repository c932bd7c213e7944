//! Submitting and aborting operations: the calls, with idempotency tokens and the
//! spec's check at the boundary; the admission itself is `OperationLife::admit`, and
//! where an operation goes in each tree `pool_resolution.rs`.

use crate::operations::operation_life::operation_life;
use crate::SchedulerCore;
use ytsched_common::api::ApiError;
use ytsched_common::identity::Caller;
use ytsched_common::protocol::UnixMillis;
use ytsched_common::spec::{IntoValidSpec, ValidSpec};
use ytsched_common::states::OperationState;
use ytsched_common::{IdempotencyToken, OperationId};

/// A spec as admission takes it: checked at its boundary, or now.
fn valid(spec: impl IntoValidSpec) -> Result<ValidSpec, ApiError> {
    spec.into_valid().map_err(|e| ApiError::new(e.to_string()))
}

impl SchedulerCore {
    /// Admits a validated spec: resolves its pool in each of its trees, checks operation
    /// count limits, and starts it as `running` or queues it as `pending` (pending while
    /// any of its trees has no room for one more running operation).
    /// Trusted callers (the simulator, tests) start operations here without ACL checks.
    pub fn start_operation(
        &mut self,
        id: OperationId,
        user: &str,
        spec: impl IntoValidSpec,
        now: UnixMillis,
    ) -> Result<OperationId, ApiError> {
        self.latest_now.observe(now);
        operation_life!(self).admit(id, user, None, valid(spec)?, now)
    }

    /// A request from the bus: the caller needs `use` on the operation's pool in each of
    /// its trees (its own ephemeral pool is always usable). `id` is the scheduler's own,
    /// fresh; a retry is recognised by the caller's `token`, scoped to the caller, and
    /// answered with the operation that token started.
    pub fn start_operation_as(
        &mut self,
        id: OperationId,
        caller: &Caller,
        spec: impl IntoValidSpec,
        token: Option<IdempotencyToken>,
        now: UnixMillis,
    ) -> Result<OperationId, ApiError> {
        let spec = valid(spec)?;
        let key = token.map(|t| (caller.user.as_str().to_string(), t));
        if let Some((k, started)) = key
            .as_ref()
            .and_then(|k| Some((k, self.operations.idempotency.get(k)?)))
        {
            // Tokens leave with their operation (retirement), so it is held.
            if let Some(op) = self.operations.get(started) {
                if op.spec == *spec {
                    // The first try's writes may not be stored yet (its caller gave up
                    // waiting for them): this answer waits for them as that one did, or
                    // an acknowledged operation could die with its leader (issue 42).
                    self.outbox.reply_after_store();
                    return Ok(started.clone());
                }
                return Err(ApiError::conflict(format!(
                    "idempotency token '{}' already started operation {started} with another spec; use a new token for a new submission",
                    k.1
                )));
            }
        }
        self.latest_now.observe(now);
        let id = operation_life!(self).admit(id, caller.user.as_str(), Some(caller), spec, now)?;
        if let Some(key) = key {
            if let Some(mut op) = self.operations.edit(&id) {
                op.idempotency_token = Some(key.1.clone());
            }
            self.operations.idempotency.insert(key, id.clone());
        }
        Ok(id)
    }

    #[tracing::instrument(level = "info", skip_all, fields(operation = %id))]
    pub fn abort_operation(&mut self, id: &OperationId, now: UnixMillis) -> Result<(), ApiError> {
        let op = self
            .operations
            .get(id)
            .ok_or_else(|| ApiError::not_found(format!("no such operation: {id}")))?;
        if op.state.is_finished() {
            return Err(ApiError::conflict(format!(
                "operation {id} is already {}",
                op.state
            )));
        }
        operation_life!(self).finish(
            id,
            OperationState::Aborted,
            Some("aborted by user".into()),
            now,
        );
        Ok(())
    }

    /// Ends an unfinished operation as completed at once (YTsaurus's
    /// `complete_operation`): its running jobs are aborted, its waiting ones dropped,
    /// and it counts as a success.
    #[tracing::instrument(level = "info", skip_all, fields(operation = %id))]
    pub fn complete_operation(
        &mut self,
        id: &OperationId,
        now: UnixMillis,
    ) -> Result<(), ApiError> {
        self.latest_now.observe(now);
        self.reads().unfinished_operation(id, "be completed")?;
        operation_life!(self).finish(id, OperationState::Completed, None, now);
        Ok(())
    }
}
