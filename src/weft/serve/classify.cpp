#include "weft/serve/classify.h"

#include "weft/autograd/variable.h"
#include "weft/data/dataset.h"
#include "weft/data/idx.h"
#include "weft/tensor/ops.h"
#include "weft/util/error.h"

namespace weft::serve {

std::string image_size_text(std::int64_t channels, std::int64_t height, std::int64_t width) {
  return (channels == 1 ? "" : std::to_string(channels) + "x") + std::to_string(height) + "x" + std::to_string(width);
}

void check_image_size(const std::string& source, std::int64_t channels, std::int64_t height, std::int64_t width,
                      const ModelRecipe& recipe) {
  const ImageInput& in = recipe.image;
  if (channels != in.channels || height != in.height || width != in.width)
    throw DataError(source + ": images of " + image_size_text(channels, height, width) + " pixels; the model takes " +
                    image_size_text(in.channels, in.height, in.width));
}

Tensor images_from_pixels(const std::vector<float>& pixels, const ModelRecipe& recipe) {
  const ImageInput& in = recipe.image;
  WEFT_CHECK(static_cast<std::int64_t>(pixels.size()) % in.pixels() == 0, "images_from_pixels: a whole number of images");
  const auto n = static_cast<std::int64_t>(pixels.size()) / in.pixels();
  const std::int64_t plane = in.height * in.width, c = in.channels;
  Tensor images = Tensor::empty({n, c, in.height, in.width});
  float* p = images.data<float>();
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t px = 0; px < plane; ++px)
      for (std::int64_t ch = 0; ch < c; ++ch) {
        const std::size_t k = recipe.mean.size() == 1 ? 0 : static_cast<std::size_t>(ch);
        const double v = pixels[static_cast<std::size_t>((i * plane + px) * c + ch)];
        p[(i * c + ch) * plane + px] = static_cast<float>((v / 255.0 - recipe.mean[k]) / recipe.stddev[k]);
      }
  return images;
}

Tensor read_idx_images(const std::string& path, const ModelRecipe& recipe) {
  IdxArray a = read_idx(path);
  if (a.dims.size() != 3 && a.dims.size() != 4)
    throw DataError(path + ": images must be [N, H, W] or [N, H, W, C], got " + std::to_string(a.dims.size()) +
                    " dimension(s)");
  check_image_size(path, a.dims.size() == 4 ? a.dims[3] : 1, a.dims[1], a.dims[2], recipe);
  std::vector<float> pixels(static_cast<std::size_t>(a.count()));
  for (std::int64_t i = 0; i < a.count(); ++i) pixels[static_cast<std::size_t>(i)] = static_cast<float>(a.value(i));
  for (float v : pixels)
    if (!(v >= 0 && v <= 255)) throw DataError(path + ": pixel values must be in [0, 255]");
  return images_from_pixels(pixels, recipe);
}

Tensor class_probabilities(Module& model, const Tensor& images) {
  NoGradGuard no_grad;
  model.eval();
  return ops::softmax(model.forward(Var(images)).value());
}

const std::vector<std::string>& fashion_mnist_classes() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                 "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return names;
}

std::string class_name(const ModelRecipe& recipe, std::int64_t label) {
  const auto& names = fashion_mnist_classes();
  // A model of Fashion-MNIST's input, classes and normalization was trained on it.
  const bool fashion = recipe.image == ImageInput{} && recipe.mean == std::vector<double>{kFashionMnistMean} &&
                       recipe.stddev == std::vector<double>{kFashionMnistStd};
  if (fashion && label >= 0 && label < static_cast<std::int64_t>(names.size()))
    return names[static_cast<std::size_t>(label)];
  return std::to_string(label);
}

}  // namespace weft::serve
