//! The key map between burn parameter paths and Hugging Face checkpoint keys.
//!
//! The modules are named after Hugging Face's, so most of a path is the key itself; this table
//! lists the only segments that differ:
//!
//! | burn path segment | checkpoint key segment | why                                  |
//! |-------------------|------------------------|--------------------------------------|
//! | `self_attention`  | `self`                 | `self` is a Rust keyword             |
//! | `layer_norm`      | `LayerNorm`            | Rust field names are snake_case      |
//! | `gamma` / `beta`  | `weight` / `bias`      | burn's LayerNorm names its params so |
//! | `head`            | (dropped)              | HF puts `classifier` at the top      |
//!
//! Encoder keys carry the `bert.` prefix in `BertForSequenceClassification` checkpoints and none
//! in bare `BertModel` ones; both are read, and `bert.` is written. Old TensorFlow conversions
//! name LayerNorm parameters `gamma`/`beta`; those are read too. Linear weights are stored
//! `[out, in]` by PyTorch and `[in, out]` by burn: they are transposed on the way in and out.

/// Path segments that differ between burn and Hugging Face (burn, HF).
pub const SEGMENT_MAP: &[(&str, &str)] = &[("self_attention", "self"), ("layer_norm", "LayerNorm")];

/// Parameter names of burn's LayerNorm and their Hugging Face names (burn, HF, legacy HF).
pub const LAYER_NORM_PARAMS: &[(&str, &str, &str)] =
    &[("gamma", "weight", "gamma"), ("beta", "bias", "beta")];

/// The top-level module of the encoder, whose keys may carry the `bert.` prefix.
pub const ENCODER_ROOT: &str = "bert";
/// The top-level module of the head, whose segment is dropped in checkpoint keys.
pub const HEAD_ROOT: &str = "head";

/// Where a parameter sits, as burn's module tree names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamPath {
    /// Field names from the root module to the parameter, e.g. `["bert", "pooler", "dense", "weight"]`.
    pub segments: Vec<String>,
    /// The type of the module that holds the parameter, e.g. `Linear`.
    pub owner: String,
}

impl ParamPath {
    /// True for the weight matrix of a linear layer, which is transposed against PyTorch.
    pub fn is_linear_weight(&self) -> bool {
        self.owner == "Linear" && self.segments.last().is_some_and(|s| s == "weight")
    }

    /// True for parameters that Hugging Face excludes from weight decay (biases, LayerNorm).
    pub fn is_no_decay(&self) -> bool {
        let last = self.segments.last().map(String::as_str).unwrap_or("");
        last == "bias" || self.owner == "LayerNorm"
    }

    /// True for weights that a pretrained encoder checkpoint may lack (they start new).
    pub fn may_be_new(&self) -> bool {
        self.segments.first().is_some_and(|s| s == HEAD_ROOT)
            || self.segments.get(1).is_some_and(|s| s == "pooler")
    }

    /// The key this parameter is written under.
    pub fn hf_key(&self) -> String {
        self.hf_keys()[0].clone()
    }

    /// Every key this parameter may be stored under, preferred first.
    pub fn hf_keys(&self) -> Vec<String> {
        let last = self.segments.len().saturating_sub(1);
        let mut modern = Vec::with_capacity(self.segments.len());
        let mut legacy = Vec::with_capacity(self.segments.len());
        for (i, segment) in self.segments.iter().enumerate() {
            if i == 0 && segment == HEAD_ROOT {
                continue;
            }
            if i == last
                && self.owner == "LayerNorm"
                && let Some((_, hf, old)) = LAYER_NORM_PARAMS.iter().find(|(b, ..)| b == segment)
            {
                modern.push(hf.to_string());
                legacy.push(old.to_string());
                continue;
            }
            let mapped = SEGMENT_MAP
                .iter()
                .find(|(b, _)| b == segment)
                .map_or(segment.as_str(), |(_, hf)| hf);
            modern.push(mapped.to_string());
            legacy.push(mapped.to_string());
        }
        let mut keys = vec![modern.join(".")];
        if legacy != modern {
            keys.push(legacy.join("."));
        }
        if self.segments.first().is_some_and(|s| s == ENCODER_ROOT) {
            // Bare `BertModel` checkpoints have no `bert.` prefix.
            let bare: Vec<String> = keys
                .iter()
                .filter_map(|k| k.strip_prefix("bert.").map(str::to_string))
                .collect();
            keys.extend(bare);
        }
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(segments: &[&str], owner: &str) -> ParamPath {
        ParamPath {
            segments: segments.iter().map(|s| s.to_string()).collect(),
            owner: owner.to_string(),
        }
    }

    #[test]
    fn attention_query_maps_to_self_query_with_and_without_prefix() {
        let p = path(
            &[
                "bert",
                "encoder",
                "layer",
                "3",
                "attention",
                "self_attention",
                "query",
                "weight",
            ],
            "Linear",
        );
        assert_eq!(
            p.hf_keys(),
            vec![
                "bert.encoder.layer.3.attention.self.query.weight",
                "encoder.layer.3.attention.self.query.weight"
            ]
        );
        assert!(p.is_linear_weight());
        assert!(!p.is_no_decay());
    }

    #[test]
    fn layer_norm_params_map_to_weight_and_bias_and_legacy_names() {
        let p = path(&["bert", "embeddings", "layer_norm", "gamma"], "LayerNorm");
        assert_eq!(
            p.hf_keys(),
            vec![
                "bert.embeddings.LayerNorm.weight",
                "bert.embeddings.LayerNorm.gamma",
                "embeddings.LayerNorm.weight",
                "embeddings.LayerNorm.gamma"
            ]
        );
        assert!(p.is_no_decay());
        assert!(!p.is_linear_weight());
    }

    #[test]
    fn head_drops_its_segment_and_may_be_new() {
        let p = path(&["head", "classifier", "bias"], "Linear");
        assert_eq!(p.hf_keys(), vec!["classifier.bias"]);
        assert!(p.may_be_new());
        assert!(p.is_no_decay());
        let pooler = path(&["bert", "pooler", "dense", "weight"], "Linear");
        assert!(pooler.may_be_new());
        let query = path(
            &["bert", "embeddings", "word_embeddings", "weight"],
            "Embedding",
        );
        assert!(!query.may_be_new());
        assert!(!query.is_linear_weight());
    }
}
