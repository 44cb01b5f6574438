//! The model and optimiser in f16, as `--precision f16` runs them on CUDA, checked on burn-flex
//! (which holds f16 tensors, though the trainer trains in f32 on the CPU): the logits within
//! f16's precision of transformers' f32, and the loss scale keeping gradients that underflow to
//! zero without it.
//! Run in a process of its own: it sets the process's default float type of the CPU device.
#![cfg(feature = "flex")]

use crate::common;

use burn::backend::Flex;
use burn::tensor::backend::set_default_float_dtype;
use burn::tensor::{DType, Tensor};
use hptune_trainer::model::BertClassifier;
use hptune_trainer::optim::StepOutcome;

use common::{B, Fixture, values};

/// The share of `grad`'s elements that are not zero.
fn nonzero_share(grad: Tensor<Flex, 2>) -> f64 {
    let grad: Vec<f32> = grad.into_data().convert::<f32>().to_vec().unwrap();
    grad.iter().filter(|g| **g != 0.0).count() as f64 / grad.len() as f64
}

#[test]
fn f16_loss_scaling_keeps_gradients_that_underflow_to_zero_without_it() {
    if !common::runs_in_own_process() {
        return;
    }
    set_default_float_dtype::<Flex>(&Default::default(), DType::F16).unwrap();
    let fixture = Fixture::load();
    // The loss times 3e-7: its gradients are as small as those of a model that nearly fits its
    // batch (softmax - one-hot near 0), i.e. mostly below f16's smallest number, 6e-8.
    let small_loss = |model: &BertClassifier<B>| fixture.loss(model).mul_scalar(3e-7);
    let model = fixture.model();
    let logits_error = fixture.logits_error(&model);
    eprintln!("f16: logits within {logits_error:.5} of transformers' f32");
    assert!(logits_error < 5e-3, "{logits_error}");
    let watched =
        |model: &BertClassifier<B>| model.bert.encoder.layer[0].intermediate.dense.weight.val();
    let mut optimizer = fixture.optimizer(&model);
    assert_eq!(
        optimizer.loss_scale().unwrap().map(|s| s.scale()),
        Some(65536.0)
    );

    // Without the scale, the first layer's gradients are zero in f16.
    let grads = small_loss(&model).backward();
    let unscaled = nonzero_share(watched(&model).grad(&grads).unwrap());
    // With it, they are kept, and the step moves the weights they belong to.
    let grads = optimizer.scale_loss(small_loss(&model)).backward();
    let scaled = nonzero_share(watched(&model).grad(&grads).unwrap());
    let start = values(watched(&model));
    // At 1e-2 AdamW moves a weight by about a tenth of the rate or more wherever the gradient
    // is above 1e-9 (its epsilon is 1e-8), far above f16's spacing of 1e-4 near the weights.
    let (model, outcome) = optimizer.step(1e-2, model, grads).unwrap();
    let end = values(watched(&model));
    let moved = start.iter().zip(&end).filter(|(a, b)| a != b).count() as f64 / start.len() as f64;
    eprintln!(
        "f16: non-zero gradients of layer 0's intermediate weights {:.1} % without the loss scale, {:.1} % with it; {:.1} % of the weights moved ({outcome:?})",
        100.0 * unscaled,
        100.0 * scaled,
        100.0 * moved
    );
    assert!(matches!(outcome, StepOutcome::Applied { .. }));
    assert!(unscaled < 0.05, "{unscaled}");
    assert!(scaled > 0.999, "{scaled}");
    assert!(moved > 0.9, "{moved}");
}
