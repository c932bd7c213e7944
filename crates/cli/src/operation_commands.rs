//! The commands about operations, jobs and nodes: each a call to the scheduler and
//! its answer printed.

use super::*;

/// The commands about operations, jobs and nodes.
pub(crate) async fn run(
    c: &async_nats::Client,
    s: &Subjects,
    user: &Caller,
    command: Command,
    format: Format,
) -> anyhow::Result<()> {
    match command {
        Command::ListOperations(args) => {
            let ops = args
                .collect(|req| async move { Ok(call(c, s, user, req).await?) })
                .await?;
            output::print(&ops, format)
        }
        Command::Usage(args) => {
            let report = args
                .report(|req| async move { Ok(call(c, s, user, req).await?) })
                .await?;
            output::print(&report, format)
        }
        Command::Events(args) => {
            let mut out = std::io::stdout().lock();
            args.run(
                |req| async move { Ok(call(c, s, user, req).await?) },
                |e| {
                    use std::io::Write;
                    serde_json::to_writer(&mut out, e)?;
                    writeln!(out)?;
                    Ok(())
                },
            )
            .await
        }
        Command::GetOperation { operation } => {
            let info = call(
                c,
                s,
                user,
                GetOperation {
                    operation_id: operation,
                },
            )
            .await?;
            output::print(&info, format)
        }
        command @ Command::Explain { .. } => explain_command(c, s, user, command, format).await,
        command @ (Command::AbortOperation { .. }
        | Command::UpdateOpParameters { .. }
        | Command::SuspendOperation { .. }
        | Command::ResumeOperation { .. }) => control_command(c, s, user, command).await,
        Command::ListJobs {
            operation,
            limit,
            state,
        } => {
            let jobs = list_jobs(c, s, user, operation, limit, state).await?;
            output::print(&jobs, format)
        }
        Command::GetJobStdout { operation, job } => {
            print_output(c, s, user, operation, job, OutputStream::Stdout).await
        }
        Command::GetJobStderr { operation, job } => {
            print_output(c, s, user, operation, job, OutputStream::Stderr).await
        }
        Command::ListNodes => output::print(&call(c, s, user, ListNodes {}).await?, format),
        _ => unreachable!("handled by run"),
    }
}

/// `ytsched explain`: an operation's or a pool's place, in words.
async fn explain_command(
    c: &async_nats::Client,
    s: &Subjects,
    user: &Caller,
    command: Command,
    format: Format,
) -> anyhow::Result<()> {
    match command {
        Command::Explain {
            operation: Some(operation),
            ..
        } => {
            let why = call(
                c,
                s,
                user,
                ExplainOperation {
                    operation_id: operation,
                },
            )
            .await?;
            output::print_words(&why, why.text(), format)
        }
        Command::Explain {
            pool, pool_tree, ..
        } => {
            let pool = pool.expect("clap requires an operation or --pool");
            let why = call(c, s, user, ExplainPool { pool, pool_tree }).await?;
            output::print_words(&why, why.text(), format)
        }
        _ => unreachable!("routed by run"),
    }
}

/// The commands that change an operation's state or parameters.
async fn control_command(
    c: &async_nats::Client,
    s: &Subjects,
    user: &Caller,
    command: Command,
) -> anyhow::Result<()> {
    match command {
        Command::AbortOperation { operation } => {
            let operation_id = operation.clone();
            call(c, s, user, AbortOperation { operation_id }).await?;
            eprintln!("operation {operation} aborted");
            Ok(())
        }
        Command::UpdateOpParameters {
            operation,
            parameters,
        } => {
            let summary = parameters.summary();
            let operation_id = operation.clone();
            call(
                c,
                s,
                user,
                UpdateOperationParameters {
                    operation_id,
                    parameters,
                },
            )
            .await?;
            eprintln!("operation {operation} updated: {summary}");
            Ok(())
        }
        Command::SuspendOperation {
            operation,
            abort_running_jobs,
        } => {
            let operation_id = operation.clone();
            call(
                c,
                s,
                user,
                SuspendOperation {
                    operation_id,
                    abort_running_jobs,
                },
            )
            .await?;
            eprintln!("operation {operation} suspended");
            Ok(())
        }
        Command::ResumeOperation { operation } => {
            let operation_id = operation.clone();
            call(c, s, user, ResumeOperation { operation_id }).await?;
            eprintln!("operation {operation} resumed");
            Ok(())
        }
        _ => unreachable!("routed by run"),
    }
}

/// Every job attempt of an operation (up to `limit`), page by page.
async fn list_jobs(
    c: &async_nats::Client,
    s: &Subjects,
    user: &Caller,
    operation: OperationId,
    limit: Option<u32>,
    state: Option<ytsched_common::states::JobState>,
) -> anyhow::Result<Vec<ytsched_common::api::JobInfo>> {
    let mut request = ListJobs {
        operation_id: operation,
        limit: limit.map(|l| l.clamp(1, ListOperations::MAX_PAGE)),
        cursor: None,
        state,
    };
    let mut jobs = Vec::new();
    loop {
        let page = call(c, s, user, request.clone()).await?;
        jobs.extend(page.jobs);
        if let Some(l) = limit {
            if jobs.len() >= l as usize {
                jobs.truncate(l as usize);
                return Ok(jobs);
            }
        }
        match page.next_cursor {
            Some(next) => request.cursor = Some(next),
            None => return Ok(jobs),
        }
    }
}

async fn print_output(
    client: &async_nats::Client,
    subjects: &Subjects,
    user: &Caller,
    operation: OperationId,
    job: JobId,
    stream: OutputStream,
) -> anyhow::Result<()> {
    let text = call(
        client,
        subjects,
        user,
        GetJobOutput {
            operation_id: operation,
            job_id: job,
            stream,
        },
    )
    .await?;
    print!("{text}");
    Ok(())
}
