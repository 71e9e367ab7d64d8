//! Expressions of the C writer: one method per expression kind, each returning C text and the
//! sparsetir dtype of its value (every compound expression parenthesised), and the literal,
//! cast and math-call helpers they share.

use super::vector_math::VMath;
use super::*;

impl<'f> Writer<'f> {
    /// In a vector loop that admits it (`classify`): `T.Select(x CMP y, a, b)` as the lane-wise
    /// helper `sel_*`, with its value's dtype; `None` where the scalar `?:` applies.
    fn vector_select(&mut self, select: &Expr) -> Res<Option<(String, DType)>> {
        let Some(vl) = &self.vec_loop else {
            return Ok(None);
        };
        // `classify` admits only a select on a comparison whose values read nothing.
        if self.classify(vl, select) != Some(super::vector::Class::Vector) {
            return Ok(None);
        }
        let Expr::Select(c, a, b) = select else {
            return Ok(None);
        };
        let Expr::Binary(op, x, y) = &**c else {
            return Ok(None);
        };
        let dt = vl.dtype();
        let mut texts = Vec::with_capacity(4);
        for p in [x, y, a, b] {
            let (t, pd) = self.expr(p)?;
            texts.push(cast(t, pd, dt));
        }
        Ok(self
            .vector_math(VMath::Select(*op), &[x, y, a, b], &texts)
            .map(|v| (v, dt)))
    }

    /// The C text of `e` (an atom or parenthesised) and the dtype of its value.
    pub(super) fn expr(&mut self, e: &Expr) -> Res<(String, DType)> {
        match e {
            Expr::Int(v, dt) => self.int_const(*v, *dt),
            Expr::Float(x, dt) => self.float_const(*x, *dt),
            Expr::Bool(b) => Ok((if *b { "true" } else { "false" }.to_string(), DType::Bool)),
            Expr::Var(v) => self.var(*v),
            Expr::Binary(op, a, b) => self.binary(*op, a, b),
            Expr::Unary(op, a) => self.unary(*op, a),
            Expr::Select(c, a, b) => {
                if let Some(v) = self.vector_select(e)? {
                    return Ok(v);
                }
                let (c, _) = self.expr(c)?;
                let (x, xd) = self.expr(a)?;
                let (y, yd) = self.expr(b)?;
                let dt = binary_result_dtype(xd, yd);
                Ok((
                    format!("({c} ? {} : {})", cast(x, xd, dt), cast(y, yd, dt)),
                    dt,
                ))
            }
            Expr::Cast(dt, a) => {
                self.ctype(*dt, "cast")?;
                if let Some(v) = self.widening_vector_load(*dt, a)? {
                    return Ok((v, *dt));
                }
                let (s, sdt) = self.expr(a)?;
                Ok((cast(s, sdt, *dt), *dt))
            }
            Expr::Load { buffer, indices } => {
                let dt = match self.func.buffers.get(*buffer) {
                    Some(b) => b.dtype,
                    None => return Err(self.invalid(format!("buffer {buffer:?} is not declared"))),
                };
                if let Some(acc) = &self.simd_acc {
                    if acc.buffer == *buffer && acc.indices == *indices {
                        return Ok((acc.name.clone(), dt));
                    }
                    if let Some((_, local)) = acc.hoisted.iter().find(|(l, _)| l == e) {
                        return Ok((local.clone(), dt));
                    }
                }
                if let Some((subs, u)) = &self.vec_sub {
                    if let Some((_, name)) = subs.iter().find(|(l, _)| l == e) {
                        if dt.bytes() == 2 {
                            // Eight 16-bit elements in four 32-bit words.
                            let word = ["x", "y", "z", "w"].get(*u / 2).copied().unwrap_or("x");
                            let bits = format!("(uint16_t)({name}.{word} >> {})", 16 * (*u % 2));
                            return Ok((half::load_value(dt, bits), dt));
                        }
                        let comp = ["x", "y", "z", "w"].get(*u).copied().unwrap_or("x");
                        return Ok((format!("{name}.{comp}"), dt));
                    }
                }
                if let Some(v) = self.vector_load(*buffer, indices)? {
                    return Ok((v, dt));
                }
                let off = self.offset(*buffer, indices)?;
                let moved = self.prefetch_clamp.as_ref().is_some_and(|(vars, _)| {
                    let mut hit = false;
                    for i in indices {
                        i.visit(&mut |z| {
                            hit |= matches!(z, Expr::Var(v) if vars.contains(v));
                        });
                    }
                    hit
                });
                if moved {
                    let size = self.flat_size(*buffer)?;
                    let off = format!(
                        "sptir_max_i64(0, sptir_min_i64((int64_t)({}), {size} - 1))",
                        strip_parens(&off)
                    );
                    if let Some((_, sizes)) = &mut self.prefetch_clamp {
                        if !sizes.contains(&size) {
                            sizes.push(size);
                        }
                    }
                    let text = format!("{}[{off}]", self.buf_name(*buffer)?);
                    return Ok((half::load_value(dt, text), dt));
                }
                if self.target == Target::Cuda {
                    return Ok((half::load_value(dt, self.cuda_load(*buffer, &off)?), dt));
                }
                let text = format!("{}[{off}]", self.buf_name(*buffer)?);
                Ok((half::load_value(dt, text), dt))
            }
            Expr::Call { op, args, dtype } => self.call(*op, args, *dtype),
            Expr::Let { var, value, body } => {
                let dt = self
                    .func
                    .vars
                    .get(*var)
                    .map(|v| v.dtype)
                    .unwrap_or(DType::I32);
                self.ctype(dt, "let variable")?;
                let (s, sdt) = self.expr(value)?;
                if self.bound.get(var.index()).copied().unwrap_or(false)
                    || self.let_subst.contains_key(var)
                {
                    return Err(self.invalid("a `let` variable is bound again inside its scope"));
                }
                self.let_subst.insert(*var, cast(s, sdt, dt));
                let r = self.expr(body);
                self.let_subst.remove(var);
                r
            }
        }
    }

    pub(super) fn var(&mut self, v: VarId) -> Res<(String, DType)> {
        let Some(var) = self.func.vars.get(v) else {
            return Err(self.invalid(format!("variable {v:?} is not declared")));
        };
        if let Some(s) = self.let_subst.get(&v) {
            return Ok((s.clone(), var.dtype));
        }
        if var.dtype == DType::Handle {
            return Err(self.unsupported(
                &format!("handle `{}`", var.name),
                "a handle cannot be used as a value",
            ));
        }
        if !self.bound[v.index()] {
            return Err(self.invalid(format!(
                "variable `{}` is used where it has no value",
                var.name
            )));
        }
        Ok((self.var_names[v.index()].clone(), var.dtype))
    }

    pub(super) fn int_const(&mut self, v: i64, dt: DType) -> Res<(String, DType)> {
        if half::is_half(dt) {
            self.ctype(dt, "constant")?;
            return Ok((half::round_to(dt, &format!("((float)({v}))")), dt));
        }
        if dt.is_float() {
            self.ctype(dt, "constant")?;
            return Ok((format!("(({})({v}))", c_type(dt).unwrap_or("double")), dt));
        }
        if dt == DType::Handle {
            return Err(self.unsupported("constant", "a constant cannot be a handle"));
        }
        Ok((int_literal(v, dt), dt))
    }

    pub(super) fn float_const(&mut self, x: f64, dt: DType) -> Res<(String, DType)> {
        if !dt.is_float() {
            // An integer-typed float literal: the evaluator converts it (truncating).
            if dt.is_bool() {
                return Ok((if x != 0.0 { "true" } else { "false" }.to_string(), dt));
            }
            return self.int_const(x as i64, dt);
        }
        self.ctype(dt, "constant")?;
        if half::is_half(dt) {
            return Ok((half::round_to(dt, &float_literal(x, DType::F32)), dt));
        }
        Ok((float_literal(x, dt), dt))
    }

    pub(super) fn binary(&mut self, op: BinOp, a: &Expr, b: &Expr) -> Res<(String, DType)> {
        let (x, xd) = self.expr(a)?;
        let (y, yd) = self.expr(b)?;
        if op.is_logical() {
            let sym = if op == BinOp::And { "&&" } else { "||" };
            return Ok((format!("({x} {sym} {y})"), DType::Bool));
        }
        if op.is_bitwise() && !(xd.is_integer() && yd.is_integer()) {
            return Err(self.invalid(format!(
                "operator `{}` takes integers, got {xd} and {yd}",
                op.symbol().unwrap_or("?")
            )));
        }
        if matches!(op, BinOp::Shl | BinOp::Shr) {
            return self.shift(op, (x, xd), (y, yd));
        }
        let mut dt = binary_result_dtype(xd, yd);
        if dt.is_bool() {
            dt = DType::I32;
        }
        self.ctype(dt, "operand")?;
        if op.is_comparison() {
            let sym = match op {
                BinOp::Eq => "==",
                BinOp::Ne => "!=",
                BinOp::Lt => "<",
                BinOp::Le => "<=",
                BinOp::Gt => ">",
                _ => ">=",
            };
            return Ok((
                format!("({} {sym} {})", cast(x, xd, dt), cast(y, yd, dt)),
                DType::Bool,
            ));
        }
        let work = work_dtype(dt);
        let (x, y) = (cast(x, xd, work), cast(y, yd, work));
        let sfx = helper_suffix(dt);
        let divides = matches!(op, BinOp::Div | BinOp::FloorDiv | BinOp::FloorMod);
        if divides && dt.is_integer() && !safe_divisor(b, dt) {
            // Neither a trap nor undefined behaviour: see the `_chk` helpers of the preludes.
            let name = match op {
                BinOp::Div => "div",
                BinOp::FloorDiv => "floordiv",
                _ => "floormod",
            };
            let status = if self.target == Target::Cuda {
                ""
            } else {
                ", &sptir_status"
            };
            let text = format!("sptir_{name}_chk_{sfx}({x}, {y}{status})");
            return Ok((cast(text, work, dt), dt));
        }
        if let Some(fun) = VMath::extreme(op).filter(|_| work.is_float()) {
            if let Some(v) = self.vector_math(fun, &[a, b], &[x.clone(), y.clone()]) {
                return Ok((v, dt));
            }
        }
        let text = match op {
            BinOp::Add => format!("({x} + {y})"),
            BinOp::Sub => format!("({x} - {y})"),
            BinOp::Mul => format!("({x} * {y})"),
            BinOp::Div => format!("({x} / {y})"),
            BinOp::FloorDiv if dt.is_uint() => format!("({x} / {y})"),
            BinOp::FloorMod if dt.is_uint() => format!("({x} % {y})"),
            BinOp::FloorDiv => format!("sptir_floordiv_{sfx}({x}, {y})"),
            BinOp::FloorMod => format!("sptir_floormod_{sfx}({x}, {y})"),
            BinOp::Min if work == DType::F32 => format!("fminf({x}, {y})"),
            BinOp::Min if work == DType::F64 => format!("fmin({x}, {y})"),
            BinOp::Max if work == DType::F32 => format!("fmaxf({x}, {y})"),
            BinOp::Max if work == DType::F64 => format!("fmax({x}, {y})"),
            BinOp::Min => format!("sptir_min_{sfx}({x}, {y})"),
            BinOp::BitAnd => format!("({x} & {y})"),
            BinOp::BitOr => format!("({x} | {y})"),
            BinOp::BitXor => format!("({x} ^ {y})"),
            _ => format!("sptir_max_{sfx}({x}, {y})"),
        };
        Ok((cast(text, work, dt), dt))
    }

    /// `x << y` / `x >> y` with the IR's meaning: `x`'s type, the amount modulo its width, `<<`
    /// of a signed value through its unsigned counterpart (no undefined behaviour in C).
    fn shift(&mut self, op: BinOp, x: (String, DType), y: (String, DType)) -> Res<(String, DType)> {
        let (x, xd) = x;
        let (y, yd) = y;
        let dt = xd;
        self.ctype(dt, "operand")?;
        let work = work_dtype(dt);
        let x = cast(x, xd, work);
        let amount = format!("((int){} & {})", cast(y, yd, DType::I64), dt.bits() - 1);
        let text = match (op, work) {
            (BinOp::Shl, DType::I32) => format!("((int32_t)((uint32_t){x} << {amount}))"),
            (BinOp::Shl, DType::I64) => format!("((int64_t)((uint64_t){x} << {amount}))"),
            (BinOp::Shl, _) => format!("({x} << {amount})"),
            _ => format!("({x} >> {amount})"),
        };
        Ok((cast(text, work, dt), dt))
    }

    pub(super) fn unary(&mut self, op: UnOp, a: &Expr) -> Res<(String, DType)> {
        let (x, dt) = self.expr(a)?;
        match op {
            UnOp::Not => Ok((format!("(!{x})"), DType::Bool)),
            UnOp::Neg => {
                let rdt = if dt.is_bool() { DType::I32 } else { dt };
                self.ctype(rdt, "operand")?;
                let work = work_dtype(rdt);
                let x = cast(x, dt, work);
                Ok((cast(format!("(-{x})"), work, rdt), rdt))
            }
        }
    }

    /// `T.atomic_add(X[i], v)` as a value: adds `v` to the integer element atomically and
    /// gives the element's value before (the staged assembly takes blocks of its staging area
    /// this way). Float elements are added by the statement form only.
    fn atomic_fetch_add(&mut self, args: &[Expr], dt: DType) -> Res<(String, DType)> {
        let [Expr::Load { buffer, indices }, value] = args else {
            return Err(self.invalid("`atomic_add` takes a buffer element `A[idx]` and a value"));
        };
        let bdt = self.buf_dtype(*buffer);
        if self.target == Target::Cuda || !bdt.is_integer() || bdt.is_bool() {
            return Err(self.unsupported(
                "atomic_add",
                format!(
                    "the value of `atomic_add` (the element before the addition) is supported for \
                     integer buffers on the C target; here the buffer is {bdt}{}",
                    if self.target == Target::Cuda {
                        " on CUDA"
                    } else {
                        ""
                    }
                ),
            ));
        }
        let (v, vdt) = self.expr(value)?;
        let off = self.offset(*buffer, indices)?;
        let name = self.buf_name(*buffer)?.to_string();
        let v = cast(v, vdt, bdt);
        let old = format!(
            "__atomic_fetch_add(&{name}[{off}], {}, __ATOMIC_RELAXED)",
            strip_parens(&v)
        );
        Ok((cast(old, bdt, dt), dt))
    }

    pub(super) fn call(&mut self, op: Intrinsic, args: &[Expr], dt: DType) -> Res<(String, DType)> {
        match op {
            Intrinsic::SortRange => {
                return Err(self.unsupported(
                    "sort_range",
                    "`sort_range` is a statement (`T.evaluate(T.sort_range(X[i], n))`)",
                ))
            }
            Intrinsic::AtomicAdd => return self.atomic_fetch_add(args, dt),
            Intrinsic::MinValue | Intrinsic::MaxValue => {
                let max = op == Intrinsic::MaxValue;
                self.ctype(dt, op.name())?;
                return Ok((limit_literal(dt, max), dt));
            }
            Intrinsic::Ctz => return self.ctz(args, dt),
            Intrinsic::Mask64 => return self.mask64(args, dt),
            Intrinsic::Popcount => return self.popcount(args, dt),
            Intrinsic::Compress64 | Intrinsic::CompressIota64 | Intrinsic::CopyRange => {
                return Err(self.unsupported(
                    op.name(),
                    format!(
                        "`{}` is a statement (`T.evaluate(T.{}(D[i], ..., mask))`)",
                        op.name(),
                        op.name()
                    ),
                ))
            }
            _ => {}
        }
        if args.len() != op.arity() {
            return Err(self.invalid(format!(
                "intrinsic `{}` takes {} argument(s), got {}",
                op.name(),
                op.arity(),
                args.len()
            )));
        }
        self.ctype(dt, op.name())?;
        let mut xs = Vec::with_capacity(args.len());
        for a in args {
            xs.push(self.expr(a)?);
        }
        if op == Intrinsic::Exp && dt == DType::F32 {
            let texts: Vec<String> = xs.iter().map(|(s, d)| cast(s.clone(), *d, dt)).collect();
            let refs: Vec<&Expr> = args.iter().collect();
            if let Some(v) = self.vector_math(VMath::Exp, &refs, &texts) {
                return Ok((v, dt));
            }
        }
        if half::is_half(dt) {
            let xs: Vec<String> = xs
                .into_iter()
                .map(|(s, d)| cast(s, d, DType::F32))
                .collect();
            return Ok((half::round_to(dt, &float_call(op, &xs, DType::F32)), dt));
        }
        if dt.is_float() {
            let xs: Vec<String> = xs.into_iter().map(|(s, d)| cast(s, d, dt)).collect();
            return Ok((float_call(op, &xs, dt), dt));
        }
        // Integer (or bool) results.
        match op {
            Intrinsic::Abs | Intrinsic::Floor | Intrinsic::Ceil | Intrinsic::Round => {
                let (s, sdt) = xs.swap_remove(0);
                let work = if dt.is_bool() { DType::I64 } else { dt };
                let v = cast(s, sdt, work);
                let v = if op == Intrinsic::Abs && work.is_int() {
                    format!("sptir_abs_{}({v})", helper_suffix(work))
                } else {
                    v
                };
                Ok((cast(v, work, dt), dt))
            }
            _ => {
                let xs: Vec<String> = xs
                    .into_iter()
                    .map(|(s, d)| cast(s, d, DType::F64))
                    .collect();
                Ok((cast(float_call(op, &xs, DType::F64), DType::F64, dt), dt))
            }
        }
    }
}

impl<'f> Writer<'f> {
    /// `T.mask64(X[i])` on the C target: the prelude's `sptir_mask64` over the 64 bytes from
    /// `X[i]` (8-bit integer buffers).
    fn mask64(&mut self, args: &[Expr], dt: DType) -> Res<(String, DType)> {
        let [Expr::Load { buffer, indices }] = args else {
            return Err(self.invalid("`mask64` takes one buffer element `X[idx]`"));
        };
        let bdt = self.buf_dtype(*buffer);
        if self.target == Target::Cuda || !(bdt.is_integer() && bdt.bits() == 8) {
            return Err(self.unsupported(
                "mask64",
                format!(
                    "`mask64` reads 8-bit integer buffers on the C target (here {bdt}{})",
                    if self.target == Target::Cuda {
                        ", on CUDA"
                    } else {
                        ""
                    }
                ),
            ));
        }
        self.ctype(dt, "mask64")?;
        self.uses_mask64 = true;
        let off = self.offset(*buffer, indices)?;
        let name = self.buf_name(*buffer)?.to_string();
        Ok((
            cast(format!("sptir_mask64(&{name}[{off}])"), DType::U64, dt),
            dt,
        ))
    }

    /// The operand of a bit-counting intrinsic (`ctz`, `popcount`) as an unsigned C value of
    /// 32 or 64 bits holding only the operand's own bits, with the operand's width and whether
    /// it takes 64 bits.
    fn bit_operand(&mut self, name: &str, args: &[Expr], dt: DType) -> Res<(String, u32, bool)> {
        let [a] = args else {
            return Err(self.invalid(format!("`{name}` takes one argument")));
        };
        let (x, xd) = self.expr(a)?;
        if !xd.is_integer() || !dt.is_integer() {
            return Err(self.invalid(format!(
                "`{name}` takes and gives integers, got {xd} -> {dt}"
            )));
        }
        self.ctype(dt, name)?;
        let bits = xd.bits();
        let wide = bits > 32;
        let u = if wide {
            "unsigned long long"
        } else {
            "unsigned int"
        };
        let v = format!(
            "(({u}){})",
            cast(x, xd, if wide { DType::U64 } else { DType::U32 })
        );
        // Narrow types: only their own bits count.
        let v = if bits < 32 {
            format!("({v} & {}u)", (1u64 << bits) - 1)
        } else {
            v
        };
        Ok((v, bits, wide))
    }

    /// `T.ctz(x)`: trailing zero bits of integer `x`, its width when `x` is 0.
    fn ctz(&mut self, args: &[Expr], dt: DType) -> Res<(String, DType)> {
        let (v, bits, wide) = self.bit_operand("ctz", args, dt)?;
        let count = match (self.target, wide) {
            (Target::Cuda, true) => format!("(__ffsll((long long){v}) - 1)"),
            (Target::Cuda, false) => format!("(__ffs((int){v}) - 1)"),
            (_, true) => format!("__builtin_ctzll({v})"),
            (_, false) => format!("__builtin_ctz({v})"),
        };
        let text = format!("(({v}) == 0 ? {bits} : {count})");
        Ok((cast(text, DType::I32, dt), dt))
    }

    /// `T.popcount(x)`: the set bits of integer `x` (of its own width).
    fn popcount(&mut self, args: &[Expr], dt: DType) -> Res<(String, DType)> {
        let (v, _, wide) = self.bit_operand("popcount", args, dt)?;
        let count = match (self.target, wide) {
            (Target::Cuda, true) => format!("__popcll({v})"),
            (Target::Cuda, false) => format!("__popc({v})"),
            (_, true) => format!("__builtin_popcountll({v})"),
            (_, false) => format!("__builtin_popcount({v})"),
        };
        Ok((cast(count, DType::I32, dt), dt))
    }
}

/// The type arithmetic on `dt` values is written in: narrow unsigned types in uint32_t (C would
/// promote them to int, where a product can overflow), narrow signed ones in int32_t, 16-bit
/// floats in float (rounded back, see `half`); results are converted back to `dt`.
fn work_dtype(dt: DType) -> DType {
    match dt {
        DType::U8 | DType::U16 => DType::U32,
        DType::I8 | DType::I16 => DType::I32,
        DType::F16 | DType::BF16 => DType::F32,
        d => d,
    }
}

/// A float intrinsic applied to already converted arguments, in the precision of `dt`.
pub(super) fn float_call(op: Intrinsic, xs: &[String], dt: DType) -> String {
    let f = if dt == DType::F32 { "f" } else { "" };
    let one = if dt == DType::F32 { "1.0f" } else { "1.0" };
    let a = xs.first().map(String::as_str).unwrap_or("0");
    let b = xs.get(1).map(String::as_str).unwrap_or("0");
    match op {
        Intrinsic::Exp => format!("exp{f}({a})"),
        Intrinsic::Exp2 => format!("exp2{f}({a})"),
        Intrinsic::Log => format!("log{f}({a})"),
        Intrinsic::Log2 => format!("log2{f}({a})"),
        Intrinsic::Sqrt => format!("sqrt{f}({a})"),
        Intrinsic::Rsqrt => format!("({one} / sqrt{f}({a}))"),
        Intrinsic::Tanh => format!("tanh{f}({a})"),
        Intrinsic::Sigmoid => format!("({one} / ({one} + exp{f}(-{a})))"),
        Intrinsic::Abs => format!("fabs{f}({a})"),
        Intrinsic::Pow => format!("pow{f}({a}, {b})"),
        Intrinsic::Floor => format!("floor{f}({a})"),
        Intrinsic::Ceil => format!("ceil{f}({a})"),
        Intrinsic::Round => format!("round{f}({a})"),
        Intrinsic::Sin => format!("sin{f}({a})"),
        Intrinsic::Cos => format!("cos{f}({a})"),
        // The evaluator computes erf in double precision and rounds.
        Intrinsic::Erf if dt == DType::F32 => format!("((float)erf((double){a}))"),
        Intrinsic::Erf => format!("erf({a})"),
        Intrinsic::MinValue
        | Intrinsic::MaxValue
        | Intrinsic::AtomicAdd
        | Intrinsic::SortRange
        | Intrinsic::Ctz
        | Intrinsic::Popcount
        | Intrinsic::Compress64
        | Intrinsic::CompressIota64
        | Intrinsic::CopyRange
        | Intrinsic::Mask64 => "0".to_string(),
    }
}

/// Converts C text of dtype `from` to `to`, with the evaluator's conversions: anything → bool
/// tests for nonzero, float → narrow integer goes through `int64_t` (so out-of-range values wrap
/// like the evaluator's instead of being undefined).
pub(super) fn cast(s: String, from: DType, to: DType) -> String {
    if from == to {
        return s;
    }
    // A 16-bit float value is a C `float` (see `half`): converting from one is converting from
    // float; converting to one rounds.
    if half::is_half(to) {
        let f = cast(s, from, DType::F32);
        return half::round_to(to, &f);
    }
    let from = if half::is_half(from) {
        DType::F32
    } else {
        from
    };
    if from == to {
        return s;
    }
    let ct = c_type(to).unwrap_or("double");
    if from.is_float() && to.is_integer() && to != DType::I64 && to != DType::U64 {
        return format!("(({ct})(int64_t){s})");
    }
    format!("(({ct}){s})")
}

/// An integer constant of dtype `dt`, wrapped to its width, as C text of that type.
pub(super) fn int_literal(v: i64, dt: DType) -> String {
    match dt {
        DType::Bool => (if v != 0 { "true" } else { "false" }).to_string(),
        DType::I64 => {
            if v == i64::MIN {
                "INT64_MIN".to_string()
            } else if v < 0 {
                format!("(-INT64_C({}))", -v)
            } else {
                format!("INT64_C({v})")
            }
        }
        DType::U64 => format!("UINT64_C({})", v as u64),
        DType::I32 => {
            let v = v as i32;
            if v == i32::MIN {
                "INT32_MIN".to_string()
            } else if v < 0 {
                format!("(-{})", -v)
            } else {
                v.to_string()
            }
        }
        DType::U32 => format!("{}u", v as u32),
        DType::I16 => format!("((int16_t){})", wrap_paren(v as i16 as i64)),
        DType::I8 => format!("((int8_t){})", wrap_paren(v as i8 as i64)),
        DType::U16 => format!("((uint16_t){})", v as u16),
        DType::U8 => format!("((uint8_t){})", v as u8),
        DType::F32 => format!("((float){})", wrap_paren(v)),
        _ => format!("((double){})", wrap_paren(v)),
    }
}

pub(super) fn wrap_paren(v: i64) -> String {
    if v < 0 {
        format!("({v})")
    } else {
        v.to_string()
    }
}

/// A float constant of a float dtype: the shortest decimal that reads back to the same value
/// (`f` suffix for float32), or `INFINITY`/`NAN`.
pub(super) fn float_literal(x: f64, dt: DType) -> String {
    let f32_ = dt == DType::F32;
    let cty = if f32_ { "float" } else { "double" };
    if x.is_nan() {
        return format!("(({cty})NAN)");
    }
    if x.is_infinite() {
        let sign = if x < 0.0 { "-" } else { "" };
        return format!("({sign}({cty})INFINITY)");
    }
    let text = if f32_ {
        format!("{:?}f", x as f32)
    } else {
        format!("{x:?}")
    };
    if text.starts_with('-') {
        format!("({text})")
    } else {
        text
    }
}

/// The lowest (`max = false`) or highest finite value of `dt`.
pub(super) fn limit_literal(dt: DType, max: bool) -> String {
    let s = match (dt, max) {
        (DType::Bool, m) => return (if m { "true" } else { "false" }).to_string(),
        (DType::F32, false) => "(-FLT_MAX)",
        (DType::F32, true) => "FLT_MAX",
        (DType::F64, false) => "(-DBL_MAX)",
        (DType::F64, true) => "DBL_MAX",
        (DType::F16, false) => "(-65504.0f)",
        (DType::F16, true) => "65504.0f",
        (DType::BF16, false) => "(-3.38953139e38f)",
        (DType::BF16, true) => "3.38953139e38f",
        (DType::I8, false) => "((int8_t)INT8_MIN)",
        (DType::I8, true) => "((int8_t)INT8_MAX)",
        (DType::I16, false) => "((int16_t)INT16_MIN)",
        (DType::I16, true) => "((int16_t)INT16_MAX)",
        (DType::I32, false) => "INT32_MIN",
        (DType::I32, true) => "INT32_MAX",
        (DType::I64, false) => "INT64_MIN",
        (DType::I64, true) => "INT64_MAX",
        (DType::U8, false) => "((uint8_t)0)",
        (DType::U8, true) => "((uint8_t)UINT8_MAX)",
        (DType::U16, false) => "((uint16_t)0)",
        (DType::U16, true) => "((uint16_t)UINT16_MAX)",
        (DType::U32, false) => "0u",
        (DType::U32, true) => "UINT32_MAX",
        (DType::U64, false) => "UINT64_C(0)",
        (DType::U64, true) => "UINT64_MAX",
        _ => "0",
    };
    s.to_string()
}

/// Whether integer division by `b` can neither divide by zero nor overflow (`MIN / -1`): a
/// constant other than 0 (and, signed, other than -1).
fn safe_divisor(b: &Expr, dt: DType) -> bool {
    match sparsetir_ir::scalar::constant(b) {
        Some(v) if !v.is_float() => {
            let v = v.as_i128();
            v != 0 && (dt.is_uint() || v != -1)
        }
        _ => false,
    }
}
