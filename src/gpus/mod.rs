//! The GPUs that a study's local trials run on (`trial.resources: {gpus: N}` or `{gpus: 1/K}`):
//! which devices the controller may hand out ([`find`]), and which of them, or which slot of
//! them, each running trial holds ([`GpuPool`]). A trial holds its devices (or its slot) under
//! locks ([`LockDir`]) that every hptune process of the machine honours, and its worker sees
//! only its devices (`CUDA_VISIBLE_DEVICES`) and its memory cap; the lease ends with the
//! trial.

mod detect;
mod lock;
mod memory;
mod mps;

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::num::NonZeroUsize;
use std::os::fd::RawFd;

pub(crate) use detect::{Source, plan};
pub(crate) use lock::{DEFAULT_LOCK_DIR, HeldLock, LockChange, LockDir};
pub(crate) use memory::{device_memory, format_bytes};
pub(crate) use mps::{Isolation, Mps};

/// The most trials one device may hold (`gpus: 1/16`).
pub(crate) const MAX_SHARE: u8 = 16;

/// What each trial of a study holds (`trial.resources.gpus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Share {
    /// `N` whole devices, alone.
    Whole(NonZeroUsize),
    /// `1/K` of one device, beside at most `K - 1` other trials of the same share (`K` from
    /// 2 to [`MAX_SHARE`]).
    Fraction(u8),
}

impl fmt::Display for Share {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Share::Whole(n) => write!(f, "{n}"),
            Share::Fraction(k) => write!(f, "1/{k}"),
        }
    }
}

/// Where an attempt ran, as `hptune trials` and the dashboard show it: its devices as
/// `HPTUNE_GPUS` names them (`0,1`), and its slot on a device it shared (`0 slot 2`).
pub(crate) fn placement(gpus: &str, slot: Option<u32>) -> String {
    match slot {
        Some(slot) => format!("{gpus} slot {slot}"),
        None => gpus.to_string(),
    }
}

/// A GPU of the pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Device {
    /// How hptune names it: its index (as `nvidia-smi` or the list given numbers it) or the
    /// UUID it was given as; recorded with the attempt and exported as `HPTUNE_GPUS`.
    pub name: String,
    /// Its UUID (`GPU-…`), when known.
    pub uuid: Option<String>,
    /// Its memory in bytes, when `nvidia-smi` said it (asked only by studies that share
    /// devices or cap their trials' memory).
    pub memory: Option<u64>,
}

impl Device {
    /// How `CUDA_VISIBLE_DEVICES` names it: its UUID when known, which is the same device
    /// whatever order CUDA numbers the GPUs in (`CUDA_DEVICE_ORDER`), else its name.
    pub(crate) fn cuda_id(&self) -> &str {
        self.uuid.as_deref().unwrap_or(&self.name)
    }
}

/// The GPUs a study's trials get: how much each, from which devices, isolated how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuPlan {
    /// What each trial holds (`trial.resources.gpus`).
    pub share: Share,
    /// The cap on each trial's device memory in bytes (`trial.resources.gpu_memory`), if the
    /// study gives one.
    pub(crate) memory_cap: Option<u64>,
    /// The devices this controller may hand out.
    pub(crate) devices: Vec<Device>,
    /// Where the devices came from.
    pub source: Source,
    /// Where the devices' locks are.
    pub(crate) locks: LockDir,
    /// How trials sharing a device are kept apart.
    pub(crate) isolation: Isolation,
}

impl GpuPlan {
    /// How many trials the devices hold at once.
    pub fn trials_at_once(&self) -> usize {
        match self.share {
            Share::Whole(n) => self.devices.len() / n,
            Share::Fraction(k) => self.devices.len() * usize::from(k),
        }
    }

    /// The devices' names, as given: `0,1,2,3`.
    pub fn names(&self) -> String {
        detect::names(&self.devices)
    }

    /// What caps each trial's device memory, as `hptune run` says it: `memory cap per trial:
    /// 20 GiB (GPU 0), ...`, or that none does for trials that share devices of unknown
    /// memory; `None` without caps.
    pub fn memory_caps(&self) -> Option<String> {
        let caps: Vec<String> = self
            .devices
            .iter()
            .filter_map(|d| {
                self.cap_on(d)
                    .map(|cap| format!("{} (GPU {})", format_bytes(cap), d.name))
            })
            .collect();
        match self.share {
            Share::Fraction(_) if caps.len() < self.devices.len() => Some(
                "memory cap per trial: none (the devices' memory is not known: nvidia-smi did not say it; give trial.resources.gpu_memory)".into(),
            ),
            _ if caps.is_empty() => None,
            _ => Some(format!("memory cap per trial: {}", caps.join(", "))),
        }
    }

    /// How trials sharing a device are kept apart, as `hptune run` says it (`isolation:
    /// ...`); `None` for trials on whole devices.
    pub fn isolation(&self) -> Option<String> {
        (self.isolation != Isolation::Alone).then(|| format!("isolation: {}", self.isolation))
    }

    /// The cap on the memory of a trial on `device`: the study's, else (for a share of a
    /// device whose memory is known) the device's memory divided among its trials.
    pub(crate) fn cap_on(&self, device: &Device) -> Option<u64> {
        match (self.memory_cap, self.share) {
            (Some(cap), _) => Some(cap),
            (None, Share::Fraction(k)) => device.memory.map(|m| m / u64::from(k)),
            (None, Share::Whole(_)) => None,
        }
    }
}

/// The devices one trial holds, its slot on a shared device, and the locks this process
/// took for them.
#[derive(Debug)]
pub(crate) struct Lease {
    devices: Vec<Device>,
    locks: Vec<HeldLock>,
    /// The slot of a trial sharing its device (recorded with its attempt).
    slot: Option<u8>,
    memory_cap: Option<u64>,
    /// The share of the device's compute a trial gets under MPS, in percent.
    mps_threads: Option<u8>,
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

    /// The slot the trial holds on a shared device.
    pub(crate) fn slot(&self) -> Option<u8> {
        self.slot
    }

    /// The cap on the trial's device memory, in bytes.
    pub(crate) fn memory_cap(&self) -> Option<u64> {
        self.memory_cap
    }

    /// The percentage of the device's compute the trial may use under MPS (`None` without
    /// MPS).
    pub(crate) fn mps_threads(&self) -> Option<u8> {
        self.mps_threads
    }

    /// The open lock files, which the trial's worker inherits: its devices stay locked while
    /// it runs, also if its controller is killed.
    pub(crate) fn lock_fds(&self) -> Vec<RawFd> {
        self.locks.iter().map(HeldLock::fd).collect()
    }
}

/// The devices of one controller: how many of its trials each holds.
#[derive(Debug)]
pub(crate) struct GpuPool {
    plan: GpuPlan,
    /// Trials of this controller on each device, by name.
    load: HashMap<String, usize>,
}

impl GpuPool {
    /// A pool of `plan`'s devices, none held.
    pub(crate) fn new(plan: GpuPlan) -> Self {
        Self {
            plan,
            load: HashMap::new(),
        }
    }

    /// The plan of the pool.
    pub(crate) fn plan(&self) -> &GpuPlan {
        &self.plan
    }

    /// How many trials of this controller hold `device`.
    fn load_of(&self, device: &Device) -> usize {
        self.load.get(&device.name).copied().unwrap_or(0)
    }

    /// How many more trials a device holds beside this controller's `load` on it.
    fn room(&self, load: usize) -> usize {
        match self.plan.share {
            Share::Whole(_) => usize::from(load == 0),
            Share::Fraction(k) => usize::from(k).saturating_sub(load),
        }
    }

    /// A lease of `devices` under `locks`, with the cap and compute share of the plan.
    fn lease(&self, devices: Vec<Device>, locks: Vec<HeldLock>, slot: Option<u8>) -> Lease {
        let memory_cap = devices.first().and_then(|d| self.plan.cap_on(d));
        let mps_threads = match (self.plan.isolation, self.plan.share) {
            (Isolation::Mps { .. }, Share::Fraction(k)) => Some(100 / k),
            _ => None,
        };
        Lease {
            devices,
            locks,
            slot,
            memory_cap,
            mps_threads,
        }
    }

    /// Devices for one trial, among those that no other process holds in a way that
    /// excludes it: whole devices no trial holds, or a free slot of the least loaded device
    /// (counting every process's trials); `None` when none is free.
    pub(crate) fn acquire(&mut self) -> io::Result<Option<Lease>> {
        let lease = match self.plan.share {
            Share::Whole(wanted) => {
                let mut devices = Vec::with_capacity(wanted.get());
                let mut locks = Vec::with_capacity(wanted.get());
                for device in &self.plan.devices {
                    if devices.len() == wanted.get() {
                        break;
                    }
                    if self.load_of(device) > 0 {
                        continue;
                    }
                    if let Some(lock) = self.plan.locks.try_lock(device)? {
                        devices.push(device.clone());
                        locks.push(lock);
                    }
                }
                if devices.len() < wanted.get() {
                    return Ok(None);
                }
                self.lease(devices, locks, None)
            }
            Share::Fraction(k) => {
                // Least loaded first, counting the trials of every process.
                let mut candidates = Vec::new();
                for device in &self.plan.devices {
                    if self.room(self.load_of(device)) > 0 {
                        candidates.push((self.plan.locks.slots_held(device, k)?, device));
                    }
                }
                candidates.sort_by_key(|(held, _)| *held);
                let mut found = None;
                for (_, device) in candidates {
                    if let Some((slot, locks)) = self.plan.locks.try_lock_slot(device, k)? {
                        found = Some((device.clone(), slot, locks));
                        break;
                    }
                }
                let Some((device, slot, locks)) = found else {
                    return Ok(None);
                };
                self.lease(vec![device], locks, Some(slot))
            }
        };
        for name in lease.names() {
            *self.load.entry(name).or_default() += 1;
        }
        Ok(Some(lease))
    }

    /// The devices (and the slot, on a shared device) recorded with a trial taken over from
    /// a controller that is gone: its worker keeps them, and no other trial gets them while
    /// it runs. Each lock is taken here if it can be; one that cannot is held by the worker,
    /// which inherited it. (A worker that never started, or has ended, holds nothing: its
    /// slot is then locked here, for the worker started again in its place.)
    pub(crate) fn keep(&mut self, names: &[String], slot: Option<u32>) -> Lease {
        let slot = slot.and_then(|s| u8::try_from(s).ok());
        let devices: Vec<Device> = names
            .iter()
            .map(|name| {
                self.plan
                    .devices
                    .iter()
                    .find(|d| d.name == *name)
                    .cloned()
                    .unwrap_or_else(|| Device {
                        name: name.clone(),
                        uuid: None,
                        memory: None,
                    })
            })
            .collect();
        let mut locks = Vec::new();
        for device in &devices {
            let locked = match self.plan.share {
                Share::Whole(_) => self
                    .plan
                    .locks
                    .try_lock(device)
                    .map(|l| l.into_iter().collect()),
                Share::Fraction(k) => self.plan.locks.try_lock_share(device, k).and_then(|held| {
                    let mut held = held.unwrap_or_default();
                    if let Some(slot) = slot.filter(|s| *s < k) {
                        held.extend(self.plan.locks.try_lock_slot_at(device, slot)?);
                    }
                    Ok(held)
                }),
            };
            match locked {
                Ok(held) => locks.extend(held),
                Err(e) => tracing::warn!("GPU {}: {e}", device.name),
            }
            *self.load.entry(device.name.clone()).or_default() += 1;
        }
        self.lease(devices, locks, slot)
    }

    /// Gives a trial's devices back (its worker has ended): their locks end, also for the
    /// processes its worker left running.
    pub(crate) fn release(&mut self, lease: Lease) {
        for device in &lease.devices {
            if let Some(load) = self.load.get_mut(&device.name) {
                *load = load.saturating_sub(1);
            }
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

    /// Whether this controller's own trials leave room for one more trial (the room may be
    /// held by other processes).
    pub(crate) fn has_room(&self) -> bool {
        let free: usize = self
            .plan
            .devices
            .iter()
            .map(|d| self.room(self.load_of(d)))
            .sum();
        match self.plan.share {
            Share::Whole(n) => free >= n.get(),
            Share::Fraction(_) => free > 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(dir: &std::path::Path, names: &[&str], share: Share) -> GpuPool {
        GpuPool::new(GpuPlan {
            share,
            memory_cap: None,
            devices: names
                .iter()
                .map(|n| Device {
                    name: n.to_string(),
                    uuid: None,
                    memory: Some(80 << 30),
                })
                .collect(),
            source: Source::Given,
            locks: LockDir::new(dir),
            isolation: Isolation::TimeShared,
        })
    }

    fn whole(n: usize) -> Share {
        Share::Whole(NonZeroUsize::new(n).unwrap())
    }

    #[test]
    fn each_lease_gets_devices_no_other_lease_holds_until_released() {
        let dir = tempfile::tempdir().unwrap();
        let mut pool = pool(dir.path(), &["0", "1", "2"], whole(2));
        let first = pool.acquire().unwrap().expect("two of three devices");
        assert_eq!(first.names(), ["0", "1"]);
        assert_eq!(first.lock_fds().len(), 2);
        assert_eq!((first.slot(), first.memory_cap()), (None, None));
        assert!(pool.acquire().unwrap().is_none(), "one device left");
        assert!(!pool.has_room());
        pool.release(first);
        assert_eq!(pool.acquire().unwrap().unwrap().names(), ["0", "1"]);
    }

    #[test]
    fn a_device_locked_by_another_pool_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let mut mine = pool(dir.path(), &["0", "1", "2"], whole(1));
        let mut other = pool(dir.path(), &["0", "1", "2"], whole(1));
        let theirs = other.acquire().unwrap().unwrap();
        assert_eq!(theirs.names(), ["0"]);
        assert_eq!(mine.acquire().unwrap().unwrap().names(), ["1"]);
        assert_eq!(mine.acquire().unwrap().unwrap().names(), ["2"]);
        assert!(mine.acquire().unwrap().is_none());
        assert!(mine.has_room(), "device 0 is free here, locked elsewhere");
        other.release(theirs);
        assert_eq!(mine.acquire().unwrap().unwrap().names(), ["0"]);
    }

    #[test]
    fn an_adopted_trial_keeps_its_devices_locked_or_not() {
        let dir = tempfile::tempdir().unwrap();
        let mut mine = pool(dir.path(), &["0", "1", "2"], whole(1));
        let mut worker = pool(dir.path(), &["0", "1", "2"], whole(1));
        let inherited = worker.acquire().unwrap().unwrap();
        let kept = mine.keep(&["0".into(), "1".into()], None);
        assert_eq!(kept.names(), ["0", "1"]);
        assert_eq!(kept.lock_fds().len(), 1, "device 0 stays its worker's lock");
        assert_eq!(mine.acquire().unwrap().unwrap().names(), ["2"]);
        assert!(mine.acquire().unwrap().is_none());
        drop(inherited);
        mine.release(kept);
        assert!(mine.has_room());
    }

    #[test]
    fn an_adopted_trial_on_a_shared_device_keeps_its_recorded_slot_held_by_its_worker_or_here() {
        let dir = tempfile::tempdir().unwrap();
        let mut mine = pool(dir.path(), &["0"], Share::Fraction(2));
        let mut worker = pool(dir.path(), &["0"], Share::Fraction(2));
        let alive = worker.acquire().unwrap().unwrap();
        assert_eq!(alive.slot(), Some(0));
        // Its worker holds slot 0: kept beside it, not taken twice.
        let kept = mine.keep(&["0".into()], Some(0));
        assert_eq!((kept.slot(), kept.lock_fds().len()), (Some(0), 2));
        let other = mine.acquire().unwrap().unwrap();
        assert_eq!(other.slot(), Some(1));
        assert!(worker.acquire().unwrap().is_none(), "both slots held");
        drop(alive);
        mine.release(kept);
        // A trial whose worker is gone: its slot is locked here, for the next worker.
        let kept = mine.keep(&["0".into()], Some(0));
        assert_eq!(kept.lock_fds().len(), 3);
        assert!(
            worker.acquire().unwrap().is_none(),
            "slot 0 kept, slot 1 held"
        );
        drop(other);
    }

    #[test]
    fn shares_fill_the_least_loaded_device_and_never_exceed_k_per_device() {
        let dir = tempfile::tempdir().unwrap();
        let mut mine = pool(dir.path(), &["0", "1"], Share::Fraction(4));
        let mut other = pool(dir.path(), &["0", "1"], Share::Fraction(4));
        let mut leases = Vec::new();
        for _ in 0..5 {
            leases.push(mine.acquire().unwrap().unwrap());
        }
        let placed: Vec<(String, Option<u8>)> = leases
            .iter()
            .map(|l| (l.names().join(","), l.slot()))
            .collect();
        let at = |d: &str, s| (d.to_string(), Some(s));
        assert_eq!(
            placed,
            [at("0", 0), at("1", 0), at("0", 1), at("1", 1), at("0", 2)]
        );
        assert_eq!(leases[0].memory_cap(), Some(20 << 30), "80 GiB / 4");
        // Another controller gets the three slots left, on device 1 first, then no more.
        let mut theirs: Vec<Lease> = (0..3).map(|_| other.acquire().unwrap().unwrap()).collect();
        assert_eq!(theirs[0].names(), ["1"]);
        assert!(other.acquire().unwrap().is_none());
        assert!(mine.acquire().unwrap().is_none());
        // A released slot is free to either, once.
        other.release(theirs.remove(0));
        let freed = mine.acquire().unwrap().unwrap();
        assert_eq!(
            (freed.names(), freed.slot()),
            (vec!["1".to_string()], Some(2))
        );
        assert!(other.acquire().unwrap().is_none());
    }

    #[test]
    fn a_device_holds_one_share_at_a_time_and_never_beside_a_whole_gpu_trial() {
        let dir = tempfile::tempdir().unwrap();
        let mut quarters = pool(dir.path(), &["0"], Share::Fraction(4));
        let mut halves = pool(dir.path(), &["0"], Share::Fraction(2));
        let mut wholes = pool(dir.path(), &["0"], whole(1));
        let quarter = quarters.acquire().unwrap().unwrap();
        assert!(halves.acquire().unwrap().is_none(), "another share waits");
        assert!(wholes.acquire().unwrap().is_none(), "a whole GPU waits");
        quarters.release(quarter);
        let gpu = wholes.acquire().unwrap().unwrap();
        assert!(
            quarters.acquire().unwrap().is_none(),
            "no share beside a whole GPU"
        );
        wholes.release(gpu);
        let half = halves.acquire().unwrap().unwrap();
        assert_eq!(half.memory_cap(), Some(40 << 30));
        assert!(quarters.acquire().unwrap().is_none());
        drop(half);
        assert!(
            quarters.acquire().unwrap().is_some(),
            "free once the half ended"
        );
    }
}
