//! Property tests for the pure Redlock arithmetic in `redquorum::quorum`
//! (docs/design.md §3). No I/O; every property is checked against an independent
//! reference computed here, so a wrong constant or comparison in `src/proto/quorum.rs`
//! makes a test fail.
//!
//! What is proved (exhaustively where the space is small, by proptest beyond):
//!
//! - **Quorums intersect**: for N = 1..=9 any two node sets of size ≥ Q(N)
//!   share a node, and Q(N) is the smallest size with that property (two
//!   disjoint sets of size Q(N) − 1 always fit in N). A failed minority of
//!   ⌊(N − 1)/2⌋ nodes still leaves a quorum alive.
//! - **`Round` decides correctly and early**: for every order of every vote
//!   vector (all 2^N sequences for N ≤ 12, every node outcome × every node
//!   permutation for N ≤ 6, random shuffles for N ≤ 9) the first non-`Pending`
//!   decision equals the decision from the full count (Granted iff
//!   yes ≥ Q), it is reached exactly when yes reaches Q or no reaches
//!   N − Q + 1, it never changes, and votes beyond N are ignored.
//! - **Termination**: after N votes the decision is never `Pending`, for odd
//!   and even N; `Count::new(0)` is `Refused`.
//! - **Drift / validity / remaining**: never panic for any input (including
//!   NaN, ±∞, negative factors, `u64::MAX` TTLs, `Duration::MAX`), drift ≥ 2 ms,
//!   validity ∈ (0, ttl − drift], `remaining` is whole milliseconds, rounded
//!   down, never negative, never more than what is left.
//! - **Conservative rounding**: for factors k/1000 and TTLs ≤ `MAX_TTL_MS`,
//!   drift ≥ ttl·k/1000 + 2 ms in exact rational arithmetic (and at most 1 ms
//!   more than the exact ceiling).
//! - **Node timeout**: ≤ validity, ≥ 1 ms unless validity < 1 ms, ≤ the
//!   configured timeout, and by default `min(50 ms, ttl / 20)` clamped.
//!
//! The two tests at the end are regression tests for corners that were once
//! not conservative: a drift computed in floating point could come out 1 ms
//! short for large products, and `validity` accepted TTLs above `MAX_TTL_MS`.

mod validity;

use std::time::Duration;

use proptest::prelude::*;
use redquorum::internals::{Count, DRIFT_FLOOR_MS, Decision, Vote, node_timeout};
use redquorum::quorum::{DEFAULT_NODE_TIMEOUT, MAX_TTL_MS, drift, quorum, remaining, validity};

const MS: Duration = Duration::from_millis(1);

// ---------------------------------------------------------------------------
// Reference helpers (independent of the code under test)
// ---------------------------------------------------------------------------

/// Majority by definition: the smallest k with 2k > n.
fn reference_quorum(n: usize) -> usize {
    (0..=n + 1).find(|k| 2 * k > n).unwrap()
}

/// The decision from the full count of a complete round.
fn full_count_decision(n: usize, votes: &[Vote]) -> Decision {
    if n == 0 {
        return Decision::Refused;
    }
    let yes = votes.iter().take(n).filter(|v| **v == Vote::Yes).count();
    if yes >= reference_quorum(n) {
        Decision::Granted
    } else {
        Decision::Refused
    }
}

/// Feeds `votes` (exactly `n` of them) followed by `extra` to a fresh round and
/// checks every step against the reference: `Pending` until the earliest
/// decisive vote, then the full-count decision forever, extra votes ignored.
fn check_round(n: usize, votes: &[Vote], extra: &[Vote]) -> Result<(), TestCaseError> {
    assert_eq!(votes.len(), n);
    let q = reference_quorum(n);
    let expected = full_count_decision(n, votes);
    let mut round = Count::new(n);
    prop_assert_eq!(round.decision(), Decision::Pending);
    prop_assert_eq!(round.nodes(), n);
    let (mut yes, mut no) = (0usize, 0usize);
    let mut first_decision: Option<(usize, Decision)> = None;
    for (i, &vote) in votes.iter().enumerate() {
        match vote {
            Vote::Yes => yes += 1,
            Vote::No => no += 1,
        }
        let got = round.record(vote);
        prop_assert_eq!(got, round.decision());
        prop_assert_eq!((round.yes(), round.no()), (yes, no));
        prop_assert_eq!(round.pending(), n - yes - no);
        // The earliest moment: granted exactly when yes reaches Q, refused
        // exactly when no reaches N − Q + 1, whichever comes first.
        let should_be = match first_decision {
            Some((_, d)) => d,
            None if yes == q => Decision::Granted,
            None if no == n - q + 1 => Decision::Refused,
            None => Decision::Pending,
        };
        prop_assert_eq!(
            got,
            should_be,
            "n={} votes={:?} step={} yes={} no={}",
            n,
            votes,
            i,
            yes,
            no
        );
        if first_decision.is_none() && got != Decision::Pending {
            first_decision = Some((i, got));
        }
    }
    // Termination and agreement with the full count.
    let (_, first) = first_decision.expect("a complete round must decide");
    prop_assert_eq!(first, expected, "n={} votes={:?}", n, votes);
    prop_assert_eq!(round.pending(), 0);
    // Votes beyond n change nothing.
    let before = round.clone();
    for &vote in extra {
        prop_assert_eq!(round.record(vote), expected);
        prop_assert_eq!(&round, &before);
    }
    Ok(())
}

fn votes_from_mask(n: usize, mask: u32) -> Vec<Vote> {
    (0..n)
        .map(|i| {
            if mask >> i & 1 == 1 {
                Vote::Yes
            } else {
                Vote::No
            }
        })
        .collect()
}

/// All permutations of `0..n` (Heap's algorithm).
fn permutations(n: usize) -> Vec<Vec<usize>> {
    fn heap(k: usize, a: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if k <= 1 {
            out.push(a.clone());
            return;
        }
        for i in 0..k - 1 {
            heap(k - 1, a, out);
            if k.is_multiple_of(2) {
                a.swap(i, k - 1);
            } else {
                a.swap(0, k - 1);
            }
        }
        heap(k - 1, a, out);
    }
    let mut out = Vec::new();
    heap(n, &mut (0..n).collect(), &mut out);
    out
}

/// Adds bits to `mask` (within `n` bits), scanning from bit `start`, until it
/// has at least `size` members.
fn pad_mask(n: usize, mut mask: u32, size: usize, start: usize) -> u32 {
    let mut i = start;
    while (mask.count_ones() as usize) < size {
        mask |= 1 << (i % n);
        i += 1;
    }
    mask
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

// ---------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------

fn any_vote() -> impl Strategy<Value = Vote> {
    prop_oneof![Just(Vote::Yes), Just(Vote::No)]
}

/// TTLs over the whole u64 range, weighted towards the edges.
fn any_ttl() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        0u64..=20,
        0u64..=1_000,
        1_000u64..=10_000_000,
        MAX_TTL_MS - 1_000..=MAX_TTL_MS + 1_000,
        u64::MAX - 1_000..=u64::MAX,
    ]
}

/// Every kind of f64: NaN, ±∞, ±0, subnormals, huge, and ordinary factors.
fn any_factor() -> impl Strategy<Value = f64> {
    prop_oneof![
        proptest::num::f64::ANY,
        0.0f64..1.0,
        -1.0f64..2.0,
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(-0.0),
        Just(f64::MAX),
        Just(f64::MIN_POSITIVE),
        Just(0.01),
    ]
}

fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        (0u64..100_000_000_000).prop_map(Duration::from_nanos),
        (0u64..1_000_000).prop_map(Duration::from_millis),
        Just(Duration::ZERO),
        Just(Duration::MAX),
        Just(MS),
    ]
}

// ---------------------------------------------------------------------------
// Quorum intersection
// ---------------------------------------------------------------------------

#[test]
fn quorum_matches_majority_definition() {
    for n in 0..=1_000 {
        assert_eq!(quorum(n), reference_quorum(n), "n = {n}");
    }
}

#[test]
fn quorums_intersect_exhaustively_up_to_9_nodes() {
    for n in 1..=9usize {
        let q = quorum(n);
        let quorums: Vec<u32> = (0u32..1 << n)
            .filter(|m| m.count_ones() as usize >= q)
            .collect();
        for &a in &quorums {
            for &b in &quorums {
                assert_ne!(a & b, 0, "n={n} q={q}: {a:#b} and {b:#b} are disjoint");
            }
        }
    }
}

#[test]
fn quorum_is_the_smallest_intersecting_size() {
    for n in 1..=64usize {
        let q = quorum(n);
        // Two disjoint sets of size Q − 1 fit in N: Q − 1 is too small.
        assert!(2 * (q - 1) <= n, "n={n} q={q}");
        // And Q itself is not larger than N, so a quorum exists at all.
        assert!(q <= n, "n={n} q={q}");
        // A failed minority of ⌊(N−1)/2⌋ nodes still leaves a quorum alive.
        assert!(n - (n - 1) / 2 >= q, "n={n} q={q}");
    }
    // Concretely for N ≤ 9: the low Q−1 bits and the next Q−1 bits.
    for n in 2..=9usize {
        let k = quorum(n) - 1;
        let a: u32 = (1 << k) - 1;
        let b: u32 = a << k;
        assert!(b < 1 << n, "n={n}: two disjoint sets of size {k} must fit");
        assert_eq!(a & b, 0);
        assert_eq!(a.count_ones() as usize, k);
        assert_eq!(b.count_ones() as usize, k);
    }
}

proptest! {
    #[test]
    fn any_two_quorums_intersect(
        n in 1usize..=9,
        a in any::<u32>(),
        b in any::<u32>(),
        sa in 0usize..9,
        sb in 0usize..9,
        extra_a in 0usize..=9,
        extra_b in 0usize..=9,
    ) {
        let q = quorum(n);
        let all = (1u32 << n) - 1;
        // Sizes anywhere from Q to N, built from random masks.
        let a = pad_mask(n, a & all, (q + extra_a).min(n), sa);
        let b = pad_mask(n, b & all, (q + extra_b).min(n), sb);
        prop_assert!(a.count_ones() as usize >= q && b.count_ones() as usize >= q);
        prop_assert_ne!(a & b, 0, "n={} q={} a={:#b} b={:#b}", n, q, a, b);
    }

    #[test]
    fn below_quorum_a_disjoint_set_of_the_same_size_exists(
        n in 2usize..=9,
        a in any::<u32>(),
        start in 0usize..9,
    ) {
        // Any set of size Q − 1 leaves at least Q − 1 nodes outside it.
        let q = quorum(n);
        let all = (1u32 << n) - 1;
        let mut a = a & all;
        while a.count_ones() as usize > q - 1 {
            a &= a - 1; // drop the lowest member
        }
        let a = pad_mask(n, a, q - 1, start);
        prop_assert_eq!(a.count_ones() as usize, q - 1);
        prop_assert!((all & !a).count_ones() as usize >= q - 1, "n={} a={:#b}", n, a);
    }
}

// ---------------------------------------------------------------------------
// Round: early decision, earliest moment, termination
// ---------------------------------------------------------------------------

#[test]
fn round_over_zero_nodes_is_refused() {
    let mut round = Count::new(0);
    assert_eq!(round.decision(), Decision::Refused);
    assert_eq!(round.record(Vote::Yes), Decision::Refused);
    assert_eq!(round.record(Vote::No), Decision::Refused);
    assert_eq!((round.yes(), round.no(), round.pending()), (0, 0, 0));
}

/// Round only sees the sequence of votes, so all 2^N sequences cover every
/// vote vector in every order.
#[test]
fn round_exhaustive_all_vote_sequences_up_to_12_nodes() {
    let extra = [Vote::Yes, Vote::No, Vote::Yes, Vote::Yes, Vote::No];
    for n in 1..=12usize {
        for mask in 0u32..1 << n {
            check_round(n, &votes_from_mask(n, mask), &extra).unwrap();
        }
    }
}

/// The same, phrased as the coordinator sees it: each node has an outcome and
/// the replies arrive in any order of the nodes.
#[test]
fn round_exhaustive_outcomes_times_arrival_orders_up_to_6_nodes() {
    for n in 1..=6usize {
        let perms = permutations(n);
        for outcome in 0u32..1 << n {
            let by_node = votes_from_mask(n, outcome);
            for perm in &perms {
                let arrival: Vec<Vote> = perm.iter().map(|&i| by_node[i]).collect();
                check_round(n, &arrival, &[Vote::No, Vote::Yes]).unwrap();
            }
        }
    }
}

#[test]
fn round_granted_and_refused_at_exact_thresholds() {
    for n in 1..=50usize {
        let q = quorum(n);
        // All yes: granted exactly at vote Q.
        let mut r = Count::new(n);
        for i in 1..=n {
            let d = r.record(Vote::Yes);
            assert_eq!(d == Decision::Granted, i >= q, "n={n} yes#{i}");
        }
        // All no: refused exactly at vote N − Q + 1.
        let mut r = Count::new(n);
        for i in 1..=n {
            let d = r.record(Vote::No);
            assert_eq!(d == Decision::Refused, i > n - q, "n={n} no#{i}");
        }
        // Q − 1 yes then the rest no: pending until refused; never granted.
        let mut r = Count::new(n);
        for _ in 0..q - 1 {
            assert_eq!(r.record(Vote::Yes), Decision::Pending, "n={n}");
        }
        for i in 1..=n - (q - 1) {
            let d = r.record(Vote::No);
            assert_eq!(d == Decision::Refused, i > n - q, "n={n}");
            assert_ne!(d, Decision::Granted);
        }
    }
}

proptest! {
    #[test]
    fn round_first_decision_equals_full_count_in_any_order(
        (n, arrival) in (1usize..=9).prop_flat_map(|n| {
            (Just(n), proptest::collection::vec(any_vote(), n).prop_shuffle())
        }),
        extra in proptest::collection::vec(any_vote(), 0..8),
    ) {
        check_round(n, &arrival, &extra)?;
    }

    #[test]
    fn round_decides_at_the_earliest_moment(
        (n, votes) in (1usize..=9).prop_flat_map(|n| {
            (Just(n), proptest::collection::vec(any_vote(), n))
        }),
    ) {
        let q = quorum(n);
        let mut round = Count::new(n);
        let (mut yes, mut no) = (0, 0);
        let mut decided = false;
        for vote in votes {
            let was_pending = round.decision() == Decision::Pending;
            let d = round.record(vote);
            if vote == Vote::Yes { yes += 1 } else { no += 1 }
            if was_pending {
                // The vote that makes yes == Q grants; the one that makes
                // no == N − Q + 1 refuses; nothing else decides.
                let expected = if yes == q {
                    Decision::Granted
                } else if no == n - q + 1 {
                    Decision::Refused
                } else {
                    Decision::Pending
                };
                prop_assert_eq!(d, expected, "n={} yes={} no={}", n, yes, no);
                decided |= d != Decision::Pending;
            }
        }
        prop_assert!(decided);
    }

    #[test]
    fn every_sequence_terminates_odd_and_even(
        (n, votes) in (1usize..=200).prop_flat_map(|n| {
            (Just(n), proptest::collection::vec(any_vote(), n))
        }),
    ) {
        let mut round = Count::new(n);
        let mut last = Decision::Pending;
        for vote in votes {
            let d = round.record(vote);
            // Once decided, never changes.
            if last != Decision::Pending {
                prop_assert_eq!(d, last);
            }
            last = d;
        }
        prop_assert_ne!(last, Decision::Pending, "n={} never decided", n);
        prop_assert_eq!(last, if round.yes() >= quorum(n) {
            Decision::Granted
        } else {
            Decision::Refused
        });
    }
}

// ---------------------------------------------------------------------------
// drift / validity / remaining
// ---------------------------------------------------------------------------
