//! `client-events`: C members of one presence channel (each subscribed with
//! the signature an auth endpoint would give), every one sending `client-*`
//! events that the server delivers to the other C−1; a member sends at
//! most `window` events ahead of what it has received from the slowest
//! other member. Every member must receive every other member's events in
//! order: the figures are the server's CPU per client event sent and per
//! delivery.

use super::socket::{is_event, preview, subscribe_presence, Message, Socket};
use super::{keep_error, measure, open_many, per, Options, DONE, DRAIN, MEASURE, WARMUP};
use serde::Deserialize;
use serde_json::{json, Value};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// The client event's name (the protocol requires the `client-` prefix).
const EVENT: &str = "client-bench";

struct State {
    phase: Cell<u8>,
    /// next[receiver][sender]: the sequence the receiver expects next.
    next: Vec<Vec<Cell<u64>>>,
    sent: Vec<Cell<u64>>,
    measured_sent: Cell<u64>,
    measured_deliveries: Cell<u64>,
    wrong: Cell<u64>,
    errors: RefCell<Vec<String>>,
}

/// What each client event carries: its sender and sequence, and padding.
#[derive(Deserialize)]
struct Body {
    s: usize,
    n: u64,
}

fn event(channel: &str, sender: usize, seq: u64, size: usize) -> String {
    let pad = "x".repeat(size.saturating_sub(24));
    format!(
        r#"{{"event":"{EVENT}","channel":"{channel}","data":{{"s":{sender},"n":{seq},"p":"{pad}"}}}}"#
    )
}

pub async fn run(o: Rc<Options>) -> Result<Value, String> {
    let c = o.connections.max(2);
    let members = open_many(
        &o,
        c,
        Some(|o, i, s| {
            (
                subscribe_presence(&o.app(), &s.socket_id, &o.channel, &format!("u{i}")),
                o.channel.clone(),
            )
        }),
    )
    .await?;
    tokio::time::sleep(super::SETTLE).await;
    let st = Rc::new(State {
        phase: Cell::new(WARMUP),
        next: (0..c)
            .map(|_| (0..c).map(|_| Cell::new(0)).collect())
            .collect(),
        sent: (0..c).map(|_| Cell::new(0)).collect(),
        measured_sent: Cell::new(0),
        measured_deliveries: Cell::new(0),
        wrong: Cell::new(0),
        errors: RefCell::new(Vec::new()),
    });
    for (i, s) in members.into_iter().enumerate() {
        let (st, o) = (st.clone(), o.clone());
        tokio::task::spawn_local(async move {
            if let Err(e) = member(i, s, &st, &o).await {
                keep_error(&st.errors, format!("member {i}: {e}"));
            }
        });
    }
    let w = measure(&o, &st.phase).await;
    let deadline = Instant::now() + DRAIN;
    let missing = || -> u64 {
        let mut n = 0;
        for (r, row) in st.next.iter().enumerate() {
            for (s, next) in row.iter().enumerate() {
                if r != s {
                    n += st.sent[s].get().saturating_sub(next.get());
                }
            }
        }
        n
    };
    while missing() > 0 && Instant::now() < deadline && st.errors.borrow().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let lost = missing();
    let (sent, deliveries) = (st.measured_sent.get(), st.measured_deliveries.get());
    let errors = st.errors.borrow().clone();
    let ok = lost == 0 && st.wrong.get() == 0 && errors.is_empty() && deliveries > 0;
    println!(
        "pusher client-events: {c} members of {}, {sent} client events sent and {deliveries} delivered in {:.2} s, lost {lost}, wrong {}",
        o.channel,
        w.secs,
        st.wrong.get()
    );
    for e in &errors {
        println!("  error: {e}");
    }
    Ok(json!({
        "mode": "pusher-client-events",
        "connections": c,
        "secs": w.secs,
        "client_events": sent,
        "msgs": deliveries,
        "msgs_per_s": deliveries as f64 / w.secs,
        "server_cpu_ns_per_msg": per(w.server_ns, deliveries),
        "server_cpu_ns_per_client_event": per(w.server_ns, sent),
        "client_cpu_ns_per_msg": per(Some(w.client_ns), deliveries),
        "lost": lost,
        "wrong": st.wrong.get(),
        "errors": errors,
        "ok": ok,
    }))
}

/// One member: sends while under its window, then reads one message.
async fn member(i: usize, mut s: Socket, st: &State, o: &Options) -> Result<(), String> {
    let window = o.window.max(1);
    loop {
        while st.phase.get() != DONE {
            let slowest = (0..st.sent.len())
                .filter(|&s| s != i)
                .map(|s| st.next[i][s].get())
                .min()
                .unwrap_or(0);
            let n = st.sent[i].get();
            if n >= slowest + window {
                break;
            }
            s.send(&event(&o.channel, i, n, o.size)).await?;
            st.sent[i].set(n + 1);
            if st.phase.get() == MEASURE {
                st.measured_sent.set(st.measured_sent.get() + 1);
            }
        }
        let text = s.recv().await?;
        if !is_event(&text, EVENT) {
            continue;
        }
        let m = Message::parse(&text)?;
        let body: Option<Body> = m.data_text().and_then(|d| serde_json::from_str(&d).ok());
        let Some(body) = body.filter(|b| b.s < st.sent.len() && b.s != i) else {
            st.wrong.set(st.wrong.get() + 1);
            keep_error(
                &st.errors,
                format!("member {i}: unexpected {}", preview(&text)),
            );
            continue;
        };
        let next = &st.next[i][body.s];
        if body.n != next.get() || m.channel.as_deref() != Some(o.channel.as_str()) {
            st.wrong.set(st.wrong.get() + 1);
            keep_error(
                &st.errors,
                format!(
                    "member {i} expected event {} of member {}, got {}",
                    next.get(),
                    body.s,
                    preview(&text)
                ),
            );
        }
        next.set(body.n + 1);
        if st.phase.get() == MEASURE {
            st.measured_deliveries.set(st.measured_deliveries.get() + 1);
        }
    }
}
