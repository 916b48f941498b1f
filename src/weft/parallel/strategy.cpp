#include "weft/parallel/strategy.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "weft/autograd/functions.h"
#include "weft/autograd/variable.h"
#include "weft/util/error.h"

namespace weft::parallel {

using Clock = std::chrono::steady_clock;

void Strategies::add(std::unique_ptr<Strategy> strategy) {
  if (!all_.empty() && !all_.back()->splits_model())
    throw ConfigError(fmt::format("'{}' cannot be combined with '{}': a data-parallel strategy comes last, and only one",
                                  strategy->name(), all_.back()->name()));
  all_.push_back(std::move(strategy));
}

void Strategies::prepare(const OptimizerFactory& make_optimizer) {
  for (auto& s : all_) s->prepare(part_);
  for (auto& s : all_)
    if (Optimizer* o = s->optimizer()) optimizer_ = o;
  if (!optimizer_) {
    own_optimizer_ = make_optimizer(part_.trained);
    optimizer_ = own_optimizer_.get();
  }
}

std::string Strategies::describe() const {
  std::string d;
  for (const auto& s : all_) d += (d.empty() ? "" : " + ") + s->name();
  return d.empty() ? "single" : d;
}

bool Strategies::holds_whole_state() const {
  return std::none_of(all_.begin(), all_.end(), [](const auto& s) { return s->shards_state(); });
}

bool Strategies::servers_hold_state() const {
  return std::any_of(all_.begin(), all_.end(), [](const auto& s) { return s->servers_hold_state(); });
}

const GptPipeline* Strategies::pipeline() const {
  for (const auto& s : all_)
    if (const GptPipeline* p = s->pipeline()) return p;
  return nullptr;
}

bool Strategies::measure_gradient_norms() {
  bool any = false;
  for (auto& s : all_) any = s->measure_gradient_norms() || any;
  return any;
}

const GradientNorms* Strategies::gradient_norms() const {
  for (const auto& s : all_)
    if (const GradientNorms* n = s->gradient_norms()) return n;
  return nullptr;
}

std::optional<std::int64_t> Strategies::round() const {
  for (const auto& s : all_)
    if (auto r = s->round()) return r;
  return std::nullopt;
}

std::optional<std::int64_t> Strategies::resident_parameter_bytes() const {
  for (const auto& s : all_)
    if (auto b = s->resident_parameter_bytes()) return b;
  return std::nullopt;
}

std::int64_t Strategies::rank_parameter_elements() const {
  for (const auto& s : all_)
    if (auto n = s->rank_parameter_elements()) return *n;
  std::int64_t n = 0;
  for (const auto& [name, p] : part_.trained) n += p.value().numel();
  return n;
}

void Strategies::summarize(nlohmann::json& summary) const {
  for (const auto& s : all_) s->summarize(summary);
}

void Strategies::update(bool more, double clip_norm) {
  for (auto& s : all_) s->after_backward(stats_);
  if (clip_norm > 0) {
    bool clipped = false;
    for (auto& s : all_) clipped = clipped || s->clip_grad_norm(part_, clip_norm).has_value();
    if (!clipped) {
      if (part_.norm_weight || part_.model_group) {
        parallel::clip_grad_norm(part_.trained, part_.norm_weight ? part_.norm_weight : [](const std::string&) { return 1.0; },
                                 part_.model_group, clip_norm);
      } else {
        std::vector<Var> params;
        for (const auto& [name, p] : part_.trained) params.push_back(p);
        weft::clip_grad_norm(params, clip_norm);
      }
    }
  }
  const auto t0 = Clock::now();
  bool applied = false;
  for (auto& s : all_) applied = applied || s->apply(*optimizer_, stats_);
  if (!applied) optimizer_->step();
  record_span("optimizer", "compute", 0, t0);
  if (more) {
    for (auto& s : all_) s->between_updates();
    optimizer_->zero_grad();
  }
}

double Strategies::step(std::int64_t number, bool last, const StepBatch& batch, const LossFn& loss, double clip_norm) {
  stats_.spans.clear();
  std::optional<SpanRecorder> recorder;
  if (record_) recorder.emplace(stats_.spans);
  optimizer_->zero_grad();
  for (auto& s : all_) s->begin_step();
  const auto update_fn = [&](bool more) { update(more, clip_norm); };
  std::optional<double> value;
  for (auto it = all_.rbegin(); it != all_.rend() && !value; ++it) value = (*it)->forward_backward(batch, update_fn);
  if (!value) {
    const auto t0 = Clock::now();
    Var l = loss(part_.model, batch);
    const auto t1 = Clock::now();
    (batch.weight == 1 ? l : mul(l, batch.weight)).backward();
    record_span("forward", "compute", 0, t0, t1);
    record_span("backward", "compute", 0, t1);
    update(false, clip_norm);
    value = l.item();
  }
  round_ended_ = false;
  for (auto& s : all_) round_ended_ = s->end_step(number, last, stats_) || round_ended_;
  return *value;
}

double Strategies::eval_loss(const StepBatch& batch, const LossFn& loss) {
  NoGradGuard no_grad;
  std::optional<double> value;
  for (auto it = all_.rbegin(); it != all_.rend() && !value; ++it) value = (*it)->eval_loss(batch);
  return value ? *value : loss(part_.model, batch).item();
}

void Strategies::begin_eval() {
  for (auto& s : all_) s->begin_eval();
  part_.model.eval();
}

void Strategies::end_eval() {
  part_.model.train();
  for (auto& s : all_) s->end_eval();
}

std::vector<Strategy*> Strategies::gather_order() const {
  std::vector<Strategy*> order;
  for (const auto& s : all_)
    if (!s->splits_model()) order.push_back(s.get());
  for (const auto& s : all_)
    if (s->splits_model()) order.push_back(s.get());
  return order;
}

void Strategies::finish() {
  for (Strategy* s : gather_order()) s->finish();
}

TrainState Strategies::gather_state() {
  TrainState state;
  state.optimizer = optimizer_->state();
  const auto order = gather_order();
  for (Strategy* s : order)
    if (auto o = s->optimizer_state(*optimizer_, state.per_rank)) state.optimizer = std::move(*o);
  bool split = false;
  for (Strategy* s : order) split = split || s->splits_model();
  std::optional<StateDict> kept;
  for (Strategy* s : order)
    if (!kept) kept = s->model_state();
  if (kept) {
    state.model = std::move(*kept);
  } else if (split) {
    for (const auto& [name, p] : part_.trained) state.model.emplace_back(name, p.value().contiguous());
    if (part_.frozen && part_.holds)  // frozen parameters this rank's stage keeps
      for (const auto& [name, p] : part_.model.named_parameters())
        if (part_.is_frozen(name) && part_.holds(name)) state.model.emplace_back(name, p.value().contiguous());
  } else {
    state.model = part_.model.state_dict();
  }
  for (Strategy* s : order) s->widen(state);
  for (Strategy* s : order) s->end_checkpoint();
  return state;
}

void Strategies::restore(const StateDict& optimizer, std::int64_t optimizer_steps) {
  StateDict mine = optimizer;
  for (Strategy* s : gather_order()) s->narrow(mine);
  bool loaded = false;
  for (auto& s : all_) loaded = loaded || s->load_optimizer_state(mine);
  if (!loaded) {
    // The entries of the parameters this rank trains, in the optimizer's order.
    std::map<std::string, const Tensor*> by_key;
    for (const auto& [key, t] : mine) by_key[key] = &t;
    StateDict ordered;
    for (const auto& [key, t] : optimizer_->state()) {
      auto it = by_key.find(key);
      if (it == by_key.end()) throw CheckpointError("the checkpoint's optimizer state has no entry '" + key + "'");
      ordered.emplace_back(key, *it->second);
    }
    optimizer_->load_state(ordered);
  }
  optimizer_->set_steps(optimizer_steps);
}

std::vector<std::string> Strategies::intro_lines() {
  std::vector<std::string> lines;
  for (auto& s : all_)
    for (auto& l : s->intro_lines()) lines.push_back(std::move(l));
  return lines;
}

std::vector<std::string> Strategies::report_lines() {
  std::vector<std::string> lines;
  for (auto& s : all_)
    for (auto& l : s->report_lines()) lines.push_back(std::move(l));
  return lines;
}

}  // namespace weft::parallel
