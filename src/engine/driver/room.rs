//! Room among a node's calls in flight, waited for before a round: the
//! client's own bound on calls in flight must not look like a node's
//! failure (docs/design.md §11, "Delivery and bounds").

use tokio::time::Instant;

use super::Driver;
use crate::proto::round::Step;

/// A place among each node's calls in flight, reserved for a round
/// ([`Driver::room`]); `None` where there was no room.
pub(crate) type Places = smallvec::SmallVec<[Option<crate::transport::in_flight::Place>; 5]>;

impl Driver {
    /// Places for a round of `step` on every node, waiting until `until`
    /// for room on each healthy node that has its bound of calls in flight:
    /// the client's own bound must not look like a node's failure, and
    /// every reachable node gets every call. A node that is down, degraded
    /// or still full by then gets no place (its call is refused,
    /// `Overloaded`, at no cost to the round). Free when there is room.
    pub(crate) async fn room(&self, step: Step, until: Instant) -> Places {
        loop {
            let places: Places = self.nodes.iter().map(|n| n.reserve(step)).collect();
            let Some(full) = places.iter().position(Option::is_none) else {
                return places;
            };
            drop(places);
            if !self.nodes[full].room(step, until).await {
                return self.nodes.iter().map(|n| n.reserve(step)).collect();
            }
        }
    }
}
