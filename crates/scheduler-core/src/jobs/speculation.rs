//! Speculative jobs (SPEC 5.8): a job of a task with `job_speculation_timeout` that has
//! run longer than that gets one copy on a different node. The first attempt to finish
//! wins; the other is aborted as `speculative_lost`, and the job counts once.
