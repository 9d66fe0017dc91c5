//! The checkers: what a schedule's validity windows must never show.
//!
//! A window is one holder's `[time the lock was returned, min(lock.deadline(),
//! time release was called))` in simulated true time. Windows that merely
//! touch (`a.end == b.start`) never overlap.

use std::time::Duration;

/// One holder's validity window in true time since the schedule started:
/// `[start, end)`.
#[derive(Debug, Clone)]
pub struct Window {
    pub client: usize,
    pub start: Duration,
    pub end: Duration,
    /// The fencing token, for fenced locks.
    pub fence: Option<u64>,
    /// The lock's token.
    pub token: String,
    /// How many of its extensions were granted.
    pub extended: u32,
    /// A read lock's window (shared with other readers); every other
    /// window is exclusive.
    pub read: bool,
}

impl Window {
    /// An exclusive window of `client` over `[start_ms, end_ms)`, with no
    /// fence, token or extension: what the checker tests build on.
    pub fn exclusive(client: usize, start_ms: u64, end_ms: u64) -> Window {
        Window {
            client,
            start: Duration::from_millis(start_ms),
            end: Duration::from_millis(end_ms),
            fence: None,
            token: String::new(),
            extended: 0,
            read: false,
        }
    }
}

/// The fencing checker: every holder's token must be larger than that of
/// every holder whose window started before it (one line per window that
/// breaks this).
pub fn fence_regressions(mut windows: Vec<Window>) -> Vec<String> {
    windows.sort_by_key(|w| (w.start, w.end));
    let mut found = Vec::new();
    let mut highest: Option<(u64, usize)> = None;
    for w in windows {
        let Some(fence) = w.fence else { continue };
        if let Some((top, client)) = highest
            && fence <= top
        {
            found.push(format!(
                "client {} was granted token {fence} after client {client} held {top}",
                w.client
            ));
        }
        if highest.is_none_or(|(top, _)| fence > top) {
            highest = Some((fence, w.client));
        }
    }
    found
}

/// The checker: every pair of windows that overlap (one line per window that
/// starts before an earlier one has ended). Windows that merely touch
/// (`a.end == b.start`) do not overlap.
pub fn overlaps(mut windows: Vec<Window>) -> Vec<String> {
    windows.sort_by_key(|w| (w.start, w.end));
    let ms = |t: Duration| t.as_secs_f64() * 1e3;
    let mut found = Vec::new();
    let mut latest: Option<Window> = None;
    for w in windows {
        if let Some(l) = &latest
            && w.start < l.end
        {
            found.push(format!(
                "client {} held [{:.3}, {:.3}) ms while client {} held [{:.3}, {:.3}) ms",
                w.client,
                ms(w.start),
                ms(w.end),
                l.client,
                ms(l.start),
                ms(l.end)
            ));
        }
        if latest.as_ref().is_none_or(|l| w.end > l.end) {
            latest = Some(w);
        }
    }
    found
}

/// The read/write checker: every pair of windows of which at least one is
/// a write (any window but a read lock's) and that overlap, one line per
/// pair. Read windows may overlap each other; windows that merely touch do
/// not overlap.
pub fn rw_conflicts(mut windows: Vec<Window>) -> Vec<String> {
    windows.sort_by_key(|w| (w.start, w.end));
    let ms = |t: Duration| t.as_secs_f64() * 1e3;
    let kind = |w: &Window| if w.read { "read" } else { "write" };
    let mut found = Vec::new();
    for (i, a) in windows.iter().enumerate() {
        // Sorted by start: the windows that start before `a` ends.
        for b in windows[i + 1..].iter().take_while(|b| b.start < a.end) {
            if a.read && b.read {
                continue;
            }
            found.push(format!(
                "client {} held a {} lock [{:.3}, {:.3}) ms while client {} held a {} lock [{:.3}, {:.3}) ms",
                b.client,
                kind(b),
                ms(b.start),
                ms(b.end),
                a.client,
                kind(a),
                ms(a.start),
                ms(a.end)
            ));
        }
    }
    found
}

/// Pairs of read windows that overlap: readers that really shared.
pub fn shared_reads(windows: &[Window]) -> u64 {
    let mut reads: Vec<&Window> = windows.iter().filter(|w| w.read).collect();
    reads.sort_by_key(|w| (w.start, w.end));
    let mut shared = 0;
    for (i, a) in reads.iter().enumerate() {
        shared += reads[i + 1..]
            .iter()
            .take_while(|b| b.start < a.end)
            .count() as u64;
    }
    shared
}

/// The permit checker: every instant at which more than `limit` windows
/// were open (one line per window that opens past the limit). Windows that
/// merely touch do not overlap.
pub fn over_limit(windows: Vec<Window>, limit: usize) -> Vec<String> {
    // At one instant: the ends of the windows that end there, then each
    // empty window (`[t, t)`, released as soon as granted) opening and
    // closing at once, counted with the windows already open (as `overlaps`
    // counts it), then the starts.
    let mut events: Vec<(Duration, u8, usize, bool, usize)> = windows
        .iter()
        .enumerate()
        .flat_map(|(i, w)| {
            let rank = if w.end > w.start { [2, 0] } else { [1, 1] };
            [
                (w.start, rank[0], i, true, w.client),
                (w.end.max(w.start), rank[1], i, false, w.client),
            ]
        })
        .collect();
    events.sort_by_key(|&(t, rank, i, opens, _)| (t, rank, i, !opens));
    let mut open = 0usize;
    let mut found = Vec::new();
    for (t, _, _, opens, client) in events {
        if opens {
            open += 1;
            if open > limit {
                found.push(format!(
                    "client {client} made {open} valid holders at {:.3} ms (limit {limit})",
                    t.as_secs_f64() * 1e3
                ));
            }
        } else {
            open -= 1;
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checker itself: nested, staggered and chained-through-a-long-window
    /// overlaps are found; windows that only touch are not.
    #[test]
    fn checker_finds_overlaps_and_only_overlaps() {
        let w = Window::exclusive;
        assert!(overlaps(vec![w(0, 0, 10), w(1, 10, 20), w(2, 20, 30)]).is_empty());
        assert!(overlaps(vec![w(1, 10, 20), w(0, 0, 10)]).is_empty());
        assert_eq!(overlaps(vec![w(0, 0, 10), w(1, 9, 20)]).len(), 1);
        assert_eq!(overlaps(vec![w(0, 0, 30), w(1, 5, 10)]).len(), 1);
        // The third window overlaps the first (long) one, not the second.
        assert_eq!(
            overlaps(vec![w(0, 0, 100), w(1, 100, 100), w(2, 50, 60)]).len(),
            1
        );
        assert_eq!(
            overlaps(vec![w(0, 0, 100), w(1, 10, 20), w(2, 30, 40)]).len(),
            2
        );
    }

    /// The fencing checker: a token not above every earlier holder's is found,
    /// windows without a token are ignored.
    #[test]
    fn fence_checker_finds_regressions_and_only_those() {
        let w = |start: u64, fence: Option<u64>| Window {
            fence,
            ..Window::exclusive(start as usize, start, start + 1)
        };
        assert!(fence_regressions(vec![w(0, Some(1)), w(5, Some(2)), w(9, Some(7))]).is_empty());
        assert!(fence_regressions(vec![w(5, Some(2)), w(0, Some(1)), w(3, None)]).is_empty());
        assert_eq!(
            fence_regressions(vec![w(0, Some(3)), w(5, Some(3))]).len(),
            1
        );
        assert_eq!(
            fence_regressions(vec![w(0, Some(5)), w(1, Some(9)), w(2, Some(6))]).len(),
            1
        );
    }

    /// The read/write checker: readers together and windows that touch are
    /// fine; a writer overlapping a reader or a writer is found, once per pair,
    /// also when the reader it overlaps started before a shorter one.
    #[test]
    fn rw_checker_finds_conflicts_and_only_conflicts() {
        let r = |client, start, end| Window {
            read: true,
            ..Window::exclusive(client, start, end)
        };
        let w = Window::exclusive;
        assert!(
            rw_conflicts(vec![
                r(0, 0, 10),
                r(1, 5, 15),
                w(2, 15, 20),
                r(3, 20, 30),
                r(4, 25, 40),
                w(5, 40, 50),
                w(6, 50, 60),
            ])
            .is_empty()
        );
        assert_eq!(rw_conflicts(vec![w(0, 0, 10), r(1, 9, 20)]).len(), 1);
        assert_eq!(rw_conflicts(vec![r(1, 9, 20), w(0, 0, 10)]).len(), 1);
        assert_eq!(rw_conflicts(vec![r(0, 0, 10), w(1, 9, 20)]).len(), 1);
        assert_eq!(rw_conflicts(vec![w(0, 0, 10), w(1, 5, 6)]).len(), 1);
        // A writer over two readers that share: two conflicts, not three.
        assert_eq!(
            rw_conflicts(vec![w(0, 0, 100), r(1, 10, 50), r(2, 20, 60)]).len(),
            2
        );
        // The writer overlaps the first (long) reader, not the second.
        assert_eq!(
            rw_conflicts(vec![r(0, 0, 100), r(1, 10, 20), w(2, 30, 40)]).len(),
            1
        );
        assert_eq!(shared_reads(&[r(0, 0, 100), r(1, 10, 20), w(2, 30, 40)]), 1);
    }

    #[test]
    fn permit_checker_counts_open_windows_and_only_those() {
        let w = Window::exclusive;
        // Two at once, touching a third: within a limit of 2.
        assert!(over_limit(vec![w(0, 0, 10), w(1, 5, 15), w(2, 10, 20)], 2).is_empty());
        // Three at once at 6 ms.
        assert_eq!(
            over_limit(vec![w(0, 0, 10), w(1, 5, 15), w(2, 6, 20)], 2).len(),
            1
        );
        // An empty window (released as soon as granted) alone, or touching
        // others, is within the limit; inside two others it is a third holder.
        assert!(over_limit(vec![w(0, 5, 5)], 2).is_empty());
        assert!(over_limit(vec![w(0, 0, 5), w(1, 5, 5), w(2, 5, 9)], 1).is_empty());
        assert_eq!(over_limit(vec![w(0, 0, 9), w(1, 5, 5)], 1).len(), 1);
        assert!(over_limit(vec![w(0, 5, 5), w(1, 5, 5)], 1).is_empty());
        assert_eq!(
            over_limit(vec![w(0, 0, 10), w(1, 2, 10), w(2, 5, 5)], 2).len(),
            1
        );
    }
}
