//! Credentials of the engines, from their usual places and never from the study file:
//! Google's Application Default Credentials, AWS's credential chain, Kubernetes' kubeconfig
//! or in-cluster service account. None is ever logged, stored, or put in an error.

pub(crate) mod aws;
pub(crate) mod google;
pub(crate) mod kube;

/// The user's home directory, where the engines' CLIs keep their files.
fn home() -> Option<std::path::PathBuf> {
    std::env::var_os("HOME").map(std::path::PathBuf::from)
}
