// Image classification for inference: pixels (0-255, 28x28) normalized as training
// normalized them, the model's class probabilities, batched.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/nn/models.h"
#include "weft/nn/module.h"
#include "weft/tensor/tensor.h"

namespace weft::serve {

inline constexpr std::int64_t kImageSide = kModelImageSide;
inline constexpr std::int64_t kImagePixels = kImageSide * kImageSide;

// [N, 1, 28, 28] normalized images from N x 784 pixel values in [0, 255].
Tensor images_from_pixels(const std::vector<float>& pixels);
// The images of an IDX file ([N, 28, 28] bytes); throws DataError naming the file otherwise.
Tensor read_idx_images(const std::string& path);
// Softmax probabilities [N, classes], the model run in evaluation mode without gradients.
Tensor class_probabilities(Module& model, const Tensor& images);
// The class names of Fashion-MNIST (the default data), by label.
const std::vector<std::string>& fashion_mnist_classes();

}  // namespace weft::serve
