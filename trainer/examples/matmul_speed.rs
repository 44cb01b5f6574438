//! Speed of the trainer's matrix products on the CPU (`fused::matmul`: OpenBLAS when the
//! system has it, burn-flex's own with `HPTUNE_BLAS=none`) at the shapes of a MiniLM training
//! step (batch 32, sequence 128: 4,096 token rows, width 384, feed-forward 1,536, 12 heads of
//! 32), plain and with either operand transposed as the backward pass multiplies them.
//!
//! `cargo run --example matmul_speed -p hptune-trainer` prints one line per product:
//! `product=… ms=… gflops=…` (bench/matmul_speed.py puts PyTorch's beside it).

use std::time::Instant;

use burn::tensor::{Distribution, Tensor};
use hptune_trainer::fused::matmul;

type B = burn::backend::Flex;

/// Times `product` (one untimed run, then the mean of ten) and prints its line.
fn time<const D: usize>(name: &str, flops: f64, product: impl Fn() -> Tensor<B, D>) {
    let _ = product();
    let reps = 10;
    let start = Instant::now();
    for _ in 0..reps {
        let _ = product();
    }
    let seconds = start.elapsed().as_secs_f64() / reps as f64;
    println!(
        "product={name} ms={:.2} gflops={:.1}",
        seconds * 1e3,
        flops / seconds / 1e9
    );
}

fn main() {
    let device = Default::default();
    let random = |dims: [usize; 2]| Tensor::<B, 2>::random(dims, Distribution::Default, &device);
    for (m, k, n) in [(4096, 384, 384), (4096, 384, 1536), (4096, 1536, 384)] {
        let flops = 2.0 * (m * k * n) as f64;
        let (a, b) = (random([m, k]), random([k, n]));
        let (a_t, b_t) = (random([k, m]), random([n, k]));
        time(&format!("{m}x{k}.{k}x{n}"), flops, || {
            matmul(a.clone(), b.clone())
        });
        time(&format!("{m}x{k}.({n}x{k})^T"), flops, || {
            matmul(a.clone(), b_t.clone().transpose())
        });
        time(&format!("({k}x{m})^T.{k}x{n}"), flops, || {
            matmul(a_t.clone().transpose(), b.clone())
        });
    }
    let heads = |_| Tensor::<B, 4>::random([32, 12, 128, 32], Distribution::Default, &device);
    let (q, k) = (heads(0), heads(1));
    let flops = 2.0 * (32 * 12 * 128 * 128 * 32) as f64;
    time("[32,12,128,32].[32,12,128,32]^T", flops, || {
        matmul(q.clone(), k.clone().swap_dims(2, 3))
    });
}
