#include "weft/algo/symbolic.h"

#include <deque>
#include <map>
#include <sstream>

#include "weft/util/error.h"

namespace weft::algo {

namespace {

struct Sym {
  std::uint64_t mask = 0;   // contributing ranks
  std::int64_t index = -1;  // original position; -1: undefined
  bool operator==(const Sym& o) const { return mask == o.mask && index == o.index; }
};

struct Message {
  int sender;
  std::size_t op;  // index of the send in the sender's current step
  std::vector<Sym> payload;
  std::uint64_t knows;
  std::uint16_t channel, peer_channel;  // the send's
};

struct Rank {
  Program program;
  std::vector<Sym> data, scratch, input;
  std::size_t step = 0;
  bool posted = false;
  std::vector<bool> done;
  std::uint64_t knows = 0;
  bool finished() const { return step >= program.steps.size(); }
};

struct Failure {
  std::string what;
};

std::string describe_chunk(const Chunk& c) {
  const char* b = c.buf == Buf::kData ? "data" : c.buf == Buf::kScratch ? "scratch" : "input";
  return std::string(b) + "[" + std::to_string(c.offset) + ", " + std::to_string(c.end()) + ")";
}

class Executor {
 public:
  Executor(Collective c, int world, std::int64_t n, const Options& o, Builder builder)
      : c_(c), world_(world), n_(n), o_(o), ranks_(static_cast<size_t>(world)) {
    for (int r = 0; r < world; ++r) {
      Rank& R = ranks_[r];
      R.program = builder(r, world, n, o);
      if (o.out_of_place) R.program = read_input_first(std::move(R.program), n);
      R.data.assign(static_cast<size_t>(n), Sym{});
      R.scratch.assign(static_cast<size_t>(R.program.scratch), Sym{});
      R.knows = bit(r);
      init(r, R);
    }
  }

  SymbolicResult run() {
    SymbolicResult result;
    for (auto& R : ranks_) {
      result.max_steps = std::max(result.max_steps, R.program.steps.size());
      ProgramStats s = stats(R.program);
      result.max_elements_sent = std::max(result.max_elements_sent, s.elements_sent);
      result.messages += s.messages;
    }
    try {
      execute();
      check_postcondition();
    } catch (const Failure& f) {
      result.ok = false;
      result.error = f.what;
    }
    return result;
  }

 private:
  std::uint64_t bit(int r) const { return std::uint64_t{1} << r; }
  std::uint64_t everyone() const { return world_ >= 64 ? ~std::uint64_t{0} : bit(world_) - 1; }
  [[noreturn]] void fail(int rank, const std::string& what) const {
    throw Failure{"rank " + std::to_string(rank) + ": " + what};
  }

  void init(int r, Rank& R) {
    auto fill_block = [&](int b, int owner, std::vector<Sym>& buf) {
      Chunk k = block(n_, world_, b);
      for (auto i = k.offset; i < k.end(); ++i) buf[i] = {bit(owner), i};
    };
    switch (c_) {
      case Collective::kAllReduce:
      case Collective::kReduce:
      case Collective::kReduceScatter:
        if (o_.out_of_place) {
          R.input.resize(static_cast<size_t>(n_));
          for (std::int64_t i = 0; i < n_; ++i) R.input[i] = {bit(r), i};
          break;
        }
        for (std::int64_t i = 0; i < n_; ++i) R.data[i] = {bit(r), i};
        break;
      case Collective::kBroadcast:
      case Collective::kScatter:
        if (r == o_.root)
          for (std::int64_t i = 0; i < n_; ++i) R.data[i] = {bit(r), i};
        break;
      case Collective::kGather:
      case Collective::kAllGather:
        fill_block(r, r, R.data);
        break;
      case Collective::kAllToAll:
        R.input.resize(static_cast<size_t>(n_));
        for (std::int64_t i = 0; i < n_; ++i) R.input[i] = {bit(r), i};
        break;
      case Collective::kBarrier:
        break;
    }
  }

  std::vector<Sym>& buffer(int r, Rank& R, const Chunk& c) {
    std::vector<Sym>& b = c.buf == Buf::kData ? R.data : c.buf == Buf::kScratch ? R.scratch : R.input;
    if (c.offset < 0 || c.count < 0 || c.end() > static_cast<std::int64_t>(b.size())) {
      fail(r, "step " + std::to_string(R.step) + " accesses " + describe_chunk(c) + " outside its buffer of " +
                  std::to_string(b.size()));
    }
    return b;
  }

  Sym combine(int r, const Sym& a, const Sym& b) const {
    if (a.index < 0 || b.index < 0) fail(r, "reduces an undefined element");
    if (a.index != b.index) {
      fail(r, "reduces element " + std::to_string(a.index) + " with element " + std::to_string(b.index));
    }
    if (a.mask & b.mask) fail(r, "counts a contribution twice at element " + std::to_string(a.index));
    return {a.mask | b.mask, a.index};
  }

  // No operation of a step may write what another one reads or writes.
  void check_races(int r, const Step& step) {
    struct Access {
      std::size_t op;
      Chunk c;
      bool write;
    };
    std::vector<Access> acc;
    for (std::size_t i = 0; i < step.ops.size(); ++i) {
      const Op& op = step.ops[i];
      switch (op.kind) {
        case OpKind::kSend: acc.push_back({i, op.src, false}); break;
        case OpKind::kRecv: acc.push_back({i, op.dst, true}); break;
        case OpKind::kRecvReduce:
          acc.push_back({i, op.dst, true});
          if (op.src.count > 0) acc.push_back({i, op.src, false});
          break;
        case OpKind::kCopy:
        case OpKind::kReduce:
          acc.push_back({i, op.src, false});
          acc.push_back({i, op.dst, true});
          break;
      }
    }
    for (std::size_t a = 0; a < acc.size(); ++a)
      for (std::size_t b = a + 1; b < acc.size(); ++b) {
        const Access &x = acc[a], &y = acc[b];
        if (x.op == y.op || !(x.write || y.write) || x.c.buf != y.c.buf) continue;
        if (x.c.count == 0 || y.c.count == 0) continue;
        if (x.c.offset < y.c.end() && y.c.offset < x.c.end()) {
          fail(r, "step " + std::to_string(ranks_[r].step) + ": operations " + std::to_string(x.op) + " and " +
                      std::to_string(y.op) + " race on " + describe_chunk(x.c) + " / " + describe_chunk(y.c));
        }
      }
  }

  void post(int r) {
    Rank& R = ranks_[r];
    const Step& step = R.program.steps[R.step];
    check_races(r, step);
    R.done.assign(step.ops.size(), false);
    for (std::size_t i = 0; i < step.ops.size(); ++i) {
      const Op& op = step.ops[i];
      if (op.kind == OpKind::kSend) {
        if (op.peer < 0 || op.peer >= world_ || op.peer == r) fail(r, "sends to invalid peer " + std::to_string(op.peer));
        auto& src = buffer(r, R, op.src);
        Message m{r, i, std::vector<Sym>(src.begin() + op.src.offset, src.begin() + op.src.end()), R.knows, op.channel, op.peer_channel};
        channels_[{r, op.peer}].push_back(std::move(m));
      } else if (op.kind == OpKind::kCopy || op.kind == OpKind::kReduce) {
        if (op.src.count != op.dst.count) fail(r, "local operation with unequal sizes");
        auto& src = buffer(r, R, op.src);
        auto& dst = buffer(r, R, op.dst);
        std::vector<Sym> tmp(src.begin() + op.src.offset, src.begin() + op.src.end());
        for (std::int64_t k = 0; k < op.dst.count; ++k) {
          Sym& d = dst[op.dst.offset + k];
          d = op.kind == OpKind::kCopy ? tmp[k] : combine(r, d, tmp[k]);
        }
        R.done[i] = true;
      } else if (op.peer < 0 || op.peer >= world_ || op.peer == r) {
        fail(r, "receives from invalid peer " + std::to_string(op.peer));
      }
    }
    R.posted = true;
  }

  bool try_receive(int r) {
    Rank& R = ranks_[r];
    const Step& step = R.program.steps[R.step];
    bool progress = false;
    std::map<int, bool> blocked;  // a peer whose earlier receive in this step is unmatched
    for (std::size_t i = 0; i < step.ops.size(); ++i) {
      const Op& op = step.ops[i];
      if (op.kind != OpKind::kRecv && op.kind != OpKind::kRecvReduce) continue;
      if (R.done[i] || blocked[op.peer]) {
        if (!R.done[i]) blocked[op.peer] = true;
        continue;
      }
      auto& ch = channels_[{op.peer, r}];
      if (ch.empty()) {
        blocked[op.peer] = true;
        continue;
      }
      Message m = std::move(ch.front());
      ch.pop_front();
      if (m.channel != op.peer_channel || m.peer_channel != op.channel) {  // channels run apart (program.h)
        fail(r, "step " + std::to_string(R.step) + " receives in channel " + std::to_string(op.channel) + " from channel " +
                    std::to_string(op.peer_channel) + " the message rank " + std::to_string(op.peer) + " sent in channel " +
                    std::to_string(m.channel) + " to channel " + std::to_string(m.peer_channel));
      }
      if (static_cast<std::int64_t>(m.payload.size()) != op.dst.count) {
        fail(r, "step " + std::to_string(R.step) + " receives " + std::to_string(op.dst.count) +
                    " elements from rank " + std::to_string(op.peer) + ", which sent " +
                    std::to_string(m.payload.size()));
      }
      auto& dst = buffer(r, R, op.dst);
      const bool based = op.kind == OpKind::kRecvReduce && op.src.count > 0;  // dst = src (op) received
      if (based && op.src.count != op.dst.count) fail(r, "receive-reduce with unequal sizes");
      std::vector<Sym> base;
      if (based) {
        auto& src = buffer(r, R, op.src);
        base.assign(src.begin() + op.src.offset, src.begin() + op.src.end());
      }
      for (std::int64_t k = 0; k < op.dst.count; ++k) {
        Sym& d = dst[op.dst.offset + k];
        d = op.kind == OpKind::kRecv ? m.payload[k] : combine(r, based ? base[k] : d, m.payload[k]);
      }
      R.knows |= m.knows;
      R.done[i] = true;
      ranks_[m.sender].done[m.op] = true;  // rendezvous: the send completes now
      progress = true;
    }
    return progress;
  }

  void execute() {
    for (;;) {
      bool progress = false;
      for (int r = 0; r < world_; ++r) {
        Rank& R = ranks_[r];
        if (R.finished()) continue;
        if (!R.posted) {
          post(r);
          progress = true;
        }
        progress = try_receive(r) || progress;
      }
      for (int r = 0; r < world_; ++r) {
        Rank& R = ranks_[r];
        if (R.finished() || !R.posted) continue;
        bool all = true;
        for (bool d : R.done) all = all && d;
        if (all) {
          ++R.step;
          R.posted = false;
          progress = true;
        }
      }
      if (!progress) break;
    }
    std::ostringstream stuck;
    for (int r = 0; r < world_; ++r)
      if (!ranks_[r].finished()) stuck << " " << r << "@step" << ranks_[r].step;
    if (!stuck.str().empty()) throw Failure{"deadlock: ranks waiting:" + stuck.str()};
    for (auto& [key, ch] : channels_)
      if (!ch.empty()) {
        throw Failure{"rank " + std::to_string(key.first) + " sent " + std::to_string(ch.size()) +
                      " message(s) to rank " + std::to_string(key.second) + " that were never received"};
      }
  }

  void expect(int r, std::int64_t i, const Sym& want) const {
    const Sym& got = ranks_[r].data[i];
    if (!(got == want)) {
      std::ostringstream s;
      s << "element " << i << " holds {mask 0x" << std::hex << got.mask << std::dec << ", from " << got.index
        << "}, expected {mask 0x" << std::hex << want.mask << std::dec << ", from " << want.index << "}";
      fail(r, s.str());
    }
  }

  void check_postcondition() {
    const std::uint64_t all = everyone();
    for (int r = 0; r < world_; ++r) {
      switch (c_) {
        case Collective::kAllReduce:
          for (std::int64_t i = 0; i < n_; ++i) expect(r, i, {all, i});
          break;
        case Collective::kBroadcast:
          for (std::int64_t i = 0; i < n_; ++i) expect(r, i, {bit(o_.root), i});
          break;
        case Collective::kReduce:
          if (r == o_.root)
            for (std::int64_t i = 0; i < n_; ++i) expect(r, i, {all, i});
          break;
        case Collective::kGather:
        case Collective::kAllGather:
          if (c_ == Collective::kAllGather || r == o_.root)
            for (int b = 0; b < world_; ++b) {
              Chunk k = block(n_, world_, b);
              for (auto i = k.offset; i < k.end(); ++i) expect(r, i, {bit(b), i});
            }
          break;
        case Collective::kScatter: {
          Chunk k = block(n_, world_, r);
          for (auto i = k.offset; i < k.end(); ++i) expect(r, i, {bit(o_.root), i});
          break;
        }
        case Collective::kReduceScatter: {
          Chunk k = block(n_, world_, r);
          for (auto i = k.offset; i < k.end(); ++i) expect(r, i, {all, i});
          break;
        }
        case Collective::kAllToAll: {
          const std::int64_t c = n_ / world_;
          for (int b = 0; b < world_; ++b)
            for (std::int64_t j = 0; j < c; ++j) expect(r, b * c + j, {bit(b), r * c + j});
          break;
        }
        case Collective::kBarrier:
          break;
      }
      if (c_ == Collective::kBarrier && ranks_[r].knows != all) {
        fail(r, "finished before hearing (directly or not) from every rank");
      }
    }
  }

  Collective c_;
  int world_;
  std::int64_t n_;
  Options o_;
  std::vector<Rank> ranks_;
  std::map<std::pair<int, int>, std::deque<Message>> channels_;
};

}  // namespace

SymbolicResult verify(Collective c, Builder builder, int world, std::int64_t n, const Options& options) {
  if (world < 1 || world > 64) throw ConfigError("the symbolic executor handles worlds of 1 to 64 ranks");
  Executor e(c, world, n, options, builder);
  return e.run();
}

SymbolicResult verify(Collective c, const std::string& algorithm, int world, std::int64_t n, const Options& options) {
  // Validates the arguments the way the communicator will.
  build_program(c, algorithm, 0, world, n, options);
  if (c == Collective::kBarrier) n = 0;
  return verify(c, find_algorithm(c, algorithm).build, world, n, options);
}

}  // namespace weft::algo
