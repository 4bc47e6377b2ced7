//! The example guests driven through the runner directly (no sockets):
//! echo, json, binary, chat, auth, counter.

mod guest_support;

use guest_support::*;
use weir::guest::{Accept, Batch, Runner, UpgradeRequest, UpgradeResponse};

/// An accept without subprotocol or attachment.
fn plain_accept() -> UpgradeResponse {
    UpgradeResponse::Accept(Accept {
        protocol: None,
        attachment: Vec::new(),
    })
}

#[test]
fn echo_answers_every_connection_in_order_in_one_call() {
    let mut r = runner("echo");
    let mut b = Batch::new();
    let conns: Vec<u64> = (1..=40).collect();
    for &c in &conns {
        b.push_open(c, "/echo", &[], b"");
    }
    // Interleave connections; each sends 5 messages, alternating kinds.
    for i in 0..5u8 {
        for &c in &conns {
            if i % 2 == 0 {
                b.push_message(c, true, format!("{c}:{i}").as_bytes());
            } else {
                b.push_message(c, false, &[c as u8, i]);
            }
        }
    }
    let out = owned(&r.handle(&mut b).unwrap());
    assert_eq!(out.len(), 200);
    for &c in &conns {
        let mine: Vec<_> = out
            .iter()
            .filter(|o| matches!(o, Owned::Text(x, _) | Owned::Binary(x, _) if *x == c))
            .collect();
        assert_eq!(
            mine,
            vec![
                &Owned::Text(c, format!("{c}:0")),
                &Owned::Binary(c, vec![c as u8, 1]),
                &Owned::Text(c, format!("{c}:2")),
                &Owned::Binary(c, vec![c as u8, 3]),
                &Owned::Text(c, format!("{c}:4")),
            ]
        );
    }
    // A batch reused after clear() still works, and empty batches cost no call.
    b.clear();
    assert!(r.handle(&mut b).unwrap().is_empty());
    b.push_message(7, false, &[]);
    assert_eq!(
        owned(&r.handle(&mut b).unwrap()),
        vec![Owned::Binary(7, vec![])]
    );
}

#[test]
fn echo_keeps_large_payloads_intact() {
    let mut r = runner("echo");
    let big: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7) as u8).collect();
    let mut b = Batch::new();
    b.push_message(1, false, &big);
    b.push_message(2, true, "ü".repeat(1000).as_bytes());
    let out = owned(&r.handle(&mut b).unwrap());
    assert_eq!(
        out,
        vec![Owned::Binary(1, big), Owned::Text(2, "ü".repeat(1000))]
    );
}

#[test]
fn json_adds_one_to_odd_two_to_even_and_reports_errors() {
    let mut r = runner("json");
    let ask = |r: &mut Runner, s: &str| match send_text(r, 1, s).unwrap().as_slice() {
        [Owned::Text(1, t)] => serde_json::from_str::<serde_json::Value>(t).unwrap(),
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(ask(&mut r, r#"{"number": 3}"#)["number"], 4);
    assert_eq!(ask(&mut r, r#"{"number": 4}"#)["number"], 6);
    assert_eq!(ask(&mut r, r#"{"number": -1}"#)["number"], 0);
    assert_eq!(ask(&mut r, r#"{"number": 0}"#)["number"], 2);
    for bad in [
        "{not json",
        r#"{"n": 1}"#,
        r#"{"number": "3"}"#,
        r#"{"number": 1.5}"#,
    ] {
        let v = ask(&mut r, bad);
        assert!(
            v["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{bad} -> {v}"
        );
        assert!(v.get("number").is_none());
    }
}

#[test]
fn binary_adds_to_little_endian_ints_and_closes_on_wrong_length() {
    let mut r = runner("binary");
    let mut b = Batch::new();
    for n in [1i32, 2, -3, 0, i32::MAX] {
        b.push_message(1, false, &n.to_le_bytes());
    }
    b.push_message(2, false, &[1, 2, 3]);
    b.push_message(3, true, b"1234");
    let out = owned(&r.handle(&mut b).unwrap());
    let ints = |n: i32| Owned::Binary(1, n.to_le_bytes().to_vec());
    assert_eq!(
        out,
        vec![
            ints(2),
            ints(4),
            ints(-2),
            ints(2),
            ints(i32::MIN), // MAX is odd: +1 wraps
            Owned::Close(2, 1003, "expected exactly 4 bytes".into()),
            Owned::Close(3, 1003, "expected a binary message".into()),
        ]
    );
}

#[test]
fn chat_subscribes_to_the_path_room_and_publishes_to_the_others() {
    let mut r = runner("chat");
    let mut b = Batch::new();
    b.push_open(1, "/chat/lobby", &[("room", "lobby")], b"");
    b.push_open(2, "/chat/lobby?x=1", &[("room", "lobby")], b"");
    b.push_open(3, "/chat/rust", &[("room", "rust")], b"");
    b.push_message(1, true, b"hello");
    b.push_message(3, false, &[9]);
    let out = owned(&r.handle(&mut b).unwrap());
    assert_eq!(
        out,
        vec![
            Owned::Subscribe(1, "lobby".into()),
            Owned::Subscribe(2, "lobby".into()),
            Owned::Subscribe(3, "rust".into()),
            Owned::Publish {
                topic: "lobby".into(),
                text: true,
                payload: b"hello".to_vec(),
                exclude: Some(1)
            },
            Owned::Publish {
                topic: "rust".into(),
                text: false,
                payload: vec![9],
                exclude: Some(3)
            },
        ]
    );
    // A fresh instance knows the room from the host's connection record.
    r.recycle();
    assert_eq!(
        send_text(&mut r, 2, "again").unwrap(),
        vec![Owned::Publish {
            topic: "lobby".into(),
            text: true,
            payload: b"again".to_vec(),
            exclude: Some(2)
        }]
    );
}

fn request(query: &str, headers: &[(&str, &str)]) -> UpgradeRequest {
    UpgradeRequest {
        path: "/auth".into(),
        query: query.into(),
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        remote_addr: "127.0.0.1:5000".into(),
        params: Vec::new(),
    }
}

#[test]
fn auth_rejects_without_the_token_and_echoes_once_accepted() {
    let program = program_with("auth", "/auth", |c| {
        c.env.insert("WEIR_AUTH_TOKEN".into(), "s3cret".into());
    });
    let mut r = Runner::new(program);
    let accepted = |r: &mut Runner, req| r.upgrade(&req).unwrap() == plain_accept();
    assert!(accepted(&mut r, request("token=s3cret", &[])));
    assert!(accepted(&mut r, request("a=1&token=s3cret", &[])));
    assert!(accepted(
        &mut r,
        request("", &[("authorization", "Bearer s3cret")])
    ));
    assert!(accepted(&mut r, request("", &[("x-weir-token", "s3cret")])));
    for req in [
        request("", &[]),
        request("token=wrong", &[]),
        request("token=s3cre", &[]),
        request("", &[("authorization", "Basic s3cret")]),
        request("", &[("x-weir-token", "s3cret-not")]),
    ] {
        assert_eq!(
            r.upgrade(&req).unwrap(),
            UpgradeResponse::Reject(401),
            "{req:?}"
        );
    }
    assert_eq!(
        send_text(&mut r, 5, "hi").unwrap(),
        vec![Owned::Text(5, "hi".into())]
    );
}

#[test]
fn auth_without_a_configured_token_rejects_everyone() {
    // The gateway's own environment is not the guest's: only the route's
    // `env` table is visible.
    std::env::set_var("WEIR_AUTH_TOKEN", "from-the-host");
    let mut r = runner("auth");
    assert_eq!(
        r.upgrade(&request("token=from-the-host", &[])).unwrap(),
        UpgradeResponse::Reject(401)
    );
    assert_eq!(
        r.upgrade(&request("token=", &[])).unwrap(),
        UpgradeResponse::Reject(401)
    );
    assert_eq!(
        r.upgrade(&request("", &[("authorization", "Bearer ")]))
            .unwrap(),
        UpgradeResponse::Reject(401)
    );
}

#[test]
fn echo_accepts_upgrades_by_default() {
    let mut r = runner("echo");
    assert_eq!(r.upgrade(&request("", &[])).unwrap(), plain_accept());
}

#[test]
fn counter_survives_instance_replacement_through_its_attachment() {
    // recycle_after = 1: every batch runs on a fresh instance.
    let mut r = Runner::new(program_with("counter", "/counter", |c| c.recycle_after = 1));
    open(&mut r, 10).unwrap();
    open(&mut r, 11).unwrap();
    for expected in 1..=5 {
        assert_eq!(
            send_text(&mut r, 10, "x").unwrap(),
            vec![Owned::Text(10, expected.to_string())]
        );
    }
    // Another connection counts on its own.
    assert_eq!(
        send_text(&mut r, 11, "x").unwrap(),
        vec![Owned::Text(11, "1".into())]
    );
    // Closing forgets: a reused id would start again at 1.
    r.forget(10);
    open(&mut r, 10).unwrap();
    assert_eq!(
        send_text(&mut r, 10, "x").unwrap(),
        vec![Owned::Text(10, "1".into())]
    );
}

#[test]
fn batch_isolation_uses_a_fresh_instance_per_batch() {
    let mut r = Runner::new(program_with("counter", "/counter", |c| {
        c.isolation = weir_config::Isolation::Batch
    }));
    open(&mut r, 1).unwrap();
    for expected in 1..=3 {
        assert_eq!(
            send_text(&mut r, 1, "x").unwrap(),
            vec![Owned::Text(1, expected.to_string())]
        );
        assert_eq!(
            r.program().live_instances(),
            0,
            "no instance outlives its batch"
        );
    }
}
