//! [`PerNode`]: one value per node, in place for up to [`INLINE`] nodes (a
//! round over 3 or 5 nodes allocates nothing for its answers), on the heap
//! beyond.

use std::ops::{Deref, DerefMut};

/// Nodes kept in place.
pub(crate) const INLINE: usize = 5;

/// One value per node, in configured order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PerNode<T> {
    Inline { items: [T; INLINE], len: usize },
    Heap(Vec<T>),
}

impl<T: Clone> PerNode<T> {
    /// `len` copies of `value`.
    pub(crate) fn filled(value: T, len: usize) -> Self {
        if len <= INLINE {
            PerNode::Inline {
                items: std::array::from_fn(|_| value.clone()),
                len,
            }
        } else {
            PerNode::Heap(vec![value; len])
        }
    }
}

impl<T> FromIterator<T> for PerNode<T>
where
    T: Clone + Default,
{
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut out = PerNode::filled(T::default(), 0);
        for item in iter {
            out.push(item);
        }
        out
    }
}

impl<T: Clone + Default> PerNode<T> {
    fn push(&mut self, item: T) {
        match self {
            PerNode::Inline { items, len } if *len < INLINE => {
                items[*len] = item;
                *len += 1;
            }
            PerNode::Inline { items, len } => {
                let mut heap: Vec<T> = items[..*len].to_vec();
                heap.push(item);
                *self = PerNode::Heap(heap);
            }
            PerNode::Heap(heap) => heap.push(item),
        }
    }
}

impl<T> Deref for PerNode<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match self {
            PerNode::Inline { items, len } => &items[..*len],
            PerNode::Heap(heap) => heap,
        }
    }
}

impl<T> DerefMut for PerNode<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            PerNode::Inline { items, len } => &mut items[..*len],
            PerNode::Heap(heap) => heap,
        }
    }
}

impl<T> IntoIterator for PerNode<T> {
    type Item = T;
    type IntoIter = IntoIter<T>;

    fn into_iter(self) -> IntoIter<T> {
        match self {
            PerNode::Inline { items, len } => IntoIter::Inline(items.into_iter().take(len)),
            PerNode::Heap(heap) => IntoIter::Heap(heap.into_iter()),
        }
    }
}

/// The values of a [`PerNode`], in order.
pub(crate) enum IntoIter<T> {
    Inline(std::iter::Take<std::array::IntoIter<T, INLINE>>),
    Heap(std::vec::IntoIter<T>),
}

impl<T> Iterator for IntoIter<T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        match self {
            IntoIter::Inline(items) => items.next(),
            IntoIter::Heap(items) => items.next(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_then_heap() {
        let small: PerNode<u8> = (1..=5).collect();
        assert!(matches!(small, PerNode::Inline { len: 5, .. }));
        assert_eq!(&*small, [1, 2, 3, 4, 5]);
        let big: PerNode<u8> = (1..=7).collect();
        assert!(matches!(big, PerNode::Heap(_)));
        assert_eq!(big.into_iter().collect::<Vec<_>>(), [1, 2, 3, 4, 5, 6, 7]);
        let mut filled = PerNode::filled(false, 3);
        filled[1] = true;
        assert_eq!(&*filled, [false, true, false]);
        assert_eq!(PerNode::filled(0u8, 9).len(), 9);
    }
}
