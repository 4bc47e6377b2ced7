//! `storm`: C connected clients send `pusher:subscribe` to one presence
//! channel at the same moment, each as its own user (`u0`…). Measured from
//! the first subscribe until every client holds the whole member list (the
//! users its `subscription_succeeded` lists, plus those `member_added`
//! names after it, are all C): the wall time and the server's CPU, with the
//! time until the last `subscription_succeeded` on the way. A member that
//! never reaches a client is missing: the run fails and says how many.

use super::socket::{is_event, subscribe_presence, Socket};
use super::{keep_error, open_many, per, server_cpu_ns, Options, DRAIN};
use serde_json::{json, Value};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

struct State {
    subscribed: Cell<usize>,
    /// Users each client knows (while it runs): what is missing at the end.
    known: Vec<Cell<usize>>,
    complete: Cell<usize>,
    /// When the last subscription_succeeded arrived.
    last_subscribed: Cell<Option<Instant>>,
    errors: RefCell<Vec<String>>,
}

/// The users a message names: every `"u<digits>"` (escaped or not) in it,
/// as indices. A `subscription_succeeded` names each member in its `ids`
/// and its `hash`, a member event its one user; nothing else in these
/// messages has that shape (the channel is `presence-…`, user info `{}`),
/// so the member list is read without parsing it.
pub fn user_indices(text: &[u8]) -> impl Iterator<Item = usize> + '_ {
    (1..text.len()).filter_map(move |i| {
        if text[i] != b'u' || text[i - 1] != b'"' {
            return None;
        }
        let digits = text[i + 1..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        let end = i + 1 + digits;
        if digits == 0 || !matches!(text.get(end), Some(b'"') | Some(b'\\')) {
            return None;
        }
        std::str::from_utf8(&text[i + 1..end]).ok()?.parse().ok()
    })
}

pub async fn run(o: Rc<Options>) -> Result<Value, String> {
    let c = o.connections.max(1);
    let clients = open_many(&o, c, None).await?;
    let st = Rc::new(State {
        subscribed: Cell::new(0),
        known: (0..c).map(|_| Cell::new(0)).collect(),
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
    let missing: usize = st.known.iter().map(|k| c.saturating_sub(k.get())).sum();
    let ok = st.complete.get() == c && errors.is_empty();
    println!(
        "pusher storm: {} of {c} subscribed to {} (last at {:.3} s), {} saw all {c} members after {secs:.3} s; server CPU {:.3} s",
        st.subscribed.get(),
        o.channel,
        sub_secs.unwrap_or(f64::NAN),
        st.complete.get(),
        cpu.map(|n| n as f64 / 1e9).unwrap_or(f64::NAN),
    );
    if missing > 0 {
        println!("  {missing} member notifications missing (summed over clients)");
    }
    for e in &errors {
        println!("  error: {e}");
    }
    Ok(json!({
        "mode": "pusher-storm",
        "connections": c,
        "subscribed": st.subscribed.get(),
        "complete": st.complete.get(),
        "missing_members": missing,
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
    let mut members = vec![false; c];
    let mut known = 0usize;
    let mut note = |text: &[u8], present: bool| -> Result<usize, String> {
        for u in user_indices(text) {
            let slot = members
                .get_mut(u)
                .ok_or_else(|| format!("unknown user u{u}"))?;
            if *slot != present {
                *slot = present;
                known = if present { known + 1 } else { known - 1 };
            }
        }
        Ok(known)
    };
    st.known[i].set(note(&first, true)?);
    st.subscribed.set(st.subscribed.get() + 1);
    st.last_subscribed.set(Some(Instant::now()));
    while st.known[i].get() < c {
        let text = s.recv().await?;
        if is_event(&text, "pusher_internal:member_added") {
            st.known[i].set(note(&text, true)?);
        } else if is_event(&text, "pusher_internal:member_removed") {
            st.known[i].set(note(&text, false)?);
        }
    }
    st.complete.set(st.complete.get() + 1);
    // Stay connected (a member leaving would change the others' counts).
    loop {
        s.recv().await?;
    }
}
