//! The spec's parsing and bounds, shown case by case.

use super::*;

#[test]
fn tree_options_and_tag_filter_are_checked() {
    let base = "tasks: {t: {command: 'true'}}";
    let e = parse_yaml(&format!("{{scheduling_tag_filter: 'ssd &', {base}}}")).unwrap_err();
    assert!(
        e.starts_with("scheduling_tag_filter: filter 'ssd &': at column 6"),
        "{e}"
    );
    let e = parse_yaml(&format!(
        "{{pool_trees: [a], scheduling_options_per_pool_tree: {{b: {{pool: x}}}}, {base}}}"
    ))
    .unwrap_err();
    assert_eq!(
        e,
        "scheduling_options_per_pool_tree.b: 'b' is not one of pool_trees (a)"
    );
    let e = parse_yaml(&format!("{{pool_trees: [a, a], {base}}}")).unwrap_err();
    assert_eq!(e, "pool_trees: pool tree 'a' is named twice");
    let e = parse_yaml(&format!("{{pool_trees: [], {base}}}")).unwrap_err();
    assert_eq!(e, "pool_trees: must name at least one pool tree");
    parse_yaml(&format!(
            "{{pool_trees: [a, b], scheduling_tag_filter: 'ssd & !slow', scheduling_options_per_pool_tree: {{b: {{pool: x}}}}, {base}}}"
        ))
        .unwrap();
}

fn parse_yaml(text: &str) -> Result<VanillaSpec, String> {
    let spec: VanillaSpec =
        serde_path_to_error::deserialize(serde_yaml_ng::Deserializer::from_str(text))
            .map_err(|e| e.to_string())?;
    spec.validate().map_err(|e| e.to_string())?;
    Ok(spec)
}

#[test]
fn full_spec_parses_with_defaults() {
    let spec = parse_yaml(
        r#"
pool: testing
title: nightly build
max_failed_job_count: 3
tasks:
  task:
    command: "sleep 60; cat"
    job_count: 3
    memory_limit: 1G
    environment: {KEY: value}
    stdin: "hi"
    job_speculation_timeout: 5000
"#,
    )
    .unwrap();
    let t = spec.tasks.get("task").unwrap();
    assert_eq!(t.cpu_limit, 1.0);
    assert_eq!(t.memory_limit.0, 1 << 30);
    assert_eq!(t.job_speculation_timeout, Some(DurationMs(5000)));
    assert_eq!(spec.total_job_count(), 3);
    assert_eq!(t.job_resources().user_slots, 1.0);
}

#[test]
fn bad_specs_name_the_field() {
    let err = parse_yaml("tasks: {t: {command: x, bogus: 1}}").unwrap_err();
    assert!(err.contains("bogus"), "{err}");
    let err = parse_yaml("tasks: {t: {command: x, cpu_limit: -1}}").unwrap_err();
    assert!(err.contains("tasks.t.cpu_limit"), "{err}");
    let err = parse_yaml("tasks: {t: {command: '  '}}").unwrap_err();
    assert!(err.contains("tasks.t.command"), "{err}");
    let err = parse_yaml("tasks: {t: {command: x, job_count: 0}}").unwrap_err();
    assert!(err.contains("tasks.t.job_count"), "{err}");
    let err = parse_yaml("tasks: {t: {command: x, memory_limit: 5Q}}").unwrap_err();
    assert!(err.contains("5Q"), "{err}");
    let err = parse_yaml("tasks: {}").unwrap_err();
    assert!(err.contains("tasks"), "{err}");
    let err = parse_yaml("pool: 'a b'\ntasks: {t: {command: x}}").unwrap_err();
    assert!(err.contains("pool"), "{err}");
}

#[test]
fn control_characters_are_refused_in_names_and_quoted_briefly() {
    let err = parse_yaml("tasks: {\"a\\0b\": {command: x}}").unwrap_err();
    assert!(err.contains("task name 'a\\u{0}b' contains NUL"), "{err}");
    let err = parse_yaml("title: \"x\\ny\"\ntasks: {t: {command: x}}").unwrap_err();
    assert!(err.starts_with("title:"), "{err}");
    let long = "K".repeat(10_000);
    let err = parse_yaml(&format!(
        "tasks: {{t: {{command: x, environment: {{\"{long}\\u0001\": v}}}}}}"
    ))
    .unwrap_err();
    assert!(err.len() < 300, "the error quotes a short prefix: {err}");
}

#[test]
fn nan_cpu_is_rejected() {
    let mut spec = VanillaSpec::single_task(TaskSpec::new("true", 1, f64::NAN, ByteSize(1)));
    assert!(spec.validate().unwrap_err().field.ends_with("cpu_limit"));
    spec.tasks.get_mut("task").unwrap().cpu_limit = 1.0;
    assert!(spec.validate().is_ok());
}
