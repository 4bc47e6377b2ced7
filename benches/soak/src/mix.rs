//! What one cycle runs: the groups of sessions (route, load, message shapes),
//! all at the same time, one engine thread per group. The message templates
//! are built once per run and shared by every cycle.

use weir_load::conn::{self, Conn, Target};
use weir_load::engine::Load;
use weir_load::payload::{Expect, Source, Template};
use weir_load::ws::Rng;

/// One connection's messages (a relay pair: A's; B sends its own pattern back).
#[derive(Clone, Copy)]
pub enum Shape {
    /// A fixed pattern of `size` bytes with the sequence number in front.
    Pattern { size: usize, text: bool },
    /// `{"number": n}`, answered by the /json guest's rule.
    Json,
}

/// A group of sessions on one route with one load.
pub struct Spec {
    pub name: &'static str,
    pub path: &'static str,
    /// Served by a guest (left out with `--no-guest`).
    pub guest: bool,
    pub load: Load,
    /// One entry per connection (per pair for a relay).
    pub shapes: &'static [Shape],
}

const fn bin(size: usize) -> Shape {
    Shape::Pattern { size, text: false }
}

const fn text(size: usize) -> Shape {
    Shape::Pattern { size, text: true }
}

/// The workload of every cycle: small pipelined messages, 1 KiB messages,
/// 128 and 256 KiB messages (several frames' worth of socket buffer, so the
/// gateway's partial reads and writes are exercised), relay pairs and two
/// guest routes, text and binary mixed. 30 sessions.
pub const MIX: &[Spec] = &[
    Spec {
        name: "echo-64",
        path: "/echo",
        guest: false,
        load: Load::ReqResp { depth: 8 },
        shapes: &[
            bin(64),
            text(64),
            bin(64),
            text(64),
            bin(64),
            text(64),
            bin(64),
            text(64),
        ],
    },
    Spec {
        name: "echo-1k",
        path: "/echo",
        guest: false,
        load: Load::ReqResp { depth: 4 },
        shapes: &[bin(1024), text(1024), bin(1024), text(1024)],
    },
    Spec {
        name: "echo-large",
        path: "/echo",
        guest: false,
        load: Load::ReqResp { depth: 2 },
        shapes: &[
            bin(128 << 10),
            text(128 << 10),
            bin(256 << 10),
            text(256 << 10),
        ],
    },
    Spec {
        name: "relay",
        path: "/relay",
        guest: false,
        load: Load::Relay,
        shapes: &[bin(64), text(64), bin(1024), text(16 << 10)],
    },
    Spec {
        name: "plain",
        path: "/plain",
        guest: true,
        load: Load::ReqResp { depth: 4 },
        shapes: &[bin(64), text(64), bin(1024), text(1024)],
    },
    Spec {
        name: "json",
        path: "/json",
        guest: true,
        load: Load::ReqResp { depth: 4 },
        shapes: &[Shape::Json, Shape::Json],
    },
];

/// The specs a run uses, with their templates built.
pub struct Mix {
    pub groups: Vec<GroupPlan>,
}

/// How to open one group's connections.
pub struct GroupPlan {
    pub spec: &'static Spec,
    /// (source, expect) per connection, in opening order (relay: A, B, A, B ...).
    pub ends: Vec<(Source, Expect)>,
}

/// Relay directions use different patterns, so an echo cannot pass as a relay.
const SEED_FORWARD: u64 = 1;
const SEED_BACK: u64 = 2;

impl Mix {
    pub fn new(guest: bool) -> Mix {
        let groups = MIX
            .iter()
            .filter(|s| guest || !s.guest)
            .map(|spec| {
                let mut ends = Vec::new();
                for (i, shape) in spec.shapes.iter().enumerate() {
                    match (*shape, spec.load) {
                        (Shape::Pattern { size, text }, Load::Relay) => {
                            let a = Template::new(size, text, SEED_FORWARD);
                            let b = Template::new(size, text, SEED_BACK);
                            ends.push((Source::Pattern(a), Expect::Pattern(b)));
                            ends.push((Source::Pattern(b), Expect::Pattern(a)));
                        }
                        (Shape::Pattern { size, text }, _) => {
                            let t = Template::new(size, text, SEED_FORWARD);
                            ends.push((Source::Pattern(t), Expect::Pattern(t)));
                        }
                        (Shape::Json, _) => {
                            let base = i as u64 * 1_000_003;
                            ends.push((Source::Json { base }, Expect::Json { base }));
                        }
                    }
                }
                GroupPlan { spec, ends }
            })
            .collect();
        Mix { groups }
    }

    /// Connections a cycle opens.
    pub fn sessions(&self) -> usize {
        self.groups.iter().map(|g| g.ends.len()).sum()
    }
}

/// A group's open connections.
pub struct Group {
    pub spec: &'static Spec,
    pub conns: Vec<Conn>,
}

impl GroupPlan {
    /// Opens the group's connections one after the other (relay pairs form in
    /// arrival order). Stops at the first failure, returning what was opened.
    pub fn open(&self, addr: &str, rng: &mut Rng) -> (Group, Option<String>) {
        let target = Target::plain(addr, self.spec.path);
        let depth = match self.spec.load {
            Load::ReqResp { depth } => depth,
            _ => 1,
        };
        let mut conns = Vec::with_capacity(self.ends.len());
        for (i, &(src, exp)) in self.ends.iter().enumerate() {
            match conn::open(&target, rng) {
                Ok(s) => conns.push(Conn::new(s, src, exp, depth)),
                Err(e) => {
                    let why = format!("{} conn {i}: open {}: {e}", self.spec.name, self.spec.path);
                    return (
                        Group {
                            spec: self.spec,
                            conns,
                        },
                        Some(why),
                    );
                }
            }
        }
        (
            Group {
                spec: self.spec,
                conns,
            },
            None,
        )
    }
}

impl Group {
    /// The close code the server must end connection `i` with: a relay's B
    /// side is closed by the server (1001) when A leaves; the others answer
    /// our close 1000.
    pub fn closed_by_server(&self, i: usize) -> bool {
        matches!(self.spec.load, Load::Relay) && i % 2 == 1
    }
}
