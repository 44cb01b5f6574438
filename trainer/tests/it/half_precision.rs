//! The model and optimiser in bf16, as `--precision bf16` runs them on CUDA, checked on
//! burn-flex (which holds bf16 tensors, though the trainer trains in f32 on the CPU): the logits,
//! and the loss before and after one AdamW step, against transformers' f32 fixture within
//! bf16's precision, and the f32 master weights keeping updates too small for a bf16 weight.
//! Run in a process of its own: it sets the process's default float type of the CPU device.
#![cfg(feature = "flex")]

use crate::common;

use burn::backend::Flex;
use burn::tensor::backend::set_default_float_dtype;
use burn::tensor::{DType, ElementConversion};

use common::{Fixture, values};

#[test]
fn bf16_follows_transformers_f32_within_its_precision_and_keeps_updates_below_its_resolution() {
    if !common::runs_in_own_process() {
        return;
    }
    set_default_float_dtype::<Flex>(&Default::default(), DType::BF16).unwrap();
    let fixture = Fixture::load();
    let number = |key: &str| fixture.number(key);

    // The logits, and the losses before and after one step at the fixture's rate, within bf16's
    // precision of transformers' f32.
    let model = fixture.model();
    assert_eq!(model.bert.pooler.dense.weight.val().dtype(), DType::BF16);
    let mut optimizer = fixture.optimizer(&model);
    assert!(
        optimizer.loss_scale().unwrap().is_none(),
        "bf16 has f32's range"
    );
    let logits_error = fixture.logits_error(&model);
    let loss = fixture.loss(&model);
    let before = loss.clone().into_scalar().elem::<f64>();
    let (model, _) = optimizer
        .step(number("learning_rate"), model, loss.backward())
        .unwrap();
    let after = fixture.loss(&model).into_scalar().elem::<f64>();
    eprintln!(
        "bf16: logits within {logits_error:.4} of transformers' f32; loss before {before:.4} (transformers f32 {:.4}), after one step {after:.4} ({:.4})",
        number("loss_before"),
        number("loss_after")
    );
    // Softmax, LayerNorm and the loss in f32, as under autocast: in bf16 throughout the logits
    // were 0.026 off and the loss after the step 7.6e-3.
    assert!(logits_error < 0.02, "{logits_error}");
    assert!((before - number("loss_before")).abs() < 2e-3, "{before}");
    assert!((after - number("loss_after")).abs() < 6e-3, "{after}");
    assert_eq!(model.bert.pooler.dense.weight.val().dtype(), DType::BF16);

    // Steps of 1e-5 each, below half of bf16's spacing near the weights (about 1e-4 at 0.02):
    // a bf16 weight updated alone would never move; the f32 master copy adds them up.
    let mut model = fixture.model();
    let start = values(model.bert.pooler.dense.weight.val());
    let mut optimizer = fixture.optimizer(&model);
    for _ in 0..40 {
        let loss = fixture.loss(&model);
        model = optimizer.step(1e-5, model, loss.backward()).unwrap().0;
    }
    let end = values(model.bert.pooler.dense.weight.val());
    let moved = start.iter().zip(&end).filter(|(a, b)| a != b).count();
    eprintln!(
        "bf16: {moved} of {} pooler weights moved after 40 steps of 1e-5",
        start.len()
    );
    assert!(moved * 4 > start.len(), "{moved} of {}", start.len());
}
