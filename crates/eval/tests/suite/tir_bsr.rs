//! The RFC's BSR × dense example at stage II (sparse buffers in position space) and stage III
//! (flat dense buffers), run by the stage II/III interpreter on random BSR data and compared
//! with a dense matrix product computed here.

use crate::tir_common;

use tir_common::*;

const STAGE_II: &str = include_str!("../../../syntax/tests/scripts/bsrmm_stage_ii.py");
const STAGE_III: &str = include_str!("../../../syntax/tests/scripts/bsrmm_stage_iii.py");

struct Case {
    nb: usize,
    mb: usize,
    blk: usize,
    feat: usize,
    indptr: Vec<i64>,
    indices: Vec<i64>,
    a: Vec<f64>,
    b: Vec<f64>,
}

fn case(seed: u64, nb: usize, mb: usize, blk: usize, feat: usize) -> Case {
    let mut rng = Rng::new(seed);
    let (indptr, indices) = random_pattern(&mut rng, nb, mb);
    let nnzb = indices.len();
    let a = (0..nnzb * blk * blk).map(|_| rng.small()).collect();
    let b = (0..mb * blk * feat).map(|_| rng.small()).collect();
    Case {
        nb,
        mb,
        blk,
        feat,
        indptr,
        indices,
        a,
        b,
    }
}

/// C = A · B with A expanded to a dense `(nb·blk) × (mb·blk)` matrix.
fn dense_reference(c: &Case) -> Vec<f64> {
    let (rows, cols) = (c.nb * c.blk, c.mb * c.blk);
    let mut a = vec![0.0; rows * cols];
    for i in 0..c.nb {
        for p in c.indptr[i] as usize..c.indptr[i + 1] as usize {
            let j = c.indices[p] as usize;
            for bi in 0..c.blk {
                for bj in 0..c.blk {
                    a[(i * c.blk + bi) * cols + j * c.blk + bj] =
                        c.a[(p * c.blk + bi) * c.blk + bj];
                }
            }
        }
    }
    let mut out = vec![0.0; rows * c.feat];
    for r in 0..rows {
        for f in 0..c.feat {
            let mut s = 0.0;
            for k in 0..cols {
                s += a[r * cols + k] * c.b[k * c.feat + f];
            }
            out[r * c.feat + f] = s;
        }
    }
    out
}

fn run_case(src: &str, c: &Case) -> Vec<f64> {
    let f = parse(src);
    let nnzb = c.indices.len();
    // C starts with garbage: the init of block `bsrmm0` must overwrite every element.
    let c0 = vec![3.5; c.nb * c.blk * c.feat];
    let mut a = args(vec![
        ("a", f32_arr(&c.a)),
        ("b", f32_arr(&c.b)),
        ("c", f32_arr(&c0)),
        ("indptr", i32_arr(&c.indptr)),
        ("indices", i32_arr(&c.indices)),
        ("nb", int(c.nb as i64)),
        ("mb", int(c.mb as i64)),
        ("nnzb", int(nnzb as i64)),
        ("blk", int(c.blk as i64)),
        ("feat_size", int(c.feat as i64)),
    ]);
    let before = a.clone();
    run(&f, &mut a);
    for name in ["a", "b", "indptr", "indices"] {
        assert_eq!(a.get(name), before.get(name), "`{name}` must not change");
    }
    out(&a, "c")
}

#[test]
fn bsrmm_stage_ii_and_iii_match_dense() {
    let shapes = [
        (4, 5, 2, 3),
        (3, 3, 3, 2),
        (5, 4, 1, 4),
        (1, 1, 2, 2),
        (3, 1, 2, 1),
    ];
    for (seed, &(nb, mb, blk, feat)) in shapes.iter().enumerate() {
        let c = case(seed as u64 + 1, nb, mb, blk, feat);
        let want = dense_reference(&c);
        assert_close(
            &run_case(STAGE_II, &c),
            &want,
            &format!("stage II case {seed}"),
        );
        assert_close(
            &run_case(STAGE_III, &c),
            &want,
            &format!("stage III case {seed}"),
        );
    }
}

#[test]
fn bsrmm_empty_matrix() {
    // No stored block at all: every output element is the init value 0.
    let c = Case {
        nb: 2,
        mb: 3,
        blk: 2,
        feat: 2,
        indptr: vec![0, 0, 0],
        indices: vec![],
        a: vec![],
        b: vec![1.0; 12],
    };
    assert_eq!(run_case(STAGE_II, &c), vec![0.0; 8]);
    assert_eq!(run_case(STAGE_III, &c), vec![0.0; 8]);
}

#[test]
fn bsrmm_hand_checked() {
    // One 2×2 block at block position (0, 1) of a 1×2 block matrix; B = 4×1 column [1, 2, 3, 4].
    // A = [[0 0 | 1 2], [0 0 | 3 4]] → C = [1·3 + 2·4, 3·3 + 4·4] = [11, 25].
    let c = Case {
        nb: 1,
        mb: 2,
        blk: 2,
        feat: 1,
        indptr: vec![0, 1],
        indices: vec![1],
        a: vec![1.0, 2.0, 3.0, 4.0],
        b: vec![1.0, 2.0, 3.0, 4.0],
    };
    assert_eq!(run_case(STAGE_II, &c), vec![11.0, 25.0]);
    assert_eq!(run_case(STAGE_III, &c), vec![11.0, 25.0]);
}
