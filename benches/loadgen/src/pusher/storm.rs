//! `storm`: C connected clients send `pusher:subscribe` to one presence
//! channel at the same moment, each as its own user. Measured from the
//! first subscribe until every client holds the whole member list (its
//! `subscription_succeeded` count plus the `member_added` events after it
//! equal C): the wall time and the server's CPU, with the time until the
//! last `subscription_succeeded` on the way. Every member_added must arrive.

use super::socket::{is_event, subscribe_presence, Socket};
use super::{keep_error, open_many, per, server_cpu_ns, Options, DRAIN};
use serde_json::{json, Value};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

struct State {
    subscribed: Cell<usize>,
    complete: Cell<usize>,
    /// When the last subscription_succeeded arrived.
    last_subscribed: Cell<Option<Instant>>,
    errors: RefCell<Vec<String>>,
}

/// The member count a `subscription_succeeded` carries (`"count":N` in its
/// presence data, escaped or not), without parsing the member list.
pub fn presence_count(text: &[u8]) -> Option<usize> {
    let at = text.windows(5).position(|w| w == b"count")? + 5;
    let digits: String = text[at..]
        .iter()
        .skip_while(|b| !b.is_ascii_digit())
        .take_while(|b| b.is_ascii_digit())
        .map(|&b| b as char)
        .collect();
    digits.parse().ok()
}

pub async fn run(o: Rc<Options>) -> Result<Value, String> {
    let c = o.connections.max(1);
    let clients = open_many(&o, c, None).await?;
    let st = Rc::new(State {
        subscribed: Cell::new(0),
        complete: Cell::new(0),
        last_subscribed: Cell::new(None),
        errors: RefCell::new(Vec::new()),
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cpu0 = server_cpu_ns(&o.server_pids);
    let t0 = Instant::now();
    for (i, s) in clients.into_iter().enumerate() {
        let (st, o) = (st.clone(), o.clone());
        tokio::task::spawn_local(async move {
            if let Err(e) = member(i, s, c, &st, &o).await {
                keep_error(&st.errors, format!("client {i}: {e}"));
            }
        });
    }
    let deadline = t0 + DRAIN.max(o.duration);
    while st.complete.get() < c && Instant::now() < deadline && st.errors.borrow().is_empty() {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let secs = t0.elapsed().as_secs_f64();
    let cpu = cpu0
        .zip(server_cpu_ns(&o.server_pids))
        .map(|(a, b)| b.saturating_sub(a));
    let sub_secs = st.last_subscribed.get().map(|t| (t - t0).as_secs_f64());
    let errors = st.errors.borrow().clone();
    let ok = st.complete.get() == c && errors.is_empty();
    println!(
        "pusher storm: {} of {c} subscribed to {} (last at {:.3} s), {} saw all {c} members after {secs:.3} s; server CPU {:.3} s",
        st.subscribed.get(),
        o.channel,
        sub_secs.unwrap_or(f64::NAN),
        st.complete.get(),
        cpu.map(|n| n as f64 / 1e9).unwrap_or(f64::NAN),
    );
    for e in &errors {
        println!("  error: {e}");
    }
    Ok(json!({
        "mode": "pusher-storm",
        "connections": c,
        "subscribed": st.subscribed.get(),
        "complete": st.complete.get(),
        "subscribed_secs": sub_secs,
        "secs": secs,
        "server_cpu_s": cpu.map(|n| n as f64 / 1e9),
        "server_cpu_ns_per_subscription": per(cpu, c as u64),
        "errors": errors,
        "ok": ok,
    }))
}

/// One client: subscribe, then count members until it knows all `c`.
async fn member(i: usize, mut s: Socket, c: usize, st: &State, o: &Options) -> Result<(), String> {
    s.send(&subscribe_presence(
        &o.app(),
        &s.socket_id,
        &o.channel,
        &format!("u{i}"),
    ))
    .await?;
    let first = s.await_subscribed(&o.channel).await?;
    let mut known =
        presence_count(&first).ok_or("subscription_succeeded without a member count")?;
    st.subscribed.set(st.subscribed.get() + 1);
    st.last_subscribed.set(Some(Instant::now()));
    while known < c {
        let text = s.recv().await?;
        if is_event(&text, "pusher_internal:member_added") {
            known += 1;
        } else if is_event(&text, "pusher_internal:member_removed") {
            known = known.saturating_sub(1);
        }
    }
    if known > c {
        return Err(format!("knows {known} members of {c}"));
    }
    st.complete.set(st.complete.get() + 1);
    // Stay connected (a member leaving would change the others' counts).
    loop {
        s.recv().await?;
    }
}
