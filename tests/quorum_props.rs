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

use std::time::Duration;

use proptest::prelude::*;
use redquorum::quorum::{
    Count, DEFAULT_NODE_TIMEOUT, DRIFT_FLOOR_MS, Decision, MAX_TTL_MS, Vote, drift, node_timeout,
    quorum, remaining, validity,
};

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

#[test]
fn validity_examples_and_empty_windows() {
    assert_eq!(drift(10_000, 0.01), Duration::from_millis(102));
    assert_eq!(drift(1, 0.01), Duration::from_millis(3));
    assert_eq!(drift(0, 0.5), Duration::from_millis(2));
    assert_eq!(validity(10_000, 0.01), Some(Duration::from_millis(9_898)));
    // ttl == drift leaves nothing: None, never Some(0).
    assert_eq!(validity(2, 0.0), None);
    assert_eq!(validity(3, 0.01), None);
    assert_eq!(validity(0, 0.0), None);
    assert_eq!(validity(3, 0.0), Some(MS));
    assert_eq!(validity(4, 0.01), Some(MS));
    for ttl in 0..=2_000u64 {
        for k in [0u64, 1, 10, 100, 500, 999] {
            let f = k as f64 / 1000.0;
            if u128::from(ttl) <= ms(drift(ttl, f)) {
                assert_eq!(validity(ttl, f), None, "ttl={ttl} f={f}");
            } else {
                assert!(validity(ttl, f).is_some_and(|v| v > Duration::ZERO));
            }
        }
    }
}

proptest! {
    #[test]
    fn drift_and_validity_are_total_and_bounded(ttl in any_ttl(), factor in any_factor()) {
        let d = drift(ttl, factor);
        prop_assert!(d >= Duration::from_millis(DRIFT_FLOOR_MS), "drift({}, {}) = {:?}", ttl, factor, d);
        prop_assert_eq!(d.subsec_nanos() % 1_000_000, 0, "drift is whole ms");
        // Factors that are not finite and positive count as 0.
        if !(factor.is_finite() && factor > 0.0) {
            prop_assert_eq!(d, Duration::from_millis(DRIFT_FLOOR_MS));
        }
        match validity(ttl, factor) {
            None => prop_assert!(
                u128::from(ttl) <= ms(d) || ttl > MAX_TTL_MS,
                "None although ttl {} > drift {:?}", ttl, d
            ),
            Some(v) => {
                prop_assert!(v > Duration::ZERO);
                prop_assert!(ms(v) + ms(d) <= u128::from(ttl), "ttl={} f={} v={:?} d={:?}", ttl, factor, v, d);
                prop_assert_eq!(v.subsec_nanos() % 1_000_000, 0, "validity is whole ms");
                prop_assert_eq!(ms(v) + ms(d), u128::from(ttl), "validity is exactly ttl − drift");
            }
        }
    }

    #[test]
    fn drift_is_monotonic_in_ttl_and_factor(
        a in 0u64..=MAX_TTL_MS,
        b in 0u64..=MAX_TTL_MS,
        f in 0.0f64..1.0,
        g in 0.0f64..1.0,
    ) {
        let (lo, hi) = (a.min(b), a.max(b));
        prop_assert!(drift(lo, f) <= drift(hi, f));
        let (flo, fhi) = (f.min(g), f.max(g));
        prop_assert!(drift(a, flo) <= drift(a, fhi));
    }

    #[test]
    fn drift_rounds_up_for_thousandths(
        ttl in prop_oneof![0u64..=100_000, 0u64..=MAX_TTL_MS, MAX_TTL_MS - 100_000..=MAX_TTL_MS],
        k in prop_oneof![0u64..1_000, Just(10u64), Just(1u64), Just(999u64)],
    ) {
        // Exact rational arithmetic in thousandths of a millisecond.
        let factor = k as f64 / 1000.0;
        let exact_milli = u128::from(ttl) * u128::from(k); // ttl·k/1000 ms, ×1000
        let exact_ceil = exact_milli.div_ceil(1000);
        let d = ms(drift(ttl, factor));
        let floor = u128::from(DRIFT_FLOOR_MS);
        prop_assert!(
            d * 1000 >= exact_milli + floor * 1000,
            "drift({}, {}/1000) = {} ms < exact {} µs-of-ms + floor", ttl, k, d, exact_milli
        );
        // Conservative but not wasteful: at most 1 ms over the exact ceiling.
        prop_assert!(d <= exact_ceil + floor + 1, "drift({}, {}/1000) = {} ms, exact ceil {}", ttl, k, d, exact_ceil);
        // Hence validity never exceeds ttl·(1 − k/1000) − 2 ms exactly.
        if let Some(v) = validity(ttl, factor) {
            prop_assert!(ms(v) * 1000 + exact_milli + floor * 1000 <= u128::from(ttl) * 1000);
        }
    }

    #[test]
    fn remaining_is_total_floored_and_bounded(v in any_duration(), elapsed in any_duration()) {
        let r = remaining(v, elapsed);
        prop_assert!(r <= v, "remaining({:?}, {:?}) = {:?} > v", v, elapsed, r);
        prop_assert_eq!(r.subsec_nanos() % 1_000_000, 0, "whole ms: {:?}", r);
        if elapsed < v {
            let left = v - elapsed;
            prop_assert!(r <= left);
            // Rounded down: exactly floor(left) in ms, saturating at u64::MAX ms.
            let expected = left.as_millis().min(u128::from(u64::MAX));
            prop_assert_eq!(ms(r), expected, "v={:?} elapsed={:?}", v, elapsed);
        } else {
            prop_assert_eq!(r, Duration::ZERO);
        }
    }

    #[test]
    fn remaining_never_grows_with_elapsed(v in any_duration(), a in any_duration(), b in any_duration()) {
        let (lo, hi) = (a.min(b), a.max(b));
        prop_assert!(remaining(v, lo) >= remaining(v, hi));
    }
}

// ---------------------------------------------------------------------------
// node_timeout
// ---------------------------------------------------------------------------

proptest! {
    #[test]
    fn node_timeout_is_bounded(
        configured in proptest::option::of(any_duration()),
        ttl in any_ttl(),
        validity in any_duration(),
    ) {
        let t = node_timeout(configured, ttl, validity);
        prop_assert!(t <= validity, "{:?} > validity {:?}", t, validity);
        if validity >= MS {
            prop_assert!(t >= MS, "{:?} < 1 ms with validity {:?}", t, validity);
        } else {
            prop_assert_eq!(t, validity);
        }
        match configured {
            // The builder rejects timeouts below 1 ms; at or above it the
            // configured value is a hard ceiling.
            Some(c) if c >= MS => prop_assert!(t <= c, "{:?} > configured {:?}", t, c),
            Some(c) => prop_assert!(t <= MS.max(c)),
            None => {
                // Default: min(50 ms, ttl/20 ms), floored at 1 ms, capped by validity.
                let default = Duration::from_millis((ttl / 20).clamp(1, 50));
                prop_assert_eq!(t, default.min(validity), "ttl={}", ttl);
                prop_assert!(t <= DEFAULT_NODE_TIMEOUT);
            }
        }
    }

    #[test]
    fn node_timeout_default_for_real_ttls(ttl in 1u64..=MAX_TTL_MS, k in 0u64..1000) {
        // As the coordinator calls it: validity derived from the same ttl.
        let Some(v) = validity(ttl, k as f64 / 1000.0) else { return Ok(()) };
        let t = node_timeout(None, ttl, v);
        prop_assert!(t >= MS && t <= v && t <= DEFAULT_NODE_TIMEOUT);
        if ttl >= 20 {
            prop_assert!(u128::from(ttl) >= 20 * ms(t), "ttl={} t={:?}", ttl, t);
        }
    }
}

#[test]
fn node_timeout_examples() {
    let big = Duration::from_secs(3600);
    assert_eq!(node_timeout(None, 10_000, big), Duration::from_millis(50));
    assert_eq!(node_timeout(None, 1_000, big), Duration::from_millis(50));
    assert_eq!(node_timeout(None, 999, big), Duration::from_millis(49));
    assert_eq!(node_timeout(None, 200, big), Duration::from_millis(10));
    assert_eq!(node_timeout(None, 19, big), MS);
    assert_eq!(node_timeout(None, 0, big), MS);
    assert_eq!(
        node_timeout(None, 10_000, Duration::from_millis(7)),
        Duration::from_millis(7)
    );
    assert_eq!(
        node_timeout(None, 10_000, Duration::from_micros(300)),
        Duration::from_micros(300)
    );
    assert_eq!(
        node_timeout(
            Some(Duration::from_secs(5)),
            1_000,
            Duration::from_millis(988)
        ),
        Duration::from_millis(988)
    );
    assert_eq!(
        node_timeout(Some(Duration::from_millis(3)), 1_000, big),
        Duration::from_millis(3)
    );
}

// ---------------------------------------------------------------------------
// Regression tests: corners that were once not conservative
// ---------------------------------------------------------------------------

/// Regression: `drift` once multiplied in f64, and the product rounded down
/// to the integer below the true one when it needed more than 53 bits (factor
/// 1 − 2^-20 with TTL 2^40 − 1; factor 0.7161 with TTL 1_099_511_382_441), so
/// the drift came out 1 ms short. It is now exact integer arithmetic.
#[test]
fn drift_rounds_up_the_exact_product_for_any_factor() {
    let ttl = MAX_TTL_MS - 1;
    let k: u128 = (1 << 20) - 1;
    let factor = k as f64 / (1u64 << 20) as f64; // exact
    let exact_ceil = (u128::from(ttl) * k).div_ceil(1 << 20);
    let d = ms(drift(ttl, factor));
    assert!(
        d >= exact_ceil + u128::from(DRIFT_FLOOR_MS),
        "drift = {d} ms < ceil(ttl × factor) + 2 = {}",
        exact_ceil + u128::from(DRIFT_FLOOR_MS)
    );
    let (ttl, k) = (1_099_511_382_441u64, 7161u128);
    let exact_ceil = (u128::from(ttl) * k).div_ceil(10_000);
    let d = ms(drift(ttl, 0.7161));
    assert!(
        d >= exact_ceil + u128::from(DRIFT_FLOOR_MS),
        "drift = {d}, exact ceil = {exact_ceil}"
    );
}

/// Regression: `validity` once computed the drift from a TTL clamped to
/// `MAX_TTL_MS` but subtracted it from the unclamped one, so
/// `validity(u64::MAX, 0.5)` was about `u64::MAX` ms. It now refuses TTLs
/// above `MAX_TTL_MS`.
#[test]
fn validity_is_conservative_above_max_ttl() {
    let ttl = u64::MAX;
    let v = validity(ttl, 0.5);
    let bound = u128::from(ttl) / 2; // ttl × (1 − 0.5), before the 2 ms floor
    assert!(
        v.is_none_or(|v| ms(v) < bound),
        "validity({ttl}, 0.5) = {v:?} exceeds ttl × (1 − 0.5) = {bound} ms"
    );
}
