//! Empty: cargo reads a package's build-dependencies only when it has a build script, and
//! this package's unify the features of the crates that build scripts use.

fn main() {}
