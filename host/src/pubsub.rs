//! One topic namespace, shared by all workers: who is subscribed to what,
//! and delivery of a published frame to every subscriber's outbound queue.
//! Each route has a namespace of its own unless routes name a shared one
//! (`topics = "name"`, see `routes`): a guest cannot publish into another
//! route's sockets by using the same topic name.
//!
//! Publishing takes a read lock on the namespace; subscribe and unsubscribe
//! a write lock. Subscribers over their outbound budget are closed with 1008:
//! a fan-out never buffers without a bound.

use crate::reactor::outbound::Outbound;
use crate::ws::close;
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

type Subscribers = HashMap<u64, Arc<Outbound>>;

#[derive(Default)]
pub struct Topics {
    topics: RwLock<HashMap<String, Subscribers>>,
}

impl Topics {
    pub fn subscribe(&self, topic: &str, conn: u64, outbound: Arc<Outbound>) {
        let mut topics = self.topics.write().expect("topics lock");
        topics
            .entry(topic.to_string())
            .or_default()
            .insert(conn, outbound);
    }

    pub fn unsubscribe(&self, topic: &str, conn: u64) {
        let mut topics = self.topics.write().expect("topics lock");
        if let Some(subs) = topics.get_mut(topic) {
            subs.remove(&conn);
            if subs.is_empty() {
                topics.remove(topic);
            }
        }
    }

    /// Queues `frame` for every subscriber of `topic` except `exclude`;
    /// returns how many got it. A subscriber over budget is closed with 1008.
    pub fn publish(&self, topic: &str, frame: &Bytes, exclude: Option<u64>) -> usize {
        let topics = self.topics.read().expect("topics lock");
        let Some(subs) = topics.get(topic) else {
            return 0;
        };
        let mut delivered = 0;
        for (conn, out) in subs {
            if Some(*conn) == exclude {
                continue;
            }
            if out.over_budget() {
                out.close(close::POLICY_VIOLATION, "subscriber too slow");
                continue;
            }
            if out.send(frame.clone()) {
                delivered += 1;
            }
        }
        delivered
    }
}
