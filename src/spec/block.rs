//! Blocks whose fields depend on a tag (the executor's `kind`, the stopping `rule`): each
//! variant's fields are declared once, in its own raw struct, and read here.
//!
//! serde's internally tagged enums would buffer the block before choosing the variant, and
//! serde_yaml cannot say where an error inside a buffered block is. So the block is read
//! again from the file's text, straight into the variant's struct, the rest of the file
//! skipped: errors keep their field path and their line and column. A study file is a few
//! kilobytes, read twice or thrice.

use std::fmt;

use serde::de::{self, DeserializeOwned, DeserializeSeed, Deserializer, IgnoredAny, MapAccess};
use serde::forward_to_deserialize_any;

/// Reads the block at `path` (mapping keys from the root: `["trial", "executor"]`) of the
/// YAML `text` as `T`; `None` when the file has no such block.
pub(super) fn read<T: DeserializeOwned>(
    text: &str,
    path: &[&str],
) -> Result<Option<T>, serde_yaml::Error> {
    let mut found = None;
    Descend {
        path,
        found: &mut found,
    }
    .deserialize(serde_yaml::Deserializer::from_str(text))?;
    Ok(found)
}

/// The mapping keys of the block at `path`, in file order (keys that are not text, as
/// YAML writes them).
pub(super) fn keys(text: &str, path: &[&str]) -> Result<Vec<String>, serde_yaml::Error> {
    let block: Option<serde_yaml::Mapping> = read(text, path)?;
    Ok(block
        .into_iter()
        .flatten()
        .map(|(key, _)| match key {
            serde_yaml::Value::String(text) => text,
            other => serde_yaml::to_string(&other)
                .unwrap_or_default()
                .trim_end()
                .to_string(),
        })
        .collect())
}

/// The fields a struct deriving `Deserialize` declares, as serde names them.
pub(super) fn fields<T: DeserializeOwned>() -> &'static [&'static str] {
    match T::deserialize(FieldNames) {
        Err(Declared(fields)) => fields,
        Ok(_) => &[],
    }
}

/// Walks down `path`, skipping every other value, and reads the value at its end.
struct Descend<'a, T> {
    path: &'a [&'a str],
    found: &'a mut Option<T>,
}

impl<'de, T: DeserializeOwned> DeserializeSeed<'de> for Descend<'_, T> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        match self.path.split_first() {
            None => {
                *self.found = Some(T::deserialize(deserializer)?);
                Ok(())
            }
            Some(_) => deserializer.deserialize_any(self),
        }
    }
}

impl<'de, T: DeserializeOwned> de::Visitor<'de> for Descend<'_, T> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let (first, rest) = self
            .path
            .split_first()
            .expect("only called with a path left");
        while let Some(key) = map.next_key::<serde_yaml::Value>()? {
            if key.as_str() == Some(first) {
                map.next_value_seed(Descend {
                    path: rest,
                    found: &mut *self.found,
                })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }

    // Any other value holds no block: the study's own reading reports it.
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }
}

/// A deserializer that only answers which fields a struct declares.
struct FieldNames;

/// The answer of [`FieldNames`], carried out as an error.
#[derive(Debug)]
struct Declared(&'static [&'static str]);

impl fmt::Display for Declared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "fields {:?}", self.0)
    }
}

impl std::error::Error for Declared {}

impl de::Error for Declared {
    fn custom<M: fmt::Display>(_: M) -> Self {
        Declared(&[])
    }
}

impl<'de> Deserializer<'de> for FieldNames {
    type Error = Declared;

    fn deserialize_struct<V: de::Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Declared> {
        Err(Declared(fields))
    }

    fn deserialize_any<V: de::Visitor<'de>>(self, _: V) -> Result<V::Value, Declared> {
        Err(Declared(&[]))
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Inner {
        count: i64,
        name: Option<String>,
    }

    const TEXT: &str =
        "a: [1, 2]\ntrial:\n  command: [x]\n  executor:\n    kind: k\n    count: 3\nz: {q: 1}\n";

    #[test]
    fn reads_the_block_at_its_path_and_skips_the_rest() {
        let inner: Option<Inner> = read(TEXT, &["trial", "executor"]).unwrap();
        assert_eq!(
            inner,
            Some(Inner {
                count: 3,
                name: None
            })
        );
        let absent: Option<Inner> = read(TEXT, &["trial", "resources"]).unwrap();
        assert_eq!(absent, None);
        assert_eq!(
            keys(TEXT, &["trial", "executor"]).unwrap(),
            ["kind", "count"]
        );
    }

    #[test]
    fn errors_inside_the_block_keep_their_path_and_position() {
        let text = TEXT.replace("count: 3", "count: three");
        let error = read::<Inner>(&text, &["trial", "executor"]).unwrap_err();
        assert_eq!(
            error.location().map(|l| (l.line(), l.column())),
            Some((6, 12))
        );
        assert!(
            error
                .to_string()
                .starts_with("trial.executor.count: invalid type"),
            "{error}"
        );
    }

    #[test]
    fn names_the_fields_a_struct_declares() {
        assert_eq!(fields::<Inner>(), ["count", "name"]);
    }
}
