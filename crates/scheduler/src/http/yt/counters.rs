//! `list_operations`'s counters, as YTsaurus counts them: operations by state, user,
//! pool and type, each count ignoring its own filter (so that a UI can offer the other
//! choices), and how many have failed jobs. They count the operations the scheduler
//! holds in memory (its published view); archived ones are listed but not counted.

use super::Ctx;
use serde_json::{json, Map, Value};
use ytsched_common::api::{OperationFilter, OperationInfo};

/// YTsaurus's `filter`: a substring of the id, user, pool or title, in any case.
pub fn text_admits(info: &OperationInfo, substring: &Option<String>) -> bool {
    let Some(s) = substring else { return true };
    [
        Some(info.id.as_str()),
        Some(info.user.as_str()),
        Some(info.pool.as_str()),
        info.spec.title.as_deref(),
    ]
    .into_iter()
    .flatten()
    .any(|f| f.to_lowercase().contains(s.as_str()))
}

fn bump(m: &mut Map<String, Value>, key: &str) {
    let n = m.get(key).and_then(Value::as_u64).unwrap_or(0);
    m.insert(key.to_string(), json!(n + 1));
}

pub async fn insert(
    ctx: &Ctx<'_>,
    filter: &OperationFilter,
    text: &Option<String>,
    out: &mut Value,
) {
    let snapshot = ctx.face.view.snapshot().await;
    let without = |f: fn(&mut OperationFilter)| {
        let mut g = filter.clone();
        f(&mut g);
        g
    };
    let (no_state, no_user, no_pool) = (
        without(|f| f.state = None),
        without(|f| f.user = None),
        without(|f| f.pool = None),
    );
    let admits = |f: &OperationFilter, o: &OperationInfo| f.admits_info(o) && text_admits(o, text);
    let (mut states, mut users, mut pools) = (Map::new(), Map::new(), Map::new());
    let (mut total, mut failed_jobs) = (0u64, 0u64);
    for o in snapshot.operations.iter() {
        if admits(&no_state, o) {
            bump(&mut states, o.state.name());
        }
        if admits(&no_user, o) {
            bump(&mut users, &o.user);
        }
        if admits(&no_pool, o) {
            for pool in o.pool_trees.values() {
                bump(&mut pools, pool);
            }
        }
        if admits(filter, o) {
            total += 1;
            failed_jobs += u64::from(o.jobs.failed > 0);
        }
    }
    if let Some(m) = out.as_object_mut() {
        m.insert("state_counts".into(), Value::Object(states));
        m.insert("user_counts".into(), Value::Object(users));
        m.insert("pool_counts".into(), Value::Object(pools));
        m.insert("type_counts".into(), json!({"vanilla": total}));
        m.insert("failed_jobs_count".into(), json!(failed_jobs));
    }
}
