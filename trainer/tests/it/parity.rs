//! Parity with Hugging Face transformers: token ids, logits and the loss after one AdamW step,
//! against fixtures recorded by `tests/fixtures/make_fixtures.py`.
#![cfg(feature = "flex")]

use crate::common::fixtures;
use std::path::Path;

use burn::backend::{Autodiff, Flex};
use burn::module::AutodiffModule;
use burn::tensor::ElementConversion;
use hptune_trainer::batch::{EncodedExample, collate};
use hptune_trainer::checkpoint::overlay_weights;
use hptune_trainer::config::BertConfig;
use hptune_trainer::model::cross_entropy;
use hptune_trainer::optim::{AdamWSettings, GroupedAdamW, StepOutcome};
use hptune_trainer::pretrained::load_classifier;
use hptune_trainer::tokenize::TextTokenizer;

type B = Autodiff<Flex>;

const LOGIT_TOLERANCE: f32 = 1e-4;
const LOSS_TOLERANCE: f64 = 1e-4;

#[derive(serde::Deserialize)]
struct Fixture {
    texts: Vec<String>,
    pairs: Vec<Option<String>>,
    labels: Vec<usize>,
    input_ids: Vec<Vec<u32>>,
    token_type_ids: Vec<Vec<u32>>,
    logits: Vec<Vec<f32>>,
    learning_rate: f64,
    weight_decay: f64,
    max_grad_norm: f64,
    adam_epsilon: f64,
    loss_before: f64,
    grad_norm: f64,
    loss_after: f64,
}

/// Checks tokens, logits and one training step of the checkpoint in `dir` against `fixture`.
fn check_parity(dir: &Path, fixture: &str, head: Option<&Path>) {
    let fixture: Fixture =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join(fixture)).unwrap()).unwrap();
    let device = Default::default();
    let config = BertConfig::from_file(&dir.join("config.json")).unwrap();
    let tokenizer = TextTokenizer::from_dir(dir, 128).unwrap();

    let mut encoded = Vec::new();
    for (i, (text, pair)) in fixture.texts.iter().zip(&fixture.pairs).enumerate() {
        let e = tokenizer.encode(text, pair.as_deref()).unwrap();
        assert_eq!(e.ids, fixture.input_ids[i], "token ids of {text:?}");
        assert_eq!(
            e.type_ids, fixture.token_type_ids[i],
            "token types of {text:?}"
        );
        encoded.push(EncodedExample {
            ids: e.ids,
            type_ids: e.type_ids,
            label: fixture.labels[i],
        });
    }

    let (model, _) = load_classifier::<B>(dir, &config, 3, Some(0.0), false, &device).unwrap();
    let model = match head {
        Some(path) => overlay_weights(model, path).unwrap().0,
        None => model,
    };
    let items: Vec<&EncodedExample> = encoded.iter().collect();
    let (input, labels) = collate::<B>(&items, tokenizer.pad_id(), &device);

    let logits = model
        .valid()
        .forward(collate(&items, tokenizer.pad_id(), &device).0);
    let logits: Vec<f32> = logits.into_data().convert::<f32>().to_vec().unwrap();
    let expected: Vec<f32> = fixture.logits.concat();
    assert_eq!(logits.len(), expected.len());
    let max_diff = logits
        .iter()
        .zip(&expected)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    eprintln!("{dir:?}: max |logit - transformers| = {max_diff:.3e}");
    assert!(
        max_diff < LOGIT_TOLERANCE,
        "max logit difference {max_diff}"
    );

    let mut optimizer = GroupedAdamW::new(
        &model,
        AdamWSettings {
            weight_decay: fixture.weight_decay,
            epsilon: fixture.adam_epsilon,
            max_grad_norm: Some(fixture.max_grad_norm),
            ..AdamWSettings::default()
        },
    );
    let loss = cross_entropy(model.forward(input.clone()), labels.clone());
    let before = loss.clone().into_scalar().elem::<f64>();
    let (model, outcome) = optimizer
        .step(fixture.learning_rate, model, loss.backward())
        .unwrap();
    let StepOutcome::Applied { grad_norm: norm } = outcome else {
        panic!("an f32 step is never skipped: {outcome:?}");
    };
    let after = cross_entropy(model.forward(input), labels)
        .into_scalar()
        .elem::<f64>();
    eprintln!(
        "{dir:?}: loss before {before:.6} (diff {:.3e}), grad norm {norm:.6} (transformers {:.6}), loss after one step {after:.6} (diff {:.3e})",
        (before - fixture.loss_before).abs(),
        fixture.grad_norm,
        (after - fixture.loss_after).abs()
    );
    assert!((before - fixture.loss_before).abs() < LOSS_TOLERANCE);
    assert!((norm - fixture.grad_norm).abs() < 1e-3 * fixture.grad_norm.max(1.0));
    assert!(
        (after - fixture.loss_after).abs() < LOSS_TOLERANCE,
        "loss after one step: {after} vs transformers {}",
        fixture.loss_after
    );
    // The step must have changed the model, or the comparison above proves nothing.
    assert!((after - before).abs() > 10.0 * LOSS_TOLERANCE);
}

#[test]
fn tiny_bert_matches_transformers_tokens_logits_and_one_adamw_step() {
    check_parity(&fixtures().join("tiny-bert"), "tiny-bert.json", None);
}

#[test]
fn minilm_matches_transformers_tokens_logits_and_one_adamw_step() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/all-MiniLM-L6-v2");
    if !dir.join("model.safetensors").is_file() {
        eprintln!(
            "skipped: {} is missing; run scripts/fetch-model.sh to get all-MiniLM-L6-v2",
            dir.display()
        );
        return;
    }
    check_parity(
        &dir,
        "all-MiniLM-L6-v2.json",
        Some(&fixtures().join("minilm-head.safetensors")),
    );
}
