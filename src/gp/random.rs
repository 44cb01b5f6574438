//! The random numbers of the model and of the samplers that use it: one seeded stream per
//! trial, and standard normal draws from it, so that a proposal depends only on the seed, the
//! trial's number and the history.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A standard normal draw (Box-Muller).
pub(crate) fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let u: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
    let v: f64 = rng.random();
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

/// A random stream for trial `number` of a study with `seed`.
pub(crate) fn stream(seed: u64, number: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(number);
    rng
}
