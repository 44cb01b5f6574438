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
    /// A PostgreSQL database, shared by controllers on many machines.
    Postgres(String),
}

impl StorageUrl {
    /// Reads `sqlite://PATH`, `sqlite:PATH`, a bare file path, or `postgres://...`.
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
            return Ok(StorageUrl::Postgres(text.to_string()));
        }
        if let Some((scheme, _)) = text.split_once("://") {
            return Err(StorageError::BadUrl(format!(
                "'{scheme}://' is not a storage hptune knows: use sqlite://PATH or postgres://USER@HOST/DATABASE"
            )));
        }
        Ok(StorageUrl::Sqlite(text.to_string()))
    }

    /// The URL as written, password included: only for a remote job's `HPTUNE_STORAGE`,
    /// never for a message or a log (`Display` masks the password).
    pub fn secret_url(&self) -> &str {
        match self {
            StorageUrl::Sqlite(path) | StorageUrl::Postgres(path) => path,
        }
    }

    /// The URL handed to the driver.
    pub(super) fn connect_string(&self) -> String {
        match self {
            StorageUrl::Sqlite(path) => format!("sqlite://{path}?mode=rwc"),
            StorageUrl::Postgres(url) => url.clone(),
        }
    }
}

/// The URL with its password, if any, replaced: URLs are shown in messages and logs.
fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((credentials, host)) => {
            let user = credentials.split(':').next().unwrap_or_default();
            let hidden = if credentials.contains(':') {
                ":***"
            } else {
                ""
            };
            format!("{scheme}://{user}{hidden}@{host}{tail}")
        }
        None => url.to_string(),
    }
}

impl fmt::Display for StorageUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageUrl::Sqlite(path) => write!(f, "sqlite://{path}"),
            StorageUrl::Postgres(url) => f.write_str(&without_password(url)),
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

    #[test]
    fn shows_postgres_urls_without_their_password() {
        let url = StorageUrl::parse("postgres://tuner:s3cret@db.example:5432/studies").unwrap();
        assert_eq!(
            url.to_string(),
            "postgres://tuner:***@db.example:5432/studies"
        );
        assert!(url.connect_string().contains("s3cret"));
        let url = StorageUrl::parse("postgresql://tuner@db/studies").unwrap();
        assert_eq!(url.to_string(), "postgresql://tuner@db/studies");
    }
}
