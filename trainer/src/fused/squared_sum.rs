//! The sum of the squares of a tensor's elements: the global gradient norm that clipping
//! needs, a pass over every gradient each step.
//!
//! burn squares into a new tensor and sums it, each on the thread that runs the model; on
//! burn-flex one pass on rayon's threads reads each gradient once and writes nothing.

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;

/// `sum(tensor * tensor)` by the backend's own ops, as a one-element tensor.
pub(super) fn composed<B: Backend>(tensor: FloatTensor<B>) -> FloatTensor<B> {
    B::float_sum(B::float_mul(tensor.clone(), tensor))
}

/// The kernel on burn-flex's tensors, for contiguous `f32` tensors (others get burn-flex's
/// ops).
#[cfg(feature = "flex")]
pub(super) mod flex {
    use burn::backend::Flex;
    use burn::tensor::Shape;
    use burn::tensor::ops::FloatTensor;

    use super::super::kernels;
    use super::super::output::tensor;

    /// The sum of the squares of `values`' elements, as a one-element tensor.
    pub(crate) fn squared_sum(values: FloatTensor<Flex>) -> FloatTensor<Flex> {
        let Some(elements) = values.as_slice::<f32>() else {
            return super::composed::<Flex>(values);
        };
        tensor(vec![kernels::squared_sum(elements) as f32], Shape::new([1]))
    }
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use burn::backend::Flex;
    use burn::tensor::{Tensor, TensorPrimitive};

    use super::super::FusedOps;
    use super::super::test_util::sample;

    #[test]
    fn the_kernel_sums_squares_as_the_definition_does() {
        // Several rayon tasks, a partial one, and a tail shorter than a vector.
        for n in [0, 1, 17, 70_001, 1 << 20] {
            let x = sample::<Flex, 1>([n], 3);
            let values: Vec<f32> = x.to_data().to_vec().unwrap();
            let expected: f64 = values.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
            let got = Tensor::<Flex, 1>::from_primitive(TensorPrimitive::Float(Flex::squared_sum(
                x.into_primitive().tensor(),
            )));
            let got = f64::from(got.into_scalar());
            assert!(
                (got - expected).abs() <= 1e-6 * (1.0 + expected),
                "n = {n}: {got} vs {expected}"
            );
        }
    }

    #[test]
    fn an_infinite_or_nan_element_makes_the_sum_so() {
        // In a vector lane and in the tail after the last full vector (an f16 loss scale's
        // overflow must be seen by the step that skips it).
        let sum = |values: Vec<f32>| {
            let x = Tensor::<Flex, 1>::from_floats(values.as_slice(), &Default::default());
            Tensor::<Flex, 1>::from_primitive(TensorPrimitive::Float(Flex::squared_sum(
                x.into_primitive().tensor(),
            )))
            .into_scalar()
        };
        for at in [3, 40] {
            let mut values = vec![0.5f32; 41];
            values[at] = f32::INFINITY;
            assert_eq!(sum(values.clone()), f32::INFINITY, "inf at {at}");
            values[at] = f32::NEG_INFINITY;
            assert_eq!(sum(values.clone()), f32::INFINITY, "-inf at {at}");
            values[at] = f32::NAN;
            assert!(sum(values).is_nan(), "NaN at {at}");
        }
    }

    #[test]
    fn a_strided_view_gets_burns_ops() {
        // A transposed view is not contiguous: burn-flex's ops sum it.
        let x = sample::<Flex, 2>([30, 7], 5);
        let expected = (x.clone() * x.clone()).sum().into_scalar();
        let got = Tensor::<Flex, 1>::from_primitive(TensorPrimitive::Float(Flex::squared_sum(
            x.transpose().into_primitive().tensor(),
        )))
        .into_scalar();
        assert!(
            (got - expected).abs() <= 1e-5 * expected,
            "{got} vs {expected}"
        );
    }
}
