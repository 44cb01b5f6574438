//! Where each field of a YAML document stands, so that errors found after deserialisation
//! (a bad range, a duplicate id) can still name a line and column.

use std::collections::HashMap;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;

/// A line and column in the study file, both counted from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// Line, from 1.
    pub line: usize,
    /// Column, from 1.
    pub column: usize,
}

/// The position of every node of a document, keyed by its field path
/// (`parameters[1].min`, `trial.command[0]`).
#[derive(Debug, Default)]
pub struct Locations {
    by_path: HashMap<String, Position>,
}

impl Locations {
    /// Indexes `text`; a document that does not parse gives an empty index (the deserialiser
    /// reports that error with its own position).
    pub fn index(text: &str) -> Self {
        let mut walker = Walker::default();
        let mut parser = Parser::new_from_str(text);
        if parser.load(&mut walker, false).is_err() {
            return Self::default();
        }
        Self {
            by_path: walker.by_path,
        }
    }

    /// The position of the node at `path`, or of its nearest ancestor that has one.
    pub fn find(&self, path: &str) -> Option<Position> {
        let mut path = path;
        while !path.is_empty() {
            if let Some(position) = self.by_path.get(path) {
                return Some(*position);
            }
            path = parent_path(path);
        }
        None
    }
}

fn parent_path(path: &str) -> &str {
    &path[..path.rfind(['.', '[']).unwrap_or(0)]
}

enum Frame {
    Mapping { key: Option<String> },
    Sequence { index: usize },
}

#[derive(Default)]
struct Walker {
    stack: Vec<Frame>,
    by_path: HashMap<String, Position>,
}

impl Walker {
    fn path(&self) -> String {
        let mut path = String::new();
        for frame in &self.stack {
            match frame {
                Frame::Mapping { key: Some(key) } => {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(key);
                }
                Frame::Mapping { key: None } => {}
                Frame::Sequence { index } => path.push_str(&format!("[{index}]")),
            }
        }
        path
    }

    fn in_key_position(&self) -> bool {
        matches!(self.stack.last(), Some(Frame::Mapping { key: None }))
    }

    fn record_value(&mut self, mark: Marker) {
        let position = Position {
            line: mark.line(),
            column: mark.col() + 1,
        };
        self.by_path.entry(self.path()).or_insert(position);
    }

    /// A value of the innermost collection is complete: move on to its next key or index.
    fn value_done(&mut self) {
        match self.stack.last_mut() {
            Some(Frame::Mapping { key }) => *key = None,
            Some(Frame::Sequence { index }) => *index += 1,
            None => {}
        }
    }
}

impl MarkedEventReceiver for Walker {
    fn on_event(&mut self, event: Event, mark: Marker) {
        match event {
            Event::Scalar(value, ..) if self.in_key_position() => {
                if let Some(Frame::Mapping { key }) = self.stack.last_mut() {
                    *key = Some(value);
                }
            }
            Event::Scalar(..) | Event::Alias(..) => {
                self.record_value(mark);
                self.value_done();
            }
            Event::MappingStart(..) => {
                self.record_value(mark);
                self.stack.push(Frame::Mapping { key: None });
            }
            Event::SequenceStart(..) => {
                self.record_value(mark);
                self.stack.push(Frame::Sequence { index: 0 });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                self.stack.pop();
                self.value_done();
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "name: demo\nparameters:\n  - id: x\n    min: 1\n  - id: y\n    values: [a, b]\ntrial:\n  command: [run]\n";

    #[test]
    fn finds_nested_fields_by_path() {
        let locations = Locations::index(DOC);
        assert_eq!(
            locations.find("name"),
            Some(Position { line: 1, column: 7 })
        );
        assert_eq!(
            locations.find("parameters[0].min"),
            Some(Position {
                line: 4,
                column: 10
            })
        );
        assert_eq!(
            locations.find("parameters[1].values[1]"),
            Some(Position {
                line: 6,
                column: 17
            })
        );
        assert_eq!(
            locations.find("trial.command[0]"),
            Some(Position {
                line: 8,
                column: 13
            })
        );
    }

    #[test]
    fn falls_back_to_the_nearest_ancestor() {
        let locations = Locations::index(DOC);
        assert_eq!(
            locations.find("parameters[0].max"),
            locations.find("parameters[0]")
        );
        assert_eq!(locations.find("nothing.here"), None);
    }

    #[test]
    fn unparsable_text_gives_an_empty_index() {
        assert_eq!(Locations::index("a: [1, 2").find("a"), None);
    }
}
