#include "weft/parallel/param_offload.h"

#include <fmt/format.h>

#include <algorithm>

#include "weft/autograd/functions.h"
#include "weft/util/error.h"

namespace weft::parallel {

namespace {
// Slots of parameters in memory: the segment computing, the one read ahead, one written back.
constexpr int kSlots = 3;
}  // namespace

ParameterOffload::~ParameterOffload() {
  if (layers_) layers_->set_around({});
}

void ParameterOffload::prepare(ModelPart& part) {
  part_ = &part;
  layers_ = dynamic_cast<Sequential*>(&part.model);
  if (!layers_) throw ConfigError("--offload params streams the layers of a model in sequence (the MLP and the CNN)");
  // Segments: each module with trained parameters starts one (those before the first join it).
  segment_of_module_.assign(layers_->size(), -1);
  for (std::size_t k = 0; k < part.trained.size(); ++k) {
    const std::string& name = part.trained[k].first;
    const std::size_t module = std::stoul(name.substr(0, name.find('.')));
    if (segments_.empty() || segments_.back().begin != module) {
      if (!segments_.empty() && module < segments_.back().begin)
        throw ConfigError("--offload params: the parameters are not in the order of their layers");
      segments_.push_back({module, layers_->size(), {}});
    }
    segments_.back().params.push_back(k);
    if (part.trained[k].second.dtype() != DType::F32) throw ConfigError("--offload params keeps float32 parameters");
  }
  if (segments_.empty()) throw ConfigError("--offload params: the model has no parameters to train");
  segments_.front().begin = 0;
  for (std::size_t s = 0; s + 1 < segments_.size(); ++s) segments_[s].end = segments_[s + 1].begin;
  for (std::size_t s = 0; s < segments_.size(); ++s)
    for (std::size_t m = segments_[s].begin; m < segments_[s].end; ++m) segment_of_module_[m] = static_cast<int>(s);
  // The optimizer over every trained parameter, its state in a file too; then the values.
  optimizer_ = make_optimizer_(part.trained);
  optimizer_->offload_state(dir_, kSlots);
  std::vector<Tensor> values;
  for (const auto& [name, p] : part.trained) values.push_back(p.value());
  store_ = std::make_unique<StateStore>(values, 1);
  values.clear();
  store_->offload(dir_, kSlots, "parameters");
  for (std::size_t k = 0; k < part.trained.size(); ++k) {  // each value to the file, then out of memory
    Var p = part.trained[k].second;
    store_->write(k, 0, p.value());
    p.mutable_value() = Tensor();
  }
  // Any other forward (evaluation) streams the parameters through the modules.
  layers_->set_around([this](std::size_t module, bool entering) {
    if (streaming_) return;
    const int s = segment_of_module_[module];
    const Segment& seg = segments_[static_cast<std::size_t>(s)];
    if (module != (entering ? seg.begin : seg.end - 1)) return;
    if (entering) {
      if (s == 0) store_->begin_pass(order(false));
      load(seg);
    } else {
      drop(seg, false);
      if (static_cast<std::size_t>(s) + 1 == segments_.size()) store_->end_pass();
    }
  });
}

// The parameter order of a pass: segment by segment, forward (`segments` of them) or backward.
std::vector<std::size_t> ParameterOffload::order(bool backward, std::size_t segments) const {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < std::min(segments, segments_.size()); ++i) {
    const Segment& s = segments_[backward ? segments_.size() - 1 - i : i];
    out.insert(out.end(), s.params.begin(), s.params.end());
  }
  return out;
}

void ParameterOffload::load(const Segment& s) {
  for (std::size_t k : s.params) {
    Var p = part_->trained[k].second;
    p.mutable_value() = store_->acquire(k)[0];
  }
}

void ParameterOffload::drop(const Segment& s, bool changed) {
  for (std::size_t k : s.params) {
    Var p = part_->trained[k].second;
    p.mutable_value() = Tensor();
    store_->release(k, changed);
  }
}

std::optional<double> ParameterOffload::forward_backward(const StepBatch& batch, const std::function<void(bool)>&) {
  streaming_ = true;
  struct Done {
    bool& flag;
    ~Done() { flag = false; }
  } done{streaming_};
  // Forward without gradients, keeping each segment's input (the last one's forward runs
  // with gradients below).
  std::vector<Tensor> inputs{batch.inputs};
  if (segments_.size() > 1) {
    NoGradGuard no_grad;
    store_->begin_pass(order(false, segments_.size() - 1));
    for (std::size_t i = 0; i + 1 < segments_.size(); ++i) {
      load(segments_[i]);
      inputs.push_back(layers_->forward_range(Var(inputs.back()), segments_[i].begin, segments_[i].end).value());
      drop(segments_[i], false);
    }
    store_->end_pass();
  }
  // Backward, segment by segment from the last; each segment's update at once.
  double loss_value = 0;
  Tensor grad;
  store_->begin_pass(order(true));
  optimizer_->begin_updates(order(true));
  for (std::size_t i = segments_.size(); i-- > 0;) {
    const Segment& s = segments_[i];
    load(s);
    Var x(inputs[i], i > 0);
    Var y = layers_->forward_range(x, s.begin, s.end);
    if (i + 1 == segments_.size()) {
      Var l = loss_(y, batch);
      loss_value = l.item();
      (batch.weight == 1 ? l : mul(l, batch.weight)).backward();
    } else {
      y.backward(grad);
    }
    grad = i > 0 ? x.grad() : Tensor();
    inputs[i] = Tensor();
    for (std::size_t k : s.params) {
      Var p = part_->trained[k].second;
      if (replicas_ && p.grad().defined()) {
        Tensor g = p.grad().contiguous();
        replicas_->allreduce(g.data<float>(), g.numel(), comm::DataType::kF32, comm::ReduceOp::kAvg)->wait();
        p.set_grad(g);
      }
      optimizer_->update(k);
      p.clear_grad();
    }
    drop(s, true);
  }
  optimizer_->end_updates();
  store_->end_pass();
  return loss_value;
}

std::optional<StateDict> ParameterOffload::model_state() {
  StateDict out;
  std::size_t k = 0;
  for (const auto& [name, p] : part_->model.named_parameters()) {
    const bool offloaded = k < part_->trained.size() && part_->trained[k].first == name;
    out.emplace_back(name, offloaded ? store_->read(k++, 0) : p.value().clone());
  }
  return out;
}

void ParameterOffload::finish() {
  // The model whole again in memory (what is saved, sampled and compared), the slots gone.
  layers_->set_around({});
  store_->release_memory();
  optimizer_->release_state_memory();
  for (std::size_t k = 0; k < part_->trained.size(); ++k) {
    Var p = part_->trained[k].second;
    p.mutable_value() = store_->read(k, 0);
  }
}

std::vector<std::string> ParameterOffload::intro_lines() {
  return {fmt::format("parameters offloaded to {}: {:.1f} MiB there, at most {:.1f} MiB in memory ({} segments of layers, "
                      "each computed again in the backward)",
                      dir_, static_cast<double>(store_->total_bytes()) / (1 << 20),
                      static_cast<double>(store_->resident_bytes()) / (1 << 20), segments_.size())};
}

}  // namespace weft::parallel
