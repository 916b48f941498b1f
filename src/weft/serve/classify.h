// Image classification for inference: pixels (0-255, the model's C x H x W, channels last
// as the data files hold them) normalized as training normalized them (the recipe's mean
// and std), the model's class probabilities, batched.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/nn/model_recipe.h"
#include "weft/nn/models.h"
#include "weft/nn/module.h"
#include "weft/tensor/tensor.h"

namespace weft::serve {

// [N, C, H, W] normalized images from N x (H x W x C) pixel values in [0, 255].
Tensor images_from_pixels(const std::vector<float>& pixels, const ModelRecipe& recipe);
// The images of an IDX file ([N, H, W] or [N, H, W, C] of the model's size); throws
// DataError naming the file otherwise.
Tensor read_idx_images(const std::string& path, const ModelRecipe& recipe);
// "1x28x28" (channels x height x width; "28x28" for one channel).
std::string image_size_text(std::int64_t channels, std::int64_t height, std::int64_t width);
// Throws DataError("<source>: images of HxW pixels; the model takes ...") unless images of
// channels x height x width are the model's size.
void check_image_size(const std::string& source, std::int64_t channels, std::int64_t height, std::int64_t width,
                      const ModelRecipe& recipe);
// Softmax probabilities [N, classes], the model run in evaluation mode without gradients.
Tensor class_probabilities(Module& model, const Tensor& images);
// The class names of Fashion-MNIST (the default data), by label.
const std::vector<std::string>& fashion_mnist_classes();
// A label's name: Fashion-MNIST's for a model of its input, classes and normalization, else
// the number.
std::string class_name(const ModelRecipe& recipe, std::int64_t label);

}  // namespace weft::serve
