//! The validity window, the node timeout and the drift: examples at the edges,
//! and properties over any TTL, drift factor and elapsed time.

use super::*;

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
