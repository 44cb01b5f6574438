//! Who a process is, in a way that survives pid reuse: its pid and its start time (Linux
//! `/proc/<pid>/stat`, in clock ticks since boot). Used for local workers (`pid:1234@5678`) and
//! for controllers (`host:pid@start`), so that a restarted controller can tell a live worker
//! or controller from a dead one.

use std::fmt;

/// A process, identified by pid and start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcessId {
    /// The pid.
    pub pid: i32,
    /// Start time in clock ticks since boot; 0 where unknown.
    pub start: u64,
}

impl ProcessId {
    /// The process with this pid now, if there is one.
    pub(crate) fn of(pid: i32) -> Option<Self> {
        Some(Self {
            pid,
            start: start_time(pid)?,
        })
    }

    /// This process.
    pub(crate) fn current() -> Self {
        let pid = std::process::id() as i32;
        Self::of(pid).unwrap_or(Self { pid, start: 0 })
    }

    /// Reads `1234@5678` (the form `Display` writes).
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let (pid, start) = text.split_once('@')?;
        Some(Self {
            pid: pid.parse().ok()?,
            start: start.parse().ok()?,
        })
    }

    /// Whether this very process still runs (a zombie counts as gone).
    pub(crate) fn is_alive(&self) -> bool {
        self.pid > 0 && start_time(self.pid) == Some(self.start)
    }
}

impl fmt::Display for ProcessId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.pid, self.start)
    }
}

/// The process group leader whose environment holds every one of `vars`: a worker started
/// by a controller that died before it could record the worker's pid.
pub(crate) fn find_by_environment(vars: &[(&str, &str)]) -> Option<ProcessId> {
    let wanted: Vec<String> = vars.iter().map(|(k, v)| format!("{k}={v}")).collect();
    std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| is_group_leader(*pid))
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
                let entries: Vec<&[u8]> = environ.split(|b| *b == 0).collect();
                wanted.iter().all(|w| entries.contains(&w.as_bytes()))
            })
        })
        .and_then(ProcessId::of)
}

fn is_group_leader(pid: i32) -> bool {
    stat_fields(pid)
        .and_then(|fields| fields.get(2)?.parse::<i32>().ok())
        .is_some_and(|group| group == pid)
}

/// The fields of `/proc/<pid>/stat` after the command name (field 3, the state, first).
fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    Some(
        stat.get(stat.rfind(')')? + 2..)?
            .split(' ')
            .map(str::to_string)
            .collect(),
    )
}

/// The start time of a live (not zombie) process.
fn start_time(pid: i32) -> Option<u64> {
    let fields = stat_fields(pid)?;
    if fields.first().map(String::as_str) == Some("Z") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// The name of this machine.
pub(crate) fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
        .unwrap_or_else(|| "localhost".into())
}

/// This controller's identity in the database: `host:pid@start`.
pub(crate) fn controller_id() -> String {
    format!("{}:{}", host_name(), ProcessId::current())
}

/// Whether the controller `id` is known to be gone: it ran on this machine and its process
/// is no longer there. A controller on another machine is judged by its heartbeats instead.
pub(crate) fn controller_is_gone(id: &str) -> Option<bool> {
    let (host, process) = id.rsplit_once(':')?;
    if host != host_name() {
        return None;
    }
    Some(!ProcessId::parse(process)?.is_alive())
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;

    use super::*;

    #[test]
    fn this_process_is_alive_and_a_different_start_time_is_not() {
        let me = ProcessId::current();
        assert!(me.start > 0);
        assert!(me.is_alive());
        assert_eq!(ProcessId::parse(&me.to_string()), Some(me));
        let reused = ProcessId {
            start: me.start + 1,
            ..me
        };
        assert!(!reused.is_alive());
    }

    #[test]
    fn a_finished_child_is_gone() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let id = ProcessId::of(child.id() as i32);
        child.wait().unwrap();
        assert!(id.is_none_or(|id| !id.is_alive()));
    }

    #[test]
    fn a_worker_is_found_by_its_environment() {
        let token = format!("find-me-{}", std::process::id());
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .env("HPTUNE_TEST_TOKEN", &token)
            .process_group(0)
            .spawn()
            .unwrap();
        // Until the child has called exec, /proc shows this process's environment: look again
        // for a while.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let found = loop {
            let found = find_by_environment(&[("HPTUNE_TEST_TOKEN", &token)]);
            if found.is_some() || std::time::Instant::now() > deadline {
                break found;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(found.map(|p| p.pid), Some(child.id() as i32));
        assert_eq!(
            find_by_environment(&[("HPTUNE_TEST_TOKEN", "nobody")]),
            None
        );
    }

    #[test]
    fn controllers_on_this_machine_are_judged_by_their_process() {
        assert_eq!(controller_is_gone(&controller_id()), Some(false));
        let dead = format!(
            "{}:{}",
            host_name(),
            ProcessId {
                pid: i32::MAX,
                start: 1
            }
        );
        assert_eq!(controller_is_gone(&dead), Some(true));
        assert_eq!(controller_is_gone("elsewhere:1@2"), None);
    }
}
