//! Each error's message, checked.

use super::*;

fn votes(answers: &[Answer], subject: Subject) -> Votes {
    Votes::new(
        answers
            .iter()
            .enumerate()
            .map(|(i, a)| (format!("redis://n{i}").into(), a.clone()))
            .collect(),
    )
    .about(subject)
}

fn lock(kind: &'static str, step: &'static str) -> Subject {
    Subject::Lock {
        resources: "orders:42".into(),
        kind,
        step,
    }
}

const HELD: Answer = Answer::Held {
    pttl: Some(Duration::from_millis(2_300)),
    ahead: None,
};

/// Each message says what happened and what to do, in one sentence,
/// before the nodes' answers; `{:#}` puts each node on a line.
#[test]
fn messages_say_what_happened_and_what_to_do() {
    let taken = |kind| LockError::Taken {
        votes: votes(
            &[HELD, HELD, HELD, Answer::Undecided, Answer::Undecided],
            lock(kind, "acquire"),
        ),
    };
    let text = taken("plain").to_string();
    assert!(
        text.starts_with(
            "\"orders:42\" is held by another holder on 3 nodes, the first for 2300 ms \
             more: try again later, or wait for its release (LockOptions::wait) (0 yes, 3 \
             held by another holder, 2 not waited for of 5 nodes; redis://n0: held by \
             another holder, 2300 ms left;"
        ),
        "{text}"
    );
    assert!(!text.contains("TTL unknown"));
    assert!(
        taken("read")
            .to_string()
            .contains("has a writer, or a writer waiting")
    );
    assert!(
        taken("write")
            .to_string()
            .contains("held by its readers or another writer")
    );
    let permits = taken("plain").about(Subject::Permits {
        name: "api".into(),
        permits: 2,
    });
    assert!(
        permits
            .to_string()
            .starts_with("every permit of the semaphore \"api\" (2 permits) is held")
    );
    let lines = format!("{:#}", taken("plain"));
    assert_eq!(lines.lines().count(), 7, "{lines}");
    assert!(lines.lines().nth(2).unwrap().starts_with("  redis://n0: "));

    let down = Answer::Failed(NodeError::TimedOut);
    let unavailable = LockError::Unavailable {
        votes: votes(
            &[Answer::Yes, Answer::Yes, down.clone(), down.clone(), down],
            lock("plain", "acquire"),
        ),
    };
    assert!(
        unavailable.to_string().starts_with(
            "\"orders:42\": only 2 of 5 nodes answered yes, 3 needed: raise the node timeout"
        ),
        "{unavailable}"
    );
    // The advice follows what the nodes said: "raise the node timeout"
    // only where they timed out.
    let oom = Answer::Failed(NodeError::from_reply("OOM command not allowed"));
    let denied = Answer::Failed(NodeError::from_reply("NOPERM no permissions to run 'eval'"));
    let refused = LockError::Unavailable {
        votes: votes(
            &[oom.clone(), oom, denied, Answer::Quarantined, Answer::Yes],
            lock("plain", "extend"),
        ),
    }
    .to_string();
    assert!(!refused.contains("node timeout"), "{refused}");
    assert!(refused.contains("raise its maxmemory"), "{refused}");
    assert!(refused.contains("grant the user"), "{refused}");
    assert!(
        refused.contains("1 quarantined (restarted, or first seen"),
        "{refused}"
    );
    assert_eq!(
        refused.matches("maxmemory").count(),
        1,
        "advice once per kind"
    );
    let late = LockError::Expired {
        votes: votes(
            &[Answer::Yes, Answer::Yes, Answer::Yes],
            lock("plain", "acquire"),
        ),
    };
    assert!(
        late.to_string()
            .contains("only after its validity had passed")
    );
    let gone = LockError::Expired {
        votes: votes(
            &[Answer::NotHeld, Answer::NotHeld, Answer::NotHeld],
            lock("plain", "extend"),
        ),
    };
    assert!(
        gone.to_string()
            .contains("no longer held on a quorum (3 nodes")
    );
    let before = LockError::Expired {
        votes: votes(&[], lock("plain", "extend")),
    };
    assert!(
        before
            .to_string()
            .contains("validity had ended before the call")
    );
    let config = LockError::Input(InputError::EmptyResource);
    assert_eq!(config.to_string(), "invalid input: resource name is empty");
    // Said once: no source to print it again.
    assert!(std::error::Error::source(&config).is_none());
}
