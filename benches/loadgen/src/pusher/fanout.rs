//! `fanout`: C subscribers of one public channel; an app server triggers
//! events through the signed HTTP API (`POST /apps/{id}/events`), at most
//! `window` events ahead of the slowest subscriber (and `rate` per second
//! if given). Every subscriber must receive every event, in order, with its
//! bytes: the figure is the server's CPU per delivered event.

use super::socket::{preview, Message, Socket};
use super::trigger::Trigger;
use super::{keep_error, measure, open_many, per, Options, DONE, DRAIN, MEASURE, WARMUP};
use serde_json::{json, Value};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// The event name triggered.
const EVENT: &str = "bench";

/// Event `seq`'s data: the sequence, zero-padded, then `x` up to `size` bytes.
pub fn payload(seq: u64, size: usize) -> String {
    let mut s = format!("{seq:012}");
    while s.len() < size {
        s.push('x');
    }
    s
}

struct State {
    phase: Cell<u8>,
    /// Events each subscriber has received (all verified).
    received: Vec<Cell<u64>>,
    triggered: Cell<u64>,
    measured_deliveries: Cell<u64>,
    measured_triggers: Cell<u64>,
    wrong: Cell<u64>,
    errors: RefCell<Vec<String>>,
    /// A subscriber received something: the trigger may be under its window.
    progress: Notify,
}

pub async fn run(o: Rc<Options>) -> Result<Value, String> {
    let c = o.connections.max(1);
    let subs = open_many(
        &o,
        c,
        Some(|o, _, _| {
            (
                super::socket::subscribe_public(&o.channel),
                o.channel.clone(),
            )
        }),
    )
    .await?;
    tokio::time::sleep(super::SETTLE).await;
    let st = Rc::new(State {
        phase: Cell::new(WARMUP),
        received: (0..c).map(|_| Cell::new(0)).collect(),
        triggered: Cell::new(0),
        measured_deliveries: Cell::new(0),
        measured_triggers: Cell::new(0),
        wrong: Cell::new(0),
        errors: RefCell::new(Vec::new()),
        progress: Notify::new(),
    });
    for (i, s) in subs.into_iter().enumerate() {
        let (st, o) = (st.clone(), o.clone());
        tokio::task::spawn_local(async move {
            if let Err(e) = subscriber(i, s, &st, &o).await {
                keep_error(&st.errors, format!("subscriber {i}: {e}"));
            }
        });
    }
    let mut api = Trigger::connect(o.addr, &o.app_id, &o.key, o.secret.as_bytes()).await?;
    {
        let (st, o) = (st.clone(), o.clone());
        tokio::task::spawn_local(async move {
            if let Err(e) = publisher(&mut api, &st, &o).await {
                keep_error(&st.errors, format!("trigger: {e}"));
            }
        });
    }
    let w = measure(&o, &st.phase).await;
    // Deliveries still on their way count; what never comes is lost.
    let deadline = Instant::now() + DRAIN;
    let all_in = || st.received.iter().all(|r| r.get() == st.triggered.get());
    while !all_in() && Instant::now() < deadline && st.errors.borrow().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let sent = st.triggered.get();
    let lost: u64 = st
        .received
        .iter()
        .map(|r| sent.saturating_sub(r.get()))
        .sum();
    let deliveries = st.measured_deliveries.get();
    let errors = st.errors.borrow().clone();
    let ok = lost == 0 && st.wrong.get() == 0 && errors.is_empty() && deliveries > 0;
    println!(
        "pusher fanout: {c} subscribers of {}, {} events triggered ({} in the window), {deliveries} deliveries in {:.2} s, lost {lost}, wrong {}",
        o.channel,
        sent,
        st.measured_triggers.get(),
        w.secs,
        st.wrong.get()
    );
    for e in &errors {
        println!("  error: {e}");
    }
    Ok(json!({
        "mode": "pusher-fanout",
        "connections": c,
        "secs": w.secs,
        "triggers": st.measured_triggers.get(),
        "msgs": deliveries,
        "msgs_per_s": deliveries as f64 / w.secs,
        "server_cpu_ns_per_msg": per(w.server_ns, deliveries),
        "server_cpu_ns_per_trigger": per(w.server_ns, st.measured_triggers.get()),
        "client_cpu_ns_per_msg": per(Some(w.client_ns), deliveries),
        "lost": lost,
        "wrong": st.wrong.get(),
        "errors": errors,
        "ok": ok,
    }))
}

/// Reads one subscriber's deliveries, checking each is the next event.
async fn subscriber(i: usize, mut s: Socket, st: &State, o: &Options) -> Result<(), String> {
    loop {
        let text = s.recv().await?;
        let m = Message::parse(&text)?;
        if m.event != EVENT {
            continue;
        }
        let n = st.received[i].get();
        let good = m.channel.as_deref() == Some(o.channel.as_str())
            && m.data_text().as_deref() == Some(payload(n, o.size).as_str());
        if !good {
            st.wrong.set(st.wrong.get() + 1);
            keep_error(
                &st.errors,
                format!("subscriber {i} expected event {n}, got {}", preview(&text)),
            );
        }
        st.received[i].set(n + 1);
        if st.phase.get() == MEASURE {
            st.measured_deliveries.set(st.measured_deliveries.get() + 1);
        }
        st.progress.notify_one();
    }
}

/// Triggers events until the window ends, `o.window` ahead of the slowest.
async fn publisher(api: &mut Trigger, st: &State, o: &Options) -> Result<(), String> {
    let t0 = Instant::now();
    while st.phase.get() != DONE {
        let sent = st.triggered.get();
        let slowest = st.received.iter().map(Cell::get).min().unwrap_or(0);
        if sent - slowest >= o.window.max(1) {
            let _ = tokio::time::timeout(Duration::from_millis(50), st.progress.notified()).await;
            continue;
        }
        if let Some(rate) = o.rate.filter(|&r| r > 0) {
            tokio::time::sleep_until(
                (t0 + Duration::from_secs_f64(sent as f64 / rate as f64)).into(),
            )
            .await;
        }
        let measured = st.phase.get() == MEASURE;
        api.trigger(&o.channel, EVENT, &payload(sent, o.size))
            .await?;
        st.triggered.set(sent + 1);
        if measured {
            st.measured_triggers.set(st.measured_triggers.get() + 1);
        }
    }
    Ok(())
}
