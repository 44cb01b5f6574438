//! Everything recorded about studies, trials and measurements.
//!
//! One database holds every study. SQLite in WAL mode is the embedded default; the schema is
//! created by embedded migrations; every query is a constant string with bound parameters.
//! Local workers never write it: they report through files and stdout to their controller.
//! The relay of a remote job (PostgreSQL only) writes its attempt's measurements and
//! heartbeats ([`relayed`]).

mod artifacts;
mod best;
mod claim;
mod ends;
mod enqueue;
mod follow;
mod leases;
mod read_only;
mod relayed;
mod rows;
mod trials;
mod url;
mod view;

use std::str::FromStr;
use std::time::Duration;

use chrono::{SecondsFormat, Utc};
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyConnection, AnyPool, ConnectOptions, Connection, Executor};

use crate::study::{Objective, Study};
pub use best::{best_first, front_numbers, ranked_first};
pub(crate) use best::{best_trial, goals, pareto_first, pareto_front, ranking};
pub(crate) use claim::{Claim, ClaimError, ClaimRules, ClientLease, Holder, Queue};
pub(crate) use ends::TrialEnd;
pub(crate) use enqueue::Enqueue;
pub(crate) use follow::StudyFollower;
pub(crate) use rows::{AttemptRecord, MeasurementRecord, StudyOverview, StudySummary};
pub use rows::{StudyRecord, TrialRecord, TrialState};
use rows::{study_columns, trial_columns};
pub(crate) use trials::NextAttempt;
pub use url::{DEFAULT_STORAGE, StorageUrl};
pub(crate) use view::StudyView;

/// Why the database could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The URL is not one we can open.
    #[error("{0}")]
    BadUrl(String),
    /// Opening or migrating the database failed.
    #[error("cannot open the database {url}: {}", cause(source))]
    Open {
        /// The database, without credentials.
        url: String,
        /// The driver's error.
        source: sqlx::Error,
    },
    /// There is no database file to read (reading never creates one).
    #[error(
        "no database at {0}: run a study first, or name the database with --storage or HPTUNE_STORAGE"
    )]
    Missing(String),
    /// The database's schema is not the one this hptune reads (reading never migrates).
    #[error("the database {url} {problem}")]
    Schema {
        /// The database, without credentials.
        url: String,
        /// What is wrong with its schema.
        problem: String,
    },
    /// A query failed.
    #[error("database error while {doing}: {source}")]
    Query {
        /// What was being done.
        doing: &'static str,
        /// The driver's error.
        source: sqlx::Error,
    },
    /// A trial this controller ran was taken over by another controller, which judged it
    /// gone: its heartbeats had stopped (the process was stopped or suspended).
    #[error(
        "this controller's trials were taken over by another controller while its heartbeats were stopped (was it suspended?): the results it printed since are not recorded; the study goes on with the other controller"
    )]
    TakenOver,
    /// A stored row does not read back.
    #[error(
        "the database holds a row that does not read back ({0}); was it written by another tool?"
    )]
    Corrupt(String),
    /// The study already exists with another search space.
    #[error(
        "study '{0}' already exists in this database with a different search space: keep the parameters as they were to continue it, or give the study a new name"
    )]
    SpaceChanged(String),
    /// The study already exists with another objective.
    #[error(
        "study '{name}' already exists in this database with objective {was}: keep the objectives as they were (the same metrics, goals and order) to continue the study, or give the study a new name"
    )]
    ObjectiveChanged {
        /// The study.
        name: String,
        /// The recorded objectives (`maximize accuracy, minimize latency_ms`).
        was: String,
    },
}

fn query_error(doing: &'static str) -> impl FnOnce(sqlx::Error) -> StorageError {
    move |source| match &source {
        sqlx::Error::Database(e) if e.message().contains(TAKEN_OVER) => StorageError::TakenOver,
        _ => StorageError::Query { doing, source },
    }
}

/// What the database says when it refuses a controller's change to a trial another
/// controller took over (migration 0005's trigger).
const TAKEN_OVER: &str = "trial taken over by another controller";

/// A statement that runs longer is warned about.
const SLOW_STATEMENT: Duration = Duration::from_secs(1);
/// How many characters of a slow statement its warning shows.
const SLOW_STATEMENT_SHOWN: usize = 200;

/// Warns of `sql` if it ran `elapsed` or longer (see [`slow_statement`]).
fn warn_if_slow(sql: &str, elapsed: Duration) {
    if let Some(warning) = slow_statement(sql, elapsed) {
        tracing::warn!("{warning}");
    }
}

/// The warning about `sql` if it ran `elapsed` or longer, showing its first characters: the
/// statements of claims and ends grow with the measurements they write (megabytes for a
/// worker that printed many), and sqlx's own warning, which prints a statement whole, is off.
fn slow_statement(sql: &str, elapsed: Duration) -> Option<String> {
    if elapsed < SLOW_STATEMENT {
        return None;
    }
    let shown: String = sql.chars().take(SLOW_STATEMENT_SHOWN).collect();
    let cut = if shown.len() < sql.len() { " ..." } else { "" };
    Some(format!(
        "slow statement ({elapsed:.1?}, {} bytes): {shown}{cut}",
        sql.len()
    ))
}

/// The current time as stored: UTC, RFC 3339, milliseconds.
pub(crate) fn now() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A handle on the database.
#[derive(Debug, Clone)]
pub struct Storage {
    pool: AnyPool,
    /// Which database it is: they are set up, locked and written differently.
    dialect: Dialect,
}

/// The two databases hptune writes, where they differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    /// One file of one machine: one connection, the database's write lock, statements sent
    /// together as one string.
    Sqlite,
    /// A server many controllers share: a pool, a row lock per study, one statement a call.
    Postgres,
}

impl Dialect {
    fn of(url: &StorageUrl) -> Self {
        match url {
            StorageUrl::Sqlite { .. } => Dialect::Sqlite,
            StorageUrl::Postgres(_) => Dialect::Postgres,
        }
    }

    /// The migrations of this hptune's schema, in the database's types.
    fn migrator(self) -> sqlx::migrate::Migrator {
        match self {
            Dialect::Sqlite => sqlx::migrate!("./migrations/sqlite"),
            Dialect::Postgres => sqlx::migrate!("./migrations/postgres"),
        }
    }
}

impl Storage {
    /// Opens (creating it if needed, unless the URL's `mode` says otherwise) the database at
    /// `url` and brings its schema up to date. Controllers started together on a new SQLite
    /// file race to create its schema, and the loser's statement finds the file locked at
    /// once (a write that began as a read is not retried by busy_timeout): it opens again,
    /// for up to [`OPEN_WHILE_LOCKED`].
    pub async fn open(url: &StorageUrl) -> Result<Self, StorageError> {
        let started = std::time::Instant::now();
        loop {
            match Self::open_once(url).await {
                Err(StorageError::Open { source, .. })
                    if is_locked(&source) && started.elapsed() < OPEN_WHILE_LOCKED =>
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                opened => return opened,
            }
        }
    }

    async fn open_once(url: &StorageUrl) -> Result<Self, StorageError> {
        let dialect = Dialect::of(url);
        let pool = connect(url, &url.connect_string(), Access::Write).await?;
        let migrator = dialect.migrator();
        migrate(&pool, &migrator).await.map_err(|e| match e {
            Migration::Newer(applied) => StorageError::Schema {
                url: url.to_string(),
                problem: newer_schema(applied, &migrator),
            },
            Migration::Failed(source) => StorageError::Open {
                url: url.to_string(),
                source,
            },
        })?;
        Ok(Self { pool, dialect })
    }

    /// The record of `study`, created on first run. A rerun must keep the objectives and
    /// the search space; the study file text is updated (budgets may grow), and with several
    /// objectives their reference points.
    pub(crate) async fn ensure_study(&self, study: &Study) -> Result<StudyRecord, StorageError> {
        let space = serde_json::to_string(&study.space).expect("a space serialises");
        let objectives: Vec<&Objective> = study.objectives().collect();
        // A study of one objective keeps it in `metric` and `goal` alone, as before 0013.
        let several = study
            .has_several_objectives()
            .then(|| serde_json::to_string(&objectives).expect("objectives serialise"));
        if let Some(existing) = self.find_study(&study.name).await? {
            if !study.keeps_objectives(&existing.objectives) {
                let was: Vec<String> = existing
                    .objectives
                    .iter()
                    .map(|o| format!("{} {}", o.goal.as_str(), o.metric))
                    .collect();
                return Err(StorageError::ObjectiveChanged {
                    name: study.name.clone(),
                    was: was.join(", "),
                });
            }
            if existing.space != space {
                return Err(StorageError::SpaceChanged(study.name.clone()));
            }
            sqlx::query("UPDATE studies SET spec = $1, objectives = $2 WHERE id = $3")
                .bind(&study.source)
                .bind(several)
                .bind(existing.id)
                .execute(&self.pool)
                .await
                .map_err(query_error("updating the study file"))?;
            return Ok(StudyRecord {
                objectives: objectives.into_iter().cloned().collect(),
                ..existing
            });
        }
        sqlx::query(
            "INSERT INTO studies (name, metric, goal, spec, space, created_at, objectives) VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(&study.name)
        .bind(&study.objective.metric)
        .bind(study.objective.goal.as_str())
        .bind(&study.source)
        .bind(&space)
        .bind(now())
        .bind(several)
        .execute(&self.pool)
        .await
        .map_err(query_error("creating the study"))?;
        // Another controller may have created it at the same moment: check it the same way.
        Box::pin(self.ensure_study(study)).await
    }

    /// The study called `name`, if any.
    pub(crate) async fn find_study(&self, name: &str) -> Result<Option<StudyRecord>, StorageError> {
        let row = sqlx::query(concat!(
            "SELECT ",
            study_columns!(),
            " FROM studies WHERE name = $1"
        ))
        .bind(name)
        .fetch_optional(&self.pool)
        .await
        .map_err(query_error("looking up the study"))?;
        row.as_ref().map(StudyRecord::from_row).transpose()
    }

    /// Every study, in creation order.
    pub(crate) async fn study_records(&self) -> Result<Vec<StudyRecord>, StorageError> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            study_columns!(),
            " FROM studies ORDER BY id"
        ))
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("listing studies"))?;
        rows.iter().map(StudyRecord::from_row).collect()
    }

    /// Every study with its trial counts and best value, in creation order.
    pub(crate) async fn list_studies(&self) -> Result<Vec<StudySummary>, StorageError> {
        let studies = self.study_records().await?;
        let mut summaries = Vec::with_capacity(studies.len());
        for study in studies {
            let trials = self.trials(study.id).await?;
            summaries.push(StudySummary::new(study, &trials));
        }
        Ok(summaries)
    }

    /// The trials of a study, by number.
    pub(crate) async fn trials(&self, study_id: i64) -> Result<Vec<TrialRecord>, StorageError> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            trial_columns!(),
            " FROM trials WHERE study_id = $1 ORDER BY number"
        ))
        .bind(study_id)
        .fetch_all(&self.pool)
        .await
        .map_err(query_error("reading trials"))?;
        rows.iter().map(TrialRecord::from_row).collect()
    }

    /// The trial numbered `number` of a study, if it has one.
    pub(crate) async fn trial(
        &self,
        study_id: i64,
        number: u64,
    ) -> Result<Option<TrialRecord>, StorageError> {
        let row = sqlx::query(concat!(
            "SELECT ",
            trial_columns!(),
            " FROM trials WHERE study_id = $1 AND number = $2"
        ))
        .bind(study_id)
        .bind(i64::try_from(number).unwrap_or(i64::MAX))
        .fetch_optional(&self.pool)
        .await
        .map_err(query_error("reading a trial"))?;
        row.as_ref().map(TrialRecord::from_row).transpose()
    }

    /// Closes the pool, flushing the WAL.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// The driver's options for `connect_string` (the URL `url` as the driver takes it).
fn connect_options(
    url: &StorageUrl,
    connect_string: &str,
) -> Result<AnyConnectOptions, StorageError> {
    sqlx::any::install_default_drivers();
    // sqlx logs every statement whole; the slow ones are warned about by `warn_if_slow`.
    AnyConnectOptions::from_str(connect_string)
        .map(|options| options.disable_statement_logging())
        .map_err(|source| StorageError::Open {
            url: url.to_string(),
            source,
        })
}

/// How long opening a database may wait for its server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a PostgreSQL session may sit idle inside a transaction before the server ends it.
/// A controller holds the study's lock in a transaction while its sampler proposes
/// (milliseconds); one that is suspended there (SIGSTOP, a laptop's sleep, a hung host) would
/// hold every other controller of the study: the server ends its session instead, which
/// releases the lock, and the suspended controller, once resumed, stops with an error while
/// the others adopt its trials.
const IDLE_IN_TRANSACTION_TIMEOUT: &str = "60s";

/// What a handle may do to the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// Read and write, the schema brought up to date: controllers, `enqueue`, the relay.
    Write,
    /// Read only, the schema checked and never changed: the listing commands, `plot`, the
    /// dashboard ([`read_only`]).
    Read,
}

/// Opens a pool on the database at `url` (`connect_string`, as the driver takes it) for
/// `access`. sqlx's pool tries a refused connection or a failed set-up again until its
/// acquire timeout, logging each try, and then says only that it timed out: one connection
/// first says at once what is wrong.
async fn connect(
    url: &StorageUrl,
    connect_string: &str,
    access: Access,
) -> Result<AnyPool, StorageError> {
    let options = connect_options(url, connect_string)?;
    let open_error = |source| StorageError::Open {
        url: url.to_string(),
        source,
    };
    let dialect = Dialect::of(url);
    connect_once(&options, dialect, access)
        .await
        .map_err(open_error)?;
    AnyPoolOptions::new()
        // SQLite: one writing connection, so its page cache stays valid (another connection's
        // write would make it read the changed pages again) and one thread stays warm; there
        // is a single writer anyway.
        .max_connections(match (dialect, access) {
            (Dialect::Sqlite, Access::Write) => 1,
            (Dialect::Sqlite, Access::Read) => 2,
            (Dialect::Postgres, _) => 4,
        })
        // An unreachable server fails in seconds; SQLite waits for its lock inside a
        // connection (busy_timeout), not here.
        .acquire_timeout(CONNECT_TIMEOUT)
        // A ping before each use guards against a server that dropped the connection; an
        // embedded SQLite file has no such server, and the ping is a round trip to the
        // connection's thread for every statement.
        .test_before_acquire(dialect == Dialect::Postgres)
        .after_connect(move |conn, _meta| Box::pin(prepare(conn, dialect, access)))
        .connect_with(options)
        .await
        .map_err(open_error)
}

/// Sets up a new connection: to write, SQLite's journal, durability, foreign keys and lock
/// wait, PostgreSQL's limit on a session idle inside a transaction; to read,
/// [`read_only::prepare`].
async fn prepare(
    conn: &mut AnyConnection,
    dialect: Dialect,
    access: Access,
) -> Result<(), sqlx::Error> {
    match (access, dialect) {
        (Access::Read, _) => read_only::prepare(conn, dialect).await?,
        (Access::Write, Dialect::Sqlite) => {
            conn.execute("PRAGMA journal_mode = WAL").await?;
            conn.execute("PRAGMA synchronous = NORMAL").await?;
            conn.execute("PRAGMA foreign_keys = ON").await?;
            conn.execute("PRAGMA busy_timeout = 30000").await?;
        }
        (Access::Write, Dialect::Postgres) => {
            let limit = format!(
                "SET idle_in_transaction_session_timeout = '{IDLE_IN_TRANSACTION_TIMEOUT}'"
            );
            conn.execute(limit.as_str()).await?;
        }
    }
    Ok(())
}

/// How long opening a database tries again while SQLite says it is locked.
const OPEN_WHILE_LOCKED: Duration = Duration::from_secs(30);

/// Whether SQLite refused a statement because another connection held the file locked.
fn is_locked(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(e) if e.message().contains("database is locked"))
        || matches!(error, sqlx::Error::Migrate(e) if e.to_string().contains("database is locked"))
}

/// Opens and sets up one connection, and closes it: fails at once where the pool would try
/// again (a refused connection, a file that is not a database).
async fn connect_once(
    options: &AnyConnectOptions,
    dialect: Dialect,
    access: Access,
) -> Result<(), sqlx::Error> {
    let attempt = async {
        let mut conn = AnyConnection::connect_with(options).await?;
        prepare(&mut conn, dialect, access).await?;
        conn.close().await
    };
    tokio::time::timeout(CONNECT_TIMEOUT, attempt)
        .await
        .unwrap_or_else(|_| {
            Err(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()),
            )))
        })
}

/// What went wrong in the driver's error, in words: the server's or SQLite's message rather
/// than sqlx's wrapping of it.
fn cause(error: &sqlx::Error) -> String {
    match error {
        sqlx::Error::Io(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            "connection refused (is the server running, and listening on that host and port?)"
                .into()
        }
        sqlx::Error::Io(e) => e.to_string(),
        sqlx::Error::Database(e) => e.message().to_string(),
        sqlx::Error::Configuration(e) => e.to_string(),
        e => e.to_string(),
    }
}

/// Why the schema could not be brought up to date.
enum Migration {
    /// The database holds a migration of this version, which this hptune does not know.
    Newer(i64),
    /// The migrator failed.
    Failed(sqlx::Error),
}

/// Brings the schema up to date. Controllers started together race to migrate a new
/// database, and SQLite gives the migrator no lock (PostgreSQL's takes an advisory lock): the
/// loser sees the winner's tables, waits, and finds the migrations applied on its next try. A
/// schema newer than this binary's is not a race: it is said at once.
async fn migrate(pool: &AnyPool, migrator: &sqlx::migrate::Migrator) -> Result<(), Migration> {
    const TRIES: u32 = 20;
    let mut tries = 0;
    loop {
        match migrator.run(pool).await {
            Ok(()) => return Ok(()),
            Err(sqlx::migrate::MigrateError::VersionMissing(version)) => {
                return Err(Migration::Newer(version));
            }
            Err(_) if tries + 1 < TRIES => {
                tries += 1;
                let pause = 50 + u64::from(std::process::id() % 100) + 25 * u64::from(tries);
                tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
            }
            Err(e) => return Err(Migration::Failed(e.into())),
        }
    }
}

/// The newest migration `migrator` knows.
fn newest_known(migrator: &sqlx::migrate::Migrator) -> i64 {
    migrator.iter().map(|m| m.version).max().unwrap_or_default()
}

/// What is wrong with a database whose schema is at `version`, past what `migrator` knows:
/// the same words whether it was to be written or read.
fn newer_schema(version: i64, migrator: &sqlx::migrate::Migrator) -> String {
    format!(
        "was written by a newer hptune: its schema is at version {version}, which this hptune \
         does not know (it knows up to {}); use that one",
        newest_known(migrator)
    )
}

/// The PostgreSQL server of the tests (`HPTUNE_TEST_POSTGRES`); `None`, said as a skip, when
/// there is none.
#[cfg(test)]
pub(crate) fn test_postgres() -> Option<StorageUrl> {
    let url = std::env::var("HPTUNE_TEST_POSTGRES")
        .ok()
        .filter(|u| !u.is_empty());
    if url.is_none() {
        eprintln!("skipped: HPTUNE_TEST_POSTGRES is not set");
    }
    url.map(|url| StorageUrl::parse(&url).unwrap())
}

/// A study of one double parameter and at most `max_trial_count` trials, in a new SQLite file
/// (kept while the returned directory lives), for the storage's tests.
#[cfg(test)]
pub(crate) async fn test_study(max_trial_count: u64) -> (tempfile::TempDir, Storage, i64) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let storage = Storage::open(&StorageUrl::parse(&url).unwrap())
        .await
        .unwrap();
    let yaml = format!(
        "name: s\nmax_trial_count: {max_trial_count}\nobjective: {{metric: loss, goal: minimize}}\nparameters:\n  - {{id: x, type: double, min: 0, max: 1}}\ntrial: {{command: [w]}}\n"
    );
    let study = crate::spec::parse(std::path::Path::new("s.yaml"), &yaml).unwrap();
    let id = storage.ensure_study(&study).await.unwrap().id;
    (dir, storage, id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_statement_is_shown_by_its_start() {
        let second = Duration::from_secs(1);
        assert_eq!(slow_statement("SELECT 1", second / 2), None);
        assert_eq!(
            slow_statement("SELECT 1", second).unwrap(),
            "slow statement (1.0s, 8 bytes): SELECT 1"
        );
        let huge = format!(
            "INSERT INTO measurements VALUES {}",
            "($1, $2), ".repeat(100_000)
        );
        let warning = slow_statement(&huge, 3 * second).unwrap();
        assert!(warning.starts_with("slow statement (3.0s, 1000032 bytes): INSERT INTO"));
        assert!(warning.ends_with(" ..."));
        assert!(warning.len() < SLOW_STATEMENT_SHOWN + 60, "{warning}");
    }
}
