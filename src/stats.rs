//! Summary statistics shared by the early-stopping rules and the samplers.

/// The median of `values`, the mean of the two middle ones for an even count (`None` when
/// empty). Sorts the values it is given.
pub(crate) fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_is_the_middle_value_or_the_mean_of_the_middle_two() {
        let even: Vec<f64> = (0..100).map(f64::from).collect();
        assert_eq!(median(even), Some(49.5));
        assert_eq!(median(vec![3.0, -1.0, 2.0]), Some(2.0));
        assert_eq!(median(Vec::new()), None);
    }
}
