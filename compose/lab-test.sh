#!/usr/bin/env bash
# End-to-end test of the docker-compose lab (compose/README.md), run by .ci/run:
# builds the image, brings the lab up under a project name of its own, waits for the
# three nodes, runs an operation in each pool tree and checks where the jobs ran and
# that they ran in job cgroups, kills one agent container and sees its jobs run
# elsewhere, kills one of the three NATS servers mid-operation and sees nothing lost and
# the server rejoin, then tears everything down and checks nothing is left behind.
# Skips (exit 0, saying so) where no Docker engine is reachable.
#   YTSCHED_LAB_PROFILE=debug  use debug binaries (faster to build; CI does this)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! docker info >/dev/null 2>&1; then
    echo "lab-test: SKIPPED: no Docker engine is reachable here"
    exit 0
fi
if docker compose version >/dev/null 2>&1; then
    compose_cmd=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
    compose_cmd=(docker-compose)
else
    echo "lab-test: SKIPPED: Docker has no compose tool (docker compose / docker-compose)"
    exit 0
fi

profile="${YTSCHED_LAB_PROFILE:-release}"
./compose/build-image.sh --profile "$profile"
cli="$PWD/target/$profile/ytsched"

project="ytsched-labtest-$$"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port)
http_port=$(free_port)
auth_dir="$PWD/compose/.build/auth-$project"
export YTSCHED_LAB_NATS_PORT="$port" YTSCHED_LAB_HTTP_PORT="$http_port" YTSCHED_LAB_CGROUP_ROOT="$project" \
    YTSCHED_LAB_AUTH_DIR="$auth_dir"
compose() { "${compose_cmd[@]}" -p "$project" -f compose/compose.yaml "$@"; }
yt() { "$cli" --nats "nats://127.0.0.1:$port" --creds "$auth_dir/admin.creds" "$@"; }

cleanup() {
    local status=$?
    if [[ $status -ne 0 ]]; then
        echo "lab-test: FAILED; the lab's logs:" >&2
        compose logs --no-color --tail 40 >&2 || true
    fi
    compose down -v --remove-orphans >/dev/null 2>&1 || true
    rm -rf "$auth_dir"
    remove_job_cgroups
    exit $status
}

# On a cgroup v1 host the agents' job cgroups live in the host's hierarchy: remove this
# run's (empty by now) directories, deepest first.
remove_job_cgroups() {
    local d
    for d in /sys/fs/cgroup/*/"$project" /sys/fs/cgroup/"$project"; do
        [[ -d "$d" ]] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
    done
    return 0
}
trap cleanup EXIT

fail() { echo "lab-test: FAILED: $*" >&2; exit 1; }

# Waits up to $1 seconds for the command after it to succeed.
wait_for() {
    local deadline=$((SECONDS + $1)); shift
    until "$@" >/dev/null 2>&1; do
        (( SECONDS < deadline )) || return 1
        sleep 0.5
    done
}

json_field() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

echo "lab-test: starting the lab (project $project, NATS on 127.0.0.1:$port)"
compose up -d >compose/.build/up.log 2>&1 || { cat compose/.build/up.log >&2; fail "compose up"; }
three_nodes() {
    [[ $(yt --format json list-nodes | json_field "sum(1 for n in d if n['state']=='online')") == 3 ]]
}
wait_for 60 three_nodes || fail "three nodes did not register"
# Authenticated: an anonymous client is turned away, and the lab printed how to connect.
if "$cli" --nats "nats://127.0.0.1:$port" list-nodes >/dev/null 2>&1; then
    fail "an unauthenticated client was served"
fi
# Read whole before matching: `grep -q` stops at the first match, and under pipefail the
# SIGPIPE that gives the still-writing `compose logs` would fail the check.
auth_log=$(compose logs --no-color auth)
grep -q "YTSCHED_CREDS=$auth_dir/admin.creds" <<<"$auth_log" || fail "the lab did not print YTSCHED_CREDS"
echo "lab-test: authenticated (anonymous clients refused; YTSCHED_CREDS printed)"
yt list-nodes
trees=$(yt --format json list-nodes | json_field "' '.join(n['id']+'='+str(n['tree']) for n in sorted(d, key=lambda n: n['id']))")
[[ "$trees" == "node1=default node2=default node3=other" ]] || fail "trees by node: $trees"

# One operation per tree; each job prints its cgroup membership.
job='cat /proc/self/cgroup; sleep 1'
op_default=$(yt run-vanilla --async --command "$job" --job-count 6 --pool development --cpu-limit 0.5)
op_other=$(yt run-vanilla --async --command "$job" --job-count 3 --pool research --pool-trees other --cpu-limit 0.5)
finished() { [[ $(yt --format json get-operation "$1" | json_field "d['state']") == completed ]]; }
wait_for 90 finished "$op_default" || fail "operation in default did not complete"
wait_for 90 finished "$op_other" || fail "operation in other did not complete"

placement() {
    yt --format json list-jobs "$1" | json_field "' '.join(sorted(set(j['node_id'] for j in d if j['state']=='completed')))"
}
echo "lab-test: default-tree operation $op_default ran on: $(placement "$op_default")"
echo "lab-test: other-tree operation $op_other ran on: $(placement "$op_other")"
[[ "$(placement "$op_other")" == "node3" ]] || fail "tree other ran outside node3"
[[ "$(placement "$op_default")" != *node3* ]] || fail "tree default ran on node3"

first_job=$(yt --format json list-jobs "$op_default" | json_field "d[0]['id']")
cgroups=$(yt get-job-stdout "$op_default" "$first_job")
grep -q "$project/node[12]/$first_job" <<<"$cgroups" || fail "job did not run in its cgroup: $cgroups"
echo "lab-test: job $first_job ran in cgroup $(grep -o "/$project/[^ ]*" <<<"$cgroups" | head -1)"

# The scheduler's HTTPS port, published on localhost, with the lab CA's certificate.
# Without a web token the face answers 401; with the admin's (made by the auth service) it reads.
ca="$auth_dir/tls/ca.pem"
code=$(python3 -c "
import ssl, urllib.request, urllib.error
ctx = ssl.create_default_context(cafile='$ca')
try: urllib.request.urlopen('https://127.0.0.1:$http_port/metrics', context=ctx); print(200)
except urllib.error.HTTPError as e: print(e.code)")
[[ "$code" == 401 ]] || fail "the HTTPS face answered $code without a token"
token=$(cat "$auth_dir/admin.web-token")
metrics=$(python3 -c "
import ssl, urllib.request
ctx = ssl.create_default_context(cafile='$ca')
print(urllib.request.urlopen(urllib.request.Request('https://127.0.0.1:$http_port/metrics', headers={'Authorization': 'Bearer $token'}), context=ctx).read().decode())")
grep -q 'ytsched_nodes{state="online"} 3' <<<"$metrics" || fail "metrics on the HTTPS port: $metrics"
echo "lab-test: https://127.0.0.1:$http_port/metrics refuses anonymous readers and reports 3 online nodes to the admin's token"

# A machine dies: its jobs run again on the other default node.
op_long=$(yt run-vanilla --async --command 'sleep 6' --job-count 4 --pool development --cpu-limit 1)
running_on_both() {
    [[ $(yt --format json list-jobs "$op_long" | json_field "len(set(j['node_id'] for j in d if j['state']=='running'))") == 2 ]]
}
wait_for 30 running_on_both || fail "the long operation did not spread over node1 and node2"
compose kill node2 >/dev/null 2>&1
echo "lab-test: killed the node2 container"
wait_for 120 finished "$op_long" || fail "the long operation did not complete after node2 died"
lost=$(yt --format json list-jobs "$op_long" | json_field "sum(1 for j in d if j.get('abort_reason')=='node_lost')")
after=$(placement "$op_long")
echo "lab-test: after node2 died: $lost job(s) lost and rerun; completed on: $after"
[[ "$lost" -ge 1 && "$after" == "node1" ]] || fail "jobs of node2 were not rescheduled onto node1"

# A NATS server dies mid-operation: the cluster (KV at 3 replicas) loses nothing, no job
# runs twice, new work still runs, and the server rejoins when it comes back.
op_nats=$(yt run-vanilla --async --command 'sleep 4' --job-count 4 --pool development --cpu-limit 0.5)
running_all() { [[ $(yt --format json get-operation "$op_nats" | json_field "d['jobs']['running']") == 4 ]]; }
wait_for 30 running_all || fail "the operation for the NATS test did not start its 4 jobs"
compose kill nats3 >/dev/null 2>&1
echo "lab-test: killed the nats3 container (one NATS server of three)"
wait_for 120 finished "$op_nats" || fail "the operation did not complete after nats3 died"
attempts=$(yt --format json list-jobs "$op_nats" | json_field "len(d)")
[[ "$attempts" == 4 ]] || fail "after nats3 died the 4 jobs took $attempts attempts"
op_after=$(yt run-vanilla --async --command true --job-count 2 --pool development --cpu-limit 0.5)
wait_for 60 finished "$op_after" || fail "new work did not run with nats3 down"
compose start nats3 >/dev/null 2>&1
rejoined() {
    # The image is a minimal Debian: bash's /dev/tcp asks nats3's monitoring port.
    [[ $(compose exec -T nats3 bash -c 'exec 3<>/dev/tcp/127.0.0.1/8222 && printf "GET /routez HTTP/1.0\r\n\r\n" >&3 && cat <&3' \
        | sed '1,/^\r$/d' | json_field "len({r['remote_id'] for r in d.get('routes') or []})") == 2 ]]
}
wait_for 60 rejoined || fail "nats3 did not rejoin the cluster"
echo "lab-test: nats3 came back and rejoined (routes to both others); each job ran once"
# Nothing stored was lost: a restarted scheduler revives both operations from the store.
compose restart scheduler >/dev/null 2>&1
wait_for 60 finished "$op_nats" || fail "the restarted scheduler lost $op_nats"
wait_for 60 finished "$op_after" || fail "the restarted scheduler lost $op_after"
echo "lab-test: a restarted scheduler revived both operations from the 3-replica store"

# The deployment guide's commands (docs/deploy.md, sections 2, 3, 6 and 7) on this lab: a
# user added and NATS reloaded, pool trees shaped, operations listed as that user.
# In nats1, as compose.yaml says: its nats.pid is a pid of that container's.
compose exec -T nats1 ytsched auth add-user alice --dir /auth >/dev/null 2>&1 \
    || fail "ytsched auth add-user in nats1"
compose kill -s HUP nats1 nats2 nats3 >/dev/null 2>&1
as_alice() { "$cli" --nats "nats://127.0.0.1:$port" --creds "$auth_dir/alice.creds" "$@"; }
wait_for 30 as_alice list-operations || fail "alice, added by ytsched auth add-user, was not let in after the reload"
yt list-operations >/dev/null
yt set //sys/pool_trees/default/@config/nodes_filter '"!custom_tag & !gpu"' >/dev/null
yt create scheduler_pool_tree --name gpu --attributes '{nodes_filter=gpu}' >/dev/null
yt create scheduler_pool --name guide --parent-name '<Root>' --pool-tree default --attributes '{weight=2}' >/dev/null
# node2 was killed above; the others stay in their trees.
trees=$(yt --format json list-nodes | json_field "' '.join(n['id']+'='+str(n['tree']) for n in sorted(d, key=lambda n: n['id']) if n['state']=='online')")
[[ "$trees" == "node1=default node3=other" ]] || fail "after the guide's pool tree commands: $trees"
op_guide=$(as_alice run-vanilla --async --command 'sleep 1; cat' --job-count 2 --pool guide)
wait_for 60 finished "$op_guide" || fail "the guide's first operation did not complete"
echo "lab-test: the deployment guide's commands ran (a user added and let in, a tree and a pool made, an operation as that user)"

compose down -v --remove-orphans >/dev/null 2>&1
left=$(docker ps -aq --filter "label=com.docker.compose.project=$project"; \
       docker network ls -q --filter "label=com.docker.compose.project=$project"; \
       docker volume ls -q --filter "label=com.docker.compose.project=$project")
[[ -z "$left" ]] || fail "left behind: $left"
echo "lab-test: PASSED (nothing left behind)"
