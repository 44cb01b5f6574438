//! WordPiece tokenisation as the checkpoint defines it, through the `tokenizers` crate.

use std::path::{Path, PathBuf};

use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::processors::bert::BertProcessing;
use tokenizers::{Tokenizer, TruncationParams, TruncationStrategy};

use crate::error::{Result, TrainerError};

/// Token ids and segment ids of one text or text pair, special tokens included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    /// WordPiece ids, starting with `[CLS]`.
    pub ids: Vec<u32>,
    /// 0 for the first text's tokens, 1 for the second's.
    pub type_ids: Vec<u32>,
}

/// A BERT tokenizer that truncates to a maximum length and never pads (batches pad themselves).
#[derive(Clone)]
pub struct TextTokenizer {
    inner: Tokenizer,
    source: PathBuf,
    pad_id: u32,
}

impl std::fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextTokenizer")
            .field("source", &self.source)
            .field("pad_id", &self.pad_id)
            .finish()
    }
}

impl TextTokenizer {
    /// Loads `tokenizer.json` from `dir`, or builds the standard BERT pipeline from `vocab.txt`
    /// (lower-casing unless `tokenizer_config.json` says `"do_lower_case": false`).
    pub fn from_dir(dir: &Path, max_len: usize) -> Result<Self> {
        let json = dir.join("tokenizer.json");
        let vocab = dir.join("vocab.txt");
        let (inner, source) = if json.is_file() {
            let tokenizer = Tokenizer::from_file(&json).map_err(|e| TrainerError::Tokenizer {
                path: json.clone(),
                message: e.to_string(),
            })?;
            (tokenizer, json)
        } else if vocab.is_file() {
            (from_vocab(&vocab, lowercase(dir))?, vocab)
        } else {
            return Err(TrainerError::Tokenizer {
                path: dir.to_path_buf(),
                message:
                    "neither tokenizer.json nor vocab.txt is there; copy them from the checkpoint"
                        .to_string(),
            });
        };
        let mut tokenizer = TextTokenizer {
            pad_id: inner.token_to_id("[PAD]").unwrap_or(0),
            inner,
            source,
        };
        tokenizer.set_max_len(max_len)?;
        Ok(tokenizer)
    }

    /// Truncates every encoding to `max_len` tokens, special tokens included; turns off any
    /// padding that the tokenizer file has baked in.
    pub fn set_max_len(&mut self, max_len: usize) -> Result<()> {
        let error = |message: String| TrainerError::Tokenizer {
            path: self.source.clone(),
            message,
        };
        if max_len < 3 {
            return Err(error(format!(
                "a maximum length of {max_len} leaves no room for [CLS], a token and [SEP]"
            )));
        }
        self.inner.with_padding(None);
        self.inner
            .with_truncation(Some(TruncationParams {
                max_length: max_len,
                strategy: TruncationStrategy::LongestFirst,
                ..TruncationParams::default()
            }))
            .map_err(|e| error(e.to_string()))?;
        Ok(())
    }

    /// The id of `[PAD]`.
    pub fn pad_id(&self) -> u32 {
        self.pad_id
    }

    /// Encodes one text, or a text pair, with special tokens.
    pub fn encode(&self, text: &str, pair: Option<&str>) -> Result<Encoded> {
        let encoding = match pair {
            Some(second) => self.inner.encode((text, second), true),
            None => self.inner.encode(text, true),
        }
        .map_err(|e| TrainerError::Tokenizer {
            path: self.source.clone(),
            message: format!("cannot encode {text:?}: {e}"),
        })?;
        Ok(Encoded {
            ids: encoding.get_ids().to_vec(),
            type_ids: encoding.get_type_ids().to_vec(),
        })
    }

    /// Writes the tokenizer (without padding, with this truncation) as `tokenizer.json` in `dir`.
    pub fn save(&self, dir: &Path) -> Result<()> {
        let path = dir.join("tokenizer.json");
        self.inner
            .save(&path, false)
            .map_err(|e| TrainerError::Tokenizer {
                path,
                message: format!("writing failed: {e}"),
            })
    }
}

/// `do_lower_case` from `tokenizer_config.json`, true when absent.
fn lowercase(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("tokenizer_config.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|config| config.get("do_lower_case").and_then(|v| v.as_bool()))
        .unwrap_or(true)
}

/// The BERT pipeline (normaliser, pre-tokeniser, WordPiece, `[CLS] a [SEP] b [SEP]`).
fn from_vocab(vocab: &Path, lowercase: bool) -> Result<Tokenizer> {
    let error = |message: String| TrainerError::Tokenizer {
        path: vocab.to_path_buf(),
        message,
    };
    let model = WordPiece::from_file(&vocab.to_string_lossy())
        .unk_token("[UNK]".to_string())
        .build()
        .map_err(|e| error(e.to_string()))?;
    let mut tokenizer = Tokenizer::new(model);
    let special = |token: &str| {
        tokenizer
            .token_to_id(token)
            .map(|id| (token.to_string(), id))
            .ok_or_else(|| error(format!("the vocabulary has no {token} token")))
    };
    let processor = BertProcessing::new(special("[SEP]")?, special("[CLS]")?);
    tokenizer
        .with_normalizer(Some(BertNormalizer::new(true, true, None, lowercase)))
        .map_err(|e| error(e.to_string()))?;
    tokenizer.with_pre_tokenizer(Some(BertPreTokenizer));
    tokenizer.with_post_processor(Some(processor));
    Ok(tokenizer)
}
