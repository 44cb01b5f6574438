//! Which hyperparameters matter: parameter importance over a study's finished trials.
//!
//! One method, PED-ANOVA ([`ped_anova`]), the one Optuna and optuna-dashboard use by
//! default: cheap (linear in the number of trials), and defined for every kind of parameter.

pub(crate) mod ped_anova;

pub(crate) use ped_anova::ped_anova;
