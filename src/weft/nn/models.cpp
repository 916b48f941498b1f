#include "weft/nn/models.h"

#include "weft/nn/activation.h"
#include "weft/nn/conv.h"
#include "weft/nn/linear.h"

namespace weft {

namespace {

class FlattenImage : public Module {  // [N, C, H, W] or [N, CHW] -> [N, CHW]
 public:
  Var forward(const Var& x) override { return x.dim() == 2 ? x : Flatten().forward(x); }
  std::string describe() const override { return "Flatten"; }
};

std::shared_ptr<Sequential> image_mlp(const std::vector<std::int64_t>& sizes, Rng& rng) {
  auto net = std::make_shared<Sequential>();
  net->add(std::make_shared<FlattenImage>());
  auto mlp = make_mlp(sizes, rng);
  for (size_t i = 0; i < mlp->children().size(); ++i) net->add(mlp->children()[i].second);
  return net;
}

}  // namespace

std::shared_ptr<Sequential> make_mlp(const std::vector<std::int64_t>& sizes, Rng& rng) {
  WEFT_CHECK(sizes.size() >= 2, "an MLP needs at least two sizes");
  auto net = std::make_shared<Sequential>();
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    net->add(std::make_shared<Linear>(sizes[i], sizes[i + 1], rng));
    if (i + 2 < sizes.size()) net->add(std::make_shared<ReLU>());
  }
  return net;
}

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names{"mlp", "cnn", "mlp128", "seed-cnn"};
  return names;
}

std::shared_ptr<Sequential> make_model(const std::string& name, Rng& rng, const ImageInput& in,
                                       const std::vector<std::int64_t>& hidden) {
  const std::int64_t c = in.channels, h = in.height, w = in.width, k = in.classes;
  if (c < 1 || h < 1 || w < 1 || k < 2)
    throw ConfigError("images of " + std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w) +
                      " pixels in " + std::to_string(k) + " classes: a model needs at least 1 pixel and 2 classes");
  auto at_least = [&](std::int64_t side) {
    if (h < side || w < side)
      throw ConfigError("--model " + name + " takes images of at least " + std::to_string(side) + "x" +
                        std::to_string(side) + " pixels, the data's are " + std::to_string(h) + "x" + std::to_string(w));
  };
  if (!hidden.empty() && name != "mlp") throw ConfigError("--hidden gives the widths of --model mlp's layers");
  if (name == "mlp") {
    std::vector<std::int64_t> sizes{in.pixels()};
    for (std::int64_t width : hidden.empty() ? std::vector<std::int64_t>{256, 256} : hidden) sizes.push_back(width);
    sizes.push_back(k);
    return image_mlp(sizes, rng);
  }
  if (name == "mlp128") return image_mlp({in.pixels(), 128, k}, rng);
  if (name == "cnn") {
    at_least(4);
    return std::make_shared<Sequential>(std::vector<std::shared_ptr<Module>>{
        std::make_shared<Conv2d>(c, 32, 3, rng, 1, 1), std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2),
        std::make_shared<Conv2d>(32, 64, 3, rng, 1, 1), std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2),
        std::make_shared<Flatten>(), std::make_shared<Linear>(64 * (h / 2 / 2) * (w / 2 / 2), 128, rng),
        std::make_shared<ReLU>(), std::make_shared<Linear>(128, k, rng)});
  }
  if (name == "seed-cnn") {
    at_least(6);
    return std::make_shared<Sequential>(std::vector<std::shared_ptr<Module>>{
        std::make_shared<Conv2d>(c, 32, 3, rng), std::make_shared<ReLU>(),
        std::make_shared<Conv2d>(32, 64, 3, rng), std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2),
        std::make_shared<Flatten>(), std::make_shared<Linear>(64 * ((h - 4) / 2) * ((w - 4) / 2), 128, rng),
        std::make_shared<ReLU>(), std::make_shared<Linear>(128, 20, rng), std::make_shared<ReLU>(),
        std::make_shared<Linear>(20, k, rng)});
  }
  std::string known;
  for (const auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
  throw ConfigError("unknown model '" + name + "' (known: " + known + ")");
}

}  // namespace weft
