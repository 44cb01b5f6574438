//! Hugging Face checkpoints: the key map between burn's parameter paths and checkpoint keys,
//! reading weights from `model.safetensors` and writing them back in the same layout.

pub mod keymap;
mod load;
mod save;
pub mod walk;

pub use load::{LoadReport, load_safetensors, overlay_safetensors};
pub use save::save_safetensors;
