//! Probabilities as Hugging Face's text-classification pipeline returns them:
//! `{"label": ..., "score": ...}` for the best label, or a list of them, best first, with
//! `top_k`.

use serde::Serialize;
use serde_json::Value;

use super::request::TopK;

/// One label and its probability.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LabelScore {
    /// The class name.
    pub label: String,
    /// Its probability.
    pub score: f32,
}

/// The prediction for one input with class probabilities `probabilities` (by class index of
/// `labels`), as `top_k` asks.
pub fn prediction(labels: &[String], probabilities: &[f32], top_k: TopK) -> Value {
    let mut ranked: Vec<LabelScore> = labels
        .iter()
        .zip(probabilities)
        .map(|(label, &score)| LabelScore {
            label: label.clone(),
            score,
        })
        .collect();
    // Best first; of equal scores the lower class index, as the pipeline's stable sort.
    ranked.sort_by(|a, b| b.score.total_cmp(&a.score));
    let listed = |n: usize| serde_json::to_value(&ranked[..n.min(ranked.len())]);
    match top_k {
        TopK::Best => serde_json::to_value(&ranked[0]),
        TopK::First(n) => listed(n),
        TopK::All => listed(ranked.len()),
    }
    .expect("labels and numbers serialise")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_best_label_alone_or_the_first_k_best_first() {
        let labels = ["neg".to_string(), "neu".to_string(), "pos".to_string()];
        let probs = [0.25, 0.25, 0.5];
        assert_eq!(
            prediction(&labels, &probs, TopK::Best),
            json!({"label": "pos", "score": 0.5})
        );
        assert_eq!(
            prediction(&labels, &probs, TopK::First(2)),
            json!([{"label": "pos", "score": 0.5}, {"label": "neg", "score": 0.25}])
        );
        assert_eq!(
            prediction(&labels, &probs, TopK::All)
                .as_array()
                .unwrap()
                .len(),
            3
        );
        assert_eq!(
            prediction(&labels, &probs, TopK::First(9))
                .as_array()
                .unwrap()
                .len(),
            3
        );
    }
}
