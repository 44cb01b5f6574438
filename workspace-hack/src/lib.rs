//! No code: this package only depends on the shared dependencies with the union of the
//! features the workspace asks of them (see its Cargo.toml).
