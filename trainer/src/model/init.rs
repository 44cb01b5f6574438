//! Hugging Face's initialisation of new weights: normal(0, initializer_range), zero biases.

use burn::module::Param;
use burn::nn::{Initializer, Linear, LinearConfig};
use burn::tensor::{Tensor, backend::Backend};

/// A linear layer initialised as `BertPreTrainedModel._init_weights` does.
pub(crate) fn linear<B: Backend>(
    d_input: usize,
    d_output: usize,
    initializer_range: f64,
    device: &B::Device,
) -> Linear<B> {
    let mut layer = LinearConfig::new(d_input, d_output)
        .with_initializer(Initializer::Normal {
            mean: 0.0,
            std: initializer_range,
        })
        .init(device);
    layer.bias = Some(Param::from_tensor(Tensor::zeros([d_output], device)));
    layer
}
