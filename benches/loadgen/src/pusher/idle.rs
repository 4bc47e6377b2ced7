//! `idle`: C connections, each subscribed to a public channel of
//! `room_size` (`{channel}-{i / room_size}`), then left alone: the server's
//! resident memory growth per idle subscribed connection (VmRSS of the
//! first `--server-pid`, read before the first connection and after the
//! last subscription is confirmed and `warmup` has passed).

use super::socket::subscribe_public;
use super::{open_many, Options};
use crate::sys;
use serde_json::{json, Value};
use std::rc::Rc;
use std::time::Instant;

pub async fn run(o: Rc<Options>) -> Result<Value, String> {
    let c = o.connections.max(1);
    let pid = o
        .server_pids
        .first()
        .copied()
        .ok_or("idle needs --server-pid")?;
    let before = sys::proc_rss_kib(pid).map_err(|e| format!("RSS of {pid}: {e}"))?;
    let t0 = Instant::now();
    let held = open_many(
        &o,
        c,
        Some(|o, i, _| {
            let ch = format!("{}-{}", o.channel, i / o.room_size.max(1));
            (subscribe_public(&ch), ch)
        }),
    )
    .await?;
    let opened_secs = t0.elapsed().as_secs_f64();
    // Let the server settle (buffers it frees after the handshakes).
    tokio::time::sleep(o.warmup).await;
    let after = sys::proc_rss_kib(pid).map_err(|e| format!("RSS of {pid}: {e}"))?;
    let per_conn = (after as f64 - before as f64) * 1024.0 / held.len() as f64;
    println!(
        "pusher idle: {} connections subscribed in {opened_secs:.2} s ({} per channel); server RSS {before} KiB → {after} KiB: {per_conn:.0} bytes per connection",
        held.len(),
        o.room_size
    );
    Ok(json!({
        "mode": "pusher-idle",
        "connections": held.len(),
        "room_size": o.room_size,
        "rss_before_kib": before,
        "rss_after_kib": after,
        "bytes_per_conn": per_conn,
        "ok": held.len() == c,
    }))
}
