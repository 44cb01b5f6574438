//! Reading every supported data format, label mapping and bad rows.

use std::path::{Path, PathBuf};

use hptune_trainer::TrainerError;
use hptune_trainer::data::{Column, ColumnSpec, LabelMap, read_examples, stratified_split};

fn write(dir: &Path, name: &str, content: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    path
}

fn with_header() -> ColumnSpec {
    ColumnSpec {
        header: true,
        ..ColumnSpec::default()
    }
}

#[test]
fn glue_tsv_with_header_keeps_quotes_and_trims_trailing_space() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "train.tsv",
        "sentence\tlabel\nit 's a \"charming\" journey . \t1\nbleak \t0\n",
    );
    let rows = read_examples(&path, &with_header()).unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].text, "it 's a \"charming\" journey .");
    assert_eq!(rows[0].label, "1");
    assert_eq!(rows[1].line, 3);
}

#[test]
fn cola_raw_tsv_loads_by_column_index_without_header() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "in_domain_train.tsv",
        "gj04\t1\t\tOur friends won't buy this analysis.\ngj04\t0\t*\tThey drank the pub.",
    );
    let spec = ColumnSpec {
        text: Some(Column::Index(3)),
        label: Some(Column::Index(1)),
        header: false,
        ..ColumnSpec::default()
    };
    let rows = read_examples(&path, &spec).unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1].text, "They drank the pub.");
    assert_eq!(rows[1].label, "0");
}

#[test]
fn csv_with_quotes_and_named_columns_and_pairs() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "pairs.csv",
        "id,sentence1,sentence2,label\n1,\"A man, tall\",A person,entailment\n2,Dogs,\"Cats, too\",contradiction\n",
    );
    let rows = read_examples(&path, &with_header()).unwrap();
    assert_eq!(rows[0].text, "A man, tall");
    assert_eq!(rows[0].pair.as_deref(), Some("A person"));
    assert_eq!(rows[1].pair.as_deref(), Some("Cats, too"));
    assert_eq!(rows[1].label, "contradiction");
}

#[test]
fn json_lines_with_string_and_integer_labels() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "data.jsonl",
        "{\"text\": \"good\", \"label\": 1}\n\n{\"text\": \"bad\", \"label\": \"0\"}\n",
    );
    let rows = read_examples(&path, &with_header()).unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].label, "1");
    assert_eq!(rows[1].label, "0");
    assert_eq!(rows[1].line, 3);
}

#[test]
fn a_row_without_label_is_reported_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "bad.tsv",
        "sentence\tlabel\nfine\t1\nno label here\n",
    );
    let error = read_examples(&path, &with_header()).unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(error, TrainerError::Data { line: 3, .. }),
        "{message}"
    );
    assert!(message.contains("bad.tsv:3"), "{message}");
    assert!(message.contains("no label column 1"), "{message}");
}

#[test]
fn an_empty_text_and_a_missing_json_field_are_errors_with_lines() {
    let dir = tempfile::tempdir().unwrap();
    let tsv = write(dir.path(), "empty.tsv", "sentence\tlabel\n \t1\n");
    assert!(
        read_examples(&tsv, &with_header())
            .unwrap_err()
            .to_string()
            .contains("empty.tsv:2: the text is empty")
    );
    let jsonl = write(
        dir.path(),
        "x.jsonl",
        "{\"text\": \"a\", \"label\": 1}\n{\"text\": \"b\"}\n",
    );
    let message = read_examples(&jsonl, &with_header())
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("x.jsonl:2: no field \"label\""),
        "{message}"
    );
}

#[test]
fn an_unknown_column_name_lists_the_header() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "a.csv", "review,stars\ngood,5\n");
    let spec = ColumnSpec {
        text: Some(Column::Name("body".into())),
        header: true,
        ..ColumnSpec::default()
    };
    let message = read_examples(&path, &spec).unwrap_err().to_string();
    assert!(message.contains("no column named \"body\""), "{message}");
    assert!(message.contains("\"review\", \"stars\""), "{message}");
}

#[test]
fn unknown_extension_is_refused_with_the_allowed_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "a.parquet", "x");
    let message = read_examples(&path, &with_header())
        .unwrap_err()
        .to_string();
    assert!(message.contains(".csv, .tsv"), "{message}");
}

#[test]
fn integer_labels_are_ordered_numerically_and_strings_alphabetically() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "n.tsv",
        "text\tlabel\na\t10\nb\t2\nc\t-1\nd\t2\n",
    );
    let rows = read_examples(&path, &with_header()).unwrap();
    let map = LabelMap::from_examples(&rows);
    assert_eq!(map.names(), ["-1", "2", "10"]);
    let path = write(
        dir.path(),
        "s.tsv",
        "text\tlabel\na\tsports\nb\tbusiness\nc\tworld\n",
    );
    let rows = read_examples(&path, &with_header()).unwrap();
    assert_eq!(
        LabelMap::from_examples(&rows).names(),
        ["business", "sports", "world"]
    );
}

#[test]
fn an_eval_label_unseen_in_training_names_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let train = write(dir.path(), "t.tsv", "text\tlabel\na\tpos\nb\tneg\n");
    let eval = write(dir.path(), "e.tsv", "text\tlabel\nc\tpos\nd\tneutral\n");
    let map = LabelMap::from_examples(&read_examples(&train, &with_header()).unwrap());
    let message = map
        .apply(&eval, read_examples(&eval, &with_header()).unwrap())
        .unwrap_err()
        .to_string();
    assert!(message.contains("e.tsv:3: label \"neutral\""), "{message}");
}

#[test]
fn stratified_split_is_seeded_and_keeps_every_class() {
    let dir = tempfile::tempdir().unwrap();
    let mut content = String::from("text\tlabel\n");
    for i in 0..90 {
        content += &format!("text {i}\t{}\n", if i < 80 { "a" } else { "b" });
    }
    let path = write(dir.path(), "d.tsv", &content);
    let rows = read_examples(&path, &with_header()).unwrap();
    let map = LabelMap::from_examples(&rows);
    let examples = map.apply(&path, rows).unwrap();
    let (train, eval) = stratified_split(examples.clone(), 0.1, 7);
    assert_eq!(train.len() + eval.len(), 90);
    assert_eq!(eval.iter().filter(|e| e.label == 0).count(), 8);
    assert_eq!(eval.iter().filter(|e| e.label == 1).count(), 1);
    let (_, again) = stratified_split(examples.clone(), 0.1, 7);
    assert_eq!(eval, again);
    let (_, other) = stratified_split(examples, 0.1, 8);
    assert_ne!(eval, other);
}
