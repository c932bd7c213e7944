//! Node tags: system tags the agent detects plus the ones an admin configures.

/// Tag names match `[A-Za-z0-9_./:-]+` and are not all digits (SPEC 4.1).
pub fn validate_tag(tag: &str) -> Result<(), String> {
    let charset_ok = !tag.is_empty()
        && tag
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | ':' | '-'));
    if !charset_ok {
        return Err(format!(
            "tag '{tag}' is invalid: use letters, digits and _ . / : - only"
        ));
    }
    if tag.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!("tag '{tag}' is invalid: it must not be all digits"));
    }
    Ok(())
}

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
    fn tag_rules() {
        assert!(validate_tag("ssd").is_ok());
        assert!(validate_tag("gpu_model:NVIDIA_H100").is_ok());
        assert!(validate_tag("123").is_err());
        assert!(validate_tag("a b").is_err());
        assert!(validate_tag("").is_err());
    }

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
