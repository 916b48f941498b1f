#include "weft/parallel/param_offload.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "weft/autograd/functions.h"
#include "weft/tensor/allocator.h"
#include "weft/util/error.h"

namespace weft::parallel {

namespace {
// Slots of parameters in memory: the segment computing, the one read ahead, one written back.
constexpr int kSlots = 3;

// A flag set for a scope.
class Raised {
 public:
  explicit Raised(bool& flag) : flag_(flag) { flag_ = true; }
  ~Raised() { flag_ = false; }
  Raised(const Raised&) = delete;
  Raised& operator=(const Raised&) = delete;

 private:
  bool& flag_;
};
}  // namespace

ParameterOffload::~ParameterOffload() {
  if (layers_) layers_->set_around({});
}

void ParameterOffload::prepare(ModelPart& part) {
  part_ = &part;
  for (const auto& [name, p] : part.trained)
    if (p.dtype() != DType::F32) throw ConfigError("--offload params keeps float32 parameters");
  if (auto* layers = dynamic_cast<Sequential*>(&part.model)) segment_layers(*layers);
  else if (auto* gpt = dynamic_cast<GPT*>(&part.model)) segment_gpt(*gpt);
  else throw ConfigError("--offload params streams a model of layers in sequence (the MLP, the CNN) or a GPT");
  // The optimizer over every trained parameter, its state in a file too; then the values,
  // a segment's after another.
  optimizer_ = make_optimizer_(part.trained);
  optimizer_->offload_state(dir_, kSlots);
  std::vector<Shape> wholes;
  for (Segment& seg : segments_) {
    for (std::size_t k : seg.params) {
      seg.shapes.push_back(part.trained[k].second.shape());
      seg.numel += shape_numel(seg.shapes.back());
    }
    wholes.push_back({seg.numel});
  }
  store_ = std::make_unique<StateStore>(wholes, DType::F32, 1);
  store_->offload(dir_, kSlots, "parameters");
  for (std::size_t s = 0; s < segments_.size(); ++s) {  // each segment to the file, then out of memory
    Tensor flat = Tensor::empty({segments_[s].numel}, DType::F32);
    const std::vector<Tensor> views = pieces(segments_[s], flat);
    for (std::size_t i = 0; i < views.size(); ++i) {
      Var p = part.trained[segments_[s].params[i]].second;
      Tensor view = views[i];
      view.copy_(p.value());
      p.mutable_value() = Tensor();
    }
    store_->write(s, 0, flat);
  }
  allocator_release_cache();  // the parameters' memory, freed for good
}

// A layered model: each module with trained parameters starts a segment (the modules before
// the first join it). Any forward of the model (evaluation) streams the parameters too.
void ParameterOffload::segment_layers(Sequential& layers) {
  layers_ = &layers;
  for (std::size_t k = 0; k < part_->trained.size(); ++k) {
    const std::string& name = part_->trained[k].first;
    const std::size_t module = std::stoul(name.substr(0, name.find('.')));
    if (segments_.empty() || segments_.back().begin != module) {
      if (!segments_.empty() && module < segments_.back().begin)
        throw ConfigError("--offload params: the parameters are not in the order of their layers");
      segments_.push_back({module, layers.size(), {}});
    }
    segments_.back().params.push_back(k);
  }
  if (segments_.empty()) throw ConfigError("--offload params: the model has no parameters to train");
  segments_.front().begin = 0;
  for (std::size_t s = 0; s + 1 < segments_.size(); ++s) segments_[s].end = segments_[s + 1].begin;
  segment_of_module_.assign(layers.size(), -1);
  for (std::size_t s = 0; s < segments_.size(); ++s)
    for (std::size_t m = segments_[s].begin; m < segments_[s].end; ++m) segment_of_module_[m] = static_cast<int>(s);
  layers.set_around([this](std::size_t module, bool entering) {
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

// A GPT: the embedding (the position table; the token one is tied to the head and stays
// in memory), each block, then the final norm and the head.
void ParameterOffload::segment_gpt(GPT& gpt) {
  gpt_ = std::make_unique<LocalGpt>(gpt);
  const auto blocks = static_cast<std::size_t>(gpt.config().layers);
  segments_.assign(blocks + 2, Segment{});
  for (std::size_t k = 0; k < part_->trained.size(); ++k) {
    const std::string& name = part_->trained[k].first;
    if (gpt.config().tied_head && name == GPT::tied_weight()) {
      pinned_.push_back(k);
      continue;
    }
    const GptPart at = gpt.part_of(name);  // (the whole model's)
    const std::size_t s = at.kind == GptPart::kEmbedding ? 0
                          : at.kind == GptPart::kBlock   ? 1 + static_cast<std::size_t>(at.block)
                                                         : blocks + 1;
    segments_.at(s).params.push_back(k);
  }
}

Var ParameterOffload::run(std::size_t s, const Var& x, const StepBatch& batch) {
  const bool last = s + 1 == segments_.size();
  if (layers_) {
    Var y = layers_->forward_range(x, segments_[s].begin, segments_[s].end);
    return last ? loss_(y, batch) : y;
  }
  if (s == 0) return gpt_->embed(x.value());
  if (!last) return gpt_->run_blocks(x, static_cast<std::int64_t>(s) - 1, static_cast<std::int64_t>(s));
  return gpt_->head_loss(x, batch.targets);
}

// The segments a pass reads, in its order: forward (the first `segments`) or backward; the
// ones without parameters are not read.
std::vector<std::size_t> ParameterOffload::order(bool backward, std::size_t segments) const {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < std::min(segments, segments_.size()); ++i) {
    const std::size_t s = backward ? segments_.size() - 1 - i : i;
    if (!segments_[s].params.empty()) out.push_back(s);
  }
  return out;
}

// The optimizer's updates of a backward pass: the segments' parameters in its order.
std::vector<std::size_t> ParameterOffload::updates_order() const {
  std::vector<std::size_t> out;
  for (std::size_t s : order(true)) out.insert(out.end(), segments_[s].params.begin(), segments_[s].params.end());
  out.insert(out.end(), pinned_.begin(), pinned_.end());
  return out;
}

std::vector<Tensor> ParameterOffload::pieces(const Segment& s, const Tensor& flat) {
  std::vector<Tensor> out;
  std::int64_t at = 0;
  for (const Shape& shape : s.shapes) {
    const std::int64_t n = shape_numel(shape);
    out.push_back(flat.slice(0, at, at + n).view(shape));
    at += n;
  }
  return out;
}

void ParameterOffload::place(const Segment& s, const Tensor& flat) {
  const std::vector<Tensor> views = pieces(s, flat);
  for (std::size_t i = 0; i < views.size(); ++i) {
    Var p = part_->trained[s.params[i]].second;
    p.mutable_value() = views[i];
  }
}

void ParameterOffload::load(const Segment& s) {
  if (s.params.empty()) return;
  place(s, store_->acquire(static_cast<std::size_t>(&s - segments_.data()))[0]);
}

void ParameterOffload::drop(const Segment& s, bool changed) {
  if (s.params.empty()) return;
  for (std::size_t k : s.params) {
    Var p = part_->trained[k].second;
    p.mutable_value() = Tensor();
  }
  store_->release(static_cast<std::size_t>(&s - segments_.data()), changed);
}

std::optional<double> ParameterOffload::forward_backward(const StepBatch& batch, const std::function<void(bool)>&) {
  const Raised streaming(streaming_);
  // Forward without gradients, keeping each segment's input (the last one's forward runs
  // with gradients below).
  std::vector<Tensor> inputs{batch.inputs};
  if (segments_.size() > 1) {
    NoGradGuard no_grad;
    store_->begin_pass(order(false, segments_.size() - 1));
    for (std::size_t i = 0; i + 1 < segments_.size(); ++i) {
      load(segments_[i]);
      inputs.push_back(run(i, Var(inputs.back()), batch).value());
      drop(segments_[i], false);
    }
    store_->end_pass();
  }
  // Backward, segment by segment from the last; each segment's update at once, the pinned
  // parameters' (whose gradients more than one segment adds to) after the first segment's.
  double loss_value = 0;
  Tensor grad;
  store_->begin_pass(order(true));
  optimizer_->begin_updates(updates_order());
  const auto apply = [&](std::size_t k) {
    Var p = part_->trained[k].second;
    if (replicas_ && p.grad().defined()) {
      Tensor g = p.grad().contiguous();
      replicas_->allreduce(g.data<float>(), g.numel(), comm::DataType::kF32, comm::ReduceOp::kAvg)->wait();
      p.set_grad(g);
    }
    optimizer_->update(k);
    p.clear_grad();
  };
  for (std::size_t i = segments_.size(); i-- > 0;) {
    const Segment& s = segments_[i];
    load(s);
    Var x(inputs[i], i > 0);
    Var y = run(i, x, batch);
    if (i + 1 == segments_.size()) {
      loss_value = y.item();
      (batch.weight == 1 ? y : mul(y, batch.weight)).backward();
    } else {
      y.backward(grad);
    }
    grad = i > 0 ? x.grad() : Tensor();
    inputs[i] = Tensor();
    for (std::size_t k : s.params) apply(k);
    drop(s, true);
  }
  for (std::size_t k : pinned_) apply(k);
  optimizer_->end_updates();
  store_->end_pass();
  return loss_value;
}

std::optional<double> ParameterOffload::eval_loss(const StepBatch& batch) {
  NoGradGuard no_grad;
  const Raised streaming(streaming_);
  Var h(batch.inputs);
  store_->begin_pass(order(false));
  for (std::size_t i = 0; i < segments_.size(); ++i) {
    load(segments_[i]);
    h = run(i, h, batch);
    drop(segments_[i], false);
  }
  store_->end_pass();
  return h.item();
}

std::optional<StateDict> ParameterOffload::model_state() {
  std::map<std::string, Tensor> offloaded;
  for (std::size_t s = 0; s < segments_.size(); ++s) {
    if (segments_[s].params.empty()) continue;
    const std::vector<Tensor> views = pieces(segments_[s], store_->read(s, 0));
    for (std::size_t i = 0; i < views.size(); ++i) offloaded[part_->trained[segments_[s].params[i]].first] = views[i].clone();
  }
  StateDict out;
  for (const auto& [name, p] : part_->model.named_parameters()) {
    auto it = offloaded.find(name);
    out.emplace_back(name, it != offloaded.end() ? std::move(it->second) : p.value().clone());
  }
  return out;
}

void ParameterOffload::finish() {
  // The model whole again in memory (what is saved, sampled and compared), the slots gone.
  if (layers_) layers_->set_around({});
  store_->release_memory();
  optimizer_->release_state_memory();
  allocator_release_cache();
  for (std::size_t s = 0; s < segments_.size(); ++s)
    if (!segments_[s].params.empty()) place(segments_[s], store_->read(s, 0));
}

std::vector<std::string> ParameterOffload::intro_lines() {
  return {fmt::format("parameters offloaded to {}: {:.1f} MiB there, at most {:.1f} MiB in memory ({} segments of layers, "
                      "each computed again in the backward)",
                      dir_, static_cast<double>(store_->total_bytes()) / (1 << 20),
                      static_cast<double>(store_->resident_bytes()) / (1 << 20), segments_.size())};
}

}  // namespace weft::parallel
