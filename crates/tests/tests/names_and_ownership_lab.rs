//! Names and ownership on a real authenticated lab (SPEC 5.11, issue 24 point 4): users,
//! admins and nodes share one name space without the ACL group words, and a user's
//! ephemeral pool takes only that user's operations (and admins').

use ytsched_tests::{Lab, NodeOpts};

#[test]
fn group_words_and_taken_names_are_refused_and_ephemeral_pools_keep_to_their_users() {
    let lab = Lab::start(vec![NodeOpts::args(&["--cpu", "2", "--memory", "2G"])]).unwrap();
    for group in ["admins", "everyone"] {
        let e = lab.add_user(group, false).unwrap_err().to_string();
        assert!(e.contains(&format!("name '{group}' is reserved")), "{e}");
        let e = lab.auth(&["add-node", group]).unwrap_err().to_string();
        assert!(e.contains("is reserved"), "{e}");
    }
    // A node's name is taken for users too, and the other way round.
    let e = lab.add_user("node0", false).unwrap_err().to_string();
    assert!(e.contains("identity 'node0' already exists"), "{e}");
    lab.add_user("alice", false).unwrap();
    lab.add_user("mallory", false).unwrap();
    let e = lab.auth(&["add-node", "alice"]).unwrap_err().to_string();
    assert!(e.contains("identity 'alice' already exists"), "{e}");

    let run = |who: &str, pool: Option<&str>| {
        let mut args = vec!["run-vanilla", "--async", "--command", "sleep 30"];
        args.extend(["--cpu-limit", "0.1", "--memory-limit", "64M"]);
        if let Some(p) = pool {
            args.extend(["--pool", p]);
        }
        lab.ytsched_as(who, &args)
    };
    let out = run("alice", None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run("mallory", Some("alice"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "mallory ran in alice's pool");
    assert!(
        err.contains("it is the ephemeral pool of user 'alice'"),
        "{err}"
    );
    // Nor can she take a name before its user does.
    let out = run("mallory", Some("bob"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("may not create the ephemeral pool 'bob'"),
        "{err}"
    );
    // Alice's own submissions are still hers to make; an admin may use her pool.
    assert!(run("alice", None).status.success());
    assert!(run("admin", Some("alice")).status.success());
}

/// A delegate given `administer` on one pool fills only its own subtree's budget (issue
/// 24 point 6): past it its creates are refused naming the limit, and the admin's
/// changes to other trees, and another delegate's, still go through.
#[test]
fn a_delegate_cannot_fill_the_configuration_for_everyone() {
    let lab = Lab::start(vec![]).unwrap();
    lab.add_user("bob", false).unwrap();
    lab.add_user("carol", false).unwrap();
    for (pool, user) in [("team", "bob"), ("lab", "carol")] {
        let acl = format!("{{acl=[{{action=allow;subjects=[{user}];permissions=[administer]}}]}}");
        lab.ok(&[
            "create",
            "scheduler_pool",
            "--name",
            pool,
            "--attributes",
            &acl,
        ]);
    }
    lab.ok(&["create", "scheduler_pool_tree", "--name", "gpu"]);
    let create_as = |who: &str, name: &str, parent: &str| {
        lab.ytsched_as(
            who,
            &[
                "create",
                "scheduler_pool",
                "--name",
                name,
                "--parent-name",
                parent,
            ],
        )
    };
    // `team` itself is one of the subtree's 200.
    let mut refusal = None;
    for i in 1..=200 {
        let out = create_as("bob", &format!("b{i}"), "team");
        if !out.status.success() {
            refusal = Some((i, String::from_utf8_lossy(&out.stderr).to_string()));
            break;
        }
    }
    let (at, why) = refusal.expect("bob's 200th pool under team is refused");
    assert_eq!(at, 200, "{why}");
    assert!(
        why.contains("subtree of pool 'team'") && why.contains("200 one delegated subtree"),
        "{why}"
    );
    let out = create_as("carol", "c1", "lab");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    lab.ok(&[
        "create",
        "scheduler_pool",
        "--name",
        "training",
        "--pool-tree",
        "gpu",
    ]);
    let out = lab.ytsched_as(
        "bob",
        &[
            "create",
            "scheduler_pool",
            "--name",
            "x",
            "--parent-name",
            "lab",
        ],
    );
    assert!(!out.status.success(), "bob has no right on carol's pool");
}
