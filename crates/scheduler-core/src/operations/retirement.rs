//! Retirement: finished operations leave memory for the archive as their tree's
//! retention settings say (see `retention.rs`), at most `MAX_RETIRED_PER_CALL` a call.

use crate::jobs::job_index::JobIndex;
use crate::operations::retention::{retire_oldest, Archived, MAX_RETIRED_PER_CALL};
use crate::operations::table::OperationTable;
use crate::outbox::Outbox;
use crate::queries::pages::describe;
use crate::queries::share_history::ShareHistory;
use crate::ClusterConfig;
use ytsched_common::names::TreeName;
use ytsched_common::protocol::UnixMillis;
use ytsched_common::OperationId;

/// What retiring finished operations moves and reads, borrowed from the core.
pub(crate) struct Retirement<'a> {
    pub(crate) cluster: &'a ClusterConfig,
    pub(crate) operations: &'a mut OperationTable,
    pub(crate) jobs: &'a mut JobIndex,
    pub(crate) outbox: &'a mut Outbox,
    pub(crate) share_history: &'a mut ShareHistory,
}

impl Retirement<'_> {
    /// Retires what the trees' retention settings let go (see the module comment).
    /// Operations whose last change is not yet taken for the store wait for the next
    /// call, so the store never holds a newer record than the archive.
    pub(crate) fn retire_due(&mut self, now: UnixMillis) {
        let trees: Vec<TreeName> = self.operations.finished_order.keys().cloned().collect();
        let mut budget = MAX_RETIRED_PER_CALL;
        for tree in trees {
            let config = self
                .cluster
                .trees
                .get(tree.as_str())
                .map(|t| t.config.clone())
                .unwrap_or_default();
            loop {
                let order = &mut self.operations.finished_order;
                let Some(set) = order.get_mut(&tree) else {
                    break;
                };
                let Some(&(finished, _, ref id)) = set.first() else {
                    order.remove(&tree);
                    break;
                };
                let (held, id) = (set.len(), id.clone());
                if budget == 0
                    || !retire_oldest(&config, held, finished, now)
                    || self.operations.is_touched(&id)
                {
                    break;
                }
                budget -= 1;
                if let Some(set) = self.operations.finished_order.get_mut(&tree) {
                    set.pop_first();
                }
                self.retire(&id);
            }
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(operation = %id))]
    fn retire(&mut self, id: &OperationId) {
        let Some(info) = self.operations.get(id).map(describe) else {
            return;
        };
        self.share_history.forget(id);
        let Some(op) = self.operations.remove(id) else {
            return;
        };
        if let Some(token) = &op.idempotency_token {
            self.operations
                .idempotency
                .remove(&(op.user.clone(), token.clone()));
        }
        for job in op.jobs.keys() {
            self.jobs.forget(job);
        }
        let task_names = op.task_names();
        let inline = op
            .inline_jobs()
            .map(|j| {
                let output = op
                    .inline_output(&j.id)
                    .map(|o| (o.stdout.clone(), o.stderr.clone()));
                (j.seq, (crate::job_info(id, &task_names, j), output))
            })
            .collect();
        self.outbox.retire(Archived {
            info,
            attempts: op.attempt_count(),
            task_names,
            inline,
        });
    }
}
