//! Node tags: system tags the agent detects plus the ones an admin configures.

pub use ytsched_common::tag_filter::validate_tag;

/// Turns free text (a GPU model name) into a valid tag fragment.
pub fn sanitize(text: &str) -> String {
    text.trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `host:<hostname>`, `arch:<arch>`, `gpu` and `gpu_model:<model>` per model present.
pub fn system_tags(hostname: &str, gpu_models: &[String]) -> Vec<String> {
    let mut tags = vec![
        format!("host:{}", sanitize(hostname)),
        format!("arch:{}", std::env::consts::ARCH),
    ];
    if !gpu_models.is_empty() {
        tags.push("gpu".to_string());
    }
    for model in gpu_models {
        let tag = format!("gpu_model:{}", sanitize(model));
        if !tags.contains(&tag) {
            tags.push(tag);
        }
    }
    tags
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_tags_include_gpu_models_once() {
        let t = system_tags(
            "box.lan",
            &[
                "NVIDIA H100 80GB HBM3".into(),
                "NVIDIA H100 80GB HBM3".into(),
            ],
        );
        assert_eq!(t[0], "host:box.lan");
        assert!(t.contains(&"gpu".to_string()));
        assert_eq!(t.iter().filter(|x| x.starts_with("gpu_model:")).count(), 1);
        assert!(t.contains(&"gpu_model:NVIDIA_H100_80GB_HBM3".to_string()));
        for tag in &t {
            validate_tag(tag).unwrap();
        }
    }
}
