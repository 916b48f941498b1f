// Image classification (seed 002 part I, seed 000's MNIST): a model from nn/models.h on
// Fashion-MNIST or any MNIST-format folder, cross-entropy over the classes, test accuracy
// after each epoch. Each global batch is the next rows of the epoch's seeded order, dealt
// among the data-parallel replicas (task.h); federated clients with label skew draw from
// their own part.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <optional>
#include <unordered_map>

#include "weft/autograd/functions.h"
#include "weft/data/dataloader.h"
#include "weft/data/dataset.h"
#include "weft/data/images.h"
#include "weft/data/partition.h"
#include "weft/nn/models.h"
#include "weft/parallel/job.h"
#include "weft/tensor/allocator.h"
#include "weft/tensor/ops.h"
#include "weft/train/task.h"
#include "weft/train/timeline.h"
#include "weft/util/error.h"
#include "weft/util/file.h"

namespace weft {

namespace {

class ImageClassification : public Task {
 public:
  ImageClassification(const TrainOptions& o, int replica, int replicas, std::FILE* out)
      : Task(*o.batch, replica, replicas), o_(o), replicas_(replicas) {
    load_data(o);
    loader_.emplace(train_, LoaderOptions{*o.batch, true, false, o.seed});
    if (o.parallel.strategy == "fedavg") {
      if (*o.batch % replicas != 0) {  // each client trains on its own part: an even split
        throw ConfigError("--batch " + std::to_string(*o.batch) + " (the global batch) is not divisible by the " +
                          std::to_string(replicas) + " federated clients");
      }
      if (o.clients > 0 && o.clients != replicas) {
        throw ConfigError("--clients " + std::to_string(o.clients) + " but the job has " + std::to_string(replicas) +
                          " rank(s): one rank per client");
      }
      if (!std::isinf(o.non_iid)) client_data(out);
    }
    open_sample_log();
  }
  void regrouped() override {
    replicas_ = static_cast<int>(speeds().size());
    o_.batch = global_batch_;
    open_sample_log();
  }
  bool batch_may_change() const override { return !client_loader_; }  // (federated clients: no)
  ~ImageClassification() override {
    if (sample_log_) std::fclose(sample_log_);
  }

  ModelRecipe recipe() const override {
    ModelRecipe r;
    r.model = o_.model;
    r.image = input_;
    r.mean = norm_.mean;
    r.stddev = norm_.stddev;
    if (!o_.hidden.empty()) r.hidden = parse_hidden(o_.hidden);
    return r;
  }
  std::string model_tag() const override { return o_.model; }
  std::int64_t rows_per_epoch() const override { return train_.size(); }
  std::int64_t epochs() const override { return *o_.epochs; }
  std::string unit() const override { return "samples"; }
  std::string generator_name() const override { return "init"; }

  parallel::StepBatch batch(std::int64_t epoch, std::int64_t at, std::int64_t step, Rng&) override {
    if (client_loader_) {  // a federated client cycles through its own data
      const std::int64_t g = epoch * steps_per_epoch() + at / global_batch_, nb = client_loader_->num_batches();
      if (g / nb != client_epoch_) {
        client_epoch_ = g / nb;
        client_order_ = client_loader_->epoch_order(client_epoch_);
      }
      Batch b = client_loader_->batch(client_order_, g % nb);
      return {b.images, b.labels, 1, {}};
    }
    if (epoch != order_epoch_) {
      order_ = loader_->epoch_order(epoch);
      order_epoch_ = epoch;
    }
    const DealtRows mine = rows_of(rows_at(at));
    const auto first = order_.begin() + at + mine.first;
    const std::vector<std::int64_t> rows(first, first + mine.count);
    if (sample_log_ && mine.share > 0) log_samples(epoch, step, rows);
    Batch b = loader_->batch(rows, 0);
    return {b.images, b.labels, mine.weight, rows};
  }

  Var output_loss(const Var& output, const parallel::StepBatch& batch) const override {
    return cross_entropy(output, batch.targets);
  }
  Var loss(Module& model, const parallel::StepBatch& batch) const override {
    if (frozen_ == 0) return output_loss(model.forward(Var(batch.inputs)), batch);
    auto& layers = dynamic_cast<Sequential&>(model);
    return cross_entropy(layers.forward_range(Var(frozen_output(layers, batch)), frozen_, layers.size()), batch.targets);
  }

  bool freeze(std::size_t layers, std::int64_t cache_bytes) override {
    if (layers != frozen_) cache_.clear();  // outputs of another layer
    frozen_ = layers;
    cache_budget_ = cache_bytes;
    cache_bytes_ = 0;
    return cache_bytes > 0;
  }
  std::size_t layers(const Module& model) const override {
    const auto* s = dynamic_cast<const Sequential*>(&model);
    return s ? s->size() : 0;
  }

  // Rank r of the replicas evaluates samples r, r + replicas, ...; the counts are summed.
  Evaluation evaluate(parallel::Strategies& strategies, const parallel::RankGroup& replicas) override {
    NoGradGuard no_grad;
    strategies.begin_eval();
    std::vector<std::int64_t> mine;
    for (std::int64_t i = replica_; i < test_.size(); i += replicas_) mine.push_back(i);
    DataLoader loader(test_, {1000, false, false, 0});
    std::int64_t counts[2] = {0, static_cast<std::int64_t>(mine.size())};  // correct, seen
    for (std::int64_t b = 0; b * 1000 < static_cast<std::int64_t>(mine.size()); ++b) {
      Batch batch = loader.batch(mine, b);
      auto pred = ops::argmax_rows(strategies.part().model(Var(batch.images)).value());
      for (size_t i = 0; i < pred.size(); ++i) counts[0] += pred[i] == batch.labels[i];
    }
    replicas.sum(counts, 2);
    strategies.end_eval();
    const double accuracy =
        static_cast<double>(counts[0]) / static_cast<double>(std::max<std::int64_t>(counts[1], 1));
    return {"test accuracy", fmt::format("test accuracy {:.2f}%", 100 * accuracy), "test_accuracy", accuracy};
  }

  std::string progress_line(std::int64_t epoch, std::int64_t step, bool epoch_end, double train_loss,
                            const Evaluation* e, const std::string& rate) const override {
    const std::string head = epoch_end ? fmt::format("epoch {}/{}", epoch + 1, epochs())
                                       : fmt::format("step {} (epoch {}/{})", step, epoch + 1, epochs());
    return fmt::format("{}: train loss {:.4f}{}  ({}, {} steps)", head, train_loss, e ? ", " + e->text : "", rate, step);
  }

 private:
  // The data, normalized, and the model's input and classes from it.
  void load_data(const TrainOptions& o) {
    const std::string dir = resolve_data_dir(*o.data, o.data_dir);
    // Within the memory this rank has available (the machine's ranks each hold the data): a
    // dataset too large is one line rather than the machine swapping.
    const int ranks_here = parallel::ranks_on_this_machine();
    const auto ceiling = ceiling_at_available_memory(
        fmt::format("reading the images of {}{}", dir,
                    ranks_here > 1 ? fmt::format(", which each of this machine's {} ranks holds", ranks_here) : ""),
        ranks_here);
    const bool given = !o.norm_mean.empty() || !o.norm_std.empty();
    if (*o.data == "fashion-mnist" && !given) {  // its published figures, as always
      train_ = load_mnist_format(dir, "train", kFashionMnistMean, kFashionMnistStd, o.limit_train);
      if (o.evaluate) test_ = load_mnist_format(dir, "test", kFashionMnistMean, kFashionMnistStd, o.limit_test);
      norm_ = {{kFashionMnistMean}, {kFashionMnistStd}};
    } else {
      ImageSplit train = read_image_split(dir, "train", o.limit_train);
      norm_ = given ? Normalization{o.norm_mean, o.norm_std} : channel_statistics(train.images);
      const auto channels = static_cast<std::size_t>(train.images.shape()[1]);
      for (const auto* v : {&norm_.mean, &norm_.stddev})
        if (v->size() != 1 && v->size() != channels)
          throw ConfigError("--norm-mean and --norm-std take one value or one per channel (" + std::to_string(channels) + ")");
      for (double sd : norm_.stddev)
        if (!(sd > 0)) throw ConfigError("--norm-std must be positive");
      train_ = dataset_of(std::move(train));
      if (o.evaluate) {
        ImageSplit test = read_image_split(dir, "test", o.limit_test);
        const Shape &a = train_.images.shape(), &b = test.images.shape();
        if (a[1] != b[1] || a[2] != b[2] || a[3] != b[3])
          throw DataError(fmt::format("{}: test images are {}x{}x{}, the training images {}x{}x{}", test.source, b[1], b[2],
                                      b[3], a[1], a[2], a[3]));
        test_ = dataset_of(std::move(test));
      }
    }
    std::int64_t classes = 2;
    for (std::int32_t l : train_.labels) classes = std::max<std::int64_t>(classes, l + 1);
    for (std::size_t i = 0; i < test_.labels.size(); ++i)
      if (test_.labels[i] >= classes)
        throw DataError(fmt::format("test label {} at index {} is not among the training set's {} classes", test_.labels[i], i,
                                    classes));
    train_.num_classes = test_.num_classes = classes;
    const Shape& s = train_.images.shape();
    input_ = {s[1], s[2], s[3], classes};
  }

  ImageDataset dataset_of(ImageSplit split) const {
    normalize_images(split.images, norm_);
    ImageDataset d;
    d.images = std::move(split.images);
    d.labels = std::move(split.labels);
    return d;
  }

  void client_data(std::FILE* out) {
    auto parts = dirichlet_partition(train_.labels, static_cast<int>(train_.num_classes), replicas_, o_.non_iid, o_.seed);
    const auto& part = parts[static_cast<size_t>(replica_)];
    const std::int64_t per_rank = *o_.batch / replicas_;
    if (part.size() < static_cast<size_t>(per_rank)) {
      throw ConfigError("client " + std::to_string(replica_) + " received only " + std::to_string(part.size()) +
                        " samples: raise --non-iid or use fewer clients");
    }
    client_loader_.emplace(train_, LoaderOptions{per_rank, true, false, o_.seed + 1 + static_cast<std::uint64_t>(replica_),
                                                 part});
    std::string sizes;
    for (const auto& p : parts) sizes += (sizes.empty() ? "" : ", ") + std::to_string(p.size());
    fmt::print(out, "federated averaging: {} clients, Dirichlet({}) label skew, samples per client: {}\n", replicas_,
               o_.non_iid, sizes);
  }

  // "epoch step index" per sample, for audits of the data order.
  void log_samples(std::int64_t epoch, std::int64_t step, const std::vector<std::int64_t>& rows) {
    bool written = true;
    for (std::int64_t i : rows)
      written &= std::fprintf(sample_log_, "%lld %lld %lld\n", static_cast<long long>(epoch),
                              static_cast<long long>(step), static_cast<long long>(i)) > 0;
    if (!written || std::fflush(sample_log_) != 0)
      throw Error("--sample-log: cannot write " + timeline_path(o_.sample_log, replica_, replicas_) + ": " +
                  std::strerror(errno));
  }

  TrainOptions o_;
  int replicas_;
  // The frozen layers' output for the batch's rows: from the cache for the samples seen
  // before, computed (without gradients) for the others, which the cache keeps while it
  // has room.
  Tensor frozen_output(Sequential& layers, const parallel::StepBatch& batch) const {
    NoGradGuard no_grad;
    const std::size_t n = batch.samples.size();
    if (cache_budget_ <= 0 || n == 0 || static_cast<std::int64_t>(n) != batch.inputs.size(0))
      return layers.forward_range(Var(batch.inputs), 0, frozen_).value();
    std::vector<std::int64_t> missing;  // rows of the batch
    for (std::size_t i = 0; i < n; ++i)
      if (!cache_.count(batch.samples[i])) missing.push_back(static_cast<std::int64_t>(i));
    Tensor computed;
    if (!missing.empty()) {
      Tensor inputs = batch.inputs;
      if (missing.size() != n) {
        Shape shape = batch.inputs.shape();
        shape[0] = static_cast<std::int64_t>(missing.size());
        inputs = Tensor::empty(shape, batch.inputs.dtype());
        for (std::size_t j = 0; j < missing.size(); ++j)
          inputs.slice(0, static_cast<std::int64_t>(j), static_cast<std::int64_t>(j) + 1)
              .copy_(batch.inputs.slice(0, missing[j], missing[j] + 1));
      }
      computed = layers.forward_range(Var(inputs), 0, frozen_).value().contiguous();
      for (std::size_t j = 0; j < missing.size(); ++j) {
        Tensor row = computed.slice(0, static_cast<std::int64_t>(j), static_cast<std::int64_t>(j) + 1);
        const auto bytes = static_cast<std::int64_t>(row.nbytes());
        if (cache_bytes_ + bytes > cache_budget_) break;
        cache_.emplace(batch.samples[static_cast<std::size_t>(missing[j])], row.clone());
        cache_bytes_ += bytes;
      }
      if (missing.size() == n) return computed;
    }
    // Assemble the rows: cached ones, and the ones just computed.
    Shape shape = (missing.empty() ? cache_.at(batch.samples[0]) : computed).shape();
    shape[0] = static_cast<std::int64_t>(n);
    Tensor out = Tensor::empty(shape, missing.empty() ? cache_.at(batch.samples[0]).dtype() : computed.dtype());
    std::size_t next = 0;  // into missing
    for (std::size_t i = 0; i < n; ++i) {
      Tensor dst = out.slice(0, static_cast<std::int64_t>(i), static_cast<std::int64_t>(i) + 1);
      if (next < missing.size() && missing[next] == static_cast<std::int64_t>(i)) {
        dst.copy_(computed.slice(0, static_cast<std::int64_t>(next), static_cast<std::int64_t>(next) + 1));
        ++next;
      } else {
        dst.copy_(cache_.at(batch.samples[i]));
      }
    }
    return out;
  }

  std::size_t frozen_ = 0;
  std::int64_t cache_budget_ = 0;
  mutable std::int64_t cache_bytes_ = 0;
  mutable std::unordered_map<std::int64_t, Tensor> cache_;  // sample -> the frozen layers' output

  // --sample-log: this replica's file (appended to).
  void open_sample_log() {
    if (o_.sample_log.empty()) return;
    if (sample_log_) std::fclose(sample_log_);
    const std::string path = timeline_path(o_.sample_log, replica_, replicas_);
    // Appended to: only a sample log (lines of three whole numbers), never a model or another file.
    check_replaceable_file(path, "--sample-log", "a sample log", [](std::string_view head) {
      const auto line = head.substr(0, head.find('\n'));
      return std::count(line.begin(), line.end(), ' ') == 2 &&
             head.find_first_not_of("0123456789 \n") == std::string_view::npos;
    });
    make_parent_directories(path);
    sample_log_ = std::fopen(path.c_str(), "a");
    if (!sample_log_) throw ConfigError("--sample-log: cannot write " + path);
  }
  ImageDataset train_, test_;
  ImageInput input_;
  Normalization norm_;
  std::optional<DataLoader> loader_, client_loader_;
  std::vector<std::int64_t> order_, client_order_;
  std::int64_t order_epoch_ = -1, client_epoch_ = -1;
  std::FILE* sample_log_ = nullptr;
};

}  // namespace

std::unique_ptr<Task> make_image_task(const TrainOptions& options, int replica, int replicas, std::FILE* out) {
  return std::make_unique<ImageClassification>(options, replica, replicas, out);
}

}  // namespace weft
