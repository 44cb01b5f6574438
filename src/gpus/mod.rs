//! The GPUs that a study's local trials run on (`trial.resources: {gpus: N}`): which devices
//! the controller may hand out ([`find`]), and which of them each running trial holds
//! ([`GpuPool`]). A trial holds its devices alone: it gets them locked ([`LockDir`]), so that
//! no other trial of this controller or of another hptune process of the machine gets them
//! while it runs, and its worker sees only them (`CUDA_VISIBLE_DEVICES`); the lease ends with
//! the trial.

mod detect;
mod lock;

use std::collections::HashSet;
use std::io;
use std::num::NonZeroUsize;
use std::os::fd::RawFd;

pub(crate) use detect::{Source, plan};
pub(crate) use lock::{DEFAULT_LOCK_DIR, HeldLock, LockChange, LockDir};

/// A GPU of the pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Device {
    /// How hptune names it: its index (as `nvidia-smi` or the list given numbers it) or the
    /// UUID it was given as; recorded with the attempt and exported as `HPTUNE_GPUS`.
    pub name: String,
    /// Its UUID (`GPU-…`), when known.
    pub uuid: Option<String>,
}

impl Device {
    /// How `CUDA_VISIBLE_DEVICES` names it: its UUID when known, which is the same device
    /// whatever order CUDA numbers the GPUs in (`CUDA_DEVICE_ORDER`), else its name.
    pub(crate) fn cuda_id(&self) -> &str {
        self.uuid.as_deref().unwrap_or(&self.name)
    }
}

/// The GPUs a study's trials get: how many each, from which devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuPlan {
    /// Devices per trial (`trial.resources.gpus`).
    pub per_trial: NonZeroUsize,
    /// The devices this controller may hand out.
    pub(crate) devices: Vec<Device>,
    /// Where the devices came from.
    pub source: Source,
    /// Where the devices' locks are.
    pub(crate) locks: LockDir,
}

impl GpuPlan {
    /// How many trials the devices hold at once.
    pub fn trials_at_once(&self) -> usize {
        self.devices.len() / self.per_trial
    }

    /// The devices' names, as given: `0,1,2,3`.
    pub fn names(&self) -> String {
        detect::names(&self.devices)
    }
}

/// The devices one trial holds, and the locks of those this process locked.
#[derive(Debug)]
pub(crate) struct Lease {
    devices: Vec<Device>,
    locks: Vec<HeldLock>,
}

impl Lease {
    /// The devices.
    pub(crate) fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// The devices' names, as recorded with the attempt.
    pub(crate) fn names(&self) -> Vec<String> {
        self.devices.iter().map(|d| d.name.clone()).collect()
    }

    /// The open lock files, which the trial's worker inherits: its devices stay locked while
    /// it runs, also if its controller is killed.
    pub(crate) fn lock_fds(&self) -> Vec<RawFd> {
        self.locks.iter().map(HeldLock::fd).collect()
    }
}

/// The devices of one controller: which are held by its trials.
#[derive(Debug)]
pub(crate) struct GpuPool {
    plan: GpuPlan,
    /// Names of the devices this controller's trials hold.
    held: HashSet<String>,
}

impl GpuPool {
    /// A pool of `plan`'s devices, none held.
    pub(crate) fn new(plan: GpuPlan) -> Self {
        Self {
            plan,
            held: HashSet::new(),
        }
    }

    /// The plan of the pool.
    pub(crate) fn plan(&self) -> &GpuPlan {
        &self.plan
    }

    /// Devices for one trial: as many as the plan gives a trial, among those no trial of
    /// this controller holds and no other process has locked; `None` when fewer are free.
    pub(crate) fn acquire(&mut self) -> io::Result<Option<Lease>> {
        let wanted = self.plan.per_trial.get();
        let mut lease = Lease {
            devices: Vec::with_capacity(wanted),
            locks: Vec::with_capacity(wanted),
        };
        for device in &self.plan.devices {
            if lease.devices.len() == wanted {
                break;
            }
            if self.held.contains(&device.name) {
                continue;
            }
            if let Some(lock) = self.plan.locks.try_lock(device)? {
                lease.devices.push(device.clone());
                lease.locks.push(lock);
            }
        }
        if lease.devices.len() < wanted {
            return Ok(None);
        }
        self.held.extend(lease.names());
        Ok(Some(lease))
    }

    /// The devices recorded with a trial taken over from a controller that is gone: its
    /// worker keeps them, and no other trial gets them while it runs. Each is locked here if
    /// it can be; one that cannot is held by the worker, which inherited its lock.
    pub(crate) fn keep(&mut self, names: &[String]) -> Lease {
        let mut lease = Lease {
            devices: Vec::with_capacity(names.len()),
            locks: Vec::new(),
        };
        for name in names {
            let device = self
                .plan
                .devices
                .iter()
                .find(|d| d.name == *name)
                .cloned()
                .unwrap_or_else(|| Device {
                    name: name.clone(),
                    uuid: None,
                });
            match self.plan.locks.try_lock(&device) {
                Ok(Some(lock)) => lease.locks.push(lock),
                Ok(None) => {}
                Err(e) => tracing::warn!("GPU {name}: {e}"),
            }
            self.held.insert(device.name.clone());
            lease.devices.push(device);
        }
        lease
    }

    /// Gives a trial's devices back (its worker has ended): their locks end, also for the
    /// processes its worker left running.
    pub(crate) fn release(&mut self, lease: Lease) {
        for device in &lease.devices {
            self.held.remove(&device.name);
        }
        lease.locks.into_iter().for_each(HeldLock::release);
    }

    /// Checks that the locks of a running trial still keep other processes off its devices
    /// (see [`HeldLock::check`]), and says so when one had to be taken again or was lost.
    pub(crate) fn check(&self, lease: &mut Lease) {
        for lock in &mut lease.locks {
            let name = lock.device().name.clone();
            match lock.check(&self.plan.locks) {
                Ok(None) => {}
                Ok(Some(LockChange::Retaken)) => tracing::warn!(
                    "GPU {name}: its lock file was removed or replaced while a trial held it; locked again"
                ),
                Ok(Some(LockChange::Lost)) => tracing::error!(
                    "GPU {name}: its lock file was removed or replaced while a trial held it, and another process has locked the new one: it may hand the device out"
                ),
                Err(e) => tracing::warn!("GPU {name}: checking its lock: {e}"),
            }
        }
    }

    /// How many of the pool's devices no trial of this controller holds (some of them may be
    /// locked by other processes).
    pub(crate) fn not_held(&self) -> usize {
        self.plan
            .devices
            .iter()
            .filter(|d| !self.held.contains(&d.name))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(dir: &std::path::Path, names: &[&str], per_trial: usize) -> GpuPool {
        GpuPool::new(GpuPlan {
            per_trial: NonZeroUsize::new(per_trial).unwrap(),
            devices: names
                .iter()
                .map(|n| Device {
                    name: n.to_string(),
                    uuid: None,
                })
                .collect(),
            source: Source::Given,
            locks: LockDir::new(dir),
        })
    }

    #[test]
    fn each_lease_gets_devices_no_other_lease_holds_until_released() {
        let dir = tempfile::tempdir().unwrap();
        let mut pool = pool(dir.path(), &["0", "1", "2"], 2);
        let first = pool.acquire().unwrap().expect("two of three devices");
        assert_eq!(first.names(), ["0", "1"]);
        assert_eq!(first.lock_fds().len(), 2);
        assert!(pool.acquire().unwrap().is_none(), "one device left");
        assert_eq!(pool.not_held(), 1);
        pool.release(first);
        assert_eq!(pool.acquire().unwrap().unwrap().names(), ["0", "1"]);
    }

    #[test]
    fn a_device_locked_by_another_pool_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let mut mine = pool(dir.path(), &["0", "1", "2"], 1);
        let mut other = pool(dir.path(), &["0", "1", "2"], 1);
        let theirs = other.acquire().unwrap().unwrap();
        assert_eq!(theirs.names(), ["0"]);
        assert_eq!(mine.acquire().unwrap().unwrap().names(), ["1"]);
        assert_eq!(mine.acquire().unwrap().unwrap().names(), ["2"]);
        assert!(mine.acquire().unwrap().is_none());
        assert_eq!(
            mine.not_held(),
            1,
            "device 0 is free here, locked elsewhere"
        );
        other.release(theirs);
        assert_eq!(mine.acquire().unwrap().unwrap().names(), ["0"]);
    }

    #[test]
    fn an_adopted_trial_keeps_its_devices_locked_or_not() {
        let dir = tempfile::tempdir().unwrap();
        let mut mine = pool(dir.path(), &["0", "1", "2"], 1);
        let mut worker = pool(dir.path(), &["0", "1", "2"], 1);
        let inherited = worker.acquire().unwrap().unwrap();
        let kept = mine.keep(&["0".into(), "1".into()]);
        assert_eq!(kept.names(), ["0", "1"]);
        assert_eq!(kept.lock_fds().len(), 1, "device 0 stays its worker's lock");
        assert_eq!(mine.acquire().unwrap().unwrap().names(), ["2"]);
        assert!(mine.acquire().unwrap().is_none());
        drop(inherited);
        mine.release(kept);
        assert_eq!(mine.not_held(), 2);
    }
}
