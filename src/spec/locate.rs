//! Where each field of a YAML document stands, so that errors found after deserialisation
//! (a bad range, a duplicate id) can still name a line and column.
//!
//! Indexing is also the study file's first gate: a document must be YAML (as yaml-rust2
//! reads it) and nest at most [`MAX_DEPTH`] lists and mappings deep before serde reads it.
//! Both YAML scanners (libyaml's, under serde_yaml, and yaml-rust2's) look at every open flow
//! collection for each token, so unbounded `[[[[...` would make reading a file quadratic in
//! its size (40,000 levels took serde_yaml 2.2 s); with the cap it is linear. The index is a
//! tree, one node per value and a map from (parent, key or index) to child, so its size is
//! linear in the document too, and it is built by a loop over the events, not by recursion.

use std::collections::HashMap;
use std::fmt;

use yaml_rust2::parser::{Event, Parser};
use yaml_rust2::scanner::{Marker, ScanError};

/// The deepest nesting of lists and mappings a study file may have (a study needs five).
pub(super) const MAX_DEPTH: usize = 64;

/// A line and column in the study file, both counted from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Position {
    /// Line, from 1.
    pub line: usize,
    /// Column, from 1.
    pub column: usize,
}

impl Position {
    fn of(mark: &Marker) -> Self {
        Self {
            line: mark.line(),
            column: mark.col() + 1,
        }
    }
}

/// Why a document could not be indexed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum IndexError {
    /// The text is not YAML.
    Syntax {
        /// Where the scanner stopped.
        position: Position,
        /// What it expected.
        message: String,
    },
    /// Lists and mappings nest deeper than [`MAX_DEPTH`].
    TooDeep {
        /// The collection that goes one level too deep.
        position: Position,
    },
}

impl IndexError {
    /// Where the problem is.
    pub(super) fn position(&self) -> Position {
        match self {
            IndexError::Syntax { position, .. } | IndexError::TooDeep { position } => *position,
        }
    }

    fn from_scan(error: &ScanError) -> Self {
        let position = Position::of(error.marker());
        // yaml-rust2 gives up at 256 nested flow collections before emitting any of them.
        if error.info() == "recursion limit exceeded" {
            return IndexError::TooDeep { position };
        }
        IndexError::Syntax {
            position,
            message: error.info().to_string(),
        }
    }
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexError::Syntax { message, .. } => write!(f, "not valid YAML: {message}"),
            IndexError::TooDeep { .. } => write!(
                f,
                "lists and mappings are nested more than {MAX_DEPTH} deep here (hptune reads at most {MAX_DEPTH} levels)"
            ),
        }
    }
}

/// One step of a field path: a mapping's key or a list's index.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Step {
    Key(String),
    Index(usize),
}

/// The position of every node of a document, found by its field path
/// (`parameters[1].min`, `trial.command[0]`).
#[derive(Debug, Default)]
pub(super) struct Locations {
    /// The position of each node; node 0 is the document's root.
    positions: Vec<Position>,
    /// (parent node, step) -> child node.
    children: HashMap<(usize, Step), usize>,
}

impl Locations {
    /// Indexes `text`: every node of its first document, every later document checked.
    pub(super) fn index(text: &str) -> Result<Self, IndexError> {
        let mut walker = Walker::default();
        let mut parser = Parser::new_from_str(text);
        loop {
            let (event, mark) = parser.next_token().map_err(|e| IndexError::from_scan(&e))?;
            if event == Event::StreamEnd {
                return Ok(walker.locations);
            }
            walker.on_event(event, &mark)?;
        }
    }

    /// The position of the node at `path`, or of its nearest ancestor that has one.
    pub(super) fn find(&self, path: &str) -> Option<Position> {
        let mut node = 0;
        let mut rest = path;
        let mut found = None;
        while !rest.is_empty() {
            let Some((child, after)) = self.step(node, rest) else {
                break;
            };
            node = child;
            rest = after;
            found = Some(self.positions[node]);
        }
        found
    }

    /// The child of `node` named by the start of `path`, and the rest of the path. A key may
    /// hold '.' or '[' itself, so each place the key could end is tried, shortest first.
    fn step<'p>(&self, node: usize, path: &'p str) -> Option<(usize, &'p str)> {
        if let Some(inner) = path.strip_prefix('[') {
            let (index, after) = inner.split_once(']')?;
            let child = self
                .children
                .get(&(node, Step::Index(index.parse().ok()?)))?;
            return Some((*child, after.strip_prefix('.').unwrap_or(after)));
        }
        let ends = path
            .match_indices(['.', '['])
            .map(|(i, _)| i)
            .chain([path.len()]);
        for end in ends {
            if let Some(child) = self
                .children
                .get(&(node, Step::Key(path[..end].to_string())))
            {
                let after = &path[end..];
                return Some((*child, after.strip_prefix('.').unwrap_or(after)));
            }
        }
        None
    }
}

/// Where the next value of an open collection goes.
enum Frame {
    /// A mapping: its node (none inside a complex key) and what comes next.
    Mapping { node: Option<usize>, slot: Slot },
    /// A list: its node (none inside a complex key) and the index of its next item.
    Sequence { node: Option<usize>, next: usize },
}

/// What a mapping reads next.
enum Slot {
    /// A key.
    Key,
    /// The value of this key (none for a key that is not a plain scalar).
    Value(Option<String>),
}

#[derive(Default)]
struct Walker {
    stack: Vec<Frame>,
    locations: Locations,
}

impl Walker {
    fn on_event(&mut self, event: Event, mark: &Marker) -> Result<(), IndexError> {
        match event {
            Event::Scalar(text, ..) => {
                self.value(mark, Some(text));
            }
            Event::Alias(..) => {
                self.value(mark, None);
            }
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                if self.stack.len() >= MAX_DEPTH {
                    return Err(IndexError::TooDeep {
                        position: Position::of(mark),
                    });
                }
                let node = self.value(mark, None);
                self.stack.push(match event {
                    Event::MappingStart(..) => Frame::Mapping {
                        node,
                        slot: Slot::Key,
                    },
                    _ => Frame::Sequence { node, next: 0 },
                });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                self.stack.pop();
            }
            _ => {}
        }
        Ok(())
    }

    /// A value starts at `mark`: a key of the innermost mapping (`scalar` is its text), or
    /// a node of the tree. Returns the node, none for keys and what is inside them.
    fn value(&mut self, mark: &Marker, scalar: Option<String>) -> Option<usize> {
        let step = match self.stack.last_mut() {
            None if self.locations.positions.is_empty() => None,
            None => return None, // a later document: checked, not indexed
            Some(Frame::Mapping { slot, .. }) => match std::mem::replace(slot, Slot::Key) {
                Slot::Key => {
                    *slot = Slot::Value(scalar);
                    return None;
                }
                Slot::Value(key) => Some(Step::Key(key?)),
            },
            Some(Frame::Sequence { next, .. }) => {
                *next += 1;
                Some(Step::Index(*next - 1))
            }
        };
        let parent = match self.stack.last() {
            Some(Frame::Mapping { node, .. } | Frame::Sequence { node, .. }) => Some((*node)?),
            None => None,
        };
        let locations = &mut self.locations;
        let node = locations.positions.len();
        locations.positions.push(Position::of(mark));
        if let (Some(parent), Some(step)) = (parent, step) {
            locations.children.entry((parent, step)).or_insert(node);
        }
        Some(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "name: demo\nparameters:\n  - id: x\n    min: 1\n  - id: y\n    values: [a, b]\ntrial:\n  command: [run]\n";

    #[test]
    fn finds_nested_fields_by_path() {
        let locations = Locations::index(DOC).unwrap();
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
        let locations = Locations::index(DOC).unwrap();
        assert_eq!(
            locations.find("parameters[0].max"),
            locations.find("parameters[0]")
        );
        assert_eq!(locations.find("nothing.here"), None);
    }

    #[test]
    fn finds_keys_that_hold_dots_and_skips_complex_keys() {
        let doc = "env: {A.B: x, C: y}\n? [k]\n: v\nafter: 1\n";
        let locations = Locations::index(doc).unwrap();
        assert_eq!(
            locations.find("env.A.B"),
            Some(Position {
                line: 1,
                column: 12
            })
        );
        assert_eq!(
            locations.find("env.C"),
            Some(Position {
                line: 1,
                column: 18
            })
        );
        assert_eq!(
            locations.find("after"),
            Some(Position { line: 4, column: 8 })
        );
    }

    #[test]
    fn unparsable_text_is_a_syntax_error_with_its_position() {
        let error = Locations::index("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(matches!(error, IndexError::Syntax { .. }), "{error:?}");
        assert!(error.to_string().starts_with("not valid YAML: "), "{error}");
        assert_eq!(error.position().line, 2);
    }

    fn nested(depth: usize, open: &str, close: &str) -> String {
        format!("a: {}1{}\n", open.repeat(depth), close.repeat(depth))
    }

    #[test]
    fn nesting_is_refused_one_level_past_the_cap_where_it_goes_too_deep() {
        // The top-level mapping is one level: `a` holds MAX_DEPTH - 1 more.
        assert!(Locations::index(&nested(MAX_DEPTH - 1, "[", "]")).is_ok());
        let error = Locations::index(&nested(MAX_DEPTH, "[", "]")).unwrap_err();
        assert_eq!(
            error,
            IndexError::TooDeep {
                position: Position {
                    line: 1,
                    column: 4 + MAX_DEPTH - 1
                }
            }
        );
        assert!(error.to_string().contains("more than 64 deep"), "{error}");
        for (open, close) in [("[", "]"), ("{k: ", "}")] {
            let error = Locations::index(&nested(100_000, open, close)).unwrap_err();
            assert!(matches!(error, IndexError::TooDeep { .. }), "{error:?}");
        }
        let block = format!("a:\n  {}1\n", "- ".repeat(100_000));
        let error = Locations::index(&block).unwrap_err();
        assert!(matches!(error, IndexError::TooDeep { .. }), "{error:?}");
    }
}
