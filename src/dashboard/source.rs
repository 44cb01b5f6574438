//! Where the dashboard's data comes from: the database, opened read-only when first needed
//! (a missing, locked or old database is said on the page and tried again on the next
//! request; a SQLite file deleted or replaced since is opened again), and the studies being
//! looked at, each followed from the rows that changed and read at most once per
//! [`FRESH_FOR`] however many pages poll it.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rayon::prelude::*;
use tokio::sync::Mutex;

use crate::plot::{self, Kind, Options, StudyData};
use crate::storage::{Storage, StorageError, StorageUrl, StudyFollower};

/// How long a study read stays fresh: polls within it are answered from memory.
const FRESH_FOR: Duration = Duration::from_millis(500);

/// The dashboard's view of the database.
pub(super) struct Source {
    url: StorageUrl,
    open: Mutex<Option<Database>>,
}

/// The database as opened, which file that was, and its studies being looked at.
#[derive(Clone)]
struct Database {
    storage: Storage,
    file: Option<FileIdentity>,
    studies: Arc<Mutex<HashMap<String, Arc<Mutex<Followed>>>>>,
}

/// Which file a path named: a file deleted, or replaced by another at the same path, has
/// another identity (or none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileIdentity {
    device: u64,
    inode: u64,
}

/// The identity of the SQLite file `url` names now; `None` for PostgreSQL or a path that
/// names no file.
async fn database_file(url: &StorageUrl) -> Option<FileIdentity> {
    let StorageUrl::Sqlite { path, .. } = url else {
        return None;
    };
    let metadata = tokio::fs::metadata(path).await.ok()?;
    Some(FileIdentity {
        device: metadata.dev(),
        inode: metadata.ino(),
    })
}

/// A study being looked at, with the figures drawn at its current revision.
pub(super) struct Followed {
    /// The study's trials, attempts and curves.
    pub follower: StudyFollower,
    read_at: Option<Instant>,
    figures: HashMap<(Kind, plot::HistoryX), (u64, Arc<str>)>,
}

impl Followed {
    /// Figures `kinds` at the current revision, in order: each drawn once per revision, those
    /// not drawn yet side by side (on rayon's threads).
    pub(super) fn figures(
        &mut self,
        kinds: &[Kind],
        options: &Options,
    ) -> Vec<Result<Arc<str>, String>> {
        let revision = self.follower.revision();
        let missing: Vec<Kind> = kinds
            .iter()
            .copied()
            .filter(|kind| {
                self.figures
                    .get(&(*kind, options.history_x))
                    .is_none_or(|(at, _)| *at != revision)
            })
            .collect();
        if !missing.is_empty() {
            let data = match StudyData::new(&self.follower) {
                Ok(data) => data,
                Err(e) => {
                    let e = e.to_string();
                    return kinds.iter().map(|_| Err(e.clone())).collect();
                }
            };
            let drawn: Vec<(Kind, Arc<str>)> = missing
                .par_iter()
                .map(|kind| (*kind, plot::draw(*kind, &data, options).into()))
                .collect();
            for (kind, svg) in drawn {
                self.figures
                    .insert((kind, options.history_x), (revision, svg));
            }
        }
        kinds
            .iter()
            .map(|kind| Ok(self.figures[&(*kind, options.history_x)].1.clone()))
            .collect()
    }
}

impl Source {
    /// A source over the database at `url`, opened when first needed.
    pub(super) fn new(url: StorageUrl) -> Self {
        Self {
            url,
            open: Mutex::new(None),
        }
    }

    /// The database, opened read-only (again, if opening failed before or its file was
    /// deleted or replaced since: the studies followed in the old one are forgotten).
    async fn database(&self) -> Result<Database, StorageError> {
        let mut open = self.open.lock().await;
        // Read before opening: a file replaced in between is found at the next request.
        let file = database_file(&self.url).await;
        match open.as_ref() {
            Some(database) if database.file == file => return Ok(database.clone()),
            Some(_) => {
                tracing::info!(url = %self.url, "the database file was deleted or replaced: opening it again");
                *open = None;
            }
            None => {}
        }
        let database = Database {
            storage: Storage::open_read_only(&self.url).await?,
            file,
            studies: Arc::default(),
        };
        *open = Some(database.clone());
        Ok(database)
    }

    /// The database, opened read-only (again, if opening failed before or its file was
    /// deleted or replaced since).
    pub(super) async fn storage(&self) -> Result<Storage, StorageError> {
        Ok(self.database().await?.storage)
    }

    /// The study called `name`, up to date; `None` if the database has no such study.
    pub(super) async fn study(
        &self,
        name: &str,
    ) -> Result<Option<Arc<Mutex<Followed>>>, StorageError> {
        let Database {
            storage, studies, ..
        } = self.database().await?;
        let known = studies.lock().await.get(name).cloned();
        let followed = match known {
            Some(followed) => followed,
            None => {
                let Some(record) = storage.find_study(name).await? else {
                    return Ok(None);
                };
                let followed = Arc::new(Mutex::new(Followed {
                    follower: StudyFollower::new(record),
                    read_at: None,
                    figures: HashMap::new(),
                }));
                studies
                    .lock()
                    .await
                    .entry(name.to_string())
                    .or_insert(followed)
                    .clone()
            }
        };
        {
            let mut study = followed.lock().await;
            if study.read_at.is_none_or(|at| at.elapsed() >= FRESH_FOR) {
                storage.follow(&mut study.follower).await?;
                study.read_at = Some(Instant::now());
            }
        }
        Ok(Some(followed))
    }
}
