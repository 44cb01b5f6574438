//! Hugging Face checkpoints: the key map between burn's parameter paths and checkpoint keys,
//! reading weights from `model.safetensors` (a `pytorch_model.bin` is an error saying how to
//! convert it), and writing them back as safetensors in the same layout.

pub mod keymap;
mod load;
mod save;
pub mod walk;
pub mod weights;

pub use load::{LoadReport, load_weights, overlay_weights};
pub use save::save_safetensors;
