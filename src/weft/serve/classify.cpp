#include "weft/serve/classify.h"

#include "weft/autograd/variable.h"
#include "weft/data/dataset.h"
#include "weft/data/idx.h"
#include "weft/tensor/ops.h"
#include "weft/util/error.h"

namespace weft::serve {

Tensor images_from_pixels(const std::vector<float>& pixels) {
  WEFT_CHECK(pixels.size() % kImagePixels == 0, "images_from_pixels: a whole number of images");
  const auto n = static_cast<std::int64_t>(pixels.size()) / kImagePixels;
  Tensor images = Tensor::empty({n, 1, kImageSide, kImageSide});
  float* p = images.data<float>();
  for (std::size_t i = 0; i < pixels.size(); ++i)
    p[i] = static_cast<float>((pixels[i] / 255.0 - kFashionMnistMean) / kFashionMnistStd);
  return images;
}

Tensor read_idx_images(const std::string& path) {
  IdxArray a = read_idx(path);
  if (a.dims.size() != 3 || a.dims[1] != kImageSide || a.dims[2] != kImageSide)
    throw DataError(path + ": expected images of 28x28 pixels ([N, 28, 28]), got " + std::to_string(a.dims.size()) +
                    " dimension(s)" + (a.dims.size() == 3 ? " of " + std::to_string(a.dims[1]) + "x" + std::to_string(a.dims[2]) : ""));
  std::vector<float> pixels(static_cast<std::size_t>(a.count()));
  for (std::int64_t i = 0; i < a.count(); ++i) pixels[static_cast<std::size_t>(i)] = static_cast<float>(a.value(i));
  for (float v : pixels)
    if (v < 0 || v > 255) throw DataError(path + ": pixel values must be in [0, 255]");
  return images_from_pixels(pixels);
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

}  // namespace weft::serve
