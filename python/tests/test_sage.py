"""The GraphSAGE example: a short training run on Planetoid cora with the mean and the max
aggregation (the latter differentiating through the max kernels' backward; skipped when
../shared/data is absent), and its torch baseline's scatter path (the aggregation off the CPU)
against torch.sparse.mm's reductions on the CPU."""

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from conftest import DATA  # noqa: E402

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
sys.path.insert(0, EXAMPLES)
import sage  # noqa: E402


@pytest.mark.skipif(not os.path.isdir(os.path.join(DATA, "planetoid-cora")),
                    reason="../shared/data/planetoid-cora is absent")
@pytest.mark.parametrize("aggr", ["mean", "max"])
def test_short_sage_run_on_cora(aggr):
    out = subprocess.run(
        [sys.executable, os.path.join(EXAMPLES, "sage.py"), "--data",
         os.path.join(DATA, "planetoid-cora"), "--aggr", aggr, "--epochs", "60", "--json"],
        capture_output=True, text=True, timeout=300, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert (r["dataset"], r["aggr"], r["seeds"]) == ("cora", aggr, 1)
    # GraphSAGE reaches about 79% on cora's public split; 60 epochs are enough to pass 75%.
    assert r["test_accuracy"] >= 0.75, r


@pytest.mark.parametrize("aggr", ["max", "min", "mean"])
def test_scatter_aggregation_matches_torch_sparse_mm_on_cpu(aggr):
    """sage.py's torch baseline off the CPU (scatter_reduce, as PyG) gives, on the CPU, the
    values and the gradients in H of torch.sparse.mm(A, H, reduce), rows without neighbours
    included (0 in both)."""
    g = torch.Generator().manual_seed(0)
    dense = torch.rand(7, 9, generator=g, dtype=torch.float64) + 0.5
    dense[torch.rand(7, 9, generator=g) < 0.6] = 0
    dense[2] = 0  # an empty row
    dense[:, 4] = 0  # a node nobody aggregates from: its gradient is 0
    dense[5, 1] = -1.5  # a negative weight: its products change sign
    A = dense.to_sparse_csr()
    assert (A.crow_indices().diff() == 0).any() and A.values().numel() > 7
    H = torch.randn(9, 5, generator=g, dtype=torch.float64, requires_grad=True)
    G = torch.randn(7, 5, generator=g, dtype=torch.float64)

    reduce = sage.TORCH_REDUCE[aggr]
    expect = torch.sparse.mm(A, H, reduce)
    (grad_expect,) = torch.autograd.grad((expect * G).sum(), H)
    for got in (sage.scatter_spmm(A, H, reduce), sage.torch_spmm(A, H, aggr, scatter=True)):
        (grad_got,) = torch.autograd.grad((got * G).sum(), H)
        assert torch.allclose(got, expect), (got, expect)
        assert torch.allclose(grad_got, grad_expect), (grad_got, grad_expect)
        assert torch.equal(got[2], torch.zeros(5, dtype=torch.float64))
        assert torch.equal(grad_got[4], torch.zeros(5, dtype=torch.float64))
    # Not a vacuous comparison: the rows hold the reduction, not the sum (but for one entry).
    if aggr != "mean":
        assert not torch.allclose(expect, torch.sparse.mm(A, H, "sum"))


def test_torch_spmm_keeps_torch_sparse_mm_on_the_cpu():
    """On the CPU the torch baseline is torch.sparse.mm, sums included, unless told otherwise."""
    A = torch.tensor([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0], [0.0, 3.0, 0.0]]).to_sparse_csr()
    H = torch.arange(6.0).reshape(3, 2)
    assert torch.equal(sage.torch_spmm(A, H), torch.tensor([[8.0, 11.0], [0.0, 0.0],
                                                            [6.0, 9.0]]))
    assert torch.equal(sage.torch_spmm(A, H, "max"), torch.tensor([[8.0, 10.0], [0.0, 0.0],
                                                                   [6.0, 9.0]]))
    assert torch.equal(sage.torch_spmm(A, H, "min", scatter=True),
                       torch.tensor([[0.0, 1.0], [0.0, 0.0], [6.0, 9.0]]))
