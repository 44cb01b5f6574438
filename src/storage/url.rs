//! Which database to open: `--storage`, `HPTUNE_STORAGE`, or `sqlite://hptune.db`.

use std::fmt;

use super::StorageError;

/// The database used when neither `--storage` nor `HPTUNE_STORAGE` names one.
pub const DEFAULT_STORAGE: &str = "sqlite://hptune.db";

/// A database location, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageUrl {
    /// A SQLite file (created if missing).
    Sqlite(String),
}

impl StorageUrl {
    /// Reads `sqlite://PATH`, `sqlite:PATH`, or a bare file path.
    pub fn parse(text: &str) -> Result<Self, StorageError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(StorageError::BadUrl(
                "the storage URL is empty: use e.g. sqlite://hptune.db".into(),
            ));
        }
        if let Some(path) = text
            .strip_prefix("sqlite://")
            .or_else(|| text.strip_prefix("sqlite:"))
        {
            let path = path.split('?').next().unwrap_or_default();
            if path.is_empty() {
                return Err(StorageError::BadUrl(format!(
                    "'{text}' names no file: use e.g. sqlite://hptune.db"
                )));
            }
            return Ok(StorageUrl::Sqlite(path.to_string()));
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Err(StorageError::BadUrl(
                "PostgreSQL storage is not available in this version: use a sqlite:// URL".into(),
            ));
        }
        if let Some((scheme, _)) = text.split_once("://") {
            return Err(StorageError::BadUrl(format!(
                "'{scheme}://' is not a storage this version knows: use sqlite://PATH"
            )));
        }
        Ok(StorageUrl::Sqlite(text.to_string()))
    }

    /// The URL handed to the driver.
    pub(super) fn connect_string(&self) -> String {
        match self {
            StorageUrl::Sqlite(path) => format!("sqlite://{path}?mode=rwc"),
        }
    }
}

impl fmt::Display for StorageUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageUrl::Sqlite(path) => write!(f, "sqlite://{path}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sqlite_urls_and_bare_paths() {
        for text in [
            "sqlite://a/b.db",
            "sqlite:a/b.db",
            "a/b.db",
            "sqlite://a/b.db?mode=ro",
        ] {
            assert_eq!(
                StorageUrl::parse(text).unwrap(),
                StorageUrl::Sqlite("a/b.db".into())
            );
        }
    }

    #[test]
    fn refuses_empty_and_unknown_urls() {
        for text in ["", "sqlite://", "mysql://x/y"] {
            assert!(StorageUrl::parse(text).is_err(), "{text}");
        }
    }
}
