//! What a whole vanilla spec must be, checked after parsing: bounded sizes (tasks, jobs,
//! owners, title, a gang's jobs), each task's values, numbers in range, and pool trees
//! named once with options only for those trees. Each refusal names its field's path.

use super::*;

impl VanillaSpec {
    pub fn validate(&self) -> Result<(), SpecError> {
        self.validate_sizes()?;
        self.validate_tasks()?;
        self.validate_numbers()?;
        self.validate_trees()
    }

    /// How many tasks, jobs and owners, and the title: bounded.
    fn validate_sizes(&self) -> Result<(), SpecError> {
        if self.tasks.is_empty() {
            return Err(SpecError::new("tasks", "at least one task is required"));
        }
        at_most("tasks", self.tasks.len(), MAX_TASKS, " tasks", "")?;
        at_most(
            "tasks",
            self.total_job_count() as usize,
            MAX_JOBS_PER_OPERATION as usize,
            " jobs in all",
            " jobs per operation",
        )?;
        at_most("owners", self.owners.len(), MAX_OWNERS, " owners", "")?;
        if self.is_gang {
            at_most(
                "is_gang",
                self.total_job_count() as usize,
                MAX_GANG_JOBS as usize,
                " jobs in a gang",
                " jobs per gang operation",
            )?;
            if let Some((name, _)) = self
                .tasks
                .iter()
                .find(|(_, t)| t.job_speculation_timeout.is_some())
            {
                return Err(SpecError::new(
                    format!("tasks.{name}.job_speculation_timeout"),
                    "a gang operation's jobs run together, so none can be copied speculatively",
                ));
            }
        }
        for o in &self.owners {
            crate::identity::UserName::parse(o)
                .map_err(|e| SpecError::new("owners", e.to_string()))?;
        }
        if self
            .title
            .as_ref()
            .is_some_and(|t| t.len() > MAX_TITLE_BYTES)
        {
            return Err(SpecError::new(
                "title",
                format!("longer than the limit of {MAX_TITLE_BYTES} bytes"),
            ));
        }
        if self
            .title
            .as_ref()
            .is_some_and(|t| t.chars().any(char::is_control))
        {
            return Err(SpecError::new(
                "title",
                "must not contain NUL or other control characters",
            ));
        }
        Ok(())
    }

    /// Task names (paths, environments and logs carry them) and each task's own
    /// values; all their text together bounded.
    fn validate_tasks(&self) -> Result<(), SpecError> {
        for (name, task) in &self.tasks {
            if name.is_empty() || name.len() > 128 {
                return Err(SpecError::new(
                    "tasks",
                    "task names must be 1 to 128 bytes long",
                ));
            }
            // A name goes into paths, environments and logs: a NUL made every attempt
            // fail, other control characters forge log lines.
            if name.chars().any(char::is_control) {
                return Err(SpecError::new(
                    "tasks",
                    format!(
                        "task name '{}' contains NUL or another control character",
                        quote(name, QUOTE_CHARS)
                    ),
                ));
            }
            task.validate(&format!("tasks.{name}"))?;
        }
        let text: usize = self.tasks.values().map(TaskSpec::text_bytes).sum();
        if text > MAX_SPEC_TEXT_BYTES {
            return Err(SpecError::new(
                "tasks",
                format!("commands, stdin and environments come to {text} bytes, more than the limit of {MAX_SPEC_TEXT_BYTES}"),
            ));
        }
        Ok(())
    }

    /// Weight, ratios and limits: finite and in range.
    fn validate_numbers(&self) -> Result<(), SpecError> {
        if let Some(w) = self.weight {
            crate::weight::check(w).map_err(|m| SpecError::new("weight", m))?;
        }
        if let Some(r) = self.max_share_ratio {
            if !r.is_finite() || !(0.0..=1.0).contains(&r) {
                return Err(SpecError::new(
                    "max_share_ratio",
                    format!("must be between 0 and 1, got {r}"),
                ));
            }
        }
        if let Some(t) = self.fair_share_starvation_tolerance {
            if !t.is_finite() || !(0.0..=1.0).contains(&t) {
                return Err(SpecError::new(
                    "fair_share_starvation_tolerance",
                    format!("must be between 0 and 1, got {t}"),
                ));
            }
        }
        if let Some(l) = &self.resource_limits {
            l.validate("resource_limits")?;
        }
        if self.time_limit.is_some_and(|t| t.0 == 0) {
            return Err(SpecError::new("time_limit", "must be more than 0"));
        }
        Ok(())
    }

    /// `pool_trees` (each once) and the per-tree options (only for those trees).
    fn validate_trees(&self) -> Result<(), SpecError> {
        if let Some(trees) = &self.pool_trees {
            if trees.is_empty() {
                return Err(SpecError::new(
                    "pool_trees",
                    "must name at least one pool tree",
                ));
            }
            for (i, t) in trees.iter().enumerate() {
                if trees[..i].contains(t) {
                    return Err(SpecError::new(
                        "pool_trees",
                        format!("pool tree '{t}' is named twice"),
                    ));
                }
            }
        }
        // Pool and tree names were checked as they were decoded (`PoolName`, `TreeName`).
        for (tree, opts) in &self.scheduling_options_per_pool_tree {
            let field = format!("scheduling_options_per_pool_tree.{tree}");
            if let Some(w) = opts.weight {
                crate::weight::check(w)
                    .map_err(|m| SpecError::new(format!("{field}.weight"), m))?;
            }
            if let Some(l) = &opts.resource_limits {
                l.validate(&format!("{field}.resource_limits"))?;
            }
            if let Some(trees) = &self.pool_trees {
                if !trees.contains(tree) {
                    return Err(SpecError::new(
                        field,
                        format!(
                            "'{tree}' is not one of pool_trees ({})",
                            trees
                                .iter()
                                .map(TreeName::as_str)
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

impl TaskSpec {
    /// `file_paths` and `layer_paths`: bounded, and no two files under one name.
    pub(super) fn validate_files(&self, field: &str) -> Result<(), SpecError> {
        use crate::files::{MAX_FILES_PER_TASK, MAX_LAYERS_PER_TASK};
        let files = format!("{field}.file_paths");
        at_most(
            &files,
            self.file_paths.len(),
            MAX_FILES_PER_TASK,
            " files",
            " files per task",
        )?;
        at_most(
            format!("{field}.layer_paths"),
            self.layer_paths.len(),
            MAX_LAYERS_PER_TASK,
            " layers",
            " layers per task",
        )?;
        for (i, f) in self.file_paths.iter().enumerate() {
            if self.file_paths[..i]
                .iter()
                .any(|g| g.file_name == f.file_name)
            {
                return Err(SpecError::new(
                    files,
                    format!("two files are named '{}' in the sandbox", f.file_name),
                ));
            }
        }
        Ok(())
    }
}
