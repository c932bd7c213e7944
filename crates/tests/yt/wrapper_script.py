"""YTsaurus's Python client (yt.wrapper, from PyPI, unmodified) driving ytsched.

Run by crates/tests/tests/yt_client_lab.rs with YT_PROXY and YT_TOKEN set to the lab's
HTTP face and a web token. Prints one `ok <step>` line per step that passed; any failure
raises, and the test shows the traceback.
"""
import sys

import yt.wrapper as yt
from yt.wrapper.spec_builders import VanillaSpecBuilder, TaskSpecBuilder


def step(name):
    print("ok", name, flush=True)


def spec(command, job_count, **kwargs):
    builder = VanillaSpecBuilder().begin_task("t").command(command).job_count(job_count).end_task()
    for key, value in kwargs.items():
        builder = getattr(builder, key)(value)
    return builder


def main():
    client = yt.YtClient(config=yt.config.config)
    user = client.get_user_name() if hasattr(client, "get_user_name") else None
    step("client made (user %s)" % user)

    # Synchronous: returns once the operation has completed.
    op = client.run_operation(spec("echo sync-$YT_JOB_INDEX >&2", 2, pool="research"))
    assert op.get_state() == "completed", op.get_state()
    step("run_operation sync")

    # Asynchronous, then waited for.
    op = client.run_operation(spec("sleep 1; echo async-out >&2", 1), sync=False)
    state = client.get_operation_state(op.id)
    assert str(state) in ("pending", "running", "completed"), state
    op.wait()
    assert client.get_operation_state(op.id) == "completed"
    step("run_operation async + Operation.wait")

    jobs = client.list_jobs(op.id)["jobs"]
    assert len(jobs) == 1, jobs
    assert jobs[0]["state"] == "completed", jobs[0]
    stderr = client.get_job_stderr(op.id, jobs[0]["id"]).read()
    assert b"async-out" in stderr, stderr
    step("list_jobs + get_job_stderr")

    # A failing operation: Operation.wait raises the client's own error, with the job's
    # stderr fetched through list_jobs and get_job_stderr.
    failing = client.run_operation(spec("echo boom-from-the-job >&2; exit 3", 1, max_failed_job_count=1), sync=False)
    try:
        failing.wait()
        raise AssertionError("a failed operation's wait returned")
    except yt.YtOperationFailedError as e:
        text = str(e)
        assert "boom-from-the-job" in text, text
    assert client.get_operation_state(failing.id) == "failed"
    step("failed operation raises with stderr")

    attrs = client.get_operation(failing.id, attributes=["state", "result", "authenticated_user"])
    assert attrs["state"] == "failed", attrs
    assert attrs["result"]["error"]["code"] != 0, attrs
    assert set(attrs) == {"state", "result", "authenticated_user"}, attrs
    step("get_operation attributes filter")

    ops = client.list_operations(limit=10)
    ids = [o["id"] for o in ops["operations"]]
    assert failing.id in ids, ids
    assert ops["state_counts"].get("failed", 0) >= 1, ops
    step("list_operations with counters")

    only_failed = client.list_operations(state="failed")["operations"]
    assert only_failed and all(o["state"] == "failed" for o in only_failed), only_failed
    newest, older = ops["operations"][0], ops["operations"][1]
    past = client.list_operations(cursor_time=newest["start_time"], cursor_direction="past")["operations"]
    assert newest["id"] not in [o["id"] for o in past] and older["id"] in [o["id"] for o in past], past
    step("list_operations filters and cursor")

    # A local file: uploaded through the client's file cache (write_file in a
    # transaction, put_file_to_cache), then found there by its md5 the second time.
    import hashlib
    import os
    import tempfile
    local = os.path.join(tempfile.mkdtemp(), "data.txt")
    with open(local, "w") as f:
        f.write("shipped-by-the-wrapper\n")
    md5 = hashlib.md5(open(local, "rb").read()).hexdigest()
    assert not client.get_file_from_cache(md5), "cached before any upload"
    with_file = (VanillaSpecBuilder().begin_task("t").command("cat data.txt >&2").job_count(1)
                 .file_paths([yt.LocalFile(local)]).end_task())
    for attempt in range(2):
        op = client.run_operation(with_file)
        assert op.get_state() == "completed", op.get_state()
        job = client.list_jobs(op.id)["jobs"][0]
        assert b"shipped-by-the-wrapper" in client.get_job_stderr(op.id, job["id"]).read()
        assert client.get_file_from_cache(md5), "not cached after the upload"
    step("local file through the file cache")


if __name__ == "__main__":
    main()
    sys.exit(0)
