//! Where the dashboard's data comes from: the database, opened read-only when first needed
//! (a missing, locked or old database is said on the page and tried again on the next
//! request), and the studies being looked at, each followed from the rows that changed and
//! read at most once per [`FRESH_FOR`] however many pages poll it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rayon::prelude::*;
use tokio::sync::Mutex;

use crate::plot::{self, Kind, Options, StudyData};
use crate::storage::{Storage, StorageError, StorageUrl, StudyFollower};

/// How long a study read stays fresh: polls within it are answered from memory.
const FRESH_FOR: Duration = Duration::from_millis(500);

/// The dashboard's view of the database.
pub struct Source {
    url: StorageUrl,
    storage: Mutex<Option<Storage>>,
    studies: Mutex<HashMap<String, Arc<Mutex<Followed>>>>,
}

/// A study being looked at, with the figures drawn at its current revision.
pub struct Followed {
    /// The study's trials, attempts and curves.
    pub follower: StudyFollower,
    read_at: Option<Instant>,
    figures: HashMap<(Kind, plot::HistoryX), (u64, Arc<str>)>,
}

impl Followed {
    /// Figures `kinds` at the current revision, in order: each drawn once per revision, those
    /// not drawn yet side by side (on rayon's threads).
    pub fn figures(&mut self, kinds: &[Kind], options: &Options) -> Vec<Result<Arc<str>, String>> {
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
                Err(e) => return kinds.iter().map(|_| Err(e.clone())).collect(),
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
    pub fn new(url: StorageUrl) -> Self {
        Self {
            url,
            storage: Mutex::new(None),
            studies: Mutex::new(HashMap::new()),
        }
    }

    /// The database, opened read-only (again, if opening failed before).
    pub async fn storage(&self) -> Result<Storage, StorageError> {
        let mut storage = self.storage.lock().await;
        if let Some(open) = storage.as_ref() {
            return Ok(open.clone());
        }
        let open = Storage::open_read_only(&self.url).await?;
        *storage = Some(open.clone());
        Ok(open)
    }

    /// The study called `name`, up to date; `None` if the database has no such study.
    pub async fn study(&self, name: &str) -> Result<Option<Arc<Mutex<Followed>>>, StorageError> {
        let storage = self.storage().await?;
        let known = self.studies.lock().await.get(name).cloned();
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
                self.studies
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
