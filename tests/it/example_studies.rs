//! The example studies of `studies/` stay valid as the study format evolves.

use std::path::Path;

#[test]
fn every_example_study_is_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("studies");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            if let Err(e) = hptune::spec::load(&path) {
                panic!("{e}");
            }
            checked += 1;
        }
    }
    assert!(checked >= 2, "only {checked} example studies");
}
