//! Opening a database only to read it: the listing commands, `hptune plot` and the dashboard
//! look at studies that a controller may be running, and must never take a write lock, change
//! the schema or create a file.

use sqlx::{AnyConnection, Executor, Row};

use super::{
    Access, Dialect, Storage, StorageError, StorageUrl, newer_schema, newest_known, query_error,
};

/// How long a read waits for a lock another connection holds before it says the database
/// is locked: short, so a page says so rather than hang.
const READ_BUSY_TIMEOUT_MS: u32 = 1000;

impl Storage {
    /// Opens the database at `url` for reading only: a SQLite file is opened with
    /// `mode=ro` and `query_only` (it must exist; it is never created, migrated or
    /// locked for writing), a PostgreSQL session is made read-only. The schema must be the
    /// one this hptune writes: an older or newer one is said, not migrated.
    pub(crate) async fn open_read_only(url: &StorageUrl) -> Result<Self, StorageError> {
        if url.is_missing() {
            return Err(StorageError::Missing(url.to_string()));
        }
        let pool = super::connect(url, &url.read_only_connect_string(), Access::Read).await?;
        let storage = Self {
            pool,
            dialect: Dialect::of(url),
        };
        storage.check_schema(url).await?;
        Ok(storage)
    }

    /// Checks that the database holds exactly the migrations this hptune knows.
    async fn check_schema(&self, url: &StorageUrl) -> Result<(), StorageError> {
        let migrator = self.dialect.migrator();
        let applied = sqlx::query("SELECT version FROM _sqlx_migrations ORDER BY version")
            .fetch_all(&self.pool)
            .await;
        let schema_error = |problem: String| StorageError::Schema {
            url: url.to_string(),
            problem,
        };
        let applied: Vec<i64> = match applied {
            Ok(rows) => rows
                .iter()
                .map(|row| row.try_get::<i64, _>(0).map_err(super::rows::corrupt))
                .collect::<Result<_, _>>()?,
            Err(sqlx::Error::Database(e)) if is_missing_table(e.message()) => {
                return Err(schema_error(
                    "holds no hptune tables: it is not an hptune database, or no study was run on it yet".into(),
                ));
            }
            Err(e) => return Err(query_error("reading the schema version")(e)),
        };
        let newest_applied = applied.last().copied().unwrap_or_default();
        let known = newest_known(&migrator);
        match newest_applied.cmp(&known) {
            std::cmp::Ordering::Less => Err(schema_error(format!(
                "has an older schema (version {newest_applied}, this hptune writes {known}): run a study on it (or `hptune enqueue`) with this hptune once to bring it up to date"
            ))),
            std::cmp::Ordering::Greater => {
                Err(schema_error(newer_schema(newest_applied, &migrator)))
            }
            std::cmp::Ordering::Equal => Ok(()),
        }
    }
}

/// Whether a database error says that a table does not exist (SQLite and PostgreSQL word it
/// differently).
fn is_missing_table(message: &str) -> bool {
    message.contains("no such table") || message.contains("does not exist")
}

/// Sets up a reading connection: SQLite refuses every write (`query_only`), waits at most a
/// second for a lock, and reads the file's header (so that a file that is not a database is
/// said as the connection opens, as the writer's `journal_mode` does); PostgreSQL's session
/// is read-only.
pub(super) async fn prepare(conn: &mut AnyConnection, dialect: Dialect) -> Result<(), sqlx::Error> {
    match dialect {
        Dialect::Sqlite => {
            conn.execute("PRAGMA query_only = ON").await?;
            conn.execute(format!("PRAGMA busy_timeout = {READ_BUSY_TIMEOUT_MS}").as_str())
                .await?;
            conn.execute("PRAGMA schema_version").await?;
        }
        Dialect::Postgres => {
            conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
                .await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_read_only_storage_reads_and_refuses_to_write() {
        let (dir, storage, id) = crate::storage::test_study(3).await;
        storage.close().await;
        let url =
            StorageUrl::parse(&format!("sqlite://{}", dir.path().join("t.db").display())).unwrap();
        let reader = Storage::open_read_only(&url).await.unwrap();
        assert_eq!(reader.trials(id).await.unwrap(), vec![]);
        let write = sqlx::query("UPDATE studies SET name = 'x'")
            .execute(&reader.pool)
            .await;
        assert!(write.is_err(), "a read-only storage wrote");
    }

    #[tokio::test]
    async fn a_missing_or_foreign_database_is_said() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none.db");
        let url = StorageUrl::parse(&missing.display().to_string()).unwrap();
        let error = Storage::open_read_only(&url).await.unwrap_err().to_string();
        assert!(error.contains("no database"), "{error}");
        assert!(!missing.exists(), "opening to read created the file");
        let empty = dir.path().join("empty.db");
        std::fs::write(&empty, b"").unwrap();
        let url = StorageUrl::parse(&empty.display().to_string()).unwrap();
        let error = Storage::open_read_only(&url).await.unwrap_err().to_string();
        assert!(error.contains("holds no hptune tables"), "{error}");
    }
}
