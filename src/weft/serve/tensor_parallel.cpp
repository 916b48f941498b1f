#include "weft/serve/tensor_parallel.h"

#include <chrono>

#include "weft/comm/process.h"

#include "weft/util/error.h"

namespace weft::serve {

namespace {

// A message: kind, then for a step the ended sequences and each sequence's id and tokens.
enum Kind : std::int64_t { kStep = 1, kHeartbeat = 2, kStop = 3 };
constexpr auto kHeartbeatEvery = std::chrono::seconds(5);

struct Step {
  std::vector<std::int64_t> ended, ids;
  std::vector<std::vector<std::int32_t>> tokens;
};

std::vector<std::int64_t> encode(const Step& s) {
  std::vector<std::int64_t> m = {kStep, static_cast<std::int64_t>(s.ended.size())};
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
    WEFT_CHECK(at < m.size(), "tensor-parallel step: a truncated message");
    return m[at++];
  };
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

// One step on this rank's slice: the ended sequences dropped, new ones started.
Tensor run_step(GptDecoder& decoder, std::map<std::int64_t, std::unique_ptr<SequenceState>>& states, const Step& s) {
  for (std::int64_t id : s.ended) states.erase(id);
  std::vector<SequenceState*> views;
  for (std::int64_t id : s.ids) {
    auto& state = states[id];
    if (!state) state = decoder.start();
    views.push_back(state.get());
  }
  return decoder.extend(views, s.tokens);
}

}  // namespace

class TensorParallelState : public SequenceState {
 public:
  TensorParallelState(TensorParallelDecoder& owner, std::int64_t sequence) : owner_(owner), id(sequence) {}
  ~TensorParallelState() override {
    std::lock_guard lock(owner_.mu_);
    owner_.ended_.push_back(id);
  }
  TensorParallelDecoder& owner_;
  const std::int64_t id;
};


TensorSlice tensor_slice(const std::shared_ptr<comm::Communicator>& group) {
  return {group->rank(), group->size(), [group](Tensor& partial) {
            group->allreduce(partial.data<float>(), partial.numel(), comm::DataType::kF32, comm::ReduceOp::kSum)->wait();
          }};
}

TensorParallelDecoder::TensorParallelDecoder(const GPT& model, WeightFormat format,
                                             std::shared_ptr<comm::Communicator> group)
    : group_(std::move(group)), local_(std::make_unique<GptDecoder>(model, format, tensor_slice(group_))) {
  WEFT_CHECK(group_->rank() == 0, "TensorParallelDecoder runs on rank 0");
  heartbeat_ = std::thread([this] { heartbeat(); });
}

TensorParallelDecoder::~TensorParallelDecoder() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  heartbeat_.join();
  std::lock_guard lock(mu_);
  broadcast(*group_, {kStop});
}

void TensorParallelDecoder::heartbeat() {
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, kHeartbeatEvery, [&] { return stopping_; })) broadcast(*group_, {kHeartbeat});
}

std::unique_ptr<SequenceState> TensorParallelDecoder::start() const {
  std::lock_guard lock(mu_);
  return std::make_unique<TensorParallelState>(const_cast<TensorParallelDecoder&>(*this), next_id_++);
}

Tensor TensorParallelDecoder::extend(const std::vector<SequenceState*>& sequences,
                                     const std::vector<std::vector<std::int32_t>>& tokens) {
  std::lock_guard lock(mu_);
  Step s;
  s.ended.swap(ended_);
  for (SequenceState* state : sequences) s.ids.push_back(static_cast<TensorParallelState*>(state)->id);
  s.tokens = tokens;
  broadcast(*group_, encode(s));
  return run_step(*local_, states_, s);
}

std::unique_ptr<Decoder> join_decoder(LanguageModel& model, WeightFormat format, int tp) {
  if (tp == 1) return make_decoder(model, format);
  auto* gpt = dynamic_cast<GPT*>(&model);
  if (!gpt) throw ConfigError("--tp is built for GPT models only");
  const comm::ProcessInfo info = comm::process_info_from_env();
  if (info.world != tp)
    throw ConfigError("--tp " + std::to_string(tp) + " needs a job of " + std::to_string(tp) + " ranks (weft launch " +
                      "--nproc-per-node " + std::to_string(tp) + "), this one has " + std::to_string(info.world));
  std::shared_ptr<comm::Communicator> group = comm::Communicator::init();
  if (group->rank() == 0) return std::make_unique<TensorParallelDecoder>(*gpt, format, group);
  follow_tensor_parallel(*gpt, format, group);
  return nullptr;
}

void follow_tensor_parallel(const GPT& model, WeightFormat format, std::shared_ptr<comm::Communicator> group) {
  GptDecoder local(model, format, tensor_slice(group));
  std::map<std::int64_t, std::unique_ptr<SequenceState>> states;
  for (;;) {
    const std::vector<std::int64_t> m = broadcast(*group, {});
    WEFT_CHECK(!m.empty(), "tensor-parallel step: an empty message");
    if (m[0] == kStop) return;
    if (m[0] == kStep) run_step(local, states, decode(m));
  }
}

}  // namespace weft::serve
