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
