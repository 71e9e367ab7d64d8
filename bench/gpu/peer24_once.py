"""One cuSPARSELt 2:4 product (PyTorch's semi-structured tensor), n x n x n float16, inside the
NVTX range `peer24`, after a warm-up product outside it: what `profile_24.sh` profiles with
Nsight Compute (`--nvtx --nvtx-include peer24/`) beside sparsetir's 2:4 kernels, so that the
best library's kernel (its name gives its tile and cluster shapes), its throughputs and its
L2 sectors can be set beside ours. Usage: python3 peer24_once.py [N] (default 4096)."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import mask24  # noqa: E402


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
    dev = torch.device("cuda")
    a = mask24(n, dev, torch.float16)
    b = torch.rand(n, n, device=dev, dtype=torch.float16)
    s = torch.sparse.SparseSemiStructuredTensorCUSPARSELT.from_dense(a)
    torch.mm(s, b)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("peer24")
    torch.mm(s, b)
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    print("peer24: one cuSPARSELt product", n, "x", n, "x", n)


if __name__ == "__main__":
    main()
