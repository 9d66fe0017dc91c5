//! The commands each operation is written as, checked.

use super::*;
use crate::proto::op::{Op, Waiter};

#[test]
fn loaded_scripts_go_as_functions_of_a_versioned_library() {
    let op = Op::Release {
        key: "{r}:lock",
        token: "t",
        line: &[],
        waiter: None,
        period: None,
    };
    let mut by_name = Vec::new();
    encode(&op, true, &mut by_name);
    let text = String::from_utf8_lossy(&by_name).into_owned();
    assert!(text.contains("FCALL") && text.contains(RELEASE.function.as_str()));
    assert!(!text.contains("redis.call"));
    assert_eq!(
        crate::transport::resp::parse(&by_name)
            .unwrap()
            .map(|(_, used)| used),
        Some(by_name.len()),
        "one whole command"
    );
    let mut by_source = Vec::new();
    encode(&op, false, &mut by_source);
    let text = String::from_utf8_lossy(&by_source).into_owned();
    assert!(text.contains("EVAL") && text.contains("redis.call"));
    assert!(LIBRARY.starts_with(&format!("#!lua name=redquorum_{}", &*VERSION)));
    for lua in ALL {
        assert!(LIBRARY.contains(&format!("'{}'", &*lua.function)));
    }
}

/// Every operation is one command whose argument count is its header's.
#[test]
fn every_operation_encodes_as_one_whole_command() {
    let keys = [
        "{r}:writer",
        "{r}:readers",
        "{r}:intent",
        "{r}:rw:line",
        "{r}:rw:alive",
    ]
    .map(String::from);
    let line = ["{k}:lock:line", "{k}:lock:alive"].map(String::from);
    let waiter = Some(Waiter {
        id: "w",
        ticket: 7,
        patience_ms: 300,
    });
    let ops = [
        Op::Acquire {
            key: "k",
            token: "t",
            label: "",
            ttl_ms: 5,
            holder_ttl: false,
            line: &[],
            waiter: None,
            period: None,
        },
        Op::Acquire {
            key: "k",
            token: "t",
            label: "",
            ttl_ms: 5,
            holder_ttl: true,
            line: &[],
            waiter: None,
            period: None,
        },
        Op::Acquire {
            key: "k",
            token: "t",
            label: "",
            ttl_ms: 5,
            holder_ttl: true,
            line: &line,
            waiter,
            period: None,
        },
        Op::Release {
            key: "k",
            token: "t",
            line: &line,
            waiter,
            period: None,
        },
        Op::AcquirePermit {
            keys: &keys,
            token: "t",
            label: "",
            ttl_ms: 5,
            permits: 3,
            waiter,
        },
        Op::ReleasePermit {
            keys: &keys,
            token: "t",
            waiter,
        },
        Op::Extend {
            key: "k",
            token: "t",
            label: "",
            ttl_ms: 5,
            restore: false,
        },
        Op::Extend {
            key: "k",
            token: "t",
            label: "l",
            ttl_ms: 5,
            restore: true,
        },
        Op::AcquireFenced {
            key: "k",
            fence_key: "f",
            token: "t",
            label: "",
            ttl_ms: 5,
            line: &line,
            waiter,
            period: None,
        },
        Op::FenceWriteBack {
            key: "k",
            fence_key: "f",
            token: "t",
            fence: 9,
        },
        Op::AcquireReentrant {
            key: "k",
            owner: "o",
            label: "",
            hold: "h",
            ttl_ms: 5,
        },
        Op::ReleaseReentrant {
            key: "k",
            owner: "o",
            hold: "h",
        },
        Op::AcquireWrite {
            keys: &keys,
            token: "t",
            label: "",
            intent: "m",
            ttl_ms: 5,
            waiter,
        },
        Op::ReleaseRead {
            keys: &keys,
            token: "t",
            waiter: None,
        },
        Op::Inspect { keys: &keys },
    ];
    for op in ops {
        for loaded in [true, false] {
            let mut out = Vec::new();
            encode(&op, loaded, &mut out);
            let (frame, used) = crate::transport::resp::parse(&out).unwrap().unwrap();
            assert_eq!(used, out.len(), "{op:?}");
            let crate::transport::resp::Frame::Array(args) = frame else {
                panic!("{op:?}")
            };
            assert!(args.iter().all(|a| a.bytes().is_some()), "{op:?}");
        }
    }
}

#[test]
fn comments_are_stripped_and_code_kept() {
    let stripped = strip_comments("-- a comment\n  if x then -- keep\n\n  return 1\nend\n");
    assert_eq!(stripped, "if x then -- keep\nreturn 1\nend");
    for lua in [&ACQUIRE, &RELEASE_REENTRANT, &ACQUIRE_MANY] {
        assert!(!lua.source.contains("\n--"));
        assert!(lua.source.contains("redis.call"));
    }
}

/// The permission probe checks every command a script calls with
/// `redis.call` (a denied one would fail mid-work), and the native `SET`,
/// each with a key where it takes one.
#[test]
fn the_probe_checks_every_command_the_scripts_call() {
    let names: Vec<&str> = COMMANDS.iter().map(|c| c[0]).collect();
    for lua in ALL {
        for part in lua.source.split("redis.call('").skip(1) {
            let command = part.split('\'').next().unwrap().to_ascii_lowercase();
            assert!(
                names.contains(&command.as_str()),
                "{command} is called but not probed"
            );
        }
    }
    assert!(names.contains(&"set") && names.contains(&"info"));
    // Every keyed command is handed a key (Redis 7.0 crashes otherwise).
    for command in COMMANDS {
        if !matches!(command[0], "time" | "info") {
            assert_eq!(command.get(1), Some(&"K"), "{command:?}");
        }
    }
    let mut out = Vec::new();
    encode_probe(true, "{p}:lock", &mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    assert!(text.contains("FCALL") && text.contains(PROBE.function.as_str()));
    assert!(text.contains("{p}:lock") && !text.contains("\r\nK\r\n"));
    assert_eq!(
        crate::transport::resp::parse(&out)
            .unwrap()
            .map(|(_, used)| used),
        Some(out.len())
    );
    out.clear();
    encode_probe(false, "{p}:lock", &mut out);
    assert!(String::from_utf8_lossy(&out).contains("acl_check_cmd"));
}

#[test]
fn a_stamp_is_one_whole_command_and_its_reply_is_read() {
    use crate::transport::resp::{self, Frame};
    let stamp = Stamp {
        run_id: "abc",
        uptime_s: Some(7),
        durable: true,
        known: false,
        acked: Some(("old", 1_796_000_000_123)),
    };
    let mut out = Vec::new();
    encode_stamp(true, "p:redquorum:dataset:2", &stamp, &mut out);
    let (frame, used) = resp::parse(&out).unwrap().unwrap();
    assert_eq!(used, out.len());
    let Frame::Array(args) = frame else {
        panic!("{frame:?}")
    };
    let text: Vec<String> = args
        .iter()
        .map(|a| match a {
            Frame::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(text[0], "FCALL");
    assert_eq!(text[1], STAMP.function.as_str());
    assert_eq!(
        &text[2..],
        [
            "1",
            "p:redquorum:dataset:2",
            "abc",
            "7",
            "1",
            "0",
            "5000",
            "500",
            "old",
            "1796000000123"
        ]
    );
    // Unknown uptime, no process before: empty arguments, as the script reads them.
    let fresh = Stamp {
        uptime_s: None,
        acked: None,
        ..stamp
    };
    out.clear();
    encode_stamp(false, "m", &fresh, &mut out);
    assert!(String::from_utf8_lossy(&out).contains("$0\r\n\r\n$0\r\n\r\n"));

    let reply = Frame::Array(vec![Frame::Int(61_000), Frame::Int(1_796_000_000_500)]);
    assert_eq!(
        read_stamp(&reply),
        Some((std::time::Duration::from_secs(61), 1_796_000_000_500))
    );
    assert_eq!(read_stamp(&Frame::Error("NOPERM".into())), None);
    assert_eq!(read_stamp(&Frame::Array(vec![Frame::Int(1)])), None);
}

/// `line.lua` keeps a waiter far back in line as long as the client sleeps
/// (`proto::retry`'s `NEAR_HEAD`, `FAR_STEP`, `FAR_AHEAD`), and caps the
/// line at `op::MAX_LINE`: the numbers are the same on both sides.
#[test]
fn the_lines_numbers_are_the_clients() {
    use crate::proto::retry::{FAR_AHEAD, FAR_STEP, NEAR_HEAD};
    let line = include_str!("line.lua");
    for (name, value) in [
        ("LINE_MAX", crate::proto::op::MAX_LINE.to_string()),
        ("LINE_AHEAD", FAR_AHEAD.to_string()),
        ("NEAR_HEAD", NEAR_HEAD.to_string()),
        ("FAR_STEP", FAR_STEP.as_millis().to_string()),
    ] {
        let want = format!("local {name} = {value}\n");
        assert!(line.contains(&want), "line.lua: no `{}`", want.trim());
    }
}

/// A period's mark goes last among the keys and its length last among the
/// arguments (as `period.lua` reads them), and takes an acquire off the
/// native `SET`; an undo names the mark last, a plain release does not.
#[test]
fn a_period_goes_last_and_takes_the_script() {
    use crate::proto::op::Period;
    use crate::transport::resp::{Frame, parse};
    let args = |op: &Op<'_>| -> Vec<String> {
        let mut out = Vec::new();
        encode(op, false, &mut out);
        let Some((Frame::Array(args), _)) = parse(&out).unwrap() else {
            panic!("{op:?}")
        };
        args.iter()
            .map(|a| String::from_utf8_lossy(a.bytes().unwrap()).into_owned())
            .collect()
    };
    let line = ["{k}:lock:line", "{k}:lock:alive"].map(String::from);
    let waiter = Some(Waiter {
        id: "w",
        ticket: 7,
        patience_ms: 300,
    });
    let period = Some(Period {
        key: "{k}:period",
        ms: 82_800_000,
    });
    let acquire = |waiter, period| Op::Acquire {
        key: "{k}:lock",
        token: "t",
        label: "",
        ttl_ms: 10_000,
        holder_ttl: false,
        line: &line,
        waiter,
        period,
    };
    assert_eq!(args(&acquire(None, None))[0], "SET");
    let sent = args(&acquire(None, period));
    assert_eq!(sent[0], "EVAL");
    assert_eq!(&sent[2..5], ["2", "{k}:lock", "{k}:period"]);
    assert_eq!(sent.last().unwrap(), "82800000");
    let sent = args(&acquire(waiter, period));
    assert_eq!(sent[2], "4");
    assert_eq!(sent[6], "{k}:period");
    assert_eq!(
        sent.len(),
        3 + 4 + 7,
        "token, ttl, label, waiter's three, ms"
    );
    assert_eq!(sent.last().unwrap(), "82800000");
    let release = |period| Op::Release {
        key: "{k}:lock",
        token: "t",
        line: &line,
        waiter: None,
        period,
    };
    assert_eq!(args(&release(None))[2], "3");
    let undo = args(&release(Some("{k}:period")));
    assert_eq!((undo[2].as_str(), undo[6].as_str()), ("4", "{k}:period"));
}

/// A reply is read by the shape its command was written with: the op is
/// built once per call, for its command only.
#[test]
fn a_reply_is_read_by_the_shape_written() {
    use crate::proto::op::Reply;
    use crate::transport::resp::Frame;
    let plain = Op::Acquire {
        key: "k",
        token: "t",
        label: "",
        ttl_ms: 5,
        holder_ttl: false,
        line: &[],
        waiter: None,
        period: None,
    };
    let shape = encode(&plain, true, &mut Vec::new());
    assert_eq!(shape, Shape::Acquire);
    let refused = Reply::Held {
        pttl_ms: None,
        ahead: None,
    };
    assert_eq!(parse_reply(shape, Frame::Nil), Ok(refused));
    let restore = Op::Extend {
        key: "k",
        token: "t",
        label: "",
        ttl_ms: 5,
        restore: true,
    };
    let shape = encode(&restore, true, &mut Vec::new());
    assert_eq!(parse_reply(shape, Frame::Int(2)), Ok(Reply::Restored));
    let keys = ["a".to_owned(), "b".to_owned()];
    let shape = encode(&Op::Inspect { keys: &keys }, true, &mut Vec::new());
    assert_eq!(shape, Shape::Snapshot(2));
    // A frame of another shape is a protocol error, never a guess.
    assert!(parse_reply(Shape::Done, Frame::Nil).is_err());
}
