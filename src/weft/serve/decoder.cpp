#include "weft/serve/decoder.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/autograd/sequence.h"
#include "weft/autograd/variable.h"
#include "weft/serve/int8_row.h"
#include "weft/serve/weight_panels.h"
#include "weft/tensor/allocator.h"
#include "weft/tensor/fast_math.h"
#include "weft/tensor/fixed_sum.h"
#include "weft/tensor/linalg.h"
#include "weft/tensor/ops.h"
#include "weft/tensor/thread_pool.h"
#include "weft/util/error.h"

namespace weft::serve {

// The blocks of a decoder's caches, all of one shape: a finished sequence's blocks come back
// here and the next sequences take them, so that no block is faulted in afresh once the
// decoder has held as many (a fresh 6 MiB block cost about 12 ms on a 2-core VM: at 16
// streams of 1,000-token prompts, a prefill step that faulted in its blocks held every stream
// for 3 s). A decoder so keeps the most blocks its sequences held at once.
class CacheBlocks {
 public:
  explicit CacheBlocks(std::int64_t bytes) : floats_((bytes + 3) / 4) {}  // (storage: any element type)
  Tensor take() {
    {
      std::lock_guard lock(mu_);
      if (!free_.empty()) {
        Tensor t = std::move(free_.back());
        free_.pop_back();
        return t;
      }
    }
    return Tensor::empty({floats_});
  }
  void give(std::vector<Tensor>& blocks) {
    std::lock_guard lock(mu_);
    for (Tensor& t : blocks) free_.push_back(std::move(t));
    blocks.clear();
  }

 private:
  const std::int64_t floats_;
  std::mutex mu_;
  std::vector<Tensor> free_;
};

namespace {

// A sequence's key-value cache, float32, bf16 or int8 (CacheFormat), in blocks of positions:
// each block holds every held layer's keys and values at its positions ([layers][key,
// value][block rows][a row: cache_row_elements]), rows [0, cached) filled. A block is taken
// as the sequence reaches it and no row is ever copied (as vLLM's paged cache: a cache that
// doubled copied a 1,000-token prompt's 74 MB at its first decoded token, into memory faulted
// in afresh, which stalled the whole batch for 0.3 s a sequence); they go back to the
// decoder's CacheBlocks with the sequence.
class GptState : public SequenceState {
 public:
  GptState(CacheFormat cache_format, std::shared_ptr<CacheBlocks> pool, std::int64_t width, std::int64_t block_rows)
      : format(cache_format), pool_(std::move(pool)), width_(width), block_rows_(block_rows) {}
  ~GptState() override { pool_->give(blocks_); }
  GptState(const GptState&) = delete;
  GptState& operator=(const GptState&) = delete;
  const CacheFormat format;
  std::int64_t cached = 0;
  // Blocks for positions [0, rows), the filled ones kept.
  void reserve(std::int64_t rows) {
    while (static_cast<std::int64_t>(blocks_.size()) * block_rows_ < rows) blocks_.push_back(pool_->take());
  }
  // The key (kv 0) or value (kv 1) row of `layer` (counted from the decoder's first) at
  // `position` (reserved), width() elements of T (cache_row_elements).
  template <class T>
  T* row(std::int64_t layer, int kv, std::int64_t position) const {
    const auto p = static_cast<std::uint32_t>(position), n = static_cast<std::uint32_t>(block_rows_);
    return static_cast<T*>(blocks_[p / n].raw_data()) + ((layer * 2 + kv) * block_rows_ + p % n) * width_;
  }
  // f(rows, first, count) for each run of positions [first, first + count) of [from, to) in
  // one block, in order: their rows width() elements apart from `rows`.
  template <class T, class F>
  void for_each_run(std::int64_t layer, int kv, std::int64_t from, std::int64_t to, const F& f) const {
    for (std::int64_t p = from; p < to;) {
      const std::int64_t end = std::min(to, (p / block_rows_ + 1) * block_rows_);
      f(row<T>(layer, kv, p), p, end - p);
      p = end;
    }
  }
  std::int64_t width() const { return width_; }
  std::int64_t blocks() const { return static_cast<std::int64_t>(blocks_.size()); }
  // The feeds since the window's start, as their attention ran (GptDecoder::restart): rows,
  // and whether in panels (kPanelRows rows or more); feeds row by row side by side joined.
  std::vector<std::pair<std::int64_t, bool>> runs;
  void log_feed(std::int64_t rows) {
    const bool panels = rows >= kPanelRows;
    if (!panels && !runs.empty() && !runs.back().second) runs.back().first += rows;
    else runs.emplace_back(rows, panels);
  }

 private:
  std::shared_ptr<CacheBlocks> pool_;
  std::int64_t width_, block_rows_;
  std::vector<Tensor> blocks_;
};

// The positions of a cache block whose positions take `row_bytes` (every held layer's key and
// value): a multiple of 16 filling most of 6 MiB, so that the block takes whole 2 MiB huge
// pages with little left over (allocator.h; a block of small pages read 30% slower at 1,000
// positions and 16 streams), at most the context (rounded up to 16), at least 16.
std::int64_t cache_block_rows(std::int64_t row_bytes, std::int64_t context) {
  constexpr std::int64_t kBlockBytes = std::int64_t{6} << 20;
  const std::int64_t fill = kBlockBytes / std::max<std::int64_t>(row_bytes, 1) / 16 * 16;
  return std::max<std::int64_t>(16, std::min(fill, (context + 15) / 16 * 16));
}

template <class T>
constexpr CacheFormat cache_format_of();
template <>
constexpr CacheFormat cache_format_of<float>() { return CacheFormat::kF32; }
template <>
constexpr CacheFormat cache_format_of<bf16>() { return CacheFormat::kBf16; }
template <>
constexpr CacheFormat cache_format_of<std::int8_t>() { return CacheFormat::kInt8; }

// A cache row's elements (of its type) for `kv_heads` heads of `hd`: the values, and for int8
// each head's scale after them (a float32 in 4 bytes, as llama.cpp's q8_0 keeps a scale per
// block of 32).
std::int64_t cache_row_elements(CacheFormat f, std::int64_t kv_heads, std::int64_t hd) {
  return kv_heads * hd + (f == CacheFormat::kInt8 ? 4 * kv_heads : 0);
}
std::int64_t cache_element_bytes(CacheFormat f) { return f == CacheFormat::kF32 ? 4 : f == CacheFormat::kBf16 ? 2 : 1; }

// A cached key or value as attention reads it: widen(element) x the scale of its head's row
// (`row` the row's first element, `kd` its values, `head` the key-value head), which is 1 but
// for int8; and a row of them as the cache stores it (the int8 row's heads each as
// quantize_int8_row codes them: scaled by its largest magnitude / 127, rounded to nearest; a
// head holding an infinity or a NaN reads as NaN, as in a float32 cache).
inline float widen(float x) { return x; }
inline float widen(bf16 x) { return from_bf16(x); }
inline float widen(std::int8_t x) { return static_cast<float>(x); }
template <class T>
inline float row_scale(const T* row, std::int64_t kd, std::int64_t head) {
  if constexpr (std::is_same_v<T, std::int8_t>) {
    float scale;
    std::memcpy(&scale, row + kd + 4 * head, sizeof scale);
    return scale;
  } else {
    (void)row, (void)kd, (void)head;
    return 1.0f;
  }
}
// A cached row's `kd` values as the decoding loops read them: float32 and bf16 rows as they
// lie (widened element by element), an int8 row widened into `buffer` first, a loop the
// compiler vectorizes (widened inside the dot products, a 16-stream step at 1,000 positions
// took 65-77 ms against 50-51; a bf16 row so widened first took 52-64 against 42-46).
template <class T>
inline const T* readable_row(const T* row, std::int64_t, std::vector<float>&) {
  return row;
}
inline const float* readable_row(const std::int8_t* row, std::int64_t kd, std::vector<float>& buffer) {
  buffer.resize(static_cast<size_t>(kd));
  for (std::int64_t e = 0; e < kd; ++e) buffer[static_cast<size_t>(e)] = static_cast<float>(row[e]);
  return buffer.data();
}
inline void store_row(const float* from, std::int64_t kd, std::int64_t, float* to) { std::copy(from, from + kd, to); }
inline void store_row(const float* from, std::int64_t kd, std::int64_t, bf16* to) {
  for (std::int64_t e = 0; e < kd; ++e) to[e] = to_bf16(from[e]);
}
inline void store_row(const float* from, std::int64_t kd, std::int64_t hd, std::int8_t* to) {
  for (std::int64_t h0 = 0; h0 < kd; h0 += hd) {
    const float scale = quantize_int8_row(from + h0, hd, to + h0).scale;
    std::memcpy(to + kd + 4 * (h0 / hd), &scale, sizeof scale);
  }
}

// A block's product, packed; a row-sliced one's partial products summed over the ranks by
// `all_reduce`, then its bias added.
class PackedProduct : public BlockLinear {
 public:
  // `sums`: a row-sliced product's partial products, summed by all_reduce, then bias_after
  // (if any) added.
  PackedProduct(std::shared_ptr<const PackedLinear> packed, bool sums = false, Tensor bias_after = {},
                std::function<void(Tensor&)> all_reduce = {})
      : packed_(std::move(packed)), sums_(sums), bias_after_(std::move(bias_after)), all_reduce_(std::move(all_reduce)) {}
  Var forward(const Var& x) const override {
    Tensor y = packed_->forward(x.value());
    if (sums_) all_reduce_(y);
    if (bias_after_.defined()) ops::add_(y, bias_after_);
    return Var(y);
  }
  std::int64_t bytes() const {  // the weights as packed, the bias in float32
    return packed_->bytes() + (bias_after_.defined() ? 4 * bias_after_.numel() : 0);
  }

 private:
  std::shared_ptr<const PackedLinear> packed_;
  bool sums_;
  Tensor bias_after_;
  std::function<void(Tensor&)> all_reduce_;
};

// The token embedding's rows, from its packed table (as float32).
class PackedRows : public TokenRows {
 public:
  PackedRows(std::shared_ptr<const PackedLinear> table, std::int64_t dim) : table_(std::move(table)), dim_(dim) {}
  Var rows(const std::vector<std::int32_t>& ids) const override {
    Tensor x = Tensor::empty({static_cast<std::int64_t>(ids.size()), dim_});
    for (std::size_t i = 0; i < ids.size(); ++i) table_->row(ids[i], x.data<float>() + static_cast<std::int64_t>(i) * dim_);
    return Var(x);
  }

 private:
  std::shared_ptr<const PackedLinear> table_;
  std::int64_t dim_;
};

// The position of each row a step feeds: its sequence's cached rows, then its new ones.
std::vector<std::int32_t> step_positions(const std::vector<SequenceState*>& sequences, const GptDecoder::StepPlan& plan) {
  std::vector<std::int32_t> p;
  p.reserve(static_cast<std::size_t>(plan.rows_total));
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const std::int64_t cached = static_cast<GptState*>(sequences[i])->cached;
    for (std::int64_t r = 0; r < plan.rows[i]; ++r) p.push_back(static_cast<std::int32_t>(cached + r));
  }
  return p;
}

// The keys [span.begin, span.end) a prompt's rows see, as panels.
struct PanelSpan {
  std::int64_t begin, end;
};

constexpr std::int64_t kC = WeightPanels::kChannels;

// One key-value head's keys and values (columns [col, col + hd) of `layer`'s rows in the
// cache, of `kd` values a row, widened to float32 and scaled) at the positions of `span`, laid
// out as serving's products read weights (weight_panels.h): keys in panels of 16 positions
// ([hd][16] each: the scores' channels), values in panels of 16 of the hd values
// ([positions][16] each: the weighted sums'). The panels' padding (positions past the span,
// values past hd) is left as the buffers held it: it feeds only channels the products drop.
template <class T>
void panel_keys_and_values(const GptState& s, std::int64_t layer, std::int64_t col, std::int64_t hd, std::int64_t kd,
                           PanelSpan span, std::vector<float>& keys, std::vector<float>& values) {
  const std::int64_t n = span.end - span.begin, key_panels = (n + kC - 1) / kC, hd_panels = (hd + kC - 1) / kC;
  keys.resize(static_cast<size_t>(key_panels * hd * kC));
  values.resize(static_cast<size_t>(hd_panels * n * kC));
  for (std::int64_t j = 0; j < n; ++j) {
    const T* krow = s.row<T>(layer, 0, span.begin + j);
    const T* vrow = s.row<T>(layer, 1, span.begin + j);
    const T* kj = krow + col;
    const T* vj = vrow + col;
    float* kp = keys.data() + (j / kC) * hd * kC + j % kC;
    const float ks = row_scale(krow, kd, col / hd), vs = row_scale(vrow, kd, col / hd);  // (1 but for int8: exact)
    for (std::int64_t e = 0; e < hd; ++e) kp[e * kC] = widen(kj[e]) * ks;
    for (std::int64_t e = 0; e < hd; ++e) values[static_cast<size_t>(((e / kC) * n + j) * kC + e % kC)] = widen(vj[e]) * vs;
  }
}

// Scores' softmax with fast_exp (as training's softmax), in place. (Their largest in 8 lanes,
// so that it vectorizes: NaNs passed over as by one running maximum, and a tie of -0 and +0,
// whichever wins, gives the same exponentials.)
inline void softmax_in_place(float* s, std::int64_t n) {
  float lane[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
  std::int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) lane[l] = std::max(lane[l], s[j + l]);
  for (; j < n; ++j) lane[0] = std::max(lane[0], s[j]);
  float top = lane[0];
  for (int l = 1; l < 8; ++l) top = std::max(top, lane[l]);
  for (j = 0; j < n; ++j) s[j] = fast_exp(s[j] - top);
  const float total = sum8<float>(n, [&](std::int64_t e) { return s[e]; });
  for (j = 0; j < n; ++j) s[j] /= total;
}

// One head's attention for R rows of a sequence (queries `ldq` floats apart) over its keys and
// values in panels (panel_keys_and_values over `span`), row r seeing keys [first(r),
// last(r)): rows in blocks of up to 64, each block's scores one panel product (each score one
// chain of fused multiply-adds over hd), their softmax row by row, then the weighted sums one
// panel product whose every output is one chain over the row's keys in order: 8 rows share
// the keys they all see, and each row's own first and last keys (a sliding window's, the
// causal mask's) go on its chain alone before and after. Outputs `ldo` floats apart.
template <class First, class Last>
inline void attend_in_panels(const float* q, std::int64_t ldq, std::int64_t R, const float* keys, const float* values,
                             std::int64_t hd, PanelSpan span, const First& first, const Last& last, float scale,
                             float* out, std::int64_t ldo, std::vector<float>& scores) {
  constexpr std::int64_t kBlock = 64, kShare = 8;
  const std::int64_t n = span.end - span.begin;
  for (std::int64_t b0 = 0; b0 < R; b0 += kBlock) {
    const std::int64_t b1 = std::min(R, b0 + kBlock);
    // Keys [key0, key1) of the span (key0 a panel's first), as channels of the block's scores.
    const std::int64_t key0 = (first(b0) - span.begin) / kC * kC, key1 = last(b1 - 1) - span.begin, ld = key1 - key0;
    scores.resize(static_cast<size_t>((b1 - b0) * ld));
    float* sb = scores.data();
    float_panel_product(keys, hd * kC, hd, q + b0 * ldq, b1 - b0, ldq, sb, ld, key0, key1, false);
    for (std::int64_t r = b0; r < b1; ++r) {
      float* sr = sb + (r - b0) * ld + (first(r) - span.begin - key0);
      const std::int64_t count = last(r) - first(r);
      for (std::int64_t j = 0; j < count; ++j) sr[j] *= scale;
      softmax_in_place(sr, count);
      std::fill(out + r * ldo, out + r * ldo + hd, 0.0f);
    }
    // Row r's weighted sum over keys [from, to) of the cache, its chain going on from the sum so far.
    const auto sum_over = [&](std::int64_t r, std::int64_t count, std::int64_t from, std::int64_t to) {
      if (to > from)
        float_panel_product(values + (from - span.begin) * kC, n * kC, to - from,
                            sb + (r - b0) * ld + (from - span.begin - key0), count, ld, out + r * ldo, ldo, 0, hd, true);
    };
    for (std::int64_t r0 = b0; r0 < b1; r0 += kShare) {
      const std::int64_t r1 = std::min(b1, r0 + kShare), shared0 = first(r1 - 1), shared1 = last(r0);
      if (shared1 <= shared0) {  // a window narrower than the rows' spread: each row alone
        for (std::int64_t r = r0; r < r1; ++r) sum_over(r, 1, first(r), last(r));
        continue;
      }
      for (std::int64_t r = r0; r < r1; ++r) sum_over(r, 1, first(r), shared0);
      sum_over(r0, r1 - r0, shared0, shared1);
      for (std::int64_t r = r0; r < r1; ++r) sum_over(r, 1, shared1, last(r));
    }
  }
}

// Each new row's attention over its sequence's cache (the new keys and values written
// first): `heads` query and `kv_heads` key-value heads of `hd` held (this rank's), query head
// h reading key-value head h / (heads / kv_heads); under a sliding window, the last
// `window` keys only.
class CachedAttention : public BlockAttention {
 public:
  CachedAttention(const std::vector<SequenceState*>& sequences, const GptDecoder::StepPlan& plan, std::int64_t heads,
                  std::int64_t kv_heads, std::int64_t hd, std::int64_t context, std::int64_t window)
      : BlockAttention(heads, kv_heads), sequences_(sequences), plan_(plan), hd_(hd), context_(context), window_(window) {}
  Var attend(const Var& qkv, std::int64_t layer) const override;
  std::vector<std::int32_t> positions(std::int64_t rows) const override;

 private:
  // The step's rows' attention, the caches' elements of type T: q_all the step's [rows, q k v]
  // rows, out [rows, heads x hd].
  template <class T>
  void attend_over(const float* q_all, std::int64_t layer, float* out) const;

  const std::vector<SequenceState*>& sequences_;
  const GptDecoder::StepPlan& plan_;
  std::int64_t hd_, context_, window_;
};

std::vector<std::int32_t> CachedAttention::positions(std::int64_t rows) const {
  WEFT_CHECK(rows == plan_.rows_total, "CachedAttention: rows are not the step's");
  return step_positions(sequences_, plan_);
}

Var CachedAttention::attend(const Var& qkv_rows, std::int64_t layer) const {
  const Tensor qkv = qkv_rows.value().contiguous();
  Tensor out = Tensor::empty({plan_.rows_total, heads() * hd_});
  const CacheFormat cache = sequences_.empty() ? CacheFormat::kF32 : static_cast<GptState*>(sequences_[0])->format;
  if (cache == CacheFormat::kBf16) attend_over<bf16>(qkv.data<float>(), layer, out.data<float>());
  else if (cache == CacheFormat::kInt8) attend_over<std::int8_t>(qkv.data<float>(), layer, out.data<float>());
  else attend_over<float>(qkv.data<float>(), layer, out.data<float>());
  return Var(out);
}

// Elements [from, to) of a cached row into the caches ahead of their use (the 64-byte lines
// that hold them): one row's read of a few heads is too short for the processor's prefetchers,
// which at one stream left attention waiting on memory for every row.
template <class T>
inline void prefetch_heads(const T* row, std::int64_t from, std::int64_t to) {
  const char* p = reinterpret_cast<const char*>(row + from);
  const char* end = reinterpret_cast<const char*>(row + to);
  for (; p < end; p += 64) __builtin_prefetch(p);
}
constexpr std::int64_t kAhead = 12;  // rows ahead
constexpr std::int64_t kScoresPerPass = std::int64_t{1} << 20;  // a short feed's scores held at once, in floats (4 MiB)

template <class T>
void CachedAttention::attend_over(const float* q_all, std::int64_t layer, float* o) const {
  const std::int64_t H = heads(), KV = kv_heads(), hd = hd_, d = H * hd, kd = KV * hd, w = d + 2 * kd, group = H / KV;
  const auto S = static_cast<std::int64_t>(sequences_.size());
  const auto& first_row = plan_.first_row;
  const auto& rows = plan_.rows;
  // The step's keys and values into sequence i's cache: every read below goes through them.
  const auto store = [&](std::int64_t i) {
    auto* s = static_cast<GptState*>(sequences_[static_cast<size_t>(i)]);
    for (std::int64_t r = 0; r < rows[static_cast<size_t>(i)]; ++r) {
      const float* src = q_all + (first_row[static_cast<size_t>(i)] + r) * w;
      store_row(src + d, kd, hd, s->row<T>(layer, 0, s->cached + r));
      store_row(src + d + kd, kd, hd, s->row<T>(layer, 1, s->cached + r));
    }
  };
  for (std::int64_t i = 0; i < S; ++i) {
    const auto* s = static_cast<const GptState*>(sequences_[static_cast<size_t>(i)]);
    WEFT_CHECK(s->format == cache_format_of<T>() && s->width() == cache_row_elements(s->format, KV, hd),
               "CachedAttention: the sequences' caches differ in type");
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // Per sequence, over a range of heads (all of them when the streams are enough to share the
  // threads, which reads each cached row of keys and values once, whole); a prompt's rows
  // (kPanelRows or more) in panels, other rows one by one. How the heads are grouped changes
  // no result; a row's result depends only on its sequence's rows of the step. A job of all
  // of a sequence's heads stores its keys and values itself, first (on the pool: an int8 or
  // bf16 cache's rounding of 16 streams' rows, done here before the jobs, held the other
  // thread idle for 3-7% of a decoding step); with fewer streams than that, this thread
  // stores them all before the jobs start.
  const std::int64_t groups = std::min(H, std::max<std::int64_t>(1, (2 * get_active_threads() + S - 1) / S));
  if (groups > 1)
    for (std::int64_t i = 0; i < S; ++i) store(i);
  parallel_loop(S * groups, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> wt, keys, values, widened;
    for (std::int64_t job = begin; job < end; ++job) {
      const std::int64_t i = job / groups, g = job % groups, h0 = g * H / groups, h1 = (g + 1) * H / groups;
      if (groups == 1) store(i);
      const auto* s = static_cast<const GptState*>(sequences_[static_cast<size_t>(i)]);
      const std::int64_t R = rows[static_cast<size_t>(i)], row0 = first_row[static_cast<size_t>(i)];
      // Row r of the step sees keys [first(r), last(r)).
      const auto last = [&](std::int64_t r) { return s->cached + r + 1; };
      const auto first = [&](std::int64_t r) { return window_ > 0 ? std::max<std::int64_t>(0, last(r) - window_) : 0; };
      if (R >= kPanelRows) {
        const PanelSpan span{first(0) / kC * kC, last(R - 1)};
        for (std::int64_t h = h0; h < h1; ++h) {
          if (h == h0 || h % group == 0) panel_keys_and_values<T>(*s, layer, (h / group) * hd, hd, kd, span, keys, values);
          attend_in_panels(q_all + row0 * w + h * hd, w, R, keys.data(), values.data(), hd, span, first, last, scale,
                           o + row0 * d + h * hd, d, wt);
        }
        continue;
      }
      // Rows one by one, over one read of the keys and values for all R: key j goes to every
      // row that sees it, so a row's scores, their softmax and its sum are as alone (a short
      // feed reads the cache once, not once a row: a preempted sequence's replay in pieces).
      // score(r, h)[j]: row r's, head h's weight of key key0 + j (each dot product in sum8's 8
      // partial sums, so that it vectorizes: one chain of hd dependent additions per key made
      // this loop a quarter of a 16-stream decoding step), their softmax with fast_exp (as
      // training's softmax), and the weighted sum of the values, key by key over the range's
      // whole width (each element's sum in key order).
      // (Rows in groups whose scores take at most kScoresPerPass floats: at a long context, one.)
      const std::int64_t heads_here = h1 - h0, per_row = heads_here * (last(R - 1) - first(0));
      const std::int64_t rows_per_pass = std::clamp<std::int64_t>(kScoresPerPass / std::max<std::int64_t>(1, per_row), 1, R);
      // A job of some heads reads a slice of each row: elements [fetch0, fetch1), fetched
      // kAhead rows ahead (a job of every head reads whole rows, which the processor fetches).
      const bool partial = heads_here < H;
      const std::int64_t fetch0 = h0 / group * hd, fetch1 = (h1 - 1) / group * hd + hd;
      for (std::int64_t r0 = 0; r0 < R; r0 += rows_per_pass) {
        const std::int64_t r1 = std::min(R, r0 + rows_per_pass), key0 = first(r0), n = last(r1 - 1) - key0;
        wt.resize(static_cast<size_t>((r1 - r0) * heads_here * n));
        const auto score = [&](std::int64_t r, std::int64_t h) { return wt.data() + ((r - r0) * heads_here + h - h0) * n; };
        const auto sees = [&](std::int64_t r, std::int64_t key) { return key >= first(r) && key < last(r); };
        s->for_each_run<T>(layer, 0, key0, key0 + n, [&](const T* run, std::int64_t run_first, std::int64_t count) {
          for (std::int64_t c = 0, j = run_first - key0; c < count; ++c, ++j) {
            const T* kj = run + c * s->width();
            if (partial && c + kAhead < count) prefetch_heads(kj + kAhead * s->width(), fetch0, fetch1);
            const auto* kr = readable_row(kj, kd, widened);
            for (std::int64_t r = r0; r < r1; ++r) {
              if (!sees(r, key0 + j)) continue;
              for (std::int64_t h = h0; h < h1; ++h) {
                const float* q = q_all + (row0 + r) * w + h * hd;
                const auto* kh = kr + h / group * hd;
                const float dot = sum8<float>(hd, [&](std::int64_t e) { return q[e] * widen(kh[e]); });
                score(r, h)[j] = dot * row_scale(kj, kd, h / group) * scale;  // (x 1 but for int8)
              }
            }
          }
        });
        for (std::int64_t r = r0; r < r1; ++r) {
          for (std::int64_t h = h0; h < h1; ++h) softmax_in_place(score(r, h) + first(r) - key0, last(r) - first(r));
          std::fill(o + (row0 + r) * d + h0 * hd, o + (row0 + r) * d + h1 * hd, 0.0f);
        }
        s->for_each_run<T>(layer, 1, key0, key0 + n, [&](const T* run, std::int64_t run_first, std::int64_t count) {
          for (std::int64_t c = 0, j = run_first - key0; c < count; ++c, ++j) {
            const T* vj = run + c * s->width();
            if (partial && c + kAhead < count) prefetch_heads(vj + kAhead * s->width(), fetch0, fetch1);
            const auto* vr = readable_row(vj, kd, widened);
            for (std::int64_t r = r0; r < r1; ++r) {
              if (!sees(r, key0 + j)) continue;
              for (std::int64_t h = h0; h < h1; ++h) {
                const float a = score(r, h)[j] * row_scale(vj, kd, h / group);  // (x 1 but for int8)
                const auto* vh = vr + h / group * hd;
                float* dh = o + (row0 + r) * d + h * hd;
                for (std::int64_t e = 0; e < hd; ++e) dh[e] += a * widen(vh[e]);
              }
            }
          }
        });
      }
    }
  });
}

}  // namespace

void check_tensor_split(const GptConfig& c, int ranks) {
  const BlockConfig block = c.block();
  const std::int64_t kv = block.key_value_heads();
  if (ranks < 1 || c.heads % ranks != 0 || kv % ranks != 0)
    throw ConfigError("a GPT with " + std::to_string(c.heads) + " heads and " + std::to_string(kv) +
                      " key-value heads does not split over " + std::to_string(ranks) + " tensor-parallel ranks");
  for (Product p : kProducts) slice_pieces(product_parts(p, block), 0, ranks);
}

GptDecoder::GptDecoder(const GPT& model, DecoderFormat holding, TensorSlice slice, LayerRange layers)
    : c_(model.config()), cache_(holding.cache), cache_block_rows_(holding.cache_block_rows), block_(c_.block()), slice_(std::move(slice)), begin_(layers.begin),
      end_(layers.end < 0 ? c_.layers : layers.end) {
  if (begin_ < 0 || begin_ >= end_ || end_ > c_.layers)
    throw ConfigError("layers [" + std::to_string(begin_) + ", " + std::to_string(end_) + ") are not a range of the " +
                      std::to_string(c_.layers) + " blocks");
  const std::int64_t n = slice_.size, r = slice_.rank, kv = block_.key_value_heads();
  WEFT_CHECK(n >= 1 && r >= 0 && r < n, "GptDecoder: a tensor slice's rank outside its group");
  check_tensor_split(c_, slice_.size);
  if (cache_block_rows_ < 0 || cache_block_rows_ > (std::int64_t{1} << 20))
    throw ConfigError("a key-value cache block of " + std::to_string(cache_block_rows_) + " positions");
  lheads_ = c_.heads / n;
  lkv_heads_ = kv / n;
  if (cache_block_rows_ == 0) cache_block_rows_ = cache_block_rows(cache_bytes_per_token(), c_.context);
  cache_blocks_ = std::make_shared<CacheBlocks>(cache_block_rows_ * cache_bytes_per_token());
  const WeightFormat format = holding.weights;
  std::map<std::string, Tensor> p;
  for (auto& [name, var] : model.named_parameters()) p[name] = var.value();
  auto get = [&](const std::string& name) {
    auto it = p.find(name);
    if (it == p.end()) throw InternalError("GptDecoder: the model has no parameter " + name);
    return it->second.contiguous();
  };
  const bool norm_bias = c_.norm == Norm::kLayer;
  // The ends: the token table packed (tied, it is the head too), positions and the final
  // norm in float32.
  const auto table = std::make_shared<const PackedLinear>(get(GPT::tied_weight()), Tensor(), format);
  const auto head =
      c_.tied_head ? table : std::make_shared<const PackedLinear>(get(model.head_weight()), Tensor(), format);
  ends_.tokens = std::make_shared<PackedRows>(table, c_.dim);
  ends_.head = std::make_shared<PackedProduct>(head);
  ends_bytes_ = table->bytes() + (c_.tied_head ? 0 : head->bytes());
  if (c_.positional == Positional::kLearned) {
    ends_.positions = Var(get("wpe.weight"));
    ends_bytes_ += 4 * ends_.positions.value().numel();
  } else if (c_.positional != Positional::kRotary) {
    ends_.positions = Var(sinusoidal_encoding(c_.context, c_.dim, c_.positional));
  }
  ends_.final_weight = Var(get("ln_f.weight"));
  if (norm_bias) ends_.final_bias = Var(get("ln_f.bias"));
  ends_bytes_ += 4 * (norm_bias ? 2 : 1) * c_.dim;
  for (std::int64_t i = begin_; i < end_; ++i) {
    std::string h = "h";  // (not "h" + ...: GCC 12 warns falsely on that concatenation)
    h += std::to_string(i);
    h += '.';
    DecoderBlockParts& b = blocks_.emplace_back();
    b.ln1_weight = Var(get(h + "ln1.weight"));
    b.ln2_weight = Var(get(h + "ln2.weight"));
    if (norm_bias) {
      b.ln1_bias = Var(get(h + "ln1.bias"));
      b.ln2_bias = Var(get(h + "ln2.bias"));
    }
    block_bytes_ += 4 * (norm_bias ? 4 : 2) * c_.dim;
    for (Product product : kProducts) {
      // Whole, or this rank's slice (its heads of Q, K and V, its part of the MLP, the
      // matching columns of both output projections), cut as tensor-parallel training cuts.
      const std::string name = h + product_name(product);
      const bool sliced = n > 1, sums = sliced && !slices_bias(product_slicing(product));
      auto cut = [&](const Tensor& t) {
        return sliced ? product_slice(t, product, block_, static_cast<int>(r), static_cast<int>(n)) : t;
      };
      const Tensor w = get(name + ".weight"), bias = has_bias(product, block_) ? get(name + ".bias") : Tensor();
      const Tensor packed_bias = bias.defined() && !sums ? cut(bias) : Tensor();
      auto packed = std::make_shared<PackedProduct>(std::make_shared<const PackedLinear>(cut(w), packed_bias, format),
                                                    sums, sums ? bias : Tensor(), slice_.all_reduce);
      block_bytes_ += packed->bytes() + (packed_bias.defined() ? 4 * packed_bias.numel() : 0);
      b.products[static_cast<std::size_t>(product)] = std::move(packed);
    }
  }
}

std::unique_ptr<SequenceState> GptDecoder::start() const {
  return std::make_unique<GptState>(cache_, cache_blocks_, cache_row_elements(cache_, lkv_heads_, block_.head_dim()),
                                    cache_block_rows_);
}

std::int64_t GptDecoder::cache_bytes_per_token() const {
  return 2 * (end_ - begin_) * cache_row_elements(cache_, lkv_heads_, block_.head_dim()) * cache_element_bytes(cache_);
}

std::int64_t GptDecoder::cache_blocks_after(const SequenceState& state, std::int64_t fed) const {
  const auto& s = static_cast<const GptState&>(state);
  const std::int64_t rows = window_length(s.cached + fed, fed, c_.context);  // (the cache holds the window)
  return std::max(s.blocks(), (rows + cache_block_rows_ - 1) / cache_block_rows_);
}

std::unique_ptr<SequenceState> GptDecoder::restart(const SequenceState& preempted,
                                                   std::vector<std::vector<std::int32_t>>& replay) const {
  const auto& old = static_cast<const GptState&>(preempted);
  std::unique_ptr<SequenceState> fresh = start();
  fresh->tokens.assign(old.tokens.begin(), old.tokens.begin() + old.window_start);
  fresh->window_start = old.window_start;
  replay.clear();
  auto at = old.tokens.begin() + old.window_start;
  for (const auto& [rows, panels] : old.runs)
    for (std::int64_t done = 0; done < rows;) {
      const std::int64_t n = panels ? rows : std::min(rows - done, kPanelRows - 1);
      replay.emplace_back(at, at + n);
      at += n;
      done += n;
    }
  WEFT_CHECK(at == old.tokens.end(), "GptDecoder::restart: a sequence's feeds do not add up to its window");
  return fresh;
}

GptDecoder::StepPlan GptDecoder::plan(const std::vector<SequenceState*>& sequences,
                                      const std::vector<std::vector<std::int32_t>>& tokens) const {
  WEFT_CHECK(sequences.size() == tokens.size(), "GptDecoder: one list of tokens per sequence");
  for (const auto& t : tokens) {
    WEFT_CHECK(!t.empty(), "GptDecoder: a step feeds at least one token per sequence");
    for (std::int32_t id : t) WEFT_CHECK(id >= 0 && id < c_.vocab, "GptDecoder: a token outside the vocabulary");
  }
  const auto S = static_cast<std::int64_t>(sequences.size());
  StepPlan p;
  p.feed.resize(static_cast<size_t>(S));
  for (std::int64_t i = 0; i < S; ++i) {
    auto* s = static_cast<GptState*>(sequences[static_cast<size_t>(i)]);
    const auto& t = tokens[static_cast<size_t>(i)];
    s->tokens.insert(s->tokens.end(), t.begin(), t.end());
    auto& f = p.feed[static_cast<size_t>(i)];
    if (slide_window(*s, static_cast<std::int64_t>(t.size()), c_.context)) {
      s->cached = 0;  // the new window prefilled
      s->runs.clear();
      f.assign(s->tokens.begin() + s->window_start, s->tokens.end());
    } else {
      f = t;
    }
    s->log_feed(static_cast<std::int64_t>(f.size()));
    s->reserve(s->cached + static_cast<std::int64_t>(f.size()));
    p.first_row.push_back(p.rows_total);
    p.rows.push_back(static_cast<std::int64_t>(f.size()));
    p.rows_total += p.rows.back();
  }
  return p;
}

Tensor GptDecoder::embed(const std::vector<SequenceState*>& sequences, const StepPlan& p) const {
  NoGradGuard no_grad;
  std::vector<std::int32_t> ids;
  ids.reserve(static_cast<std::size_t>(p.rows_total));
  for (const auto& f : p.feed) ids.insert(ids.end(), f.begin(), f.end());
  return decoder_embed(ids, step_positions(sequences, p), ends_).value();
}

void GptDecoder::run_blocks(const std::vector<SequenceState*>& sequences, const StepPlan& p, Tensor& x) const {
  NoGradGuard no_grad;
  const CachedAttention attention(sequences, p, lheads_, lkv_heads_, block_.head_dim(), c_.context, c_.window);
  Var h(x);
  for (std::size_t l = 0; l < blocks_.size(); ++l)
    h = decoder_block(h, blocks_[l], attention, static_cast<std::int64_t>(l), block_);
  x = h.value();
}

void GptDecoder::finish(const std::vector<SequenceState*>& sequences, const StepPlan& p) const {
  for (std::size_t i = 0; i < sequences.size(); ++i) static_cast<GptState*>(sequences[i])->cached += p.rows[i];
}

Tensor GptDecoder::head(const StepPlan& p, const Tensor& x) const {
  const std::int64_t d = c_.dim;
  const auto S = static_cast<std::int64_t>(p.rows.size());
  Tensor last = Tensor::empty({S, d});
  const float* xp = x.data<float>();
  for (std::int64_t i = 0; i < S; ++i) {
    const std::int64_t row = p.first_row[static_cast<size_t>(i)] + p.rows[static_cast<size_t>(i)] - 1;
    std::copy(xp + row * d, xp + (row + 1) * d, last.data<float>() + i * d);
  }
  NoGradGuard no_grad;
  return decoder_head(Var(last), ends_, block_).value();
}

Tensor GptDecoder::extend(const std::vector<SequenceState*>& sequences,
                          const std::vector<std::vector<std::int32_t>>& tokens) {
  WEFT_CHECK(begin_ == 0 && end_ == c_.layers, "GptDecoder::extend needs every layer (a pipeline stage runs pieces)");
  const StepPlan p = plan(sequences, tokens);
  Tensor x = embed(sequences, p);
  run_blocks(sequences, p, x);
  finish(sequences, p);
  return head(p, x);
}

std::int64_t GptDecoder::weight_bytes() const {
  return ends_bytes_ + block_bytes_;
}

Tensor Decoder::prompt_logits(const std::vector<std::int32_t>&) {
  throw ConfigError("the prompt's logprobs are not computed by this decoder (--tp, --pp)");
}

Tensor GptDecoder::prompt_logits(const std::vector<std::int32_t>& tokens) {
  WEFT_CHECK(begin_ == 0 && end_ == c_.layers, "GptDecoder::prompt_logits needs every layer");
  WEFT_CHECK(!tokens.empty() && static_cast<std::int64_t>(tokens.size()) <= c_.context,
             "GptDecoder::prompt_logits: 1 to context tokens");
  std::unique_ptr<SequenceState> state = start();
  const std::vector<SequenceState*> sequences = {state.get()};
  const StepPlan p = plan(sequences, {tokens});
  Tensor x = embed(sequences, p);
  run_blocks(sequences, p, x);
  NoGradGuard no_grad;
  return decoder_head(Var(x), ends_, block_).value();  // every row's, not the last one's
}

Tensor WindowDecoder::prompt_logits(const std::vector<std::int32_t>& tokens) {
  WEFT_CHECK(!tokens.empty() && static_cast<std::int64_t>(tokens.size()) <= model_.context(),
             "WindowDecoder::prompt_logits: 1 to context tokens");
  return model_.window_logits(tokens);
}

std::int64_t window_length(std::int64_t held, std::int64_t fed, std::int64_t context) {
  return held <= context ? held : std::min(context, std::max(context / 2, fed));
}

bool slide_window(SequenceState& s, std::int64_t fed, std::int64_t context) {
  const auto held = static_cast<std::int64_t>(s.tokens.size()) - s.window_start;
  const std::int64_t length = window_length(held, fed, context);
  if (length == held) return false;
  s.window_start += held - length;
  return true;
}

Tensor WindowDecoder::extend(const std::vector<SequenceState*>& sequences,
                             const std::vector<std::vector<std::int32_t>>& tokens) {
  WEFT_CHECK(sequences.size() == tokens.size(), "WindowDecoder: one list of tokens per sequence");
  const std::int64_t V = model_.vocab();
  Tensor logits = Tensor::empty({static_cast<std::int64_t>(sequences.size()), V});
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    SequenceState& s = *sequences[i];
    for (std::int32_t id : tokens[i]) WEFT_CHECK(id >= 0 && id < V, "WindowDecoder: a token outside the vocabulary");
    s.tokens.insert(s.tokens.end(), tokens[i].begin(), tokens[i].end());
    slide_window(s, static_cast<std::int64_t>(tokens[i].size()), model_.context());
    const Tensor out =
        model_.next_token_logits(std::vector<std::int32_t>(s.tokens.begin() + s.window_start, s.tokens.end()));
    std::copy(out.data<float>(), out.data<float>() + V, logits.data<float>() + static_cast<std::int64_t>(i) * V);
  }
  return logits;
}

bool release_module_held_by(std::shared_ptr<Module>& module, const Decoder& decoder) {
  if (dynamic_cast<const GptDecoder*>(&decoder) == nullptr) return false;
  module.reset();
  allocator_release_cache();
  return true;
}

std::unique_ptr<Decoder> make_decoder(LanguageModel& model, DecoderFormat format) {
  if (auto* gpt = dynamic_cast<GPT*>(&model)) return std::make_unique<GptDecoder>(*gpt, format);
  if (format.weights != WeightFormat::kF32)
    throw ConfigError(std::string("weights in ") + weight_format_name(format.weights) + " are built for GPT models only");
  if (format.cache != CacheFormat::kF32)
    throw ConfigError(std::string("a key-value cache in ") + cache_format_name(format.cache) +
                      " is a GPT's: this model has no cache");
  return std::make_unique<WindowDecoder>(model);
}

CacheFormat parse_cache_format(const std::string& name) {
  if (name == "fp32") return CacheFormat::kF32;
  if (name == "bf16") return CacheFormat::kBf16;
  if (name == "int8") return CacheFormat::kInt8;
  throw ConfigError("unknown key-value cache type '" + name + "' (known: fp32, bf16, int8)");
}

const char* cache_format_name(CacheFormat f) {
  return f == CacheFormat::kBf16 ? "bf16" : f == CacheFormat::kInt8 ? "int8" : "fp32";
}

}  // namespace weft::serve
