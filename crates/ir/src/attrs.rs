//! Attribute dictionaries (`T.func_attr`, `T.block_attr`, `T.sp.iteration_attr`, loop
//! annotations): ordered string keys with literal values.

/// Block annotation: a list of names of buffers the block allocates that may be kept across the
/// block's instances run by one thread. Such a buffer is zero when first allocated, and the
/// block is correct whatever an earlier instance left in it (SpGEMM's workspace: `flag` holds
/// row stamps `row + 1`, so a stale entry never equals the current row's stamp, and `wval` is
/// read only where `flag` holds the current stamp). Allocating it afresh for every instance is
/// always a valid implementation (the evaluators do); the C writer allocates it once per
/// thread, outside the loops around the block.
pub const WORKSPACE_ATTR: &str = "workspace";

/// The block annotation `{"atomic": True}`: the block's stores become atomic additions at stage
/// III (`lower_atomic`), so its reduction iterations may run on different threads.
pub const ATOMIC_ATTR: &str = "atomic";

/// The function attribute `{"assume_distinct": {"rows": "fiber", "perm": "all"}}`: parameters
/// (index arrays, by their handle's name) that a schedule stores through from iterations it
/// runs apart or in another order, trusting each iteration to reach an element of its own. The
/// values must be distinct inside each fiber (`"fiber"`: the runs of the array's last axis or
/// dimension, a compressed axis's fibers, a table's rows) or over the whole array (`"all"`).
/// The schedule adds it; the runtime checks it before every launch.
pub const DISTINCT_ATTR: &str = "assume_distinct";

/// The function attribute `{"assume_monotone": ["P"]}`: parameters (by their handle's name)
/// whose consecutive values a schedule takes as the bounds of ranges of positions, one range
/// per iteration it runs apart or in another order (a store to `k + P[q]`, `k` below
/// `P[q + 1] - P[q]`). The values must never decrease, so that the ranges never overlap. The
/// schedule adds it; the runtime checks it before every launch (an axis's `indptr` is checked
/// so already).
pub const MONOTONE_ATTR: &str = "assume_monotone";

/// Where the values of an [`DISTINCT_ATTR`] parameter must be distinct.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DistinctScope {
    /// Inside each run of the last axis or dimension.
    Fiber,
    /// Over the whole array.
    All,
}

impl DistinctScope {
    pub fn name(self) -> &'static str {
        match self {
            DistinctScope::Fiber => "fiber",
            DistinctScope::All => "all",
        }
    }
    pub fn from_name(s: &str) -> Option<DistinctScope> {
        match s {
            "fiber" => Some(DistinctScope::Fiber),
            "all" => Some(DistinctScope::All),
            _ => None,
        }
    }
}

impl Attrs {
    /// The parameters of [`DISTINCT_ATTR`] with their scopes, in order; an entry that is not
    /// `name: "fiber" | "all"` reads as `"all"` (the stronger demand).
    pub fn distinct(&self) -> Vec<(String, DistinctScope)> {
        let Some(AttrValue::Dict(d)) = self.get(DISTINCT_ATTR) else {
            return Vec::new();
        };
        d.iter()
            .map(|(k, v)| {
                let scope = match v {
                    AttrValue::Str(s) => DistinctScope::from_name(s).unwrap_or(DistinctScope::All),
                    _ => DistinctScope::All,
                };
                (k.to_string(), scope)
            })
            .collect()
    }
    /// Adds `param` to [`DISTINCT_ATTR`] (keeping the stronger scope where it is already
    /// there).
    pub fn assume_distinct(&mut self, param: &str, scope: DistinctScope) {
        let mut d = match self.get(DISTINCT_ATTR) {
            Some(AttrValue::Dict(d)) => d.clone(),
            _ => Attrs::new(),
        };
        let old = d.get(param).and_then(|v| match v {
            AttrValue::Str(s) => DistinctScope::from_name(s),
            _ => Some(DistinctScope::All),
        });
        let scope = old.map_or(scope, |o| o.max(scope));
        d.set(param, AttrValue::Str(scope.name().to_string()));
        self.set(DISTINCT_ATTR, AttrValue::Dict(d));
    }
    /// The parameters of [`MONOTONE_ATTR`], in order (entries that are not strings skipped).
    pub fn monotone(&self) -> Vec<String> {
        let Some(AttrValue::List(l)) = self.get(MONOTONE_ATTR) else {
            return Vec::new();
        };
        l.iter()
            .filter_map(|v| match v {
                AttrValue::Str(s) => Some(s.clone()),
                _ => None,
            })
            .collect()
    }
    /// Adds `param` to [`MONOTONE_ATTR`] (once).
    pub fn assume_monotone(&mut self, param: &str) {
        let mut l = match self.get(MONOTONE_ATTR) {
            Some(AttrValue::List(l)) => l.clone(),
            _ => Vec::new(),
        };
        if !l
            .iter()
            .any(|v| matches!(v, AttrValue::Str(s) if s == param))
        {
            l.push(AttrValue::Str(param.to_string()));
        }
        self.set(MONOTONE_ATTR, AttrValue::List(l));
    }
}

/// An attribute value: a Python literal.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<AttrValue>),
    Dict(Attrs),
}

/// An ordered dictionary of attributes; keys are unique.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attrs(pub Vec<(String, AttrValue)>);

impl Attrs {
    pub fn new() -> Self {
        Attrs(Vec::new())
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn get(&self, key: &str) -> Option<&AttrValue> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
    /// Sets `key`, replacing an existing value in place or appending.
    pub fn set(&mut self, key: impl Into<String>, value: AttrValue) {
        let key = key.into();
        if let Some(slot) = self.0.iter_mut().find(|(k, _)| *k == key) {
            slot.1 = value;
        } else {
            self.0.push((key, value));
        }
    }
    pub fn remove(&mut self, key: &str) -> Option<AttrValue> {
        let i = self.0.iter().position(|(k, _)| k == key)?;
        Some(self.0.remove(i).1)
    }
    /// The value as an integer (`True`/`False` count as 1/0).
    pub fn get_int(&self, key: &str) -> Option<i64> {
        match self.get(key)? {
            AttrValue::Int(v) => Some(*v),
            AttrValue::Bool(b) => Some(*b as i64),
            _ => None,
        }
    }
    pub fn iter(&self) -> impl Iterator<Item = (&str, &AttrValue)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }
}
