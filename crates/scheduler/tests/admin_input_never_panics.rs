//! Admin paths and values from the wire (SPEC 5.12): any path and any JSON value give a
//! result or a clear error, never a panic, and a refused change leaves the configuration
//! as it was.

use proptest::prelude::*;
use ytsched_scheduler::core::{AdminPath, CoreConfig, SchedulerCore};

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<f64>().prop_map(|f| serde_json::json!(f)),
        any::<i64>().prop_map(serde_json::Value::from),
        "[a-z_@<>/$ ]{0,12}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            proptest::collection::btree_map("[a-z_]{1,24}", inner, 0..4)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

fn path() -> impl Strategy<Value = String> {
    let seg = prop_oneof![
        Just("sys".to_string()),
        Just("pool_trees".to_string()),
        Just("default".to_string()),
        Just("cluster_nodes".to_string()),
        Just("@config".to_string()),
        Just("@weight".to_string()),
        Just("@acl".to_string()),
        Just("@user_tags".to_string()),
        Just("<Root>".to_string()),
        Just("..".to_string()),
        "[a-z@_$:]{0,10}",
    ];
    proptest::collection::vec(seg, 0..7).prop_map(|s| format!("//{}", s.join("/")))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn any_path_and_value_is_answered(p in path(), raw in ".{0,40}", v in json_value()) {
        let _ = AdminPath::parse(&raw);
        let _ = AdminPath::parse(&p);
        let mut core = SchedulerCore::new(CoreConfig::default());
        core.create_pool("default", "a", None, serde_json::Value::Null).unwrap();
        let before = core.cluster_config().clone();
        let _ = core.reads().admin_get(&p);
        let _ = core.reads().admin_list(&p);
        if core.admin_set(&p, v.clone()).is_err() {
            prop_assert_eq!(core.cluster_config(), &before);
        }
        let _ = core.admin_remove(&p);
        let _ = core.create_pool("default", &raw, Some("a"), v);
    }
}
