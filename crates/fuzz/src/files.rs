//! Target `files`: the `.mtx`, `.tns` and `.npy` readers on mutated bytes, and what they read
//! bound to the catalog's csrmm (a 2-D COO as `A`, a tensor as `B`) and evaluated, as
//! `sparsetir run --bind` does.

use sparsetir_eval::eval_func;
use sparsetir_formats::mtx::parse_mtx;
use sparsetir_formats::npy::{read_npy_bytes, write_npy_bytes};
use sparsetir_formats::tns::parse_tns;
use sparsetir_formats::{Coo, Tensor};
use sparsetir_ir::DType;
use sparsetir_runtime::Binder;

use crate::mutate::{Mutator, INTERESTING_INTS};

/// Seed files: Matrix Market (coordinate/array, real/integer/pattern/complex-less,
/// general/symmetric/skew), FROSTT and `.npy` of several dtypes and ranks.
pub fn seeds() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = [
        "%%MatrixMarket matrix coordinate real general\n% comment\n3 4 5\n1 1 1.5\n1 3 -2\n2 2 3e0\n3 1 4\n3 4 0.25\n",
        "%%MatrixMarket matrix coordinate pattern general\n2 2 3\n1 1\n1 2\n2 2\n",
        "%%MatrixMarket matrix coordinate integer symmetric\n3 3 3\n1 1 2\n2 1 -1\n3 2 7\n",
        "%%MatrixMarket matrix coordinate real skew-symmetric\n3 3 2\n2 1 1.0\n3 1 -2.5\n",
        "%%MatrixMarket matrix array real general\n2 3\n1\n2\n3\n4\n5\n6\n",
        "%%MatrixMarket matrix array real symmetric\n2 2\n1\n2\n3\n",
        "%%MatrixMarket matrix coordinate real general\n1 1 0\n",
        "1 1 1 1.0\n1 2 3 -2.0\n2 1 2 0.5\n3 3 3 4\n",
        "# a comment\n1 1 1.0\n2 2 2.0\n",
        "1 2 3 4 5.0\n",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    let tensors = [
        Tensor::from_f64(DType::F32, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]),
        Tensor::from_f64(DType::F64, &[0.5, -1.0, 2.0]),
        Tensor::from_i64(DType::I32, &[0, 2, 3, 5]),
        Tensor::from_i64(DType::I64, &[1, 0]),
    ];
    for (k, t) in tensors.into_iter().enumerate() {
        let Ok(mut t) = t else { continue };
        if k == 0 {
            t.shape = vec![4, 2];
        }
        if let Ok(b) = write_npy_bytes(&t) {
            out.push(b);
        }
    }
    out
}

/// Data-aware mutation: numbers in text files get interesting values, `.npy` headers get
/// their shape/dtype fields edited, otherwise bytes are mutated.
pub fn mutate(m: &mut Mutator, seed: &[u8]) -> Vec<u8> {
    let mut v = seed.to_vec();
    if v.starts_with(b"\x93NUMPY") && m.chance(0.5) {
        let header_end = v.iter().position(|&b| b == b'\n').unwrap_or(v.len());
        let header = String::from_utf8_lossy(&v[..header_end]).into_owned();
        let edited = match m.below(4) {
            0 => header.replacen(
                |c: char| c.is_ascii_digit(),
                &m.pick(INTERESTING_INTS).to_string(),
                1,
            ),
            1 => {
                let f4 = *m.pick::<&str>(&["<i4", "<f8", "|b1", "<c8", "<U4", "|O", ">f4"]);
                let f8 = *m.pick::<&str>(&["<f2", "<i8", "<V2", "|u1"]);
                header.replace("<f4", f4).replace("<f8", f8)
            }
            2 => header.replace("False", "True"),
            _ => header.replace("(", "(0, "),
        };
        let mut out = edited.into_bytes();
        out.extend_from_slice(&v[header_end.min(v.len())..]);
        if m.chance(0.3) {
            let cut = m.below(out.len() + 1);
            out.truncate(cut);
        }
        return out;
    }
    if std::str::from_utf8(&v).is_ok() && m.chance(0.6) {
        let text = String::from_utf8_lossy(&v).into_owned();
        let mut s = m.script(&text, &[]);
        if m.chance(0.5) {
            // Replace one number with an extreme one.
            let nums: Vec<(usize, usize)> = number_spans(&s);
            if !nums.is_empty() {
                let (a, b) = *m.pick(&nums);
                let r = m.pick(&[
                    "0",
                    "-1",
                    "4294967297",
                    "1e999",
                    "nan",
                    "-inf",
                    "99999999999",
                ]);
                s.replace_range(a..b, r);
            }
        }
        return s.into_bytes();
    }
    m.bytes(&mut v);
    v
}

fn number_spans(s: &str) -> Vec<(usize, usize)> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            let st = i;
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.' || b[i] == b'e') {
                i += 1;
            }
            out.push((st, i));
        } else {
            i += 1;
        }
    }
    out
}

/// Runs every reader on the bytes, and binds what they read.
pub fn execute(bytes: &[u8]) -> Result<(), String> {
    if let Ok(text) = std::str::from_utf8(bytes) {
        if let Ok(coo) = parse_mtx(text) {
            crate::deep();
            check_coo(&coo, "mtx")?;
            bind_coo(&coo);
        }
        if let Ok(coo) = parse_tns(text) {
            crate::deep();
            check_coo(&coo, "tns")?;
            bind_coo(&coo);
        }
    }
    if let Ok(t) = read_npy_bytes(bytes) {
        crate::deep();
        let n: Option<usize> = t.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        if n != Some(t.len()) {
            return Err(format!("npy tensor shape {:?} holds {}", t.shape, t.len()));
        }
        bind_dense(t);
    }
    Ok(())
}

/// What a reader returns must be a valid COO.
fn check_coo(coo: &Coo, what: &str) -> Result<(), String> {
    coo.validate()
        .map_err(|e| format!("{what} reader returned an invalid COO: {e}"))
}

fn csrmm() -> &'static sparsetir_ir::PrimFunc {
    static F: std::sync::OnceLock<sparsetir_ir::PrimFunc> = std::sync::OnceLock::new();
    F.get_or_init(|| sparsetir_ops::load("csrmm").expect("catalog csrmm"))
}

fn bind_coo(coo: &Coo) {
    let f = csrmm();
    let mut b = Binder::new(f);
    if b.bind_coo("A", coo).is_err() {
        return;
    }
    let _ = b.set("feat_size", "2");
    if let Ok(mut args) = b.finish() {
        let _ = eval_func(f, &mut args);
    }
}

fn bind_dense(t: Tensor) {
    let f = csrmm();
    let mut b = Binder::new(f);
    let a = Coo {
        dims: vec![2, 3],
        coords: vec![vec![0, 1], vec![1, 2]],
        values: vec![1.0, 2.0],
        field: sparsetir_formats::Field::Real,
    };
    if b.bind_coo("A", &a).is_err() || b.bind_tensor("B", t).is_err() {
        return;
    }
    if let Ok(mut args) = b.finish() {
        let _ = eval_func(f, &mut args);
    }
}
