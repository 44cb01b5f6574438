//! Tracks where a module visitor or mapper is in the module tree.

use super::keymap::ParamPath;

/// The stack of fields entered so far, fed by `enter_module` / `exit_module`.
#[derive(Debug, Default)]
pub struct PathStack {
    segments: Vec<String>,
    owners: Vec<String>,
}

impl PathStack {
    /// Records entering field `name` of a container described as e.g. `Struct:Linear`.
    pub fn enter(&mut self, name: &str, container_type: &str) {
        self.segments.push(name.to_string());
        let owner = container_type
            .strip_prefix("Struct:")
            .unwrap_or(container_type);
        self.owners.push(owner.to_string());
    }

    /// Records leaving the innermost field.
    pub fn exit(&mut self) {
        self.segments.pop();
        self.owners.pop();
    }

    /// The path of the parameter being visited now.
    pub fn current(&self) -> ParamPath {
        ParamPath {
            segments: self.segments.clone(),
            owner: self.owners.last().cloned().unwrap_or_default(),
        }
    }
}
