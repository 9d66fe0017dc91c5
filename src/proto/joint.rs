//! Joint quorums: the member sets a round's votes count in, and the
//! decision over all of them (docs/agreement.md, "Changing members").
//!
//! A client counts its nodes' votes in one set — its deployment's members —
//! except while the membership changes: then in two, the old members and
//! the new, and a round is granted only with a majority of **each**, as
//! Raft does for a change of configuration. A set's members that the client
//! does not reach (a new node on an old client's list, a removed one on a
//! new client's) count as no from the start: its majority must come from
//! the nodes the client has.
//!
//! ```text
//! Sets::all(5)                 one set, every node (no record, no change)
//! Sets::new([(mask, size)..])  the sets a record names, by client place
//! Joint::new(&sets)            one round's count over them
//!   record(place, vote)        a node's vote, in each set it is in
//!   decision()                 Granted: all sets granted; Refused: any set refused
//! ```

use smallvec::SmallVec;

use super::quorum::{Count, Decision, Vote};

/// Client places, by index.
type Places = SmallVec<[bool; 5]>;

/// One member set: which of the client's places are in it, and how many
/// members it has (including those the client does not reach).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Set {
    places: Places,
    size: usize,
}

/// The member sets a client's rounds count in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sets {
    sets: SmallVec<[Set; 2]>,
}

impl Sets {
    /// One set of `n` members: every one of the client's `n` places.
    pub(crate) fn all(n: usize) -> Self {
        Sets {
            sets: smallvec::smallvec![Set {
                places: smallvec::smallvec![true; n],
                size: n,
            }],
        }
    }

    /// The sets `(places, size)`: `places[i]` says whether the client's
    /// node `i` is a member, `size` how many members the set has. A set
    /// smaller than the client places it names is taken at their count.
    pub(crate) fn new<I: IntoIterator<Item = bool>>(
        sets: impl IntoIterator<Item = (I, usize)>,
    ) -> Self {
        Sets {
            sets: sets
                .into_iter()
                .map(|(places, size)| {
                    let places: Places = places.into_iter().collect();
                    let size = size.max(places.iter().filter(|p| **p).count());
                    Set { places, size }
                })
                .collect(),
        }
    }
}

/// One round's count over the member sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Joint {
    counts: SmallVec<[(Count, Places); 2]>,
    yes: usize,
    no: usize,
}

impl Joint {
    /// A round over `sets` with no votes yet: in each set, the members
    /// the client does not reach are counted as no now.
    pub(crate) fn new(sets: &Sets) -> Self {
        let counts = sets
            .sets
            .iter()
            .map(|set| {
                let mut count = Count::new(set.size);
                let reached = set.places.iter().filter(|p| **p).count();
                for _ in reached..set.size {
                    count.record(Vote::No);
                }
                (count, set.places.clone())
            })
            .collect();
        Joint {
            counts,
            yes: 0,
            no: 0,
        }
    }

    /// Node `place`'s vote, counted in every set it is in (once per node:
    /// the caller sees to it).
    pub(crate) fn record(&mut self, place: usize, vote: Vote) -> Decision {
        match vote {
            Vote::Yes => self.yes += 1,
            Vote::No => self.no += 1,
        }
        for (count, places) in &mut self.counts {
            if places.get(place).copied().unwrap_or(false) {
                count.record(vote);
            }
        }
        self.decision()
    }

    /// Granted when every set is, refused as soon as one is; a round over
    /// no set is refused.
    pub(crate) fn decision(&self) -> Decision {
        let decisions = self.counts.iter().map(|(c, _)| c.decision());
        if self.counts.is_empty() || decisions.clone().any(|d| d == Decision::Refused) {
            Decision::Refused
        } else if decisions.clone().all(|d| d == Decision::Granted) {
            Decision::Granted
        } else {
            Decision::Pending
        }
    }

    /// The yes votes recorded.
    pub(crate) fn yes(&self) -> usize {
        self.yes
    }

    /// The no votes recorded.
    pub(crate) fn no(&self) -> usize {
        self.no
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(sets: &Sets, votes: &[(usize, Vote)]) -> Decision {
        let mut joint = Joint::new(sets);
        for (place, vote) in votes {
            joint.record(*place, *vote);
        }
        joint.decision()
    }

    use Vote::{No, Yes};

    #[test]
    fn one_set_is_a_plain_majority() {
        let sets = Sets::all(5);
        assert_eq!(run(&sets, &[(0, Yes), (1, Yes)]), Decision::Pending);
        assert_eq!(
            run(&sets, &[(0, Yes), (1, Yes), (4, Yes)]),
            Decision::Granted
        );
        assert_eq!(run(&sets, &[(0, No), (1, No), (2, No)]), Decision::Refused);
    }

    /// Node 5 replaced by 5': an old client (places 1-5) counts the new set
    /// over places 1-4 and the absent 5'.
    #[test]
    fn a_replacement_needs_a_majority_of_both_sets() {
        let old_client = Sets::new([
            ([true; 5].to_vec(), 5),
            ([true, true, true, true, false].to_vec(), 5),
        ]);
        // Nodes 1, 2 and 5: a majority of the old set, only two of the new.
        let votes = [(0, Yes), (1, Yes), (4, Yes), (2, No), (3, No)];
        assert_eq!(run(&old_client, &votes), Decision::Refused);
        // Nodes 1, 2, 3: a majority of each.
        assert_eq!(
            run(&old_client, &[(0, Yes), (1, Yes), (2, Yes)]),
            Decision::Granted
        );
    }

    /// Growing 5 → 7: an old client has 5 of the 7 new members, and
    /// needs 4 of them; a new client needs 3 of the old five and 4 of 7.
    #[test]
    fn growing_five_to_seven() {
        let old_client = Sets::new([([true; 5].to_vec(), 5), ([true; 5].to_vec(), 7)]);
        let three = [(0, Yes), (1, Yes), (2, Yes)];
        assert_eq!(run(&old_client, &three), Decision::Pending);
        assert_eq!(
            run(
                &old_client,
                &[(0, Yes), (1, Yes), (2, Yes), (3, No), (4, No)]
            ),
            Decision::Refused
        );
        assert_eq!(
            run(&old_client, &[(0, Yes), (1, Yes), (2, Yes), (3, Yes)]),
            Decision::Granted
        );
        let mut in_old = [true; 7].to_vec();
        in_old[5] = false;
        in_old[6] = false;
        let new_client = Sets::new([(in_old, 5), ([true; 7].to_vec(), 7)]);
        // 6 and 7 make a majority of seven with 1 and 2, not of the old.
        let votes = [
            (0, Yes),
            (1, Yes),
            (5, Yes),
            (6, Yes),
            (2, No),
            (3, No),
            (4, No),
        ];
        assert_eq!(run(&new_client, &votes), Decision::Refused);
        let votes = [(0, Yes), (1, Yes), (2, Yes), (5, Yes)];
        assert_eq!(run(&new_client, &votes), Decision::Granted);
    }

    /// Every order of every vote vector: granted exactly when each set
    /// has a majority, whatever the order.
    #[test]
    fn decides_as_a_majority_of_each_set_for_every_vote_vector() {
        let a = [true, true, true, true, false];
        let b = [false, true, true, true, true];
        let sets = Sets::new([(a.to_vec(), 5), (b.to_vec(), 5)]);
        for bits in 0u32..32 {
            let yes = |i: usize| bits & (1 << i) != 0;
            let each = |set: &[bool; 5]| (0..5).filter(|i| set[*i] && yes(*i)).count() >= 3;
            let expected = if each(&a) && each(&b) {
                Decision::Granted
            } else {
                Decision::Refused
            };
            let votes: Vec<_> = (0..5).map(|i| (i, if yes(i) { Yes } else { No })).collect();
            assert_eq!(run(&sets, &votes), expected, "{bits:05b}");
            let reversed: Vec<_> = votes.iter().rev().copied().collect();
            assert_eq!(run(&sets, &reversed), expected, "{bits:05b} reversed");
        }
    }

    #[test]
    fn no_set_is_refused_and_a_place_in_none_counts_nowhere() {
        assert_eq!(
            run(&Sets::new(Vec::<(Vec<bool>, usize)>::new()), &[]),
            Decision::Refused
        );
        let sets = Sets::new([([true, true, false].to_vec(), 2)]);
        assert_eq!(run(&sets, &[(2, Yes), (0, Yes)]), Decision::Pending);
        assert_eq!(run(&sets, &[(0, Yes), (1, Yes)]), Decision::Granted);
    }
}
