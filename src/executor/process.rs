//! Who a process is, in a way that survives pid reuse: its pid and its start time (Linux
//! `/proc/<pid>/stat`, in clock ticks since boot). Used for local workers (`pid:1234@5678`) and
//! for controllers (`host:pid@start`), so that a restarted controller can tell a live worker
//! or controller from a dead one.

use std::fmt;

/// A process, identified by pid and start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessId {
    /// The pid.
    pub pid: i32,
    /// Start time in clock ticks since boot; 0 where unknown.
    pub start: u64,
}

impl ProcessId {
    /// The process with this pid now, if there is one.
    pub fn of(pid: i32) -> Option<Self> {
        Some(Self {
            pid,
            start: start_time(pid)?,
        })
    }

    /// This process.
    pub fn current() -> Self {
        let pid = std::process::id() as i32;
        Self::of(pid).unwrap_or(Self { pid, start: 0 })
    }

    /// Reads `1234@5678` (the form `Display` writes).
    pub fn parse(text: &str) -> Option<Self> {
        let (pid, start) = text.split_once('@')?;
        Some(Self {
            pid: pid.parse().ok()?,
            start: start.parse().ok()?,
        })
    }

    /// Whether this very process still runs (a zombie counts as gone).
    pub fn is_alive(&self) -> bool {
        self.pid > 0 && start_time(self.pid) == Some(self.start)
    }
}

impl fmt::Display for ProcessId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.pid, self.start)
    }
}

/// The start time of a live (not zombie) process.
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    let fields: Vec<&str> = stat.get(stat.rfind(')')? + 2..)?.split(' ').collect();
    if fields.first() == Some(&"Z") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// The name of this machine.
pub fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
        .unwrap_or_else(|| "localhost".into())
}

/// This controller's identity in the database: `host:pid@start`.
pub fn controller_id() -> String {
    format!("{}:{}", host_name(), ProcessId::current())
}

/// Whether the controller `id` is known to be gone: it ran on this machine and its process
/// is no longer there. A controller on another machine is judged by its heartbeats instead.
pub fn controller_is_gone(id: &str) -> Option<bool> {
    let (host, process) = id.rsplit_once(':')?;
    if host != host_name() {
        return None;
    }
    Some(!ProcessId::parse(process)?.is_alive())
}

#[cfg(test)]
mod tests {
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
