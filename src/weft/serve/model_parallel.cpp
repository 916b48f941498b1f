#include "weft/serve/model_parallel.h"

#include <chrono>
#include <cstdio>
#include <utility>

#include "weft/comm/process.h"
#include "weft/util/error.h"

namespace weft::serve {

namespace {

// ConfigError unless a GPT of `layers` blocks splits into `stages` pipeline stages.
void check_pipeline_split(std::int64_t layers, int stages) {
  if (layers < stages)
    throw ConfigError("a GPT of " + std::to_string(layers) + " blocks does not split into " + std::to_string(stages) +
                      " pipeline stages");
}

// A message: kind, then for a step the restarted sequences (preempted id, fresh id), the ended
// sequences, and each sequence's id and tokens.
enum Kind : std::int64_t { kStep = 1, kHeartbeat = 2, kStop = 3 };
constexpr auto kHeartbeatEvery = std::chrono::seconds(5);

struct Step {
  std::vector<std::pair<std::int64_t, std::int64_t>> restarts;
  std::vector<std::int64_t> ended, ids;
  std::vector<std::vector<std::int32_t>> tokens;
};

std::vector<std::int64_t> encode(const Step& s) {
  std::vector<std::int64_t> m = {kStep, static_cast<std::int64_t>(s.restarts.size())};
  for (const auto& [preempted, fresh] : s.restarts) m.insert(m.end(), {preempted, fresh});
  m.push_back(static_cast<std::int64_t>(s.ended.size()));
  m.insert(m.end(), s.ended.begin(), s.ended.end());
  m.push_back(static_cast<std::int64_t>(s.ids.size()));
  for (std::size_t i = 0; i < s.ids.size(); ++i) {
    m.push_back(s.ids[i]);
    m.push_back(static_cast<std::int64_t>(s.tokens[i].size()));
    m.insert(m.end(), s.tokens[i].begin(), s.tokens[i].end());
  }
  return m;
}

Step decode(const std::vector<std::int64_t>& m) {
  Step s;
  std::size_t at = 1;
  auto next = [&] {
    WEFT_CHECK(at < m.size(), "model-parallel step: a truncated message");
    return m[at++];
  };
  for (std::int64_t n = next(); n > 0; --n) {
    const std::int64_t preempted = next();
    s.restarts.emplace_back(preempted, next());
  }
  for (std::int64_t n = next(); n > 0; --n) s.ended.push_back(next());
  for (std::int64_t n = next(); n > 0; --n) {
    s.ids.push_back(next());
    std::vector<std::int32_t> t(static_cast<std::size_t>(next()));
    for (auto& token : t) token = static_cast<std::int32_t>(next());
    s.tokens.push_back(std::move(t));
  }
  return s;
}

// Rank 0 sends a message (its length first); the others receive it.
std::vector<std::int64_t> broadcast(comm::Communicator& group, std::vector<std::int64_t> message) {
  std::int64_t n = static_cast<std::int64_t>(message.size());
  group.broadcast(&n, 1, comm::DataType::kI64, 0)->wait();
  message.resize(static_cast<std::size_t>(n));
  group.broadcast(message.data(), n, comm::DataType::kI64, 0)->wait();
  return message;
}

// One step on this rank: the restarted sequences' fresh states made (rank 0 made its own),
// the ended sequences dropped, new ones started, the runner run.
Tensor run_step(StepRunner& runner, std::map<std::int64_t, std::unique_ptr<SequenceState>>& states, const Step& s) {
  for (const auto& [preempted, fresh] : s.restarts) {
    if (states.count(fresh)) continue;
    const auto it = states.find(preempted);
    WEFT_CHECK(it != states.end(), "model-parallel step: a restart of a sequence this rank does not hold");
    std::vector<std::vector<std::int32_t>> replay;  // (rank 0's is the batcher's)
    states[fresh] = runner.restart(*it->second, replay);
  }
  for (std::int64_t id : s.ended) states.erase(id);
  std::vector<SequenceState*> views;
  for (std::int64_t id : s.ids) {
    auto& state = states[id];
    if (!state) state = runner.start();
    views.push_back(state.get());
  }
  return runner.run(views, s.tokens);
}

// A runner over this rank's GptDecoder (its part of the model): what a step does aside, the
// decoder's.
class LocalRunner : public StepRunner {
 public:
  template <class... Args>
  explicit LocalRunner(Args&&... args) : local_(std::forward<Args>(args)...) {}
  std::unique_ptr<SequenceState> start() override { return local_.start(); }
  std::int64_t vocab() const override { return local_.vocab(); }
  std::int64_t context() const override { return local_.context(); }
  std::int64_t weight_bytes() const override { return local_.weight_bytes(); }
  std::int64_t cache_bytes_per_token() const override { return local_.cache_bytes_per_token(); }
  std::int64_t cache_block_positions() const override { return local_.cache_block_positions(); }
  std::int64_t cache_blocks_after(const SequenceState& state, std::int64_t fed) const override {
    return local_.cache_blocks_after(state, fed);
  }
  std::unique_ptr<SequenceState> restart(const SequenceState& preempted,
                                         std::vector<std::vector<std::int32_t>>& replay) const override {
    return local_.restart(preempted, replay);
  }

 protected:
  GptDecoder local_;
};

class TensorParallelRunner : public LocalRunner {
 public:
  TensorParallelRunner(const GPT& model, DecoderFormat format, std::shared_ptr<comm::Communicator> group)
      : LocalRunner(model, format, tensor_slice(group)) {}
  Tensor run(const std::vector<SequenceState*>& sequences, const std::vector<std::vector<std::int32_t>>& tokens) override {
    return local_.extend(sequences, tokens);
  }
};

class PipelineRunner : public LocalRunner {
 public:
  // Stages of `tp` ranks (world ranks [s·tp, (s+1)·tp) are stage s), each a tensor-parallel
  // group over the stage's blocks (tp 1: one rank a stage).
  PipelineRunner(const GPT& model, DecoderFormat format, std::shared_ptr<comm::Communicator> group, int micro_batches,
                 int tp = 1)
      : LocalRunner(model, format, stage_slice(*group, tp),
                    blocks_of(model.config().layers, group->rank() / tp, group->size() / tp)),
        group_(std::move(group)),
        tp_(tp),
        stage_(group_->rank() / tp),
        stages_(group_->size() / tp),
        micro_batches_(micro_batches > 0 ? micro_batches : stages_) {}

  // Micro-batches of the step's sequences through the stages: stage 0 embeds and sends each
  // on as soon as its blocks are done, and collects the logits from the last stage.
  Tensor run(const std::vector<SequenceState*>& sequences, const std::vector<std::vector<std::int32_t>>& tokens) override {
    const auto S = static_cast<std::int64_t>(sequences.size());
    const std::int64_t M = std::min<std::int64_t>(micro_batches_, S), d = local_.dim(), V = local_.vocab();
    const bool first = stage_ == 0, last = stage_ == stages_ - 1;
    // This rank's peers in the stages before and after (the same place in their stage: every
    // rank of a stage holds the whole activations), and the rank that takes the logits.
    const int rank = group_->rank(), before = rank - tp_, after = rank + tp_;
    const bool collects = rank == 0, answers = last && rank % tp_ == 0;
    std::vector<comm::WorkPtr> sends;
    std::vector<Tensor> sent;  // alive until their sends complete
    for (std::int64_t m = 0; m < M; ++m) {
      const auto begin = static_cast<std::ptrdiff_t>(S * m / M), end = static_cast<std::ptrdiff_t>(S * (m + 1) / M);
      const std::vector<SequenceState*> part(sequences.begin() + begin, sequences.begin() + end);
      const std::vector<std::vector<std::int32_t>> part_tokens(tokens.begin() + begin, tokens.begin() + end);
      const GptDecoder::StepPlan plan = local_.plan(part, part_tokens);
      Tensor x;
      if (first) {
        x = local_.embed(part, plan);
      } else {
        x = Tensor::empty({plan.rows_total, d});
        group_->irecv(x.data<float>(), x.numel(), comm::DataType::kF32, before)->wait();
      }
      local_.run_blocks(part, plan, x);
      local_.finish(part, plan);
      if (last && !answers) continue;  // (the last stage's other ranks: the logits go from one)
      Tensor out = last ? local_.head(plan, x) : x;
      sends.push_back(group_->isend(out.data<float>(), out.numel(), comm::DataType::kF32, last ? 0 : after));
      sent.push_back(std::move(out));
    }
    Tensor logits;
    if (collects) {
      logits = Tensor::empty({S, V});
      for (std::int64_t m = 0; m < M; ++m) {
        const std::int64_t rows = S * (m + 1) / M - S * m / M;
        group_->irecv(logits.data<float>() + (S * m / M) * V, rows * V, comm::DataType::kF32, (stages_ - 1) * tp_)->wait();
      }
    }
    for (auto& w : sends) w->wait();
    return logits;
  }

 private:
  static LayerRange blocks_of(std::int64_t layers, int stage, int stages) {
    check_pipeline_split(layers, stages);
    return {layers * stage / stages, layers * (stage + 1) / stages};
  }

  // The slice of this rank's stage: a group of the stage's ranks (made by its members).
  static TensorSlice stage_slice(comm::Communicator& world, int tp) {
    if (tp == 1) return {};
    std::vector<int> members;
    for (int t = 0; t < tp; ++t) members.push_back(world.rank() / tp * tp + t);
    return tensor_slice(world.new_group(members));
  }

  std::shared_ptr<comm::Communicator> group_;
  int tp_, stage_, stages_, micro_batches_;
};

}  // namespace

class DistributedState : public SequenceState {
 public:
  DistributedState(DistributedDecoder& owner, std::int64_t sequence) : owner_(owner), id(sequence) {}
  ~DistributedState() override {
    std::lock_guard lock(owner_.mu_);
    owner_.ended_.push_back(id);
  }
  DistributedDecoder& owner_;
  const std::int64_t id;
};

TensorSlice tensor_slice(const std::shared_ptr<comm::Communicator>& group) {
  return {group->rank(), group->size(), [group](Tensor& partial) {
            group->allreduce(partial.data<float>(), partial.numel(), comm::DataType::kF32, comm::ReduceOp::kSum)->wait();
          }};
}

std::unique_ptr<StepRunner> tensor_parallel_runner(const GPT& model, DecoderFormat format,
                                                   std::shared_ptr<comm::Communicator> group) {
  return std::make_unique<TensorParallelRunner>(model, format, std::move(group));
}

std::unique_ptr<StepRunner> pipeline_runner(const GPT& model, DecoderFormat format,
                                            std::shared_ptr<comm::Communicator> group, int micro_batches, int tp) {
  return std::make_unique<PipelineRunner>(model, format, std::move(group), micro_batches, tp);
}

DistributedDecoder::DistributedDecoder(std::unique_ptr<StepRunner> runner, std::shared_ptr<comm::Communicator> group)
    : runner_(std::move(runner)), group_(std::move(group)) {
  WEFT_CHECK(group_->rank() == 0, "DistributedDecoder runs on rank 0");
  heartbeat_ = std::thread([this] { heartbeat(); });
}

DistributedDecoder::~DistributedDecoder() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  heartbeat_.join();
  std::lock_guard lock(mu_);
  if (!failed_.empty()) return;
  try {
    broadcast(*group_, {kStop});
  } catch (const std::exception&) {
    // A rank already gone: nothing left to stop.
  }
}

void DistributedDecoder::heartbeat() {
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, kHeartbeatEvery, [&] { return stopping_; })) {
    try {
      broadcast(*group_, {kHeartbeat});
    } catch (const std::exception& e) {
      failed_ = e.what();  // the next step reports it
      return;
    }
  }
}

std::unique_ptr<SequenceState> DistributedDecoder::start() const {
  std::lock_guard lock(mu_);
  return std::make_unique<DistributedState>(const_cast<DistributedDecoder&>(*this), next_id_++);
}

std::int64_t DistributedDecoder::cache_blocks_after(const SequenceState& state, std::int64_t fed) const {
  std::lock_guard lock(mu_);
  const auto it = states_.find(static_cast<const DistributedState&>(state).id);
  if (it != states_.end()) return runner_->cache_blocks_after(*it->second, fed);
  return runner_->cache_blocks_after(*runner_->start(), fed);  // (not stepped yet: no rank holds it)
}

std::unique_ptr<SequenceState> DistributedDecoder::restart(const SequenceState& preempted,
                                                           std::vector<std::vector<std::int32_t>>& replay) const {
  std::int64_t id = 0;
  {
    std::lock_guard lock(mu_);
    id = next_id_++;
    const auto it = states_.find(static_cast<const DistributedState&>(preempted).id);
    if (it == states_.end()) {
      replay.clear();  // not stepped yet: no rank holds it
    } else {
      std::unique_ptr<SequenceState> local = runner_->restart(*it->second, replay);
      if (!local) return nullptr;
      states_[id] = std::move(local);
      restarts_.emplace_back(it->first, id);
    }
  }
  return std::make_unique<DistributedState>(const_cast<DistributedDecoder&>(*this), id);  // (outside the lock: its end takes it)
}

Tensor DistributedDecoder::extend(const std::vector<SequenceState*>& sequences,
                                  const std::vector<std::vector<std::int32_t>>& tokens) {
  std::lock_guard lock(mu_);
  if (!failed_.empty()) throw Error("a model-parallel rank is gone: " + failed_);
  Step s;
  s.restarts.swap(restarts_);
  s.ended.swap(ended_);
  for (SequenceState* state : sequences) s.ids.push_back(static_cast<DistributedState*>(state)->id);
  s.tokens = tokens;
  broadcast(*group_, encode(s));
  return run_step(*runner_, states_, s);
}

void follow(StepRunner& runner, comm::Communicator& group) {
  std::map<std::int64_t, std::unique_ptr<SequenceState>> states;
  for (;;) {
    const std::vector<std::int64_t> m = broadcast(group, {});
    WEFT_CHECK(!m.empty(), "model-parallel step: an empty message");
    if (m[0] == kStop) return;
    if (m[0] == kStep) run_step(runner, states, decode(m));
  }
}

std::string split_name(int tp, int pp) {
  return tp > 1 && pp > 1 ? "--tp " + std::to_string(tp) + " with --pp " + std::to_string(pp)
         : tp > 1          ? "--tp " + std::to_string(tp)
                           : "--pp " + std::to_string(pp);
}

std::unique_ptr<Decoder> join_decoder(LanguageModel& model, DecoderFormat format, int tp, int pp, int micro_batches) {
  if (tp == 1 && pp == 1) return make_decoder(model, format);
  auto* gpt = dynamic_cast<GPT*>(&model);
  if (!gpt) throw ConfigError(std::string(pp == 1 ? "--tp" : "--pp") + " is built for GPT models only");
  const int ranks = tp * pp;
  const std::string flag = split_name(tp, pp);
  const comm::ProcessInfo info = comm::process_info_from_env();
  if (info.launcher == "none") {
    // Run alone: this command starts its own job of `ranks` ranks on this node, once the
    // model is known to split that way (each rank would say so otherwise).
    check_tensor_split(gpt->config(), tp);
    check_pipeline_split(gpt->config().layers, pp);
    std::fprintf(stderr, "%s: starting %d ranks on this node (weft launch --nproc-per-node %d)\n", flag.c_str(), ranks, ranks);
    comm::exec_as_local_job(ranks);
  }
  if (info.world != ranks)
    throw ConfigError(flag + " needs a job of " + std::to_string(ranks) + " ranks (weft launch --nproc-per-node " +
                      std::to_string(ranks) + "), this one has " + std::to_string(info.world));
  std::shared_ptr<comm::Communicator> group = comm::Communicator::init();
  std::unique_ptr<StepRunner> runner =
      pp == 1 ? tensor_parallel_runner(*gpt, format, group) : pipeline_runner(*gpt, format, group, micro_batches, tp);
  if (group->rank() == 0) return std::make_unique<DistributedDecoder>(std::move(runner), group);
  follow(*runner, *group);
  return nullptr;
}

}  // namespace weft::serve
