//! Functions (`PrimFunc`) and modules (`IRModule`): the arenas that own every declaration, the
//! parameters, attributes and body.

use crate::arena::Arena;
use crate::attrs::{AttrValue, Attrs};
use crate::axis::{Axis, AxisId};
use crate::buffer::Buffer;
use crate::expr::{BufferId, Var, VarId};
use crate::span::Span;
use crate::stmt::Stmt;

/// The three IR stages, recorded as the function attribute `sparse_tir_level`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stage {
    /// Sparse iterations in coordinate space (`sparse_tir_level = 2`).
    I,
    /// Loops and blocks in position space, sparse buffers still present (`sparse_tir_level = 1`).
    II,
    /// Flat dense buffers (`sparse_tir_level = 0`).
    III,
}

impl Stage {
    /// The value of the `sparse_tir_level` attribute.
    pub fn level(self) -> i64 {
        match self {
            Stage::I => 2,
            Stage::II => 1,
            Stage::III => 0,
        }
    }
    pub fn from_level(level: i64) -> Option<Stage> {
        match level {
            2 => Some(Stage::I),
            1 => Some(Stage::II),
            0 => Some(Stage::III),
            _ => None,
        }
    }
}

/// The attribute key holding the stage.
pub const STAGE_ATTR: &str = "sparse_tir_level";

/// A function: parameters, declarations (in arenas, in declaration order), attributes and body.
#[derive(Clone, Debug, PartialEq)]
pub struct PrimFunc {
    pub name: String,
    /// Parameters in order; each is a variable of `vars` (`T.handle` or a scalar type).
    pub params: Vec<VarId>,
    pub vars: Arena<Var>,
    /// Sparse axes, declared at function level.
    pub axes: Arena<Axis>,
    /// Every buffer of the function, wherever it is declared.
    pub buffers: Arena<Buffer>,
    /// Buffers declared at function level (match and alloc), in declaration order. Buffers of a
    /// block's header or of `T.allocate` statements are not listed here.
    pub buffer_decls: Vec<BufferId>,
    /// `T.func_attr({...})`.
    pub attrs: Attrs,
    pub body: Stmt,
    pub span: Span,
}

impl PrimFunc {
    /// An empty function with the given name.
    pub fn new(name: impl Into<String>) -> PrimFunc {
        PrimFunc {
            name: name.into(),
            params: Vec::new(),
            vars: Arena::new(),
            axes: Arena::new(),
            buffers: Arena::new(),
            buffer_decls: Vec::new(),
            attrs: Attrs::new(),
            body: Stmt::empty(),
            span: Span::default(),
        }
    }

    /// The stage: from `sparse_tir_level` when present; otherwise stage I when the function
    /// declares axes or contains sparse iterations, stage III else.
    pub fn stage(&self) -> Stage {
        if let Some(level) = self.attrs.get_int(STAGE_ATTR) {
            if let Some(s) = Stage::from_level(level) {
                return s;
            }
        }
        let mut has_iter = false;
        self.body
            .visit(&mut |s| has_iter |= matches!(s, Stmt::SparseIteration(_)));
        if has_iter || !self.axes.is_empty() {
            Stage::I
        } else {
            Stage::III
        }
    }

    pub fn set_stage(&mut self, stage: Stage) {
        self.attrs.set(STAGE_ATTR, AttrValue::Int(stage.level()));
    }

    pub fn add_var(&mut self, name: impl Into<String>, dtype: crate::DType) -> VarId {
        self.vars.append(Var {
            name: name.into(),
            dtype,
        })
    }

    /// Finds a parameter by name.
    pub fn param(&self, name: &str) -> Option<VarId> {
        self.params
            .iter()
            .copied()
            .find(|v| self.vars[*v].name == name)
    }
    pub fn axis_by_name(&self, name: &str) -> Option<AxisId> {
        self.axes
            .iter()
            .find(|(_, a)| a.name == name)
            .map(|(h, _)| h)
    }
    pub fn buffer_by_name(&self, name: &str) -> Option<BufferId> {
        self.buffers
            .iter()
            .find(|(_, b)| b.name == name)
            .map(|(h, _)| h)
    }
}

/// A module: functions by name, in order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IRModule {
    pub funcs: Vec<PrimFunc>,
}

impl IRModule {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn get(&self, name: &str) -> Option<&PrimFunc> {
        self.funcs.iter().find(|f| f.name == name)
    }
    pub fn get_mut(&mut self, name: &str) -> Option<&mut PrimFunc> {
        self.funcs.iter_mut().find(|f| f.name == name)
    }

    /// The function named `name`, or the only one when no name is given.
    pub fn pick(&self, name: Option<&str>) -> Result<&PrimFunc, PickError> {
        let all = || {
            self.funcs
                .iter()
                .map(|f| f.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match name {
            Some(n) => self.get(n).ok_or_else(|| PickError::NoSuch {
                name: n.to_string(),
                functions: all(),
            }),
            None if self.funcs.len() == 1 => Ok(&self.funcs[0]),
            None if self.funcs.is_empty() => Err(PickError::Empty),
            None => Err(PickError::Several { functions: all() }),
        }
    }
}

/// Why [`IRModule::pick`] found no function (callers add how to name one).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PickError {
    #[error("no function `{name}` (functions: {functions})")]
    NoSuch { name: String, functions: String },
    #[error("the script defines no function")]
    Empty,
    #[error("the script defines several functions ({functions})")]
    Several { functions: String },
}
