#!/usr/bin/env python3
"""Matrix products at MiniLM's training shapes: hptune-trainer's (OpenBLAS when the system has
it, burn-flex's with HPTUNE_BLAS=none) beside PyTorch, in the same command, on the same cores.

    bench/.venv/bin/python bench/matmul_speed.py

Builds and runs `trainer/examples/matmul_speed.rs`, times the same products with torch (as
many threads as cores), and prints a Markdown table with burn's speed as a ratio of PyTorch's.
"""

import os
import subprocess
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


def burn_products():
    subprocess.run(["cargo", "build", "--quiet", "-p", "hptune-trainer", "--example",
                    "matmul_speed"], cwd=ROOT, check=True)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    out = subprocess.run([str(target / "debug" / "examples" / "matmul_speed")],
                         check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        fields = dict(part.split("=", 1) for part in line.split())
        rows.append((fields["product"], float(fields["ms"]), float(fields["gflops"])))
    return rows


def torch_product(name):
    """The same product as burn's line `name`, with torch tensors of the same layout."""
    if name.startswith("[32,12,128,32]"):
        q, k = torch.rand(32, 12, 128, 32), torch.rand(32, 12, 128, 32)
        return lambda: q @ k.transpose(2, 3)
    left, right = name.split(".")
    def operand(text):
        transposed = text.endswith("^T")
        rows, cols = (int(x) for x in text.strip("()^T").split("x"))
        t = torch.rand(rows, cols)
        return (lambda: t.t()) if transposed else (lambda: t)
    a, b = operand(left), operand(right)
    return lambda: a() @ b()


def seconds(product, reps=10):
    product()
    start = time.perf_counter()
    for _ in range(reps):
        product()
    return (time.perf_counter() - start) / reps


def main():
    torch.set_num_threads(os.cpu_count())
    print(f"| product | burn ms | burn GFLOP/s | PyTorch {torch.__version__} ms | burn/PyTorch speed |")
    print("|---|---:|---:|---:|---:|")
    for name, ms, gflops in burn_products():
        torch_ms = 1e3 * seconds(torch_product(name))
        print(f"| {name} | {ms:.2f} | {gflops:.1f} | {torch_ms:.2f} | {torch_ms / ms:.2f}x |")


if __name__ == "__main__":
    main()
