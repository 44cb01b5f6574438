//! Reading labelled texts from CSV, TSV and JSON lines, and mapping labels to class indices.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::str::FromStr;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use crate::error::{Result, TrainerError};

/// A column chosen by header name or by 0-based index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Column {
    /// The column whose header is this name.
    Name(String),
    /// The column at this 0-based position.
    Index(usize),
}

impl FromStr for Column {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        Ok(match s.parse::<usize>() {
            Ok(index) => Column::Index(index),
            Err(_) => Column::Name(s.to_string()),
        })
    }
}

impl std::fmt::Display for Column {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Column::Name(name) => write!(f, "\"{name}\""),
            Column::Index(index) => write!(f, "{index}"),
        }
    }
}

/// Which columns hold the text, the optional second text and the label.
#[derive(Debug, Clone, Default)]
pub struct ColumnSpec {
    /// The text; default `sentence`, `text` or `sentence1` (with a header), else column 0.
    pub text: Option<Column>,
    /// The second text of a pair; default `sentence2` when the text is `sentence1`.
    pub pair: Option<Column>,
    /// The label; default `label` (with a header), else column 1.
    pub label: Option<Column>,
    /// False when CSV/TSV files have no header row.
    pub header: bool,
}

/// One row as read, before its label is mapped to a class index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawExample {
    /// The text.
    pub text: String,
    /// The second text of a pair.
    pub pair: Option<String>,
    /// The label as written.
    pub label: String,
    /// 1-based line of the row in its file.
    pub line: usize,
}

/// One row ready for tokenisation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Example {
    /// The text.
    pub text: String,
    /// The second text of a pair.
    pub pair: Option<String>,
    /// The class index.
    pub label: usize,
}

/// The file formats the trainer reads, told apart by extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Comma-separated, with RFC 4180 quoting.
    Csv,
    /// Tab-separated, no quoting (as GLUE writes it).
    Tsv,
    /// One JSON object per line.
    JsonLines,
}

impl Format {
    /// The format of `path` by its extension.
    pub fn of(path: &Path) -> Result<Format> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        match ext.as_str() {
            "csv" => Ok(Format::Csv),
            "tsv" | "tab" | "txt" => Ok(Format::Tsv),
            "jsonl" | "ndjson" | "json" => Ok(Format::JsonLines),
            _ => Err(TrainerError::Data {
                path: path.to_path_buf(),
                line: 0,
                message: format!(
                    "unknown extension \".{ext}\"; use .csv, .tsv (or .txt) or .jsonl"
                ),
            }),
        }
    }
}

/// Reads every row of a data file; a row without text or label is an error naming its line.
pub fn read_examples(path: &Path, spec: &ColumnSpec) -> Result<Vec<RawExample>> {
    let examples = match Format::of(path)? {
        Format::Csv => read_delimited(path, spec, b',', true)?,
        Format::Tsv => read_delimited(path, spec, b'\t', false)?,
        Format::JsonLines => read_json_lines(path, spec)?,
    };
    if examples.is_empty() {
        return Err(data_error(path, 0, "the file holds no rows"));
    }
    Ok(examples)
}

fn data_error(path: &Path, line: usize, message: impl Into<String>) -> TrainerError {
    TrainerError::Data {
        path: path.to_path_buf(),
        line,
        message: message.into(),
    }
}

/// Column positions resolved against a header (or the defaults for headerless files).
struct Positions {
    text: usize,
    pair: Option<usize>,
    label: usize,
}

fn resolve(path: &Path, spec: &ColumnSpec, header: Option<&[String]>) -> Result<Positions> {
    let find = |column: &Column, role: &str| -> Result<usize> {
        match (column, header) {
            (Column::Index(i), Some(names)) if *i >= names.len() => Err(data_error(
                path,
                1,
                format!("--{role}-column {i} is past the last column ({} columns)", names.len()),
            )),
            (Column::Index(i), _) => Ok(*i),
            (Column::Name(name), Some(names)) => {
                names.iter().position(|n| n == name).ok_or_else(|| {
                    data_error(
                        path,
                        1,
                        format!("no column named \"{name}\" for --{role}-column; the header has {names:?}"),
                    )
                })
            }
            (Column::Name(name), None) => Err(data_error(
                path,
                0,
                format!("--{role}-column \"{name}\" names a column but --no-header says the file has no header; give a 0-based index"),
            )),
        }
    };
    let default_text = || {
        match header {
        Some(names) => ["sentence", "text", "sentence1", "question", "content"]
            .iter()
            .find(|c| names.iter().any(|n| n == *c))
            .map(|c| Column::Name(c.to_string()))
            .ok_or_else(|| {
                data_error(
                    path,
                    1,
                    format!("no text column named sentence, text or sentence1 in the header {names:?}; choose one with --text-column"),
                )
            }),
        None => Ok(Column::Index(0)),
    }
    };
    let text_column = match &spec.text {
        Some(c) => c.clone(),
        None => default_text()?,
    };
    let pair_column = spec.pair.clone().or_else(|| {
        let names = header?;
        (text_column == Column::Name("sentence1".into()) && names.iter().any(|n| n == "sentence2"))
            .then(|| Column::Name("sentence2".into()))
    });
    let label_column = spec.label.clone().unwrap_or(match header {
        Some(_) => Column::Name("label".into()),
        None => Column::Index(1),
    });
    Ok(Positions {
        text: find(&text_column, "text")?,
        pair: pair_column.map(|c| find(&c, "text-pair")).transpose()?,
        label: find(&label_column, "label")?,
    })
}

fn read_delimited(
    path: &Path,
    spec: &ColumnSpec,
    delimiter: u8,
    quoting: bool,
) -> Result<Vec<RawExample>> {
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .quoting(quoting)
        .has_headers(spec.header)
        .flexible(true)
        .from_path(path)
        .map_err(|e| csv_error(path, e))?;
    let header: Option<Vec<String>> = if spec.header {
        let names = reader.headers().map_err(|e| csv_error(path, e))?;
        Some(names.iter().map(|n| n.trim().to_string()).collect())
    } else {
        None
    };
    let positions = resolve(path, spec, header.as_deref())?;
    let mut examples = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| csv_error(path, e))?;
        let line = record.position().map_or(0, |p| p.line() as usize);
        let field = |index: usize, role: &str| {
            record.get(index).map(str::trim).ok_or_else(|| {
                data_error(
                    path,
                    line,
                    format!(
                        "the row has {} columns, so it has no {role} column {index}",
                        record.len()
                    ),
                )
            })
        };
        let text = field(positions.text, "text")?;
        let pair = positions.pair.map(|i| field(i, "text-pair")).transpose()?;
        let label = field(positions.label, "label")?;
        examples.push(checked(path, line, text, pair, label)?);
    }
    Ok(examples)
}

fn checked(
    path: &Path,
    line: usize,
    text: &str,
    pair: Option<&str>,
    label: &str,
) -> Result<RawExample> {
    if text.is_empty() {
        return Err(data_error(path, line, "the text is empty"));
    }
    if pair.is_some_and(str::is_empty) {
        return Err(data_error(path, line, "the second text is empty"));
    }
    if label.is_empty() {
        return Err(data_error(path, line, "the label is empty"));
    }
    Ok(RawExample {
        text: text.to_string(),
        pair: pair.map(str::to_string),
        label: label.to_string(),
        line,
    })
}

fn csv_error(path: &Path, error: csv::Error) -> TrainerError {
    let line = error.position().map_or(0, |p| p.line() as usize);
    match error.into_kind() {
        csv::ErrorKind::Io(e) => TrainerError::io(path, "reading", e),
        csv::ErrorKind::Utf8 { err, .. } => data_error(path, line, format!("not UTF-8: {err}")),
        other => data_error(path, line, format!("{other:?}")),
    }
}

fn read_json_lines(path: &Path, spec: &ColumnSpec) -> Result<Vec<RawExample>> {
    let text = std::fs::read_to_string(path).map_err(|e| TrainerError::io(path, "reading", e))?;
    let name = |column: &Option<Column>, default: &[&str], role: &str| -> Result<Option<String>> {
        match column {
            Some(Column::Name(n)) => Ok(Some(n.clone())),
            Some(Column::Index(i)) => Err(data_error(
                path,
                0,
                format!(
                    "--{role}-column {i}: JSON lines files name their fields; give the field's name"
                ),
            )),
            None => Ok(default.first().map(|d| d.to_string())),
        }
    };
    let label_key = name(&spec.label, &["label"], "label")?.unwrap_or_default();
    let pair_key = name(&spec.pair, &[], "text-pair")?;
    let explicit_text = name(&spec.text, &[], "text")?;
    let mut examples = Vec::new();
    for (index, row) in text.lines().enumerate() {
        let line = index + 1;
        if row.trim().is_empty() {
            continue;
        }
        let object: serde_json::Map<String, serde_json::Value> = serde_json::from_str(row)
            .map_err(|e| TrainerError::Json {
                path: path.to_path_buf(),
                line,
                message: format!("{e}; each line must be one JSON object"),
            })?;
        let text_key = match &explicit_text {
            Some(key) => key.clone(),
            None => ["sentence", "text", "sentence1"]
                .iter()
                .find(|k| object.contains_key(**k))
                .map(|k| k.to_string())
                .ok_or_else(|| data_error(path, line, "no \"sentence\", \"text\" or \"sentence1\" field; choose one with --text-column"))?,
        };
        let get = |key: &str| -> Result<String> {
            match object.get(key) {
                Some(serde_json::Value::String(s)) => Ok(s.trim().to_string()),
                Some(serde_json::Value::Number(n)) => Ok(n.to_string()),
                Some(serde_json::Value::Bool(b)) => Ok(b.to_string()),
                Some(other) => Err(data_error(
                    path,
                    line,
                    format!("field \"{key}\" is {other}, not a string or number"),
                )),
                None => Err(data_error(
                    path,
                    line,
                    format!(
                        "no field \"{key}\"; the object has {:?}",
                        object.keys().collect::<Vec<_>>()
                    ),
                )),
            }
        };
        let text = get(&text_key)?;
        let pair = pair_key.as_deref().map(get).transpose()?;
        let label = get(&label_key)?;
        examples.push(checked(path, line, &text, pair.as_deref(), &label)?);
    }
    Ok(examples)
}

/// Class names in a stable order: numerically when every label is an integer, else sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelMap {
    names: Vec<String>,
}

impl LabelMap {
    /// The map of the labels that occur in `examples`.
    pub fn from_examples(examples: &[RawExample]) -> LabelMap {
        let distinct: BTreeSet<&str> = examples.iter().map(|e| e.label.as_str()).collect();
        let mut names: Vec<String> = distinct.into_iter().map(str::to_string).collect();
        if names.iter().all(|n| n.parse::<i64>().is_ok()) {
            names.sort_by_key(|n| n.parse::<i64>().unwrap_or_default());
        }
        LabelMap { names }
    }

    /// A map with these names, index `i` being `names[i]`.
    pub fn from_names(names: Vec<String>) -> LabelMap {
        LabelMap { names }
    }

    /// Number of classes.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// True when there are no classes.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The class names, by index.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The index of a label as written.
    pub fn index_of(&self, label: &str) -> Option<usize> {
        self.names.iter().position(|n| n == label)
    }

    /// `id2label` as Hugging Face's config.json writes it.
    pub fn id2label(&self) -> BTreeMap<String, String> {
        self.names
            .iter()
            .enumerate()
            .map(|(i, n)| (i.to_string(), n.clone()))
            .collect()
    }

    /// Maps every example's label, failing on the first label the map does not know.
    pub fn apply(&self, path: &Path, examples: Vec<RawExample>) -> Result<Vec<Example>> {
        examples
            .into_iter()
            .map(|raw| {
                let label = self.index_of(&raw.label).ok_or_else(|| {
                    data_error(
                        path,
                        raw.line,
                        format!(
                            "label \"{}\" is not among the training labels {:?}",
                            raw.label, self.names
                        ),
                    )
                })?;
                Ok(Example {
                    text: raw.text,
                    pair: raw.pair,
                    label,
                })
            })
            .collect()
    }
}

/// Splits off `fraction` of the examples of each class (at least one of every class with two
/// or more examples) as an evaluation set, reproducibly for a given seed.
pub fn stratified_split(
    examples: Vec<Example>,
    fraction: f64,
    seed: u64,
) -> (Vec<Example>, Vec<Example>) {
    let mut by_class: BTreeMap<usize, Vec<Example>> = BTreeMap::new();
    for example in examples {
        by_class.entry(example.label).or_default().push(example);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mut train, mut eval) = (Vec::new(), Vec::new());
    for (_, mut group) in by_class {
        group.shuffle(&mut rng);
        let n = group.len();
        let take = if n < 2 {
            0
        } else {
            ((n as f64 * fraction).round() as usize).clamp(1, n - 1)
        };
        eval.extend(group.drain(..take));
        train.extend(group);
    }
    train.shuffle(&mut rng);
    (train, eval)
}
