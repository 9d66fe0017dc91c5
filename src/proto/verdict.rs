//! What a quorum says about a resource, from what each node holds: the
//! verdict of an inspection, and how long a holder keeps a quorum.
//!
//! ```text
//! per node: unreachable | free | held by H      (what one node read)
//! Held { H }    H on at least Q nodes
//! Free          at least Q nodes hold nothing
//! Unknown       neither, and the unreachable nodes could make it either
//! NotHeld       neither, and they could not: leftovers that expire at their TTL
//! ```
//!
//! A verdict is a snapshot: each node was read once, at its own instant.
//! `Held` says a quorum held it when read, never that it still does; `Free`
//! never that a lock would be granted now (see `docs/design.md` §11b).
//!
//! ```
//! use redquorum::verdict::{Read, Verdict, verdict};
//! let read = [Read::Held("a"), Read::Held("a"), Read::Held("a"), Read::Free, Read::Unreachable];
//! assert_eq!(verdict(&read, 3), Verdict::Held { holder: "a", nodes: 3 });
//! let read = [Read::Held("a"), Read::Held("a"), Read::Free, Read::Free, Read::Unreachable];
//! assert_eq!(verdict(&read, 3), Verdict::Unknown { reachable: 4 });
//! ```

use std::time::Duration;

/// What one node read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read<H> {
    /// The node did not answer.
    Unreachable,
    /// It holds nothing for the resource.
    Free,
    /// It holds it for `H`.
    Held(H),
}

/// What a quorum says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict<H> {
    /// One holder on a quorum of nodes.
    Held {
        /// The holder.
        holder: H,
        /// On how many nodes.
        nodes: usize,
    },
    /// A quorum of nodes hold nothing.
    Free {
        /// How many nodes hold nothing.
        nodes: usize,
    },
    /// No holder on a quorum and fewer than a quorum free, whatever the
    /// unreachable nodes hold: leftovers, which expire at their TTL.
    NotHeld {
        /// How many nodes hold nothing.
        free: usize,
    },
    /// The unreachable nodes could decide it either way.
    Unknown {
        /// How many nodes answered.
        reachable: usize,
    },
}

/// The verdict over the nodes' reads, with a quorum of `quorum`.
pub fn verdict<H: PartialEq + Clone>(reads: &[Read<H>], quorum: usize) -> Verdict<H> {
    let unreachable = reads.iter().filter(|r| **r == Read::Unreachable).count();
    let free = reads.iter().filter(|r| **r == Read::Free).count();
    // The holder on the most nodes (the first such, in node order).
    let mut top: Option<(&H, usize)> = None;
    for read in reads {
        if let Read::Held(h) = read {
            let count = reads
                .iter()
                .filter(|r| **r == Read::Held(h.clone()))
                .count();
            if top.is_none_or(|(_, most)| count > most) {
                top = Some((h, count));
            }
        }
    }
    let most = top.map_or(0, |(_, count)| count);
    match top {
        Some((holder, nodes)) if nodes >= quorum => Verdict::Held {
            holder: holder.clone(),
            nodes,
        },
        _ if free >= quorum => Verdict::Free { nodes: free },
        _ if most + unreachable >= quorum || free + unreachable >= quorum => Verdict::Unknown {
            reachable: reads.len() - unreachable,
        },
        _ => Verdict::NotHeld { free },
    }
}

/// How long a holder keeps a quorum, from the time each holding node's key
/// has left: the `quorum`-th longest (after it, fewer than a quorum hold
/// it). `None` when fewer than `quorum` are given.
///
/// ```
/// use std::time::Duration;
/// use redquorum::verdict::quorum_left;
/// let left = [900, 1000, 950].map(Duration::from_millis);
/// assert_eq!(quorum_left(&left, 2), Some(Duration::from_millis(950)));
/// assert_eq!(quorum_left(&left, 4), None);
/// ```
pub fn quorum_left(left: &[Duration], quorum: usize) -> Option<Duration> {
    let mut left = left.to_vec();
    left.sort_unstable_by(|a, b| b.cmp(a));
    left.get(quorum.checked_sub(1)?).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        use Read::{Free as F, Held as H, Unreachable as D};
        let v = |r: &[Read<char>]| verdict(r, r.len() / 2 + 1);
        assert_eq!(
            v(&[H('a'), H('a'), H('a'), F, F]),
            Verdict::Held {
                holder: 'a',
                nodes: 3
            }
        );
        assert_eq!(
            v(&[H('a'), H('a'), H('a'), D, D]),
            Verdict::Held {
                holder: 'a',
                nodes: 3
            }
        );
        assert_eq!(v(&[F, F, F, H('a'), H('a')]), Verdict::Free { nodes: 3 });
        assert_eq!(
            v(&[H('a'), H('a'), H('b'), H('b'), F]),
            Verdict::NotHeld { free: 1 }
        );
        assert_eq!(
            v(&[H('a'), H('a'), F, F, D]),
            Verdict::Unknown { reachable: 4 }
        );
        assert_eq!(
            v(&[H('a'), H('b'), F, D, D]),
            Verdict::Unknown { reachable: 3 }
        );
        assert_eq!(v(&[H('a'), H('b'), D]), Verdict::Unknown { reachable: 2 });
        assert_eq!(v(&[H('a'), H('b'), F]), Verdict::NotHeld { free: 1 });
        assert_eq!(v(&[D, D, D]), Verdict::Unknown { reachable: 0 });
    }

    #[test]
    fn a_quorum_lasts_until_its_last_member_expires() {
        let ms = Duration::from_millis;
        assert_eq!(quorum_left(&[ms(5), ms(9), ms(7), ms(1)], 3), Some(ms(5)));
        assert_eq!(quorum_left(&[], 1), None);
        assert_eq!(quorum_left(&[ms(5)], 0), None);
    }
}
