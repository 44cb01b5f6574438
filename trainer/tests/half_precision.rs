//! The model and optimiser in bf16, as `--precision bf16` runs them on CUDA, checked on
//! burn-flex (which holds bf16 tensors, though the trainer trains in f32 on the CPU): the loss
//! before and after one AdamW step against transformers' f32 fixture within bf16's precision,
//! and the f32 master weights keeping updates too small for a bf16 weight.
//! One test in this binary: it sets the process's default float type of the CPU device.
#![cfg(feature = "flex")]

use std::path::{Path, PathBuf};

use burn::backend::{Autodiff, Flex};
use burn::tensor::backend::set_default_float_dtype;
use burn::tensor::{DType, ElementConversion, Tensor};
use hptune_trainer::batch::{EncodedExample, collate};
use hptune_trainer::config::BertConfig;
use hptune_trainer::model::cross_entropy;
use hptune_trainer::optim::{AdamWSettings, GroupedAdamW};
use hptune_trainer::pretrained::load_classifier;
use hptune_trainer::tokenize::TextTokenizer;

type B = Autodiff<Flex>;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn values(tensor: Tensor<B, 2>) -> Vec<f32> {
    tensor.into_data().convert::<f32>().to_vec().unwrap()
}

#[test]
fn bf16_follows_transformers_f32_within_its_precision_and_keeps_updates_below_its_resolution() {
    let device = Default::default();
    set_default_float_dtype::<Flex>(&device, DType::BF16).unwrap();
    let dir = fixtures().join("tiny-bert");
    let fixture: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("tiny-bert.json")).unwrap())
            .unwrap();
    let number = |key: &str| fixture[key].as_f64().unwrap();
    let texts: Vec<(String, Option<String>, usize)> = serde_json::from_value(serde_json::json!([
        fixture["texts"],
        fixture["pairs"],
        fixture["labels"]
    ]))
    .map(
        |(t, p, l): (Vec<String>, Vec<Option<String>>, Vec<usize>)| {
            t.into_iter()
                .zip(p)
                .zip(l)
                .map(|((t, p), l)| (t, p, l))
                .collect()
        },
    )
    .unwrap();
    let config = BertConfig::from_file(&dir.join("config.json")).unwrap();
    let tokenizer = TextTokenizer::from_dir(&dir, 128).unwrap();
    let encoded: Vec<EncodedExample> = texts
        .iter()
        .map(|(text, pair, label)| {
            let e = tokenizer.encode(text, pair.as_deref()).unwrap();
            EncodedExample {
                ids: e.ids,
                type_ids: e.type_ids,
                label: *label,
            }
        })
        .collect();
    let items: Vec<&EncodedExample> = encoded.iter().collect();
    let (input, labels) = collate::<B>(&items, tokenizer.pad_id(), &device);
    let settings = AdamWSettings {
        weight_decay: number("weight_decay"),
        max_grad_norm: Some(number("max_grad_norm")),
        ..AdamWSettings::default()
    };

    // One step at the fixture's rate: the losses within bf16's precision of transformers' f32.
    let (model, _) = load_classifier::<B>(&dir, &config, 3, Some(0.0), false, &device).unwrap();
    assert_eq!(model.bert.pooler.dense.weight.val().dtype(), DType::BF16);
    let mut optimizer = GroupedAdamW::new(&model, settings);
    let loss = cross_entropy(model.forward(input.clone()), labels.clone());
    let before = loss.clone().into_scalar().elem::<f64>();
    let (model, _) = optimizer.step(number("learning_rate"), model, loss.backward());
    let after = cross_entropy(model.forward(input.clone()), labels.clone())
        .into_scalar()
        .elem::<f64>();
    eprintln!(
        "bf16: loss before {before:.4} (transformers f32 {:.4}), after one step {after:.4} ({:.4})",
        number("loss_before"),
        number("loss_after")
    );
    assert!((before - number("loss_before")).abs() < 2e-2, "{before}");
    assert!((after - number("loss_after")).abs() < 2e-2, "{after}");
    assert_eq!(model.bert.pooler.dense.weight.val().dtype(), DType::BF16);

    // Steps of 1e-5 each, below half of bf16's spacing near the weights (about 1e-4 at 0.02):
    // a bf16 weight updated alone would never move; the f32 master copy adds them up.
    let (mut model, _) = load_classifier::<B>(&dir, &config, 3, Some(0.0), false, &device).unwrap();
    let start = values(model.bert.pooler.dense.weight.val());
    let mut optimizer = GroupedAdamW::new(&model, settings);
    for _ in 0..40 {
        let loss = cross_entropy(model.forward(input.clone()), labels.clone());
        model = optimizer.step(1e-5, model, loss.backward()).0;
    }
    let end = values(model.bert.pooler.dense.weight.val());
    let moved = start.iter().zip(&end).filter(|(a, b)| a != b).count();
    eprintln!(
        "bf16: {moved} of {} pooler weights moved after 40 steps of 1e-5",
        start.len()
    );
    assert!(moved * 4 > start.len(), "{moved} of {}", start.len());
}
