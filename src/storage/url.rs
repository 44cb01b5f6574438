//! Which database to open: `--storage`, `HPTUNE_STORAGE`, or `sqlite://hptune.db`.
//!
//! A PostgreSQL URL holds a password: it is shown only masked ([`fmt::Display`]), and a URL
//! whose password could not be told apart from the rest (a raw `/`, `#` or `@` that should
//! be percent-encoded) is refused with a message that does not repeat it.

use std::fmt;
use std::str::FromStr;

use sqlx::sqlite::SqliteConnectOptions;

use super::StorageError;

/// The database used when neither `--storage` nor `HPTUNE_STORAGE` names one.
pub const DEFAULT_STORAGE: &str = "sqlite://hptune.db";

/// The query parameters of a PostgreSQL URL that sqlx reads (`PgConnectOptions`); it
/// ignores others with a warning that would print their value, so hptune refuses them.
const POSTGRES_PARAMETERS: [&str; 19] = [
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
    "options",
    "options[NAME]",
];

/// A database location, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageUrl {
    /// A SQLite file, with sqlx's query parameters (`mode=ro`, `mode=rw`, `immutable=true`,
    /// ...); created if missing unless `mode` says otherwise.
    Sqlite {
        /// The file.
        path: String,
        /// The query parameters as written, without the `?`; empty for none.
        query: String,
    },
    /// A PostgreSQL database, shared by controllers on many machines.
    Postgres(String),
}

impl StorageUrl {
    /// Reads `sqlite://PATH`, `sqlite:PATH`, a bare file path (each with sqlx's SQLite query
    /// parameters), or `postgres://...`.
    pub fn parse(text: &str) -> Result<Self, StorageError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(StorageError::BadUrl(
                "the storage URL is empty: use e.g. sqlite://hptune.db".into(),
            ));
        }
        if let Some(rest) = ["postgres://", "postgresql://"]
            .iter()
            .find_map(|scheme| text.strip_prefix(scheme))
        {
            check_postgres(rest)?;
            return Ok(StorageUrl::Postgres(text.to_string()));
        }
        let file = match text
            .strip_prefix("sqlite://")
            .or_else(|| text.strip_prefix("sqlite:"))
        {
            Some(file) => file,
            None => {
                if let Some((scheme, _)) = text.split_once("://") {
                    return Err(StorageError::BadUrl(format!(
                        "'{scheme}://' is not a storage hptune knows: use sqlite://PATH or postgres://USER@HOST/DATABASE"
                    )));
                }
                text
            }
        };
        let (path, query) = file.split_once('?').unwrap_or((file, ""));
        if path.is_empty() {
            return Err(StorageError::BadUrl(format!(
                "'{text}' names no file: use e.g. sqlite://hptune.db"
            )));
        }
        let url = StorageUrl::Sqlite {
            path: path.to_string(),
            query: query.to_string(),
        };
        // sqlx reads the parameters when it connects; read them now, so that a wrong one is
        // bad input, said before anything runs.
        SqliteConnectOptions::from_str(&url.connect_string()).map_err(|e| {
            StorageError::BadUrl(format!(
                "{url}: {e}: SQLite storage URLs take mode (ro, rw, rwc, memory), cache, immutable and vfs"
            ))
        })?;
        Ok(url)
    }

    /// Whether this names a SQLite file that does not exist (yet): there is no database to
    /// read.
    pub fn is_missing(&self) -> bool {
        matches!(self, StorageUrl::Sqlite { path, .. } if !std::path::Path::new(path).exists())
    }

    /// The URL as written, password included: only for a remote job's `HPTUNE_STORAGE`,
    /// never for a message or a log (`Display` masks the password).
    pub(crate) fn secret_url(&self) -> String {
        match self {
            StorageUrl::Sqlite { .. } => self.to_string(),
            StorageUrl::Postgres(url) => url.clone(),
        }
    }

    /// The URL handed to the driver: a SQLite file is created if missing (`mode=rwc`) unless
    /// the URL sets `mode`.
    pub(super) fn connect_string(&self) -> String {
        match self {
            StorageUrl::Sqlite { path, query } => {
                let sets_mode = query.split('&').any(|pair| pair.starts_with("mode="));
                match (query.is_empty(), sets_mode) {
                    (true, _) => format!("sqlite://{path}?mode=rwc"),
                    (false, true) => format!("sqlite://{path}?{query}"),
                    (false, false) => format!("sqlite://{path}?mode=rwc&{query}"),
                }
            }
            StorageUrl::Postgres(url) => url.clone(),
        }
    }

    /// The URL handed to the driver to read only: a SQLite file is opened with `mode=ro`,
    /// whatever mode the URL sets.
    pub(super) fn read_only_connect_string(&self) -> String {
        match self {
            StorageUrl::Sqlite { path, query } => {
                let mut pairs = vec!["mode=ro"];
                pairs.extend(
                    query
                        .split('&')
                        .filter(|pair| !pair.is_empty() && !pair.starts_with("mode=")),
                );
                format!("sqlite://{path}?{}", pairs.join("&"))
            }
            StorageUrl::Postgres(url) => url.clone(),
        }
    }
}

/// A PostgreSQL URL after `scheme://`, in its parts.
struct PostgresParts<'a> {
    /// `USER:PASSWORD`, `USER`, or none.
    credentials: Option<&'a str>,
    /// `HOST:PORT`.
    host: &'a str,
    /// `/DATABASE`, or empty.
    path: &'a str,
    /// The query parameters, without the `?`; empty for none.
    query: &'a str,
}

impl<'a> PostgresParts<'a> {
    /// Splits as RFC 3986 does: the authority ends at the first `/` or `?`, its credentials
    /// at its last `@`.
    fn split(rest: &'a str) -> Self {
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
        let (credentials, host) = match authority.rsplit_once('@') {
            Some((credentials, host)) => (Some(credentials), host),
            None => (None, authority),
        };
        Self {
            credentials,
            host,
            path,
            query,
        }
    }

    /// The query's `(key, value)` pairs as written; `None` for a key without `=`.
    fn pairs(&self) -> impl Iterator<Item = (&'a str, Option<&'a str>)> {
        self.query
            .split('&')
            .filter(|pair| !pair.is_empty())
            .map(|pair| match pair.split_once('=') {
                Some((key, value)) => (key, Some(value)),
                None => (pair, None),
            })
    }
}

/// Refuses a PostgreSQL URL (after `scheme://`) whose password cannot be told apart from the
/// rest, or that sets a parameter sqlx would ignore. The messages never repeat the URL.
fn check_postgres(rest: &str) -> Result<(), StorageError> {
    let bad = |why: &str| {
        Err(StorageError::BadUrl(format!(
            "the PostgreSQL storage URL {why}: write postgres://USER:PASSWORD@HOST:PORT/DATABASE with a '/', '?', '#', '@' or '%' of the password percent-encoded (%2F, %3F, %23, %40, %25)"
        )))
    };
    let parts = PostgresParts::split(rest);
    if rest.contains('#') {
        return bad("holds a '#'");
    }
    if parts.path.contains('@') || parts.pairs().any(|(key, _)| key.contains('@')) {
        return bad("holds an '@' after its host (a raw '/' or '?' in the password?)");
    }
    if parts.credentials.is_some_and(|c| c.contains(['/', '?'])) {
        return bad("holds a raw '/' or '?' in its user or password");
    }
    for (key, value) in parts.pairs() {
        let known = POSTGRES_PARAMETERS.contains(&key)
            || (key.starts_with("options[") && key.ends_with(']'));
        if !known {
            // A word with no '=' may be a misplaced password: it is not repeated.
            let plain = key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-[]".contains(c));
            let shown = match value.is_some() && plain {
                true => format!("'{key}'"),
                false => "not repeated here".to_string(),
            };
            return Err(StorageError::BadUrl(format!(
                "the PostgreSQL storage URL sets a query parameter hptune does not know ({shown}): use {}",
                POSTGRES_PARAMETERS.join(", ")
            )));
        }
    }
    Ok(())
}

/// A PostgreSQL URL (after `scheme://`, checked by [`check_postgres`]) with its password,
/// in the credentials or in the query, replaced by `***`.
fn without_password(rest: &str) -> String {
    let parts = PostgresParts::split(rest);
    let credentials = match parts.credentials {
        Some(credentials) => match credentials.split_once(':') {
            Some((user, _)) => format!("{user}:***@"),
            None => format!("{credentials}@"),
        },
        None => String::new(),
    };
    let query: Vec<String> = parts
        .pairs()
        .map(|(key, value)| match (key, value) {
            ("password", _) => format!("{key}=***"),
            (_, Some(value)) => format!("{key}={value}"),
            (_, None) => key.to_string(),
        })
        .collect();
    let query = match query.is_empty() {
        true => String::new(),
        false => format!("?{}", query.join("&")),
    };
    format!("{credentials}{}{}{query}", parts.host, parts.path)
}

impl fmt::Display for StorageUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageUrl::Sqlite { path, query } if query.is_empty() => write!(f, "sqlite://{path}"),
            StorageUrl::Sqlite { path, query } => write!(f, "sqlite://{path}?{query}"),
            StorageUrl::Postgres(url) => {
                let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
                write!(f, "{scheme}://{}", without_password(rest))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite(path: &str, query: &str) -> StorageUrl {
        StorageUrl::Sqlite {
            path: path.into(),
            query: query.into(),
        }
    }

    #[test]
    fn reads_sqlite_urls_and_bare_paths() {
        for text in ["sqlite://a/b.db", "sqlite:a/b.db", "a/b.db"] {
            assert_eq!(StorageUrl::parse(text).unwrap(), sqlite("a/b.db", ""));
        }
        let read_only = StorageUrl::parse("sqlite://a/b.db?mode=ro").unwrap();
        assert_eq!(read_only, sqlite("a/b.db", "mode=ro"));
        assert_eq!(read_only.connect_string(), "sqlite://a/b.db?mode=ro");
        assert_eq!(read_only.to_string(), "sqlite://a/b.db?mode=ro");
        let written = StorageUrl::parse("sqlite://a/b.db?mode=rwc&cache=shared").unwrap();
        assert_eq!(
            written.read_only_connect_string(),
            "sqlite://a/b.db?mode=ro&cache=shared"
        );
        let immutable = StorageUrl::parse("a.db?immutable=true").unwrap();
        assert_eq!(
            immutable.connect_string(),
            "sqlite://a.db?mode=rwc&immutable=true"
        );
    }

    #[test]
    fn refuses_empty_and_unknown_urls() {
        for text in [
            "",
            "sqlite://",
            "mysql://x/y",
            "sqlite://a.db?mode=readonly",
            "sqlite://a.db?read_only=1",
        ] {
            assert!(StorageUrl::parse(text).is_err(), "{text}");
        }
    }

    #[test]
    fn shows_postgres_urls_without_their_password() {
        for (text, shown) in [
            (
                "postgres://tuner:s3cret@db.example:5432/studies",
                "postgres://tuner:***@db.example:5432/studies",
            ),
            (
                "postgres://tuner:s3%2Fcr%40et@db/studies?sslmode=require",
                "postgres://tuner:***@db/studies?sslmode=require",
            ),
            (
                "postgres://tuner:p@ss@db/studies",
                "postgres://tuner:***@db/studies",
            ),
            (
                "postgresql://tuner@db/studies?password=s3cret&application_name=a@b",
                "postgresql://tuner@db/studies?password=***&application_name=a@b",
            ),
            (
                "postgres://db/studies?user=tuner&password=s3cret",
                "postgres://db/studies?user=tuner&password=***",
            ),
            (
                "postgresql://tuner@db/studies",
                "postgresql://tuner@db/studies",
            ),
        ] {
            let url = StorageUrl::parse(text).unwrap();
            assert_eq!(url.to_string(), shown);
            assert_eq!(url.secret_url(), text);
        }
    }

    #[test]
    fn refuses_postgres_urls_whose_password_cannot_be_told_apart() {
        for text in [
            "postgres://tuner:s3/cret@db/studies",
            "postgres://tuner:5432/x@db/studies",
            "postgres://tuner:s3?cret@db/studies",
            "postgres://tuner:s3#cret@db/studies",
            "postgres://tuner@db/studies?pasword=s3cret",
            "postgres://tuner@db/studies?s3cret",
        ] {
            let error = StorageUrl::parse(text).unwrap_err().to_string();
            assert!(!error.contains("s3") && !error.contains("cret"), "{error}");
        }
    }
}
