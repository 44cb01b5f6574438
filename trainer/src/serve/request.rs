//! What a prediction request asks, read from its body: the inputs (Vertex AI's `instances`,
//! or Hugging Face's `inputs`, as JSON; or CSV rows) and the parameters. Every refusal says
//! what is wrong and where in the body.

use std::collections::BTreeMap;

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::classify::TextInput;

/// A request read from its body.
#[derive(Debug, Clone, PartialEq)]
pub struct PredictRequest {
    /// The texts to classify, in order.
    pub inputs: Vec<TextInput>,
    /// How many labels each prediction lists.
    pub top_k: TopK,
}

/// How many labels a prediction lists, as Hugging Face's text-classification pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopK {
    /// `top_k` not given: the best label, as one `{"label", "score"}` object.
    Best,
    /// `top_k: N`: the best N labels, best first, as a list.
    First(usize),
    /// `top_k: null`: every label, best first, as a list.
    All,
}

/// The formats of a request's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFormat {
    /// `application/json` (also a body without a content type).
    Json,
    /// `text/csv`: one input a row, a text or a text and its pair.
    Csv,
}

/// Why a request is refused: the message a client gets with its 400.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadRequest(pub String);

fn bad<T>(message: impl Into<String>) -> Result<T, BadRequest> {
    Err(BadRequest(message.into()))
}

/// Reads a request of `format` from `body`, with at most `max_inputs` inputs: a request
/// with more is refused as soon as one too many is read, before the rest is.
pub fn parse(
    body: &[u8],
    format: BodyFormat,
    max_inputs: usize,
) -> Result<PredictRequest, BadRequest> {
    match format {
        BodyFormat::Json => parse_json(body, max_inputs),
        BodyFormat::Csv => parse_csv(body, max_inputs),
    }
}

fn too_many(max_inputs: usize) -> BadRequest {
    BadRequest(format!(
        "more than {max_inputs} inputs in one request: at most {max_inputs} (split the request, or start the server with a larger --max-instances)"
    ))
}

fn not_json(e: serde_json::Error) -> BadRequest {
    BadRequest(format!(
        "the body is not valid JSON: {e} (line {}, column {})",
        e.line(),
        e.column()
    ))
}

fn parse_json(body: &[u8], max_inputs: usize) -> Result<PredictRequest, BadRequest> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return bad("the body is empty: send {\"instances\": [\"a text\", ...]}");
    }
    // Checked whole, but only the fields are taken apart: a list is read one item at a time.
    let raw: &RawValue = serde_json::from_slice(body).map_err(not_json)?;
    if !raw.get().starts_with('{') {
        return bad(format!(
            "the body must be a JSON object such as {{\"instances\": [\"a text\"]}}, got {}",
            raw_kind(raw)
        ));
    }
    let object: BTreeMap<String, &RawValue> = serde_json::from_str(raw.get()).map_err(not_json)?;
    let allowed = ["instances", "inputs", "parameters"];
    if let Some(unknown) = object.keys().find(|k| !allowed.contains(&k.as_str())) {
        return bad(format!(
            "unknown field \"{unknown}\": a request has \"instances\" (or \"inputs\") and optionally \"parameters\""
        ));
    }
    let inputs = match (object.get("instances"), object.get("inputs")) {
        (Some(_), Some(_)) => return bad("give \"instances\" or \"inputs\", not both"),
        (Some(items), None) if items.get().starts_with('[') => {
            list("instances", items, max_inputs)?
        }
        (Some(other), None) => {
            return bad(format!(
                "instances: must be a list, got {}",
                raw_kind(other)
            ));
        }
        (None, Some(items)) if items.get().starts_with('[') => list("inputs", items, max_inputs)?,
        (None, Some(one)) => vec![input("inputs", &value(one)?)?],
        (None, None) => {
            return bad("the body has no \"instances\": send {\"instances\": [\"a text\", ...]}");
        }
    };
    let top_k = match object.get("parameters").map(|raw| value(raw)).transpose()? {
        None => TopK::Best,
        Some(Value::Object(parameters)) => top_k(&parameters)?,
        Some(other) => {
            return bad(format!(
                "parameters: must be an object, got {}",
                kind(&other)
            ));
        }
    };
    Ok(PredictRequest { inputs, top_k })
}

/// A field's JSON, already checked, as a value.
fn value(raw: &RawValue) -> Result<Value, BadRequest> {
    serde_json::from_str(raw.get()).map_err(not_json)
}

/// The inputs of the JSON list `items` named `field`, read one at a time: an empty list, or
/// one of more than `max_inputs`, is refused.
fn list(field: &str, items: &RawValue, max_inputs: usize) -> Result<Vec<TextInput>, BadRequest> {
    let mut reader = ListReader {
        field,
        max_inputs,
        refused: None,
    };
    let mut deserializer = serde_json::Deserializer::from_str(items.get());
    let inputs = match serde::de::DeserializeSeed::deserialize(&mut reader, &mut deserializer) {
        Ok(inputs) => inputs,
        Err(e) => return Err(reader.refused.take().unwrap_or_else(|| not_json(e))),
    };
    if inputs.is_empty() {
        return bad(format!(
            "{field}: the list is empty: give at least one text"
        ));
    }
    Ok(inputs)
}

/// Reads a JSON list of inputs item by item, keeping why it stopped.
struct ListReader<'a> {
    field: &'a str,
    max_inputs: usize,
    refused: Option<BadRequest>,
}

impl<'de> serde::de::DeserializeSeed<'de> for &mut ListReader<'_> {
    type Value = Vec<TextInput>;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for &mut ListReader<'_> {
    type Value = Vec<TextInput>;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("a list of inputs")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut items: A,
    ) -> Result<Self::Value, A::Error> {
        let mut inputs = Vec::new();
        while let Some(item) = items.next_element::<Value>()? {
            let read = match inputs.len() < self.max_inputs {
                true => input(&format!("{}[{}]", self.field, inputs.len()), &item),
                false => Err(too_many(self.max_inputs)),
            };
            match read {
                Ok(read) => inputs.push(read),
                Err(refused) => {
                    let message = refused.0.clone();
                    self.refused = Some(refused);
                    return Err(serde::de::Error::custom(message));
                }
            }
        }
        Ok(inputs)
    }
}

/// One input at `path`: a string, or `{"text": ..., "text_pair": ...}`.
fn input(path: &str, value: &Value) -> Result<TextInput, BadRequest> {
    match value {
        Value::String(text) => Ok(TextInput {
            text: text.clone(),
            pair: None,
        }),
        Value::Object(object) => {
            if let Some(unknown) = object
                .keys()
                .find(|k| !["text", "text_pair"].contains(&k.as_str()))
            {
                return bad(format!(
                    "{path}: unknown field \"{unknown}\": an instance is a string or {{\"text\": ..., \"text_pair\": ...}}"
                ));
            }
            let text = match object.get("text") {
                Some(Value::String(text)) => text.clone(),
                Some(other) => {
                    return bad(format!(
                        "{path}.text: must be a string, got {}",
                        kind(other)
                    ));
                }
                None => return bad(format!("{path}: missing \"text\"")),
            };
            let pair = match object.get("text_pair") {
                None | Some(Value::Null) => None,
                Some(Value::String(pair)) => Some(pair.clone()),
                Some(other) => {
                    return bad(format!(
                        "{path}.text_pair: must be a string, got {}",
                        kind(other)
                    ));
                }
            };
            Ok(TextInput { text, pair })
        }
        other => bad(format!(
            "{path}: must be a string or {{\"text\": ..., \"text_pair\": ...}}, got {}",
            kind(other)
        )),
    }
}

/// `parameters`: only `top_k`, a whole number from 1 or null.
fn top_k(parameters: &Map<String, Value>) -> Result<TopK, BadRequest> {
    if let Some(unknown) = parameters.keys().find(|k| k.as_str() != "top_k") {
        return bad(format!(
            "parameters: unknown parameter \"{unknown}\" (the one parameter is top_k)"
        ));
    }
    match parameters.get("top_k") {
        None => Ok(TopK::Best),
        Some(Value::Null) => Ok(TopK::All),
        Some(value) => match value.as_u64() {
            Some(n) if n >= 1 => Ok(TopK::First(usize::try_from(n).unwrap_or(usize::MAX))),
            _ => bad(format!(
                "parameters.top_k: must be a whole number from 1, or null for every label, got {value}"
            )),
        },
    }
}

/// A CSV body: each row a text, or a text and its pair; no header.
fn parse_csv(body: &[u8], max_inputs: usize) -> Result<PredictRequest, BadRequest> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(body);
    let mut inputs = Vec::new();
    for (i, record) in reader.records().enumerate() {
        if i == max_inputs {
            return Err(too_many(max_inputs));
        }
        let line = i + 1;
        let record = record.map_err(|e| BadRequest(format!("CSV row {line}: {e}")))?;
        let input = match record.len() {
            1 => TextInput {
                text: record[0].to_string(),
                pair: None,
            },
            2 => TextInput {
                text: record[0].to_string(),
                pair: Some(record[1].to_string()),
            },
            n => {
                return bad(format!(
                    "CSV row {line}: {n} columns; a row is a text, or a text and its pair (quote texts that hold commas)"
                ));
            }
        };
        inputs.push(input);
    }
    if inputs.is_empty() {
        return bad("the CSV body has no rows: send one text a row");
    }
    Ok(PredictRequest {
        inputs,
        top_k: TopK::Best,
    })
}

/// How the JSON value written `raw` is named in messages, from its first character.
fn raw_kind(raw: &RawValue) -> &'static str {
    match raw.get().as_bytes().first() {
        Some(b'{') => "an object",
        Some(b'[') => "a list",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
    }
}

/// How a JSON value is named in messages.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(body: &str) -> Result<PredictRequest, String> {
        parse(body.as_bytes(), BodyFormat::Json, 4).map_err(|e| e.0)
    }

    fn text(t: &str) -> TextInput {
        TextInput {
            text: t.into(),
            pair: None,
        }
    }

    #[test]
    fn instances_are_strings_or_text_pairs() {
        let request =
            json(r#"{"instances": ["a", {"text": "b", "text_pair": "c"}], "parameters": {}}"#)
                .unwrap();
        assert_eq!(request.top_k, TopK::Best);
        assert_eq!(
            request.inputs,
            vec![
                text("a"),
                TextInput {
                    text: "b".into(),
                    pair: Some("c".into())
                }
            ]
        );
        assert_eq!(json(r#"{"inputs": "x"}"#).unwrap().inputs, vec![text("x")]);
    }

    #[test]
    fn top_k_is_a_count_or_null_for_every_label() {
        let top = |p: &str| {
            json(&format!(
                r#"{{"instances": ["a"], "parameters": {{"top_k": {p}}}}}"#
            ))
        };
        assert_eq!(top("2").unwrap().top_k, TopK::First(2));
        assert_eq!(top("null").unwrap().top_k, TopK::All);
        for wrong in ["0", "-1", "1.5", "\"2\""] {
            assert!(
                top(wrong).unwrap_err().starts_with("parameters.top_k: "),
                "{wrong}"
            );
        }
    }

    #[test]
    fn every_bad_body_says_what_and_where() {
        let cases = [
            ("", "the body is empty"),
            ("{\"instances\": [", "the body is not valid JSON"),
            ("[1]", "the body must be a JSON object"),
            ("{}", "the body has no \"instances\""),
            (r#"{"instances": []}"#, "instances: the list is empty"),
            (
                r#"{"instances": "a"}"#,
                "instances: must be a list, got a string",
            ),
            (
                r#"{"instances": ["a", 3]}"#,
                "instances[1]: must be a string",
            ),
            (
                r#"{"instances": [{"text": 1}]}"#,
                "instances[0].text: must be a string, got a number",
            ),
            (
                r#"{"instances": [{"txt": "a"}]}"#,
                "instances[0]: unknown field \"txt\"",
            ),
            (
                r#"{"instances": [{"text_pair": "a"}]}"#,
                "instances[0]: missing \"text\"",
            ),
            (
                r#"{"instances": ["a"], "params": {}}"#,
                "unknown field \"params\"",
            ),
            (
                r#"{"instances": ["a"], "parameters": 3}"#,
                "parameters: must be an object",
            ),
            (
                r#"{"instances": ["a"], "parameters": {"k": 1}}"#,
                "parameters: unknown parameter \"k\"",
            ),
            (
                r#"{"instances": ["a","b","c","d","e"]}"#,
                "more than 4 inputs in one request: at most 4",
            ),
        ];
        for (body, start) in cases {
            let error = json(body).unwrap_err();
            assert!(error.starts_with(start), "{body}: {error}");
        }
    }

    #[test]
    fn csv_rows_are_texts_or_pairs() {
        let csv = |body: &str| parse(body.as_bytes(), BodyFormat::Csv, 4).map_err(|e| e.0);
        let request = csv("a\n\"b, c\",d\n").unwrap();
        assert_eq!(request.inputs[0], text("a"));
        assert_eq!(request.inputs[1].text, "b, c");
        assert_eq!(request.inputs[1].pair.as_deref(), Some("d"));
        assert!(csv("").unwrap_err().starts_with("the CSV body has no rows"));
        // Refused at the fifth row: the rest, not even CSV, is never read.
        assert!(
            csv("a\nb\nc\nd\ne\n\"unclosed")
                .unwrap_err()
                .starts_with("more than 4 inputs in one request: at most 4")
        );
        assert!(
            csv("a\nb,c,d\n")
                .unwrap_err()
                .starts_with("CSV row 2: 3 columns")
        );
    }
}
