//! What a schedule is made of: which assumption it breaks ([`Control`]),
//! which kind of lock its clients take ([`Kind`]) and the parameters drawn
//! from its seed ([`Plan`], [`plan`]).

use std::time::Duration;

use rand::RngExt;
use rand::rngs::StdRng;

use crate::NODES;
use crate::net::Net;

/// Which safety assumption a schedule breaks, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Every assumption holds: the checker must find nothing.
    None,
    /// Node clocks run 1.5× fast with drift factor 0.01.
    FastClocks,
    /// Restarted nodes come back without their keys, within the TTL.
    EmptyRestarts,
    /// Fenced locks only; restarted nodes keep their lock keys but lose their
    /// fencing counters (counters that are not durable) and their clocks
    /// start again from zero (the clock floor's assumption broken).
    LostCounters,
    /// The transport loses 5 % of requests: acquires that never reach a node
    /// that never failed.
    LostRequests,
    /// Reentrant locks, often nested; a node's reentrant release gives back
    /// two holds (the bug a cancelled reentrant release once had).
    DoubleRelease,
    /// Multi-resource locks; a node's multi-resource acquire is not
    /// all-or-nothing (sets what is free and answers done).
    PartialMany,
    /// The client's bound on calls in flight is 1024 while the checker
    /// expects 1: shows the in-flight checker can fail.
    LooseBound,
    /// Semaphores; the clients open 3 permits while the fleet agreed on 2
    /// (the checker's limit): shows the permit checker can fail.
    ExtraPermit,
    /// Read/write locks; a node's write acquire ignores live readers (sets
    /// the writer key whenever no writer stands): shows the read/write
    /// checker can fail.
    WriterIgnoresReaders,
    /// Elections; restarted nodes come back without their keys within the
    /// TTL: two leaders at once, which the overlap checker must see.
    LeadersOnEmptyRestarts,
    /// Elections; restarted nodes lose their fencing counters and their
    /// clocks start again from zero: a later leader's term no larger than
    /// an earlier one's, which the fencing checker must see.
    TermsOnLostCounters,
    /// Not a negative control: restarted nodes come back without their
    /// keys within the TTL, as under [`EmptyRestarts`](Control::EmptyRestarts),
    /// but quarantined for the longest TTL (the delayed restart, kept by
    /// the clients): exclusion must hold again, whatever the lock kind.
    QuarantinedRestarts,
    /// Node clocks jump forward past the TTL (a wrong NTP step, a VM
    /// restored from a snapshot), several times on every node: keys
    /// expire at once on a majority while their holder counts on them.
    ClockSteps,
}

/// Which kind of lock a schedule's clients take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `try_lock`.
    Plain,
    /// `LockOptions::fenced`.
    Fenced,
    /// `ReentrantLock`, sometimes a second hold inside the first.
    Reentrant,
    /// `lock_many` over the resource and a second one, which other clients
    /// sometimes take alone.
    Many,
    /// `run_with`: work that runs while a lease is extended every third of
    /// the TTL, for longer than the TTL.
    Lease,
    /// A semaphore of [`PERMITS`] permits (`try_acquire`, or waiting with
    /// `acquire_with`): at most that many valid holders at once.
    Semaphore,
    /// Read/write locks on the resource: each round a read lock or, with
    /// [`WRITE_P`], a write lock (`RwLock::try_read`/`RwLock::try_write`, or
    /// waiting with `RwLock::read_with`/`RwLock::write_with`): readers together,
    /// a writer alone.
    ReadWrite,
    /// An election on the resource: each round a candidate campaigns
    /// (`Election::lead`, waiting in line) and leads for a while; its term
    /// is the window's fencing token.
    Election,
}

/// How often a client of a read/write schedule takes a write lock.
pub const WRITE_P: f64 = 0.35;

/// The permits of a semaphore schedule.
pub const PERMITS: u32 = 2;

impl Control {
    pub fn name(self) -> &'static str {
        match self {
            Control::None => "none",
            Control::FastClocks => "fast-clocks",
            Control::EmptyRestarts => "empty-restarts",
            Control::LostCounters => "lost-counters",
            Control::LostRequests => "lost-requests",
            Control::DoubleRelease => "double-release",
            Control::PartialMany => "partial-many",
            Control::LooseBound => "loose-bound",
            Control::ExtraPermit => "extra-permit",
            Control::WriterIgnoresReaders => "writer-ignores-readers",
            Control::LeadersOnEmptyRestarts => "leaders-on-empty-restarts",
            Control::TermsOnLostCounters => "terms-on-lost-counters",
            Control::QuarantinedRestarts => "quarantined-restarts",
            Control::ClockSteps => "clock-steps",
        }
    }

    pub fn parse(s: &str) -> Control {
        match s {
            "" | "none" => Control::None,
            "fast-clocks" => Control::FastClocks,
            "empty-restarts" => Control::EmptyRestarts,
            "lost-counters" => Control::LostCounters,
            "lost-requests" => Control::LostRequests,
            "double-release" => Control::DoubleRelease,
            "partial-many" => Control::PartialMany,
            "loose-bound" => Control::LooseBound,
            "extra-permit" => Control::ExtraPermit,
            "writer-ignores-readers" => Control::WriterIgnoresReaders,
            "leaders-on-empty-restarts" => Control::LeadersOnEmptyRestarts,
            "terms-on-lost-counters" => Control::TermsOnLostCounters,
            "quarantined-restarts" => Control::QuarantinedRestarts,
            "clock-steps" => Control::ClockSteps,
            other => panic!("REDQUORUM_SIM_CONTROL: unknown control {other:?}"),
        }
    }

    /// The seed's salt, so a control's schedules differ from the plain ones.
    pub fn salt(self) -> u64 {
        match self {
            Control::None => 0,
            Control::FastClocks => 0x1111_1111_0000_0000,
            Control::EmptyRestarts => 0x2222_2222_0000_0000,
            Control::LostCounters => 0x3333_3333_0000_0000,
            Control::LostRequests => 0x4444_4444_0000_0000,
            Control::DoubleRelease => 0x5555_5555_0000_0000,
            Control::PartialMany => 0x6666_6666_0000_0000,
            Control::LooseBound => 0x7777_7777_0000_0000,
            Control::ExtraPermit => 0x8888_8888_0000_0000,
            Control::WriterIgnoresReaders => 0x9999_9999_0000_0000,
            Control::LeadersOnEmptyRestarts => 0xaaaa_aaaa_0000_0000,
            Control::TermsOnLostCounters => 0xbbbb_bbbb_0000_0000,
            Control::QuarantinedRestarts => 0xcccc_cccc_0000_0000,
            Control::ClockSteps => 0xdddd_dddd_0000_0000,
        }
    }
}

/// The parameters of one schedule, drawn from its seed.
#[derive(Debug, Clone)]
pub struct Plan {
    pub clients: usize,
    pub rounds: usize,
    pub ttl_ms: u64,
    pub factor: f64,
    pub node_timeout: Option<Duration>,
    pub rates: [f64; NODES],
    pub net: Net,
    /// How many faults each node suffers, one after another.
    pub faults: [u32; NODES],
    /// Restarts lose the node's keys (negative control only).
    pub wipe: bool,
    /// Restarts lose the node's fencing counters (negative control only).
    pub forget_counters: bool,
    /// Every fault steps the node's clock forward past the TTL (negative
    /// control only); otherwise some faults step it back, which only
    /// makes keys live longer.
    pub steps_forward: bool,
    /// The kind of lock every client takes.
    pub kind: Kind,
    /// The permits the clients open a semaphore with (the checker allows
    /// [`PERMITS`]).
    pub permits: u32,
    /// The bound on calls in flight per node (`Builder::max_in_flight`)…
    pub max_in_flight: usize,
    /// …and the one the checker holds every link to (the same, except in
    /// the negative control that shows the checker can fail).
    pub checked_in_flight: usize,
    /// How often a reentrant holder takes a second hold inside the first.
    pub nest_p: f64,
    /// The probability that a client drops its acquire or release future
    /// at a random point (cancellation).
    pub cancel_p: f64,
    /// A client pauses up to this long after a failed round.
    pub max_pause: Duration,
}

pub fn plan(r: &mut StdRng, control: Control) -> Plan {
    {
        let factor = match control {
            Control::FastClocks => 0.01,
            _ => [0.01, 0.01, 0.02, 0.05][r.random_range(0..4)],
        };
        let ttl_ms = r.random_range(20..=300);
        let mut rates = [1.0; NODES];
        for rate in &mut rates {
            *rate = match control {
                Control::FastClocks => 1.5,
                // Within the bound: a node clock may run up to `factor` fast
                // (or slow, which only makes keys live longer).
                _ => r.random_range(1.0 - factor..=1.0 + factor),
            };
        }
        let mut faults = [0; NODES];
        for f in &mut faults {
            *f = match control {
                // Enough restarts that some land within one lease's
                // extension interval: an extension restores a key a node
                // lost (docs/design.md §4), so one restart alone is healed
                // before another holder can use it.
                Control::EmptyRestarts
                | Control::LostCounters
                | Control::LeadersOnEmptyRestarts
                | Control::TermsOnLostCounters
                | Control::QuarantinedRestarts
                | Control::ClockSteps => r.random_range(3..=8),
                _ => r.random_range(0..=3),
            };
        }
        let fast_us = r.random_range(0..=3_000);
        // Above what a schedule's calls reach: a call refused for the bound
        // is never sent, and would (rightly) leave keys to their TTL, which
        // the stricter leftover checker here does not excuse.
        let in_flight = 1024;
        Plan {
            clients: r.random_range(2..=7),
            rounds: r.random_range(4..=10),
            ttl_ms,
            factor,
            node_timeout: if r.random_bool(0.5) {
                None
            } else {
                Some(Duration::from_millis(r.random_range(1..=ttl_ms / 2)))
            },
            rates,
            net: Net {
                fast_us,
                slow_p: r.random_range(0.0..=0.1),
                slow_us: r.random_range(fast_us..=2 * ttl_ms * 1_000),
                loss_p: r.random_range(0.0..=0.05),
                request_loss_p: if control == Control::LostRequests {
                    0.05
                } else {
                    0.0
                },
            },
            faults,
            wipe: matches!(
                control,
                Control::EmptyRestarts
                    | Control::LeadersOnEmptyRestarts
                    | Control::QuarantinedRestarts
            ),
            forget_counters: matches!(
                control,
                Control::LostCounters | Control::TermsOnLostCounters
            ),
            steps_forward: control == Control::ClockSteps,
            max_pause: Duration::from_millis(r.random_range(1..=ttl_ms / 2)),
            kind: match control {
                Control::LostCounters => Kind::Fenced,
                Control::DoubleRelease => Kind::Reentrant,
                Control::PartialMany => Kind::Many,
                Control::ExtraPermit => Kind::Semaphore,
                Control::WriterIgnoresReaders => Kind::ReadWrite,
                Control::LeadersOnEmptyRestarts | Control::TermsOnLostCounters => Kind::Election,
                _ => [
                    Kind::Plain,
                    Kind::Fenced,
                    Kind::Reentrant,
                    Kind::Many,
                    Kind::Lease,
                    Kind::Semaphore,
                    Kind::ReadWrite,
                    Kind::Election,
                ][r.random_range(0..8)],
            },
            permits: if control == Control::ExtraPermit {
                PERMITS + 1
            } else {
                PERMITS
            },
            max_in_flight: if control == Control::LooseBound {
                1024
            } else {
                in_flight
            },
            checked_in_flight: if control == Control::LooseBound {
                1
            } else {
                in_flight
            },
            nest_p: if control == Control::DoubleRelease {
                0.8
            } else {
                0.3
            },
            cancel_p: r.random_range(0.0..=0.3),
        }
    }
}
