//! Typed arenas and handles: declarations (variables, axes, buffers) live in per-function arenas
//! and are referred to by `Handle<T>`, so identity is a cheap copyable index and renaming is a
//! change of one string.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;

/// An index into an [`Arena<T>`]. Handles from different functions must never be mixed.
pub struct Handle<T> {
    index: u32,
    _marker: PhantomData<fn() -> T>,
}

impl<T> Handle<T> {
    /// Builds a handle from a raw index (for tests and for arenas built in lockstep).
    pub fn from_index(index: usize) -> Self {
        Handle {
            index: index as u32,
            _marker: PhantomData,
        }
    }
    /// The position of the item in its arena (declaration order).
    pub fn index(self) -> usize {
        self.index as usize
    }
}

impl<T> Clone for Handle<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Handle<T> {}
impl<T> PartialEq for Handle<T> {
    fn eq(&self, other: &Self) -> bool {
        self.index == other.index
    }
}
impl<T> Eq for Handle<T> {}
impl<T> PartialOrd for Handle<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Handle<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.index.cmp(&other.index)
    }
}
impl<T> Hash for Handle<T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.index.hash(state)
    }
}
impl<T> fmt::Debug for Handle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let full = std::any::type_name::<T>();
        let short = full.rsplit("::").next().unwrap_or(full);
        write!(f, "{short}#{}", self.index)
    }
}

/// A growable store of `T`, addressed by [`Handle<T>`]. Items are never removed, so handles stay
/// valid for the arena's life; the order of items is their declaration order.
#[derive(Clone, PartialEq)]
pub struct Arena<T> {
    items: Vec<T>,
}

impl<T> Default for Arena<T> {
    fn default() -> Self {
        Arena { items: Vec::new() }
    }
}

impl<T: fmt::Debug> fmt::Debug for Arena<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.items.iter().enumerate())
            .finish()
    }
}

impl<T> Arena<T> {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn append(&mut self, item: T) -> Handle<T> {
        let h = Handle::from_index(self.items.len());
        self.items.push(item);
        h
    }
    pub fn len(&self) -> usize {
        self.items.len()
    }
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    pub fn get(&self, h: Handle<T>) -> Option<&T> {
        self.items.get(h.index())
    }
    /// Iterates `(handle, item)` in declaration order.
    pub fn iter(&self) -> impl Iterator<Item = (Handle<T>, &T)> {
        self.items
            .iter()
            .enumerate()
            .map(|(i, t)| (Handle::from_index(i), t))
    }
    pub fn handles(&self) -> impl Iterator<Item = Handle<T>> {
        (0..self.items.len()).map(Handle::from_index)
    }
}

impl<T> std::ops::Index<Handle<T>> for Arena<T> {
    type Output = T;
    fn index(&self, h: Handle<T>) -> &T {
        &self.items[h.index()]
    }
}
impl<T> std::ops::IndexMut<Handle<T>> for Arena<T> {
    fn index_mut(&mut self, h: Handle<T>) -> &mut T {
        &mut self.items[h.index()]
    }
}
